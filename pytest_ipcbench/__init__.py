"""pytest-ipcbench: fixtures, harness and reports for IPC regression benchmarking."""

from .backends import BACKEND_NAMES, MODES, BackendSpec
from .core.group import Group, GroupError, LocalWorld, MPIGroup
from .core.payloads import PayloadSpec, make_payload, parse_size
from .harness.transfer import Delivery, assert_delivered, deliver

__version__ = "0.1.0"

__all__ = [
    "BACKEND_NAMES",
    "MODES",
    "BackendSpec",
    "Delivery",
    "Group",
    "GroupError",
    "LocalWorld",
    "MPIGroup",
    "PayloadSpec",
    "assert_delivered",
    "deliver",
    "make_payload",
    "parse_size",
]
