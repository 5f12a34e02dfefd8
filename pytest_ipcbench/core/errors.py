"""The one base of the errors pytest-ipcbench raises on purpose.

Every public exception class of the package derives from :class:`IpcbenchError` (and, where users
may already catch it so, from the built-in it always was: ValueError, RuntimeError,
AssertionError...). ``ipcbench`` turns an IpcbenchError into exit code 2 with its message; any
other exception is a bug and keeps its traceback.
"""

from __future__ import annotations


class IpcbenchError(Exception):
    """Raised by pytest-ipcbench on purpose: bad input, a bad file, something missing here."""


__all__ = ["IpcbenchError"]
