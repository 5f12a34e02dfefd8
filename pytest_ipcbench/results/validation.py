"""What a results file may hold: the checks ``ResultSet.load`` makes before it builds anything.

Every problem is a :class:`MalformedResults` naming the file, the record and the field; memory
and time stay bounded (MAX_FILE_BYTES, MAX_SAMPLES, MAX_DEPTH), and a FIFO, folder or device is
refused, never read.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

from ..core.errors import IpcbenchError


class MalformedResults(IpcbenchError, ValueError):
    """A results file with the right schema whose content is not what this version writes."""


#: A results file larger than this is refused unread (a run's hold a few MB, a gate's merged
#: sides up to a few hundred; parsing JSON takes several times the file's size in memory).
MAX_FILE_BYTES = 10**9
#: Samples of one metric in one case: the harness takes at most ``max_iterations`` (10,000) and a
#: gate merges up to 2 + 30 rounds of them. The bootstrap of a comparison costs resamples x samples.
MAX_SAMPLES = 400_000
#: Nesting of an ``extra``, ``plan`` or ``env`` value (ours are 2-3 levels deep): deeper ones made
#: the recursive code that copies and prints them raise RecursionError.
MAX_DEPTH = 16
_MAX_INT = 2**63 - 1


def describe_value(value: Any) -> str:
    """``value`` as JSON, cut to 60 characters (for an error message)."""
    try:
        text = json.dumps(value) if not isinstance(value, float) else repr(value)
    except (RecursionError, ValueError):
        text = f"a {type(value).__name__} nested too deep to show"
    return text if len(text) <= 60 else text[:57] + "..."


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and (
        math.isfinite(x) if isinstance(x, float) else abs(x) <= _MAX_INT)


def _whole(lo: int, hi: int = _MAX_INT) -> Any:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def _opt(check: Any) -> Any:
    return lambda v: v is None or check(v)


def _str(v: Any) -> bool:
    return isinstance(v, str)


def _obj(v: Any) -> bool:
    return isinstance(v, dict)


def _depth(value: Any, limit: int) -> int:
    """How deep ``value`` nests (objects and lists), counted without recursion up to ``limit + 1``."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            d += 1
            deepest = max(deepest, d)
            if deepest > limit:
                return deepest
            stack.extend((x, d) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def _samples(v: Any) -> bool:
    return isinstance(v, dict) and all(
        isinstance(k, str) and isinstance(xs, list) and len(xs) <= MAX_SAMPLES
        and all(_number(x) and x >= 0 for x in xs) for k, xs in v.items())


def _known(checks: dict[str, tuple[Any, str]]) -> Any:
    """An object whose keys named in ``checks`` (when present) pass them; other keys are free."""
    def ok(v: Any) -> bool:
        return isinstance(v, dict) and all(k not in v or check(v[k]) for k, (check, _) in checks.items())
    return ok


def _which(checks: dict[str, tuple[Any, str]], v: Any) -> str:
    return "; ".join(f"{k!r} must be {what}" for k, (check, what) in checks.items()
                     if isinstance(v, dict) and k in v and not check(v[k]))


_NUMBER = (_number, "a finite number")
_OPT_NUMBER = (_opt(_number), "null or a finite number")
#: ``extra`` keys that our code reads back (what each must be); the rest is free-form
_EXTRA_KEYS: dict[str, tuple[Any, str]] = {
    "gate_rounds": (lambda v: isinstance(v, dict) and all(
        isinstance(c, list) and all(_whole(1)(n) for n in c) for c in v.values()),
        "an object of metric -> list of whole numbers >= 1"),
    "work_s": _NUMBER, "window": (_opt(_whole(0)), "null or a whole number >= 0"),
    "release": _OPT_NUMBER, "wall_s": _OPT_NUMBER, "passes": (_whole(0), "a whole number >= 0"),
    "test": (_str, "a string"), "case": (_str, "a string"), "config": (_opt(_str), "null or a string"),
}
#: ``env`` keys that our code reads back (report header, compare's warnings, the gate)
_ENV_KEYS: dict[str, tuple[Any, str]] = {
    "load_start": _OPT_NUMBER, "load_end": _OPT_NUMBER, "copy_bandwidth_MBps": _OPT_NUMBER,
    "cores": (_opt(_whole(0)), "null or a whole number >= 0"),
    "failures": (lambda v: v is None or (isinstance(v, list) and all(isinstance(x, str) for x in v)),
                 "null or a list of strings"),
    "mpi": (_opt(_known({"packages": (_opt(_obj), "")})), "null or an object (its 'packages' an object)"),
    "packages": (_opt(_obj), "null or an object"), "wait": (_opt(_obj), "null or an object"),
    "harness_floor": (_opt(_obj), "null or an object"),
    "git": (_opt(_known({"commit": (_opt(_str), "")})), "null or an object (its 'commit' a string)"),
    "ranks_per_node": (_opt(lambda v: isinstance(v, list)), "null or a list"),
}

# field -> (check, what it must be); a field absent from a record takes its default
_CHECKS: dict[str, tuple[Any, str]] = {
    "scenario": (lambda v: isinstance(v, str) and v != "", "a non-empty string"),
    "backend": (lambda v: isinstance(v, str) and v != "", "a non-empty string"),
    "mode": (_str, "a string"),
    "payload": (_str, "a string"),
    "size": (_whole(0), "a whole number >= 0"),
    "ranks": (_whole(1, 2**31), "a whole number >= 1"),
    "nbytes": (_whole(0), "a whole number >= 0"),
    "samples": (_samples, f"an object of metric -> list of finite seconds >= 0 (at most {MAX_SAMPLES} a metric)"),
    "primary": (_str, "a string"),
    "extra": (_known(_EXTRA_KEYS), "an object"),
    "variant": (_str, "a string"),
    "verified": (lambda v: v is None or (isinstance(v, dict) and set(v) <= {"checked", "failed"} and all(
        _whole(0)(x) for x in v.values())),
        "null or {checked, failed} whole numbers"),
    "delivery": (_str, "a string"),
    "kind": (_str, "a string"),  # ``delivery`` in files written before 0.2
    "readers": (_whole(0, 2**31), "a whole number >= 0"),
    "group": (_str, "a string"),
    "oversubscribed": (lambda v: v is None or isinstance(v, bool), "null, true or false"),
    "nodes": (_whole(1, 2**31), "a whole number >= 1"),
    "plan": (_opt(_known({"warmup": (_whole(0), ""), "iterations": (_whole(0), ""), "estimate": (_number, ""),
                          "verify": (_str, ""), "limited_by": (_str, "")})),
             "null or an object (warmup, iterations whole numbers; estimate a number; verify, limited_by strings)"),
    "copy_bandwidth": (_opt(lambda v: _number(v) and v > 0), "null or a finite number > 0"),
    "wait": (_str, "a string"),
    "counters": (lambda v: v is None or (isinstance(v, dict) and isinstance(v.get("ranks"), list) and all(
        isinstance(r, dict) and isinstance(r.get("totals"), dict) for r in v["ranks"])),
        "null or an object with ranks of totals"),
}
_REQUIRED = ("scenario", "backend", "mode", "payload", "size", "ranks", "samples")
_NESTED = ("extra", "plan", "samples", "verified")


def _why(name: str, value: Any, what: str) -> str:
    """What is wrong with a field: the sub-key for ``extra``/``env``, the count for ``samples``."""
    if name == "extra":
        detail = _which(_EXTRA_KEYS, value)
        return f"an object ({detail})" if detail else what
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return f"{what} (at most {2**31 if name in ('ranks', 'readers', 'nodes') else '2**63 - 1'})"
    if name == "samples" and isinstance(value, dict):
        big = {k: len(xs) for k, xs in value.items() if isinstance(xs, list) and len(xs) > MAX_SAMPLES}
        if big:
            metric, n = next(iter(big.items()))
            return f"{what}; {metric!r} has {n} samples (more than any run takes: refused, not loaded)"
    return what


def check_record(d: Any, where: str, primary_default: str) -> None:
    """Raise MalformedResults naming ``where`` (file and record) and the field that is wrong
    (``primary_default``: the primary metric of a record that names none)."""
    if not isinstance(d, dict):
        raise MalformedResults(f"{where}: expected an object, got {describe_value(d)}")
    for name in _REQUIRED:
        if name not in d:
            raise MalformedResults(f"{where}: field {name!r} is missing")
    for name in _NESTED:
        if name in d and _depth(d[name], MAX_DEPTH) > MAX_DEPTH:
            raise MalformedResults(f"{where}: field {name!r} is nested more than {MAX_DEPTH} levels deep")
    for name, (ok, what) in _CHECKS.items():
        if name in d and not ok(d[name]):
            raise MalformedResults(f"{where}: field {name!r} must be {_why(name, d[name], what)}, "
                                   f"got {describe_value(d[name])}")
    samples = d["samples"]
    primary = d.get("primary", primary_default)
    if samples and primary not in samples:
        raise MalformedResults(f"{where}: field 'primary' names {describe_value(primary)}, a metric without samples "
                               f"(has {describe_value(sorted(samples))})")
    if samples and not samples.get(primary):
        raise MalformedResults(f"{where}: field 'samples' has no samples of the primary metric {primary!r}")
    if samples.get(primary) and not any(x > 0 for x in samples[primary]):
        raise MalformedResults(f"{where}: field 'samples': every {primary!r} sample is 0 (no time measured)")


def check_env(env: Any, where: str) -> None:
    """Raise MalformedResults unless ``env`` is an object whose known keys have their types."""
    if not isinstance(env, dict):
        raise MalformedResults(f"{where}: field 'env' must be an object, got {describe_value(env)}")
    if _depth(env, MAX_DEPTH) > MAX_DEPTH:
        raise MalformedResults(f"{where}: field 'env' is nested more than {MAX_DEPTH} levels deep")
    wrong = _which(_ENV_KEYS, env)
    if wrong:
        raise MalformedResults(f"{where}: field 'env': {wrong}")


def read_regular_file(path: Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``limit`` bytes; never blocks on a
    FIFO, never reads a device or an endless file (MalformedResults otherwise)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise FileNotFoundError(f"no results file at {path}") from None
    except OSError as exc:
        raise MalformedResults(f"{path}: cannot open it: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a folder" if stat.S_ISDIR(st.st_mode)
                    else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                    else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a file")
            raise MalformedResults(f"{path} is not a regular file ({kind}): refusing to read it as results")
        if st.st_size > limit:
            raise MalformedResults(f"{path} is larger than a results file may be ({st.st_size} bytes; at most "
                                   f"{limit}): refusing to read it")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise MalformedResults(f"{path} is larger than a results file may be (more than {limit} bytes): "
                                       "refusing to read it")
        return b"".join(chunks)
    except OSError as exc:
        raise MalformedResults(f"{path}: cannot read it: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
