"""The evaluation's public case generator: families of realistic objects, 64 B - 256 MiB.

Each family builds an object of about ``size`` bytes from a seed (deterministic: the same case
gives the same object in every process). :func:`cases` draws a stratified set: the families in
turn, each case's size log-uniform within its family's range (capped by ``max_bytes``), readers
1-3 in turn (3 readers oversubscribe 2 cores on purpose), broadcast mostly, ping-pong and stream
for some. ``tools/advise_eval.py`` scores ``advise`` on them (docs/advise.md).
"""

from __future__ import annotations

import math
import mmap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


def _gnn_batch(size: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    # a graph batch as PyG/DGL loaders hand it over: node features, edges, labels, batch vector
    feats = 64
    nodes = max(1, size // (feats * 4 + 8 * 2 + 8 * 2 * 4))
    edges = nodes * 4
    return {"x": rng.standard_normal((nodes, feats), dtype=np.float32),
            "edge_index": rng.integers(0, nodes, (2, edges), dtype=np.int64),
            "y": rng.integers(0, 10, nodes, dtype=np.int64),
            "batch": np.sort(rng.integers(0, 32, nodes)).astype(np.int64)}


def _nested_small(size: int, rng: np.random.Generator) -> dict[str, Any]:
    # a model's state: layers of small weight and bias arrays
    layers = max(1, size // 400)
    return {f"layer{i}": {"w": rng.standard_normal(64, dtype=np.float32).reshape(8, 8),
                          "b": rng.standard_normal(8).astype(np.float32),
                          "meta": {"name": f"l{i}", "trainable": bool(i % 2)}}
            for i in range(layers)}


def _bytes(size: int, rng: np.random.Generator) -> bytes:
    return rng.integers(0, 256, max(1, size), dtype=np.uint8).tobytes()


def _strings(size: int, rng: np.random.Generator) -> list[str]:
    n = max(1, size // 25)  # about 20 characters and their pickle opcodes
    return [f"item-{i:08d}-{int(x):06x}" for i, x in enumerate(rng.integers(0, 2**24, n))]


def _images(size: int, rng: np.random.Generator) -> np.ndarray:
    b = max(1, size // (3 * 64 * 64))
    return rng.integers(0, 256, (b, 3, 64, 64), dtype=np.uint8)


def _noncontiguous(size: int, rng: np.random.Generator) -> np.ndarray:
    base = rng.standard_normal(max(2, size // 8 * 2))
    return base[::2]  # every other element: a strided view, pickled by copying


def _ragged(size: int, rng: np.random.Generator) -> list[np.ndarray]:
    out, left = [], max(4, size)
    while left > 0:
        n = int(rng.integers(1, max(2, min(size // 16, 4096)) + 1))
        out.append(rng.integers(0, 1000, n, dtype=np.int32))
        left -= n * 4 + 100
    return out


def _status(size: int, rng: np.random.Generator) -> dict[str, Any]:
    extra = max(0, (size - 200) // 40)
    d: dict[str, Any] = {"step": int(rng.integers(0, 10**6)), "loss": float(rng.random()), "ok": True,
                         "phase": "train", "lr": 3e-4}
    d.update({f"m{i}": float(rng.random()) for i in range(extra)})
    return d


def _small_arrays(size: int, rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.standard_normal(64).astype(np.float32) for _ in range(max(1, size // 356))]


def _records(size: int, rng: np.random.Generator) -> np.ndarray:
    dt = np.dtype([("id", "<i8"), ("x", "<f4"), ("y", "<f4"), ("tag", "S8")])
    a = np.zeros(max(1, size // dt.itemsize), dtype=dt)
    a["id"] = np.arange(a.size)
    a["x"] = rng.random(a.size)
    return a


def _objects(size: int, rng: np.random.Generator) -> np.ndarray:
    n = max(1, size // 6)  # pickled: a small int or a short string each
    a = np.empty(n, dtype=object)
    a[:] = [(f"k{i}" if i % 2 else i) for i in range(n)]
    return a


def _mmap_view(size: int, rng: np.random.Generator) -> np.ndarray:
    # bytes that live in a mapping (anonymous: nothing is left on disk), seen through a memoryview
    n = max(1, size)
    mm = mmap.mmap(-1, n)
    mm.write(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
    return np.frombuffer(memoryview(mm), dtype=np.uint8)


#: family -> (builder, smallest, largest size in bytes)
FAMILIES: dict[str, tuple[Callable[[int, np.random.Generator], Any], int, int]] = {
    "gnn-batch": (_gnn_batch, 16 * 2**10, 256 * 2**20),
    "nested-small-arrays": (_nested_small, 4 * 2**10, 16 * 2**20),
    "bytes": (_bytes, 64, 256 * 2**20),
    "strings": (_strings, 256, 16 * 2**20),
    "image-batch": (_images, 64 * 2**10, 256 * 2**20),
    "noncontiguous-view": (_noncontiguous, 1024, 64 * 2**20),
    "ragged-lists": (_ragged, 1024, 64 * 2**20),
    "status-dict": (_status, 64, 4 * 2**10),
    "small-arrays-list": (_small_arrays, 4 * 2**10, 16 * 2**20),
    "record-array": (_records, 1024, 64 * 2**20),
    "object-array": (_objects, 256, 4 * 2**20),
    "mmap-view": (_mmap_view, 4 * 2**10, 256 * 2**20),
}


@dataclass(frozen=True)
class Case:
    family: str
    size: int
    readers: int
    scenario: str
    seed: int

    @property
    def id(self) -> str:
        return f"{self.family}-{self.size}B-r{self.readers}-{self.scenario}-s{self.seed}"

    def build(self) -> Any:
        builder = FAMILIES[self.family][0]
        return builder(self.size, np.random.default_rng(self.seed))


def cases(n: int, seed: int = 0, max_bytes: int = 256 * 2**20, families: list[str] | None = None) -> list[Case]:
    """``n`` cases, the families in turn; within a family sizes log-uniform over its range."""
    names = families or list(FAMILIES)
    unknown = [f for f in names if f not in FAMILIES]
    if unknown:
        raise ValueError(f"unknown families {unknown}; known: {', '.join(FAMILIES)}")
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        family = names[i % len(names)]
        lo, hi = FAMILIES[family][1], min(FAMILIES[family][2], max_bytes)
        hi = max(hi, lo)
        size = int(math.exp(rng.uniform(math.log(lo), math.log(hi))))
        readers = 1 + (i // len(names)) % 3
        k = i % 7
        scenario = "pingpong" if k == 5 else ("stream" if k == 6 else "broadcast")
        if scenario == "pingpong":
            readers = 1
        out.append(Case(family, size, readers, scenario, seed * 100_000 + i))
    return out
