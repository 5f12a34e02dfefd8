"""A wrong-bytes failure names the first differing index and both values (issue 39: "received
ndarray(shape=(1, 602), dtype=float32), expected ndarray(shape=(1, 602), dtype=float32)")."""

from __future__ import annotations

import numpy as np

from pytest_ipcbench import PayloadSpec
from pytest_ipcbench.harness.transfer import describe_difference


def test_an_ndarray_difference_names_the_index_and_the_values() -> None:
    expected = PayloadSpec("ndarray", 2408).build(seed=1)
    got = expected.copy()
    got.flat[17] = -1.5
    text = describe_difference(got, expected)
    assert text.startswith(f"received ndarray(shape={expected.shape}, dtype={expected.dtype})")
    index = np.unravel_index(17, expected.shape)
    assert f"1 of {expected.size} elements differ; the first at index {tuple(int(i) for i in index)}: -1.5 instead of " \
           f"{expected.flat[17].item()!r}" in text


def test_a_shape_or_dtype_difference_is_named() -> None:
    a = np.zeros((2, 3), np.float32)
    assert describe_difference(a.reshape(3, 2), a).endswith("shape (3, 2) instead of (2, 3)")
    assert describe_difference(a.astype(np.float64), a).endswith("dtype float64 instead of float32")


def test_bytes_dicts_and_lists_name_where_they_differ() -> None:
    assert describe_difference(b"abcd", b"abXd").endswith("first differing byte at index 2: 0x63 instead of 0x58")
    assert describe_difference(b"abc", b"abcd").endswith("3 bytes instead of 4")
    expected = {"x": np.arange(4), "meta": {"name": "a", "n": 3}, "items": [1, 2, 3]}
    got = {"x": np.arange(4), "meta": {"name": "a", "n": 4}, "items": [1, 2, 3]}
    assert describe_difference(got, expected).endswith("at ['meta']['n']: 4 instead of 3")
    got = {"x": np.array([0, 1, 7, 3]), "meta": expected["meta"], "items": [1, 2, 3]}
    assert describe_difference(got, expected).endswith("at ['x']: 1 of 4 elements differ; the first at index 2: 7 instead of 2")
    assert describe_difference([1, 2], [1, 2, 3]).endswith("length 2 instead of 3")
    assert describe_difference({"a": 1}, {"b": 1}).endswith("key 'b' missing")
    assert describe_difference((1, "x"), [1, "x"]).endswith("type tuple instead of list")


def test_equal_values_give_no_difference_and_nan_in_place_is_equal() -> None:
    a = np.array([1.0, np.nan])
    assert describe_difference(a, a.copy()) == "received ndarray(shape=(2,), dtype=float64), expected ndarray(shape=(2,), dtype=float64)"
    assert describe_difference(np.array([0.0]), np.array([-0.0])).endswith("index 0: 0.0 instead of -0.0")
