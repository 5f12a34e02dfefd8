"""One error base: every public exception class is an IpcbenchError (and still what it was), and
``ipcbench`` turns only ours into exit 2: any other exception is a bug and keeps its traceback."""

from __future__ import annotations

import argparse
import ast
import builtins
from pathlib import Path

import pytest

import pytest_ipcbench
from pytest_ipcbench import commands
from pytest_ipcbench.core.errors import IpcbenchError, UsageError

PACKAGE = Path(pytest_ipcbench.__file__).parent
BUILTIN_ERRORS = {name for name, obj in vars(builtins).items() if isinstance(obj, type) and issubclass(obj, BaseException)}


def _public_exception_classes() -> list[tuple[str, str]]:
    """(module, class) of every public class whose bases name an exception (by name, read from source)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                if bases & BUILTIN_ERRORS or any(b.endswith(("Error", "Unavailable", "Exception")) for b in bases):
                    found.append((module, node.name))
    return found


def test_every_public_exception_class_is_an_ipcbench_error() -> None:
    import importlib

    classes = _public_exception_classes()
    assert len(classes) >= 17
    # an interrupt (core.terminate.Terminated, a KeyboardInterrupt) is no error: `except Exception` must miss it
    errors = [(m, c) for m, c in classes if issubclass(getattr(importlib.import_module(m), c), Exception)]
    assert len(classes) - len(errors) <= 1, classes
    wrong = [f"{m}.{c}" for m, c in errors if not issubclass(getattr(importlib.import_module(m), c), IpcbenchError)]
    assert not wrong, wrong


def test_they_stay_what_users_catch_today() -> None:
    from pytest_ipcbench.backends.base import BackendUnavailable, PayloadError
    from pytest_ipcbench.harness.scenarios import VerificationError
    from pytest_ipcbench.results.results import MalformedResults
    from pytest_ipcbench.shared.segment import SegmentGone

    assert issubclass(PayloadError, ValueError) and issubclass(MalformedResults, ValueError)
    assert issubclass(BackendUnavailable, RuntimeError) and issubclass(VerificationError, AssertionError)
    assert issubclass(SegmentGone, FileNotFoundError) and issubclass(UsageError, ValueError)
    assert pytest_ipcbench.IpcbenchError is IpcbenchError


def _command(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    def run(args: argparse.Namespace) -> int:
        raise exc

    module = argparse.Namespace(HELP="test", configure=lambda parser: None, run=run)
    monkeypatch.setitem(commands.COMMANDS, "boom", "boom")
    real = commands.importlib.import_module
    monkeypatch.setattr(commands.importlib, "import_module",
                        lambda name: module if name.endswith(".boom") else real(name))


def test_our_error_exits_2_with_its_message(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    _command(monkeypatch, UsageError("bad value for --x"))
    assert commands.main(["boom"]) == 2
    assert "ipcbench boom: bad value for --x" in capsys.readouterr().err


def test_any_other_error_is_a_bug_and_keeps_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    _command(monkeypatch, ValueError("a bug"))
    with pytest.raises(ValueError, match="a bug"):
        commands.main(["boom"])
