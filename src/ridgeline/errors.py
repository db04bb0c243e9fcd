"""The one exception type users see as a one-line message (never a traceback)."""

from __future__ import annotations


class RidgelineError(Exception):
    """Bad input or an impossible request. The message names the field and what is allowed."""


def field_error(field: str, value: object, allowed: str) -> RidgelineError:
    """Build the standard one-line error: `<field>: got <value>; allowed: <allowed>`."""
    return RidgelineError(f"{field}: got {value!r}; allowed: {allowed}")
