"""Payload kinds: sizes, labels, parse errors, exact equality."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from pytest_ipcbench.core.payloads import (
    NDARRAY_COLS,
    TINY_BYTES,
    PayloadSpec,
    make_payload,
    parse_size,
    payload_kinds,
)
from pytest_ipcbench.core.units import SizeTooLarge, machine_memory, size_label


@pytest.mark.parametrize(
    ("text", "nbytes"),
    [("100", 100), ("1KB", 1000), ("1 MB", 10**6), ("600MB", 600 * 10**6), ("2GB", 2 * 10**9),
     ("64KiB", 65536), ("1MiB", 2**20), ("1.5KB", 1500), ("7b", 7), (42, 42)],
)
def test_parse_size(text, nbytes) -> None:
    assert parse_size(text) == nbytes


@pytest.mark.parametrize("bad", ["", "MB", "1QB", "-1KB", "1 K B", "1e3"])
def test_parse_size_errors_say_what_is_expected(bad) -> None:
    with pytest.raises(ValueError, match=r"bad size .*e\.g\. 1MB"):
        parse_size(bad)
    with pytest.raises(ValueError, match="negative"):
        parse_size(-1)


@pytest.mark.parametrize(
    ("nbytes", "label"),
    [(1000, "1KB"), (10**6, "1MB"), (600 * 10**6, "600MB"), (10**9, "1GB"), (65536, "64KiB"),
     (2**20, "1MiB"), (64, "64B"), (1500, "1500B"), (0, "0B")],
)
def test_format_size_is_the_shortest_exact_label(nbytes, label) -> None:
    assert size_label(nbytes) == label
    assert parse_size(label) == nbytes


def test_ids() -> None:
    assert PayloadSpec("ndarray", 10**6).id == "ndarray-1MB"
    assert PayloadSpec("ragged2d", 1000).id == "ragged2d-1KB"
    assert PayloadSpec("tiny", 10**6).id == "tiny-64B"  # tiny has one size whatever is asked


@pytest.mark.parametrize("kind", payload_kinds())
@pytest.mark.parametrize("size", [1000, 10**6])
def test_every_kind_is_equal_to_itself_rebuilt_and_not_to_another_seed(kind, size) -> None:
    spec = PayloadSpec(kind, size)
    a, b, other = spec.build(0), spec.build(0), spec.build(1)
    assert spec.equal(a, b)
    assert spec.equal(a, pickle.loads(pickle.dumps(a, protocol=5)))
    assert not spec.equal(a, other)


@pytest.mark.parametrize("kind", ["dict", "ndarray", "array1d", "ragged2d"])
def test_sizes_are_near_the_target(kind) -> None:
    for size in (10**4, 10**6):
        nbytes = PayloadSpec(kind, size).nbytes
        assert 0.9 * size <= nbytes <= 1.05 * size, (kind, size, nbytes)


@pytest.mark.parametrize("kind", ["dict", "ndarray", "array1d", "ragged2d"])
def test_a_small_size_means_what_it_says(kind) -> None:
    """Issue 39: the "1KB" ndarray was one 602-column row, 2,408 B."""
    for size in (100, 1000) if kind in ("dict", "ndarray") else (1000,):  # seed 004's: 5 rows, 220 B at least
        nbytes = PayloadSpec(kind, size).nbytes
        assert 0.85 * size <= nbytes <= size, (kind, size, nbytes)


def test_kinds_follow_the_seeds() -> None:
    nd = make_payload("ndarray", "1MB")
    assert nd.dtype == np.float32 and nd.shape[1] == NDARRAY_COLS
    ragged = make_payload("ragged2d", "1KB")
    base = PayloadSpec("ragged2d", 1000).base()
    assert [len(r) for r in ragged] == [base * (i + 1) ** 2 for i in range(5)]
    assert all(r.dtype == np.int32 for r in ragged)
    assert len(make_payload("array1d", 2200)) == 10 * 55
    tiny = make_payload("tiny", 0)
    assert isinstance(tiny, bytes) and len(tiny) == TINY_BYTES


def test_equality_is_exact_about_type_dtype_and_shape() -> None:
    spec = PayloadSpec("ndarray", 10**4)
    a = spec.build()
    assert not spec.equal(a, a.astype(np.float64))
    assert not spec.equal(a, a.reshape(-1))
    assert not spec.equal(a, a.tolist())
    b = a.copy()
    b[-1, -1] += 1
    assert not spec.equal(a, b)
    rag = PayloadSpec("ragged2d", 1000)
    assert rag.equal(rag.build(), tuple(rag.build()))
    assert not rag.equal(rag.build(), rag.build()[:4])
    d = PayloadSpec("dict", 1000)
    changed = d.build()
    changed["k0000000"]["tags"]["b"] = "y"
    assert not d.equal(d.build(), changed)
    assert not PayloadSpec("tiny", 0).equal(b"x", "x")


def test_bad_specs() -> None:
    with pytest.raises(ValueError, match="unknown payload kind 'json'; choose from array1d, dict, ndarray, ragged2d, tiny"):
        PayloadSpec("json", 1)
    with pytest.raises(ValueError, match="negative"):
        PayloadSpec("dict", -1)


def test_specs_are_picklable_and_hashable() -> None:
    spec = PayloadSpec("array1d", 5000)
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert len({spec, PayloadSpec("array1d", 5000)}) == 1


@pytest.mark.parametrize("text", ["99999999999999999999GB", "9" * 400 + "GB", 10**30])
def test_a_size_beyond_this_machine_is_refused_naming_both(text) -> None:
    memory = machine_memory()
    assert memory > 0
    with pytest.raises(SizeTooLarge, match=r"is more than this machine's memory \(\d+(\.\d+)? GB\)") as info:
        parse_size(text)
    assert str(text)[:20] in str(info.value)
    with pytest.raises(ValueError, match="machine's memory"):
        PayloadSpec("dict", memory + 1)  # an API caller's spec too: it would grow until OOM
    assert parse_size(str(memory // 2)) == memory // 2  # what fits is fine
