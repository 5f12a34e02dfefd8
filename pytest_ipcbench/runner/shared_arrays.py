"""The shared-array experiment (``shared.experiment.run_experiment``) as results of ``ipcbench run``."""

from __future__ import annotations

from typing import Any

from ..results.results import Result


def experiment_results(got: dict[str, Any] | None) -> list[Result]:
    """Result records (scenario ``shared-array``, one per path) of run_experiment's dictionary."""
    if not isinstance(got, dict) or "samples" not in got:
        return []
    nbytes = int(got.get("nbytes", 0))
    results = [
        Result(scenario="shared-array", backend=path, mode="native", payload="ndarray", size=nbytes, ranks=2,
               samples={"completion": [float(x) for x in samples]}, nbytes=nbytes,
               extra={"shape": list(got.get("shape", ())), "ratios": got.get("ratios", {}),
                      "what": "put until the consumer holds the array (shared-array experiment)"})
        for path, samples in got["samples"].items() if samples
    ]
    sweep = got.get("handle_sweep") or {}
    for n, label in zip(sweep.get("sizes", ()), sweep.get("samples", {})):
        for path, samples in sweep["samples"][label].items():
            results.append(Result(
                scenario="shared-array-handle", backend=path, mode="native", payload="ndarray", size=int(n), ranks=2,
                samples={"completion": [float(x) for x in samples]}, nbytes=int(n),
                extra={"ratio": sweep.get("ratio", {}).get(label),
                       "release": sweep.get("release", {}).get(label) if path == "handle" else None,
                       "what": "handle-only round trip (handle) against None (ping), same queue"}))
    return results
