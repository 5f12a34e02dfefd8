"""Runs a block of cases in a job of its own and writes one JSON line per case.

asv runs each benchmark in a process that cannot be an MPI rank, so the MPI cases of the suite
are measured here, under ``mpiexec -n 4`` started from :func:`setup_cache` -- one launch for
*every* MPI case of a commit (the broadcast matrix of ``bench_transfer`` and the MPI methods of
``bench_mpi_methods``: both modules import this one function, so asv runs it once and shares its
cache). The job times inside itself with the project's harness, and the figure asv records is
the median over iterations of the max over readers -- mpiexec start-up is never part of it.
Cases of 2 ranks run on a sub-group of the first two ranks of the same launch.

The default suite is small on purpose (a few minutes a commit): one latency case and three 1 MB
shapes of data per backend and mode at 4 ranks, the MPI methods' Small and Large configurations.
``IPCBENCH_ASV_FULL=1`` (set when running asv) selects the full matrix: every payload kind and
size, 2 and 4 ranks, every configuration. Cases outside the selected suite show as skipped.

Usable by hand too::

    mpiexec -n 4 python benchmarks/_job.py all --out cases.jsonl
    mpiexec -n 4 python benchmarks/_job.py transfer --out cases.jsonl --backends shm --sizes 1MB
    python benchmarks/_job.py transfer --local --backends mp-queue --out cases.jsonl

Output lines (rank 0 writes them, one per case, as soon as the case ends):
``{"case": KEY, "value": seconds}``, ``{"case": KEY, "skip": "why"}``, ``{"error": "why"}`` for the
whole job, and a final ``{"done": true}``. This file lives in benchmarks/, not in the package,
so it is the same for every commit asv measures; what it imports from the package is guarded.

Nothing here is imported at module level but the standard library: asv imports this module when
it discovers the suite.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()

#: The full matrix instead of the default suite (``IPCBENCH_ASV_FULL=1`` in asv's environment).
FULL = os.environ.get("IPCBENCH_ASV_FULL", "").strip().lower() not in ("", "0", "no", "false")

# The matrix, fixed in the suite (not read from the package) so it is the same over history.
BACKENDS = ("lmdb", "shm", "zmq", "mpi-bcast", "mpi-pkl5", "mpi-buffer", "mpi-p2p", "mp-queue", "mpi-shm-win")
MODES = ("bytes", "native")
KINDS = ("dict", "ndarray", "array1d", "ragged2d", "tiny")
SIZES = ("1KB", "1MB")  # small (latency-bound) and large (bandwidth-bound); `ipcbench run` goes bigger
RANKS = (2, 4)
METHOD_CONFIGS = ("Small", "Medium", "Large")
SHAPES = ("1d", "2d")
TIME_BUDGET = 0.1  # seconds of timed iterations per case: asv wants a suite, not a survey
MAX_ITERATIONS = 500
JOB_TIMEOUT = 1500.0

# The default suite: what each case adds (the full matrix repeats most of it).  (kind, size):
# tiny = latency; ndarray = one buffer (bandwidth); dict and ragged2d = many objects per message,
# the serialization-bound shapes -- at 1 MB, where backends differ most.  4 ranks (fan-out);
# the MPI methods' Small (11 KB) and Large (1.1 MB) configurations, both shapes.
DEFAULT_CASES = (("tiny", "1KB"), ("ndarray", "1MB"), ("dict", "1MB"), ("ragged2d", "1MB"))
DEFAULT_RANKS = (4,)
DEFAULT_METHOD_CONFIGS = ("Small", "Large")

#: What the selected suite (default or full) covers; the asv classes take their params from here.
SUITE_KINDS = KINDS if FULL else tuple(k for k in KINDS if any(k == c[0] for c in DEFAULT_CASES))
SUITE_RANKS = RANKS if FULL else DEFAULT_RANKS
SUITE_METHOD_CONFIGS = METHOD_CONFIGS if FULL else DEFAULT_METHOD_CONFIGS
#: asv rounds of the in-process time benchmarks (asv's default is 2; one is enough to follow history)
ROUNDS = 2 if FULL else 1
#: asv repeat and warm-up of the in-process time benchmarks: asv's defaults (0 and -1: up to 10
#: samples or 20 s, 1 s of warm-up) in the full suite; up to 5 samples within 4 s by default
REPEAT: Any = 0 if FULL else (1, 5, 4.0)
WARMUP_TIME = -1 if FULL else 0.2
#: asv rounds of the track_* benchmarks: their figures come from a cache, another round reads
#: the same number again
TRACK_ROUNDS = 1
NOT_IN_SUITE = "not in the default suite (IPCBENCH_ASV_FULL=1 runs the full matrix)"


def case_key(*parts: Any) -> str:
    return "|".join(str(p) for p in parts)


def skip_reason(kind: str, size: str) -> str | None:
    """Why (kind, size) is not measured by the selected suite, or None."""
    if kind == "tiny" and size != SIZES[0]:
        return "tiny payloads have one size (64 B), listed under the smallest"
    if not FULL and (kind, size) not in DEFAULT_CASES:
        return NOT_IN_SUITE
    return None


def suite_pairs() -> list[tuple[str, str]]:
    """The (kind, size) pairs of the selected suite."""
    return [(k, s) for k in SUITE_KINDS for s in SIZES if skip_reason(k, s) is None]


def case_label(kind: str, size: str) -> str:
    """The asv parameter value of a (kind, size) pair: ``ndarray-1MB``, ``tiny-64B``."""
    return "tiny-64B" if kind == "tiny" else f"{kind}-{size}"


#: asv parameter values of the selected suite's payload cases, and what each one means.  asv
#: runs every parameter combination in a process of its own (skipped ones too), so the
#: parameters list exactly what is measured instead of a product with holes.
SUITE_CASES = [case_label(k, s) for k, s in suite_pairs()]
CASE_OF = {case_label(k, s): (k, s) for k in KINDS for s in SIZES if k != "tiny" or s == SIZES[0]}


def transfer_cases(backends: Iterable[str] = BACKENDS, modes: Iterable[str] = MODES,
                   kinds: Iterable[str] = KINDS, sizes: Iterable[str] = SIZES) -> list[tuple[str, str, str, str]]:
    """(backend, mode, kind, size label); ``tiny`` has one fixed size (64 B), listed under the first."""
    sizes = list(sizes)
    return [
        (b, m, k, s)
        for b in backends for m in modes for k in kinds for s in sizes
        if k != "tiny" or s == sizes[0]
    ]


# ---------------------------------------------------------------------------------- in the job


class _Out:
    """Rank 0's line writer (flushed per line, so a killed job keeps what it measured)."""

    def __init__(self, path: str | None, active: bool) -> None:
        self.f = open(path, "a") if (path and active) else None

    def __call__(self, **record: Any) -> None:
        if self.f is not None:
            self.f.write(json.dumps(record) + "\n")
            self.f.flush()

    def close(self) -> None:
        if self.f is not None:
            self.f.close()


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return float(s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2)


def _cases_of(args: argparse.Namespace) -> list[tuple[str, str, str, str]]:
    cases = transfer_cases(args.backends, args.modes, args.kinds, args.sizes)
    if args.pairs:
        pairs = {tuple(p.split("@", 1)) for p in args.pairs}
        cases = [c for c in cases if (c[2], c[3]) in pairs]
    return cases


def _transfer_job(args: argparse.Namespace, world: Any = None, out: _Out | None = None) -> int:
    """The broadcast matrix; given ``world`` and ``out`` (the ``all`` job), no final done line."""
    cases = _cases_of(args)
    try:
        from pytest_ipcbench.backends.base import BackendSpec, unavailable_reason
        from pytest_ipcbench.core.payloads import PayloadSpec, parse_size
        from pytest_ipcbench.harness import measure
    except ImportError as exc:  # an older commit: no harness yet
        if out is not None:
            out(error=f"this commit cannot measure transfers: {exc}", part="transfer")
        else:
            print(json.dumps({"error": f"this commit cannot be measured: {exc}"}), file=_stream(args))
        return 0
    settings = measure.BenchSettings(time_budget=args.budget, min_iterations=5, max_iterations=MAX_ITERATIONS)

    def payload(kind: str, size: str) -> Any:
        return PayloadSpec(kind, 64 if kind == "tiny" else parse_size(size))

    if args.local:
        return _local_transfer(args, cases, measure, BackendSpec, unavailable_reason, payload, settings)

    own = out is None
    if world is None:
        from pytest_ipcbench.core.group import MPIGroup

        world = MPIGroup.world()
    if out is None:
        out = _Out(args.out, world.rank == 0)
    try:
        for ranks in args.ranks:
            if ranks > world.size:
                for b, m, k, s in cases:
                    out(case=case_key(b, m, k, s, ranks), skip=f"the job has only {world.size} ranks")
                continue
            sub = world.split(ranks)
            if sub is not None:
                for b, m, k, s in cases:
                    key = case_key(b, m, k, s, ranks)
                    reason = unavailable_reason(b, sub)
                    if reason:
                        # a backend that does not need MPI may still run between local processes
                        out(case=key, skip=reason, local=not _needs_mpi(b))
                        continue
                    _one(out, key, lambda: measure.bench(sub, BackendSpec(b, m), payload(k, s), "broadcast", settings),  # noqa: B023 (_one calls it at once)
                         sub.rank == 0)
            _quiet_barrier(world, measure)
        if own:
            out(done=True)
    finally:
        if own:
            out.close()
    return 0


def _local_transfer(args: argparse.Namespace, cases: list[tuple[str, str, str, str]], measure: Any,
                    BackendSpec: Any, unavailable_reason: Callable[..., str | None],
                    payload: Callable[[str, str], Any], settings: Any) -> int:
    """Backends that cannot run between MPI ranks (e.g. mp-queue) run in a local world instead."""
    from pytest_ipcbench.core.local import LocalWorld

    out = _Out(args.out, True)
    try:
        with LocalWorld(max(args.ranks)) as world:
            for ranks in args.ranks:
                group = world.group(ranks)
                for b, m, k, s in cases:
                    key = case_key(b, m, k, s, ranks)
                    # the world starts its workers (and their queues) at the first run: ask the
                    # backend about this machine only, the harness checks the group itself
                    reason = unavailable_reason(b, None)
                    if reason:
                        out(case=key, skip=reason)
                        continue
                    _one(out, key, lambda: measure.run_bench(group, BackendSpec(b, m), payload(k, s),  # noqa: B023 (_one calls it at once)
                                                             "broadcast", settings), True)
        out(done=True)
    finally:
        out.close()
    return 0


def _needs_mpi(backend: str) -> bool:
    from pytest_ipcbench.backends.base import BackendUnavailable, get_backend

    try:
        return bool(get_backend(backend).needs_mpi)
    except (BackendUnavailable, ValueError):  # cannot even load: a local world will not help
        return True


def _one(out: _Out, key: str, run: Callable[[], Any], is_root: bool) -> None:
    """Measure one case; record its median completion time (rank 0), or why it has none."""
    try:
        result = run()
    except Exception as exc:  # every rank of the case raises (the harness's verdicts are collective)
        out(case=key, skip=f"failed: {type(exc).__name__}: {exc}"[:500])
        return
    if is_root and result is not None:
        samples = result.samples.get(result.primary) or []
        if samples:
            out(case=key, value=_median(samples), n=len(samples))
        else:
            out(case=key, skip=f"no {result.primary} samples")


def _quiet_barrier(world: Any, measure: Any) -> None:
    barrier = getattr(measure, "quiet_barrier", None)
    barrier(world) if barrier else world.barrier()


def _methods_job(args: argparse.Namespace, world: Any = None, out: _Out | None = None) -> int:
    """The MPI methods; given ``world`` and ``out`` (the ``all`` job), no final done line."""
    try:
        try:
            from pytest_ipcbench import mpi_methods as mm
        except ImportError:  # commits before seed004/ was renamed mpi_methods/
            from pytest_ipcbench import seed004 as mm
        from pytest_ipcbench.core.group import MPIGroup
        if hasattr(mm, "matrix_settings"):  # the MPI methods on the harness: 0.2 s of transfers per case
            timing: dict[str, Any] = {"settings": mm.matrix_settings(case_time=0.2, rounds=1), "rounds": 1}
        else:  # commits with the MPI methods' own timing loop (all before the rename)
            from pytest_ipcbench.seed004 import methods as mm
            timing = {"plan": mm.Plan(sample_time=0.02, case_time=0.2, min_samples=5, max_samples=7)}
    except ImportError as exc:
        if out is not None:
            out(error=f"this commit has no MPI methods: {exc}", part="methods")
        else:
            print(json.dumps({"error": f"this commit has no MPI methods: {exc}"}), file=_stream(args))
        return 0
    own = out is None
    if world is None:
        world = MPIGroup.world()
    if out is None:
        out = _Out(args.out, world.rank == 0)
    try:
        for ranks in args.ranks:
            sub = world.split(ranks) if ranks <= world.size else None
            if sub is not None:
                for config in args.configs:
                    for shape in SHAPES:
                        for method in mm.METHOD_NAMES:
                            key = case_key(method, config, shape, ranks)
                            try:
                                results = mm.run_matrix(sub, [config], [method], [shape], **timing)
                            except Exception as exc:
                                out(case=key, skip=f"failed: {type(exc).__name__}: {exc}"[:500])
                                continue
                            for r in results:
                                out(case=key, value=_median(r.samples["completion"]), n=len(r.samples["completion"]))
            _quiet_barrier(world, _try_measure())
        if own:
            out(done=True)
    finally:
        if own:
            out.close()
    return 0


def _all_job(args: argparse.Namespace) -> int:
    """Every MPI case of the suite in one launch: the broadcast matrix, then the MPI methods."""
    try:
        from pytest_ipcbench.core.group import MPIGroup
    except ImportError as exc:
        print(json.dumps({"error": f"this commit cannot be measured: {exc}"}), file=_stream(args))
        return 0
    world = MPIGroup.world()
    out = _Out(args.out, world.rank == 0)
    try:
        _transfer_job(args, world, out)
        _methods_job(args, world, out)
        out(done=True)
    finally:
        out.close()
    return 0


def _try_measure() -> Any:
    try:
        from pytest_ipcbench.harness import measure
        return measure
    except ImportError:
        return None


def _stream(args: argparse.Namespace) -> Any:
    return open(args.out, "a") if args.out else sys.stdout


def _csv(text: str) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="benchmarks/_job.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="job", required=True)
    t = sub.add_parser("transfer", help="broadcast: every backend x mode x payload kind x size x ranks")
    m = sub.add_parser("methods", help="the MPI methods: every MPI method x configuration x shape x ranks")
    a = sub.add_parser("all", help="both, in one launch (the selected suite by default)")
    for q in (t, a):
        q.add_argument("--backends", type=_csv, default=list(BACKENDS))
        q.add_argument("--modes", type=_csv, default=list(MODES))
        q.add_argument("--kinds", type=_csv, default=list(KINDS))
        q.add_argument("--sizes", type=_csv, default=list(SIZES))
        q.add_argument("--pairs", type=_csv, default=None, metavar="KIND@SIZE,...",
                       help="only these (kind, size) pairs, e.g. tiny@1KB,ndarray@1MB")
        q.add_argument("--budget", type=float, default=TIME_BUDGET, help="seconds of timed iterations per case")
    t.add_argument("--local", action="store_true", help="a local world of processes instead of MPI ranks")
    for q in (m, a):
        q.add_argument("--configs", type=_csv, default=list(METHOD_CONFIGS))
    for q in (t, m, a):
        q.add_argument("--ranks", type=lambda s: [int(x) for x in _csv(s)], default=list(RANKS))
        q.add_argument("--out", help="JSON lines file (rank 0 appends)")
    a.set_defaults(local=False)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return {"transfer": _transfer_job, "methods": _methods_job, "all": _all_job}[args.job](args)


def suite_args() -> list[str]:
    """Arguments of the ``all`` job for the selected suite (default or ``IPCBENCH_ASV_FULL``)."""
    return ["--kinds", ",".join(SUITE_KINDS), "--pairs", ",".join(f"{k}@{s}" for k, s in suite_pairs()),
            "--ranks", ",".join(map(str, SUITE_RANKS)), "--configs", ",".join(SUITE_METHOD_CONFIGS)]


def setup_cache() -> dict[str, Any]:
    """One ``mpiexec -n 4`` job for every MPI case of the commit, then one plain launch for the
    backends that cannot run between MPI ranks (mp-queue: its queues are inherited by local
    processes).  ``bench_transfer`` and ``bench_mpi_methods`` both import this function, so asv
    (which keys a cache by the function's module and line) runs it once per commit for both."""
    cache = launch(["all", *suite_args()], Path("mpi-cases.jsonl").resolve(), nprocs=4)
    local = sorted(cache.pop("!local", ()))
    if local:
        transfer_only = suite_args()[:6]  # kinds, pairs, ranks
        cache.update(launch(["transfer", "--local", "--backends", ",".join(local), *transfer_only],
                            Path("local-cases.jsonl").resolve(), nprocs=None))
    return cache


setup_cache.timeout = 2 * JOB_TIMEOUT + 60  # type: ignore[attr-defined]


# ------------------------------------------------------------------------- from setup_cache


def find_mpiexec() -> list[str] | None:
    """The launcher of the environment asv runs in (the mpich wheel puts it next to python).

    ``IPCBENCH_MPIEXEC`` overrides it (e.g. ``"mpiexec --oversubscribe"`` for a system Open MPI).
    """
    override = os.environ.get("IPCBENCH_MPIEXEC")
    if override:
        return override.split()
    here = Path(sys.executable).parent / "mpiexec"
    exe = str(here) if here.exists() else shutil.which("mpiexec")
    if exe is None:
        return None
    cmd = [exe]
    try:
        version = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        version = ""
    if "Open MPI" in version or "OpenRTE" in version:
        cmd.append("--oversubscribe")  # 4 ranks on a 2-core runner
    return cmd


def launch(job_args: Sequence[str], out: Path, nprocs: int | None = 4, timeout: float = JOB_TIMEOUT) -> dict[str, Any]:
    """Run this script (under ``mpiexec -n nprocs``, or alone when ``nprocs`` is None).

    Returns ``{case key: seconds or "skip: why"}``; a job that failed as a whole gives its reason
    under every case the caller asks for (see :func:`lookup`) through the key ``"*"``.
    """
    cmd = [sys.executable, "-u", str(HERE), *job_args, "--out", str(out)]
    if nprocs is not None:
        mpiexec = find_mpiexec()
        if mpiexec is None:
            return {"*": "skip: no mpiexec in this environment (install the package with the mpi extra)"}
        cmd = [*mpiexec, "-n", str(nprocs), *cmd]
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # the job imports the package installed in asv's environment
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env=env)
    try:
        log, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        log, _ = proc.communicate()
        log += f"\n[job killed after {timeout:g} s]"
    cache = read_lines(out)
    if proc.returncode != 0 or "!done" not in cache:
        took = time.monotonic() - started
        tail = "\n".join(log.splitlines()[-20:])
        sys.stderr.write(f"job {' '.join(job_args)} ended with {proc.returncode} after {took:.0f} s:\n{tail}\n")
        cache.setdefault("*", f"skip: the job did not finish (exit {proc.returncode}): {tail[-300:]}")
    return cache


def run_json(cmd: Sequence[str], timeout: float) -> Any:
    """Run a command that prints one JSON document; the document, or ``"skip: why"``."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=env)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return f"skip: {' '.join(cmd[1:4])} did not finish within {timeout:g} s"
    if proc.returncode != 0:
        last = (err.strip().splitlines() or ["?"])[-1]
        if "No module named" in err:
            return f"skip: this commit cannot run it: {last}"
        sys.stderr.write(err[-3000:])
        return f"skip: failed (exit {proc.returncode}): {last}"
    try:
        return json.loads(out)
    except ValueError:
        return f"skip: no JSON in the output: {out[-200:]!r}"


def read_lines(path: Path) -> dict[str, Any]:
    cache: dict[str, Any] = {}
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return cache
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if "error" in rec:
            cache["*" + rec.get("part", "")] = f"skip: {rec['error']}"
        elif rec.get("done"):
            cache["!done"] = True
        elif "case" in rec:
            cache[rec["case"]] = rec["value"] if "value" in rec else f"skip: {rec.get('skip', '?')}"
            if rec.get("local"):
                cache.setdefault("!local", set()).add(rec["case"].split("|")[0])
    return cache


def lookup(cache: dict[str, Any], key: str, part: str = "") -> float:
    """The measured seconds of ``key``; NotImplementedError (asv: skipped) when there are none.

    ``part`` (``transfer``, ``methods``): a failure of that part of the ``all`` job applies too.
    """
    value = cache.get(key, cache.get("*" + part, cache.get("*", "skip: not measured by this commit")))
    if isinstance(value, str):
        raise NotImplementedError(value)
    return float(value)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except BaseException:
        traceback.print_exc()
        sys.exit(1)
