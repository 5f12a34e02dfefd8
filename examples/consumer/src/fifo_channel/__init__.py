"""An example consumer of pytest-ipcbench: its own IPC backend (``fifo``) and payload kind
(``records``), declared as entry points in pyproject.toml."""

from .backend import FifoBackend
from .payloads import records_kind

__all__ = ["FifoBackend", "records_kind"]
