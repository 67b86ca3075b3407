"""The notifier's errors: one base, :class:`NotifyError`. Not public; see :mod:`signoff.desk.notify`."""

from __future__ import annotations


class NotifyError(Exception):
    """Base of every notifier error."""


class ConfigError(NotifyError):
    """An endpoint's configuration the notifier cannot use (a bad URL, a missing address, an unknown name)."""


class SignatureError(NotifyError):
    """A webhook signature that does not check out (missing, malformed, stale or wrong)."""
