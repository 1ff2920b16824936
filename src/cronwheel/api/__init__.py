"""The HTTP JSON API (``cronwheel api``): FastAPI over the Store, strict at the edge."""

from cronwheel.api.app import create_api

__all__ = ["create_api"]
