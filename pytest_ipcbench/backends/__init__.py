"""IPC backends: one module each, declared as entry points (see base.py for the protocol)."""

from .base import (
    MODES,
    Backend,
    BackendSpec,
    BackendUnavailable,
    PayloadError,
    backend_names,
    declared_resources,
    get_backend,
    register,
    register_backend,
    unavailable_reason,
)

__all__ = [
    "MODES",
    "Backend",
    "BackendSpec",
    "BackendUnavailable",
    "PayloadError",
    "backend_names",
    "declared_resources",
    "get_backend",
    "register",
    "register_backend",
    "unavailable_reason",
]
