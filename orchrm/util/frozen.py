"""The base of every configuration section: frozen, and unknown keys refused.

Both :mod:`orchrm.config` and the sandbox's noise config (:mod:`orchrm.execution.sandbox.config`,
which ``orchrm.config`` nests) build on it; it lives apart from both so that neither imports
the other for it.

>>> class Section(FrozenConfig):
...     size: int = 1
>>> Section(size=2).size
2
>>> Section(sise=2)  # doctest: +IGNORE_EXCEPTION_DETAIL
Traceback (most recent call last):
pydantic_core._pydantic_core.ValidationError: 1 validation error for Section
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class FrozenConfig(BaseModel):
    """A pydantic model that cannot be changed once built (derived values are methods) and that
    rejects unknown fields, so a misspelt key fails on load instead of being ignored."""

    model_config = ConfigDict(frozen=True, extra="forbid")


__all__ = ["FrozenConfig"]
