"""IPC backends: one module each, declared as entry points (see base.py for the protocol)."""

# Loaded with the package, so base.py need not import them (each builds on base's Backend):
# hierarchy sets how a node-local store opens across nodes; references registers ref-<backend>;
# null is the harness's own floor (a channel that moves nothing).
from . import hierarchy, null, references  # noqa: F401
from .base import (
    MODES,
    Backend,
    BackendSpec,
    BackendUnavailable,
    PayloadError,
    backend_names,
    declared_resources,
    get_backend,
    holds_payload_in_shm,
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
    "holds_payload_in_shm",
    "get_backend",
    "register",
    "register_backend",
    "unavailable_reason",
]
