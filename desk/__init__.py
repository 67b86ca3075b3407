"""Signoff desk: the web page and JSON API where people decide paused tool calls.

Public surface: :func:`create_app` (the FastAPI app factory) and :func:`main` (the
``desk`` console command). Everything else is internal to the package. Both are loaded on
first use (PEP 562), so ``desk --help`` does not pay for importing FastAPI.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from signoff.desk.app import create_app
    from signoff.desk.cli import main

__all__ = ["create_app", "main"]
_FROM = {"create_app": "signoff.desk.app", "main": "signoff.desk.cli"}


def __getattr__(name: str) -> Any:
    """PEP 562: import :mod:`signoff.desk.app` (FastAPI) or :mod:`signoff.desk.cli` when the name is used."""
    module = _FROM.get(name)
    if module is None:
        raise AttributeError(f"module 'signoff.desk' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
