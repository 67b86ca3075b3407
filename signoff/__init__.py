"""Signoff: a person between an AI agent and the tools it calls, on a log nobody can quietly rewrite.

Three subpackages, one per job (DESIGN.md "Three rooms around one heart"):

* :mod:`signoff.audit`: the log, the review lifecycle, verification and the ``audit`` command
  (it imports neither google-adk nor FastAPI);
* :mod:`signoff.bridge`: the Google ADK adapter (the plugin, ``apply_reviewed_args``, the resumer);
* :mod:`signoff.desk`: the web desk and the ``desk`` command.

The names an agent developer needs are importable from here too, loaded on first use so that
``import signoff.audit`` never pays for importing ADK::

    from signoff import Signoff, ToolPolicy, apply_reviewed_args
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from signoff.bridge import (
        Signoff,
        SignoffPlugin,
        ToolPolicy,
        apply_reviewed_args,
        idempotency_key,
        record_decision,
        record_tool_executed,
        request_confirmation,
    )

__all__ = [
    "Signoff",
    "SignoffPlugin",
    "ToolPolicy",
    "apply_reviewed_args",
    "idempotency_key",
    "record_decision",
    "record_tool_executed",
    "request_confirmation",
]
_FROM_BRIDGE = frozenset(__all__)


def __getattr__(name: str) -> Any:
    """PEP 562: load :mod:`signoff.bridge` (and with it google-adk) only when one of its names is used."""
    if name in _FROM_BRIDGE:
        return getattr(importlib.import_module("signoff.bridge"), name)
    raise AttributeError(f"module 'signoff' has no attribute {name!r}")
