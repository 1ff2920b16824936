"""The web dashboard: server-rendered Jinja2 views over the API's store, refreshed
live by htmx (vendored; nothing is loaded from elsewhere). See ``views``."""

from cronwheel.dashboard.views import mount

__all__ = ["mount"]
