"""Where a calibration is kept so that it is found, not remembered (docs/calibration.md).

``ipcbench calibrate`` stores it in ``$XDG_CACHE_HOME/pytest-ipcbench/`` (else
``~/.cache/pytest-ipcbench/``, mode 0700), named by two digests: the **machine** (CPU model,
cores, Python, MPI, as a results file's ``env`` records them) and the **matrix** (the sorted case
keys, in-run references left out). Compare and the gate compute both from the results they
compare. A folder that is a symlink or another user's is refused (exit 2): a calibration sets
every verdict's noise.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ..core.outdir import write_text
from ..results.results import ResultSet
from .calibration import Calibration
from .calibration_check import CalibrationError
from .normalise import is_reference

APP = "pytest-ipcbench"
CACHE_TEXT = f"$XDG_CACHE_HOME/{APP}/ (else ~/.cache/{APP}/)"  # where, in words (help texts: the same everywhere)


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/pytest-ipcbench`` (an absolute XDG_CACHE_HOME only, as the spec says), else
    ``~/.cache/pytest-ipcbench``."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    return (Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache") / APP


def private_folder(create: bool) -> Path | None:
    """The per-user folder, checked: a folder (not a symlink) owned by this user, mode 0700 (a
    looser mode of our own folder is tightened). None when it does not exist and ``create`` is
    false; CalibrationError (exit 2) when it cannot be trusted or made."""
    root = cache_root()
    try:
        if create and not os.path.lexists(root):
            root.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            try:
                os.mkdir(root, 0o700)
            except FileExistsError:
                pass
        st = os.lstat(root)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CalibrationError(f"calibration folder {root}: {exc.strerror or exc}") from None
    if stat.S_ISLNK(st.st_mode):
        raise CalibrationError(f"calibration folder {root} is a symlink: refusing it (a calibration decides every "
                               f"verdict's noise; remove the link, or set XDG_CACHE_HOME to a folder of yours)")
    if not stat.S_ISDIR(st.st_mode):
        raise CalibrationError(f"calibration folder {root} is not a folder")
    if st.st_uid != os.geteuid():
        raise CalibrationError(f"calibration folder {root} belongs to uid {st.st_uid}, not to you "
                               f"(uid {os.geteuid()}): refusing it (set XDG_CACHE_HOME to a folder of yours)")
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(root, 0o700)
    return root


def _python(text: Any) -> str:
    """``"CPython 3.11.2"`` -> ``"CPython 3.11"``: a patch release does not change the noise's regime."""
    parts = str(text or "?").split()
    if len(parts) == 2 and parts[1].count(".") >= 2:
        return f"{parts[0]} {parts[1].rsplit('.', 1)[0]}"
    return " ".join(parts)


def _mpi(env: dict[str, Any]) -> str:
    found = env.get("mpi")
    mpi: dict[str, Any] = found if isinstance(found, dict) else {}
    if mpi.get("vendor"):
        return f"{mpi['vendor']} {mpi.get('vendor_version', '')}".strip()
    listed = mpi.get("packages")
    packages: dict[str, Any] = listed if isinstance(listed, dict) else {}
    return ", ".join(f"{k} {v}" for k, v in sorted(packages.items())) or "no MPI"


def machine(env: dict[str, Any]) -> str:
    """What identifies the machine a results file was measured on, in words."""
    return f"{env.get('cpu') or '?'}, {env.get('cores') or '?'} cores, {_python(env.get('python'))}, {_mpi(env)}"


def matrix_keys(rs: ResultSet) -> list[str]:
    return sorted({r.key for r in rs.results if not is_reference(r)})


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def store_name(env: dict[str, Any], keys: Iterable[str]) -> str:
    return f"calibration-{_digest(machine(env))}-{_digest(json.dumps(sorted(keys)))}.json"


def save(calibration: Calibration, runs: Sequence[ResultSet]) -> Path:
    """Keep ``calibration`` where compare and the gate look for it: named by the first run's machine
    and every case of the runs (a case that failed in one run is still the matrix's, as a gate's
    rounds merged)."""
    folder = private_folder(create=True)
    assert folder is not None
    keys = sorted({k for rs in runs for k in matrix_keys(rs)})
    env = runs[0].env
    calibration.env.update(machine=machine(env), matrix_cases=len(keys))
    path = folder / store_name(env, keys)
    try:
        write_text(path, json.dumps(calibration.to_dict(), indent=1) + "\n")
    except OSError as exc:
        raise CalibrationError(f"cannot write the calibration to {path}: {exc.strerror or exc}") from None
    calibration.path = str(path)
    return path


def find(*sides: ResultSet) -> Calibration | None:
    """The stored calibration of this machine and one side's matrix (the head's first: a pull request
    that adds a case still finds the base's), or None. A stored file that is a symlink, not ours,
    or fails its check is an error (exit 2), never used."""
    folder = private_folder(create=False)
    if folder is None:
        return None
    for rs in sides:
        path = folder / store_name(rs.env, matrix_keys(rs))
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode) or st.st_uid != os.geteuid():
            raise CalibrationError(f"calibration file {path} is a symlink or belongs to another user: refusing it")
        return Calibration.load(path)
    return None


def describe_use(calibration: Calibration | None, explicit: str | None = None) -> str:
    """The line every verdict carries: which calibration it used (path, date, machine), or none."""
    if calibration is None:
        if explicit is not None and explicit.strip().lower() in ("", "none", "off"):
            return "calibration: none (--calibration none): the between-run noise is assumed"
        return ("calibration: none for this machine and matrix (`ipcbench calibrate` stores one in "
                f"{cache_root()}): the between-run noise is assumed")
    when = str(calibration.env.get("created", "?"))[:16].replace("T", " ")
    env = calibration.env
    where = env.get("machine") or f"{env.get('host', '?')}, {env.get('cores', '?')} cores"
    return f"calibration: {calibration.path or '(in memory)'}, made {when} on {where}"


def find_calibration(path: str | None, *sides: ResultSet) -> Calibration | None:
    """The calibration a comparison uses: the file ``path`` names; none for "none" / "off" / "";
    by default (None) the stored one of this machine and one of ``sides``' matrices (:func:`find`)."""
    if path is not None:
        if path.strip().lower() in ("", "none", "off"):
            return None
        return Calibration.load(path)
    return find(*sides)
