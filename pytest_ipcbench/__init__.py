"""pytest-ipcbench: fixtures, harness and reports for IPC regression benchmarking."""

from .advice import Advice, advise
from .backends import MODES, Backend, BackendSpec, BackendUnavailable, PayloadError, backend_names, register_backend
from .core.errors import IpcbenchError
from .core.group import Group, GroupError, MPIGroup
from .core.local import LocalWorld
from .core.payloads import Kind, PayloadSpec, make_payload, parse_size, payload_kinds, register_payload
from .core.registry import ExtensionError
from .harness.payload import BufferPayload
from .harness.plan import BenchSettings
from .harness.transfer import Delivery, assert_delivered, deliver

__version__ = "0.1.0"

__all__ = [
    "Advice",
    "MODES",
    "Backend",
    "BackendSpec",
    "BackendUnavailable",
    "BenchSettings",
    "BufferPayload",
    "Delivery",
    "ExtensionError",
    "Group",
    "GroupError",
    "IpcbenchError",
    "Kind",
    "LocalWorld",
    "MPIGroup",
    "PayloadError",
    "PayloadSpec",
    "advise",
    "assert_delivered",
    "backend_names",
    "deliver",
    "make_payload",
    "parse_size",
    "payload_kinds",
    "register_backend",
    "register_payload",
]
