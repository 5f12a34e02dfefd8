"""The verdict corpus (tests/data/verdict_corpus, tools/verdict_corpus.py): real results files of
identical code, injected 1.5x and 2x slowdowns and counter changes, as separate runs, several runs a
side and a gate's rounds, with and without a calibration, quiet-ish and loaded; every pair gives
the verdicts recorded in its manifest (status per case, outcome and exit code)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "data" / "verdict_corpus"
MANIFEST = json.loads((CORPUS / "manifest.json").read_text())


def _tool():
    spec = importlib.util.spec_from_file_location("verdict_corpus", REPO / "tools" / "verdict_corpus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TOOL = _tool()


def test_the_corpus_covers_what_it_should() -> None:
    pairs = MANIFEST["pairs"]
    kinds = " ".join(p["kind"] for p in pairs)
    assert len(pairs) >= 30
    for what in ("A/A", "shm 2x", "mp-queue 1.5x", "loaded", "gate", "counters"):
        assert what in kinds, what
    assert any(p["calibration"] for p in pairs) and any(not p["calibration"] for p in pairs)
    assert any(p["base"] == "runs/A" for p in pairs)  # several runs a side
    assert {p["name"] for p in pairs} == {p["name"] for p in TOOL.pairs()}  # the manifest is the tool's
    size = sum(f.stat().st_size for f in CORPUS.rglob("*") if f.is_file())
    assert size < 5 * 2 ** 20, size


@pytest.mark.parametrize("pair", MANIFEST["pairs"], ids=[p["name"] for p in MANIFEST["pairs"]])
def test_each_pair_gives_its_recorded_verdicts(pair: dict) -> None:
    got = TOOL.verdicts(pair)
    want = pair["expect"]
    changed = {k: (want["statuses"].get(k), s) for k, s in got["statuses"].items() if want["statuses"].get(k) != s}
    assert not changed and got["statuses"].keys() == want["statuses"].keys(), changed
    assert (got["outcome"], got["exit_code"]) == (want["outcome"], want["exit_code"])
