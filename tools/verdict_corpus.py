"""The verdict corpus: real results files and the verdicts compare and the gate give on them.

    .venv/bin/python tools/verdict_corpus.py make --work /tmp/vc     # the runs (about 20 min)
    .venv/bin/python tools/verdict_corpus.py store --work /tmp/vc    # shrink them into the corpus
    .venv/bin/python tools/verdict_corpus.py --record                # write today's verdicts
    .venv/bin/python tools/verdict_corpus.py                         # check: exit 1 on a change

``make`` runs ``ipcbench run --quick`` of a small matrix (:data:`RUN_ARGS`) again and again in
``--work``: 4 runs of identical code for a calibration (never compared), then rounds of four runs
in turn: A and B (identical code), S2 (``IPCBENCH_INJECT=shm=2``) and S15 (``mp-queue=1.5``), then
rounds under load (two spinning processes of this tool beside each run): LA, LB, LS2. ``store``
keeps of each run what a comparison reads (each case's primary metric, the in-run references cut to
:data:`MAX_REFERENCE` samples, the env keys compare reads) and writes the gate's sides as the gate
merges its rounds (one job id), so the corpus stays small. The pairs and their options are
:func:`pairs`; ``--record`` writes each pair's verdicts (status per case, outcome, exit code)
into ``manifest.json``, and tests/comparison/test_verdict_corpus.py recomputes them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "data" / "verdict_corpus"
RUN_ARGS = ["--quick", "--sizes", "1KB,1MB", "--backends", "shm,mp-queue", "--kinds", "ndarray,buffer",
            "--scenarios", "broadcast,pingpong", "--no-extras"]
INJECT = {"S2": "shm=2", "S15": "mp-queue=1.5", "LS2": "shm=2"}
QUIET = ("A", "B", "S2", "S15")
LOADED = ("LA", "LB", "LS2")
#: The in-run reference cases (copy bandwidth, a raw pipe) hold thousands of samples; the
#: normalisation reads their medians, which this many evenly spaced sorted samples keep.
MAX_REFERENCE = 400
ENV_KEYS = ("created", "host", "cores", "run_id", "load_start", "load_end", "others_cpu_share", "cross_cpu_copy_s",
            "cross_cpu_copy_start_s", "cross_cpu_copy_end_s", "injected", "ranks", "oversubscribed", "level",
            "git", "packages", "python", "mpi", "spell_change")


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _run(out: Path, inject: str, count: bool = False) -> None:
    if (out / "results.json").is_file():
        return
    env = {k: v for k, v in os.environ.items() if k != "IPCBENCH_INJECT"}
    if inject:
        env["IPCBENCH_INJECT"] = inject
    cmd = [sys.executable, "-m", "pytest_ipcbench", "run", *RUN_ARGS, "--results-only", "--progress", "none",
           "--out", str(out), *(["--count"] if count else [])]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd="/tmp")
    if proc.returncode not in (0, 1) or not (out / "results.json").is_file():
        raise SystemExit(f"[verdict-corpus] {out}: ipcbench run exited {proc.returncode}:\n{proc.stdout[-2000:]}")
    print(f"[verdict-corpus] {out.parent.name}/{out.name}{f' ({inject})' if inject else ''}: "
          f"{time.monotonic() - t0:.0f} s, load {_load()}", flush=True)


def make(work: Path, rounds: int, loaded_rounds: int) -> None:
    work.mkdir(parents=True, exist_ok=True)
    for i in range(4):
        _run(work / "C" / str(i + 1), "")
    for r in range(rounds):
        for name in QUIET[r % 4:] + QUIET[:r % 4]:  # the order rotates from round to round
            _run(work / name / str(r + 1), INJECT.get(name, ""))
    for r in range(loaded_rounds):
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
        try:
            for name in LOADED[r % 3:] + LOADED[:r % 3]:
                _run(work / name / str(r + 1), INJECT.get(name, ""))
        finally:
            for p in hogs:
                p.kill()
                p.wait()


COUNTER_ARGS = ["--count", "--no-config", "--backends", "inj", "--modes", "bytes", "--kinds", "ndarray,buffer",
                "--sizes", "1KB,1MB", "--scenarios", "broadcast,pingpong", "--ranks", "2", "--quick", "--no-extras"]


def counters(work: Path) -> None:
    """Counted runs of tests/data/counter_consumer's ``inj`` backend: clean (twice: an A/A), and its
    ``syscall`` and ``copy`` variants (one more write, one more copy per message)."""
    import shutil

    for name, variant in (("base", "clean"), ("none", "clean"), ("syscall", "syscall"), ("copy", "copy")):
        out = work / "counters" / name
        if (out / "results.json").is_file():
            continue
        src = work / "counters-src" / name
        shutil.rmtree(src, ignore_errors=True)
        shutil.copytree(REPO / "tests" / "data" / "counter_consumer" / "src", src)
        v = src / "inj_channel" / "variant.py"
        v.write_text(v.read_text().replace('VARIANT = "clean"', f'VARIANT = "{variant}"'))
        info = src / "ipcbench_counter_injection-0.1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ipcbench-counter-injection\nVersion: 0.1.0\n")
        (info / "entry_points.txt").write_text("[pytest_ipcbench.backends]\ninj = inj_channel:InjLocal\n")
        path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH", ""), str(src)) if p)
        env = {**{k: v for k, v in os.environ.items() if k != "IPCBENCH_INJECT"}, "PYTHONPATH": path}
        proc = subprocess.run([sys.executable, "-m", "pytest_ipcbench", "run", *COUNTER_ARGS, "--results-only",
                               "--progress", "none", "--out", str(out)], env=env, cwd="/tmp",
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"[verdict-corpus] counters {name}: exit {proc.returncode}:\n{proc.stdout[-2000:]}")
        print(f"[verdict-corpus] counters/{name} ({variant}), load {_load()}", flush=True)


# ------------------------------------------------------------------------------------- storing


def _shrink(data: dict[str, Any]) -> dict[str, Any]:
    env = {k: data["env"][k] for k in ENV_KEYS if k in data["env"]}
    results = []
    for r in data["results"]:
        keep = {k: v for k, v in r.items() if k not in ("stats", "derived", "plan", "verified", "samples", "extra")}
        if r.get("counters"):  # what compare reads of the counters: their values, not the raw records
            keep["counters"] = r["counters"]
        primary = r["primary"]
        samples = [round(x, 10) for x in r["samples"][primary]]
        if r["scenario"] in ("reference", "copy") and len(samples) > MAX_REFERENCE:
            s = sorted(samples)
            samples = [s[int(i * (len(s) - 1) / (MAX_REFERENCE - 1))] for i in range(MAX_REFERENCE)]
        keep["samples"] = {primary: samples}
        extra = {k: v for k, v in (r.get("extra") or {}).items() if k in ("case", "gate_rounds")}
        if extra:
            keep["extra"] = extra
        results.append(keep)
    return {"schema": data["schema"], "created": data.get("created"), "env": env, "results": results}


def _write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, separators=(",", ":")) + "\n")


def store(work: Path) -> None:
    from pytest_ipcbench.comparison.rounds import merge_rounds
    from pytest_ipcbench.results.results import ResultSet

    calibrated = [str(p) for p in sorted(work.glob("C/*/results.json"))]
    subprocess.run([sys.executable, "-m", "pytest_ipcbench", "calibrate", "--from", *calibrated, "--out",
                    str(CORPUS / "calibration.json"), "--plot", "none"], check=True, cwd="/tmp", stdout=subprocess.DEVNULL)
    for run in sorted(work.glob("*/*/results.json")):
        name, number = run.parent.parent.name, run.parent.name
        if name == "C":  # the calibration's runs are never compared
            continue
        where = CORPUS / "counters" / number if name == "counters" else CORPUS / "runs" / name / number
        _write(where / "results.json", _shrink(json.loads(run.read_text())))
    runs = CORPUS / "runs"
    for gate, (base, head, rounds) in GATES.items():
        sides = {}
        for side, name in (("base", base), ("head", head)):
            sets = [ResultSet.load(runs / name / str(i) / "results.json") for i in rounds]
            merged = merge_rounds(sets)
            merged.env["gate_job"] = f"corpus-{gate}"
            merged.env["gate_side"] = name
            sides[side] = merged
        for side, rs in sides.items():
            rs.save(CORPUS / "gates" / gate / f"{side}.json")


#: gate name -> (base runs, head runs, round numbers): sides merged as the gate merges its rounds
GATES = {
    "aa-3": ("A", "B", (1, 2, 3)), "aa-5": ("A", "B", (1, 2, 3, 4, 5)), "s2-3": ("A", "S2", (1, 2, 3)),
    "s2-5": ("A", "S2", (1, 2, 3, 4, 5)), "s15-5": ("A", "S15", (1, 2, 3, 4, 5)), "s2-1": ("A", "S2", (1,)),
    "aa-1": ("A", "B", (2,)), "loaded-aa-3": ("LA", "LB", (1, 2, 3)), "loaded-s2-3": ("LA", "LS2", (1, 2, 3)),
}


# ------------------------------------------------------------------------------------- the pairs


def pairs() -> list[dict[str, Any]]:
    """Every pair of the corpus with its options (paths relative to the corpus folder)."""
    out: list[dict[str, Any]] = []

    def add(name: str, kind: str, base: str, head: str, **opts: Any) -> None:
        out.append({"name": name, "kind": kind, "command": opts.pop("command", "compare"), "base": base,
                    "head": head, "calibration": opts.pop("calibration", None), "metric": opts.pop("metric", None),
                    "threshold": opts.pop("threshold", 0.10), "paired": opts.pop("paired", None), **opts})

    cal = "calibration.json"
    for i in range(1, 6):
        add(f"aa-single-{i}", "A/A", f"runs/A/{i}/results.json", f"runs/B/{i}/results.json")
        add(f"aa-single-{i}-cal", "A/A", f"runs/A/{i}/results.json", f"runs/B/{i}/results.json", calibration=cal)
    for i in (1, 2, 3):
        add(f"s2-single-{i}", "shm 2x", f"runs/A/{i}/results.json", f"runs/S2/{i}/results.json")
        add(f"s2-single-{i}-cal", "shm 2x", f"runs/A/{i}/results.json", f"runs/S2/{i}/results.json", calibration=cal)
        add(f"s15-single-{i}", "mp-queue 1.5x", f"runs/A/{i}/results.json", f"runs/S15/{i}/results.json")
        add(f"s15-single-{i}-cal", "mp-queue 1.5x", f"runs/A/{i}/results.json", f"runs/S15/{i}/results.json",
            calibration=cal)
    add("s2-single-1-paired", "shm 2x", "runs/A/1/results.json", "runs/S2/1/results.json", paired=True)
    add("s2-single-1-t30", "shm 2x", "runs/A/1/results.json", "runs/S2/1/results.json", calibration=cal,
        threshold=0.30)
    add("same-file", "A/A", "runs/A/1/results.json", "runs/A/1/results.json")
    add("aa-runs-5", "A/A", "runs/A", "runs/B")
    add("aa-runs-5-cal", "A/A", "runs/A", "runs/B", calibration=cal)
    add("s2-runs-5", "shm 2x", "runs/A", "runs/S2")
    add("s15-runs-5", "mp-queue 1.5x", "runs/A", "runs/S15")
    add("s15-runs-5-cal", "mp-queue 1.5x", "runs/A", "runs/S15", calibration=cal)
    add("aa-runs-3", "A/A", "runs/A/[123]", "runs/B/[123]")  # too few runs a side: the single-run rule
    add("s2-runs-3-cal", "shm 2x", "runs/A/[123]", "runs/S2/[123]", calibration=cal)
    for i in (1, 2, 3):
        add(f"loaded-aa-single-{i}", "A/A loaded", f"runs/LA/{i}/results.json", f"runs/LB/{i}/results.json")
        add(f"loaded-aa-single-{i}-cal", "A/A loaded", f"runs/LA/{i}/results.json", f"runs/LB/{i}/results.json",
            calibration=cal)
        add(f"loaded-s2-single-{i}", "shm 2x loaded", f"runs/LA/{i}/results.json", f"runs/LS2/{i}/results.json")
        add(f"loaded-s2-single-{i}-cal", "shm 2x loaded", f"runs/LA/{i}/results.json",
            f"runs/LS2/{i}/results.json", calibration=cal)
    for gate, (_b, head, rounds) in GATES.items():
        kind = {"B": "A/A", "S2": "shm 2x", "S15": "mp-queue 1.5x", "LB": "A/A loaded", "LS2": "shm 2x loaded"}[head]
        add(f"gate-{gate}", f"{kind}, gate {len(rounds)} round(s)", f"gates/{gate}/base.json",
            f"gates/{gate}/head.json", command="gate")
        add(f"gate-{gate}-cal", f"{kind}, gate {len(rounds)} round(s)", f"gates/{gate}/base.json",
            f"gates/{gate}/head.json", command="gate", calibration=cal)
    for variant in ("none", "syscall", "copy"):
        if (CORPUS / "counters" / variant).is_dir():
            add(f"counters-{variant}", f"counters {variant}", "counters/base/results.json",
                f"counters/{variant}/results.json")
    return out


# ------------------------------------------------------------------------------------- verdicts


def verdicts(pair: dict[str, Any], root: Path = CORPUS) -> dict[str, Any]:
    """The pair's verdicts as compare (or the gate's comparison of its merged sides) gives them."""
    from pytest_ipcbench.comparison.calibration import Calibration
    from pytest_ipcbench.comparison.compare import compare_sets
    from pytest_ipcbench.comparison.run_sets import load_side

    cwd = os.getcwd()
    os.chdir(root)  # the sides' globs are relative to the corpus
    try:
        base, head = load_side(pair["base"], "base"), load_side(pair["head"], "head")
    finally:
        os.chdir(cwd)
    calibration = Calibration.load(root / pair["calibration"]) if pair["calibration"] else None
    paired = True if pair["command"] == "gate" else pair["paired"]
    comparison = compare_sets(base, head, pair["threshold"], 0.95, pair["metric"], True, paired, calibration)
    # (before the outcome existed, the last line said REGRESSION or OK)
    outcome = getattr(comparison, "outcome", None) or ("REGRESSION" if comparison.exit_code == 1 else "OK")
    return {"outcome": outcome, "exit_code": comparison.exit_code,
            "statuses": {c.key: c.status for c in comparison.cases}}


def record_or_check(record: bool) -> int:
    manifest_path = CORPUS / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    recorded = {p["name"]: p for p in manifest.get("pairs", [])}
    changed = 0
    new_pairs = []
    for pair in pairs():
        got = verdicts(pair)
        old = recorded.get(pair["name"], {}).get("expect")
        if old is not None and old != got:
            changed += 1
            diff = {k: (old["statuses"].get(k), s) for k, s in got["statuses"].items() if old["statuses"].get(k) != s}
            print(f"{pair['name']}: {old['outcome']} {old['exit_code']} -> {got['outcome']} {got['exit_code']}; "
                  f"{diff}")
        new_pairs.append({**pair, "expect": got})
    if record:
        manifest = {"about": "pairs of real results files and the verdicts they give (tools/verdict_corpus.py)",
                    "run_args": RUN_ARGS, "inject": INJECT, "max_reference_samples": MAX_REFERENCE,
                    "runs": _run_notes(), "pairs": new_pairs}
        manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
        print(f"recorded {len(new_pairs)} pairs ({changed} changed) in {manifest_path}")
        return 0
    print(f"{len(new_pairs)} pairs, {changed} changed")
    return 1 if changed else 0


def _run_notes() -> dict[str, Any]:
    """Each run's load at its start and end and others' CPU share, as recorded in its env."""
    notes = {}
    for run in sorted((CORPUS / "runs").glob("*/*/results.json")):
        env = json.loads(run.read_text())["env"]
        notes[f"{run.parent.parent.name}/{run.parent.name}"] = {
            k: env.get(k) for k in ("created", "load_start", "load_end", "others_cpu_share", "injected")}
    return notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("step", nargs="?", choices=("make", "counters", "store", "check"), default="check")
    parser.add_argument("--work", default="/tmp/verdict-corpus")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--loaded-rounds", type=int, default=3)
    parser.add_argument("--record", action="store_true", help="write today's verdicts into the manifest")
    args = parser.parse_args(argv)
    if args.step == "make":
        make(Path(args.work), args.rounds, args.loaded_rounds)
        return 0
    if args.step == "counters":
        counters(Path(args.work))
        return 0
    if args.step == "store":
        store(Path(args.work))
        return 0
    return record_or_check(args.record)


if __name__ == "__main__":
    sys.exit(main())
