"""Settings of the example shop: one PostgreSQL database (``DATABASE_URL``) holds the
shop's tables and cronwheel's store, so an order and its job commit together."""

from __future__ import annotations

import os

from psycopg.conninfo import conninfo_to_dict

DATABASE_URL = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
# cronwheel's store: the same database (transactional enqueue needs the same one)
CRONWHEEL_STORE_URL = os.environ.get("CRONWHEEL_STORE_URL", DATABASE_URL)

_db = conninfo_to_dict(DATABASE_URL)
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",  # psycopg 3
        "NAME": _db.get("dbname", ""),
        "USER": _db.get("user", ""),
        "PASSWORD": _db.get("password", ""),
        "HOST": _db.get("host", ""),
        "PORT": _db.get("port", ""),
        "OPTIONS": {"options": _db["options"]} if "options" in _db else {},
    }
}

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-a-secret")
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
INSTALLED_APPS = ["orders"]
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "shopsite.urls"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
