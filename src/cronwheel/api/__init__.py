"""The HTTP JSON API (``cronwheel api``): FastAPI over the Store, strict at the edge."""

from cronwheel.api.app import create_app

__all__ = ["create_app"]
