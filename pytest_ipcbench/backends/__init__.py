"""IPC backends: one module each, registered by name (see base.py for the protocol)."""

from .base import (
    BACKEND_NAMES,
    MODES,
    Backend,
    BackendSpec,
    BackendUnavailable,
    PayloadError,
    get_backend,
    register,
    unavailable_reason,
)

__all__ = [
    "BACKEND_NAMES",
    "MODES",
    "Backend",
    "BackendSpec",
    "BackendUnavailable",
    "PayloadError",
    "get_backend",
    "register",
    "unavailable_reason",
]
