"""The two kinds of API model: a request body (strict: no coercion, no unknown key)
and an answer (no unknown key)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class InModel(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class OutModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
