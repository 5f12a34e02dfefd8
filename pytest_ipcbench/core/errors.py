"""The one base of the errors pytest-ipcbench raises on purpose.

Every public exception class of the package derives from :class:`IpcbenchError`, and also from
the built-in it always was (ValueError, RuntimeError, AssertionError, OSError...), so code that
catches those keeps working. ``ipcbench`` turns an IpcbenchError into exit code 2 with its
message; any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations


class IpcbenchError(Exception):
    """Raised by pytest-ipcbench on purpose: bad input, a bad file, something missing here."""


class UsageError(IpcbenchError, ValueError):
    """A bad value given by a person or written in a file: an unknown name, a bad size, a bad option."""


class FileMissing(IpcbenchError, FileNotFoundError):
    """A file that was named (a results file, a pyproject.toml) is not there."""


__all__ = ["FileMissing", "IpcbenchError", "UsageError"]
