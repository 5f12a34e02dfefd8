"""The MPI methods' configurations and data: names, sizes, shapes, and what receivers know beforehand.

The one place these constants live: the matrix, the fixtures, ``ipcbench run`` and the report import them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.payloads import ELEMENTS_PER_BASE, PayloadSpec

#: The Result scenario of the matrix (``Result.backend`` is the method's name).
SCENARIO = "mpi-method"
MODE = "native"

#: The MPI methods' configurations: name -> base (1D = base * 55 int32; 2D rows = base * (i + 1)**2).
CONFIGS: dict[str, int] = {
    "Small": 50,
    "Medium": 500,
    "Large": 5_000,
    "XLarge": 50_000,
    "XXLarge": 500_000,
    "XXXLarge": 2_000_000,
}
CONFIG_NAMES: tuple[str, ...] = tuple(CONFIGS)
#: The order of the report's tables (smallest first).
CONFIG_ORDER: tuple[str, ...] = CONFIG_NAMES
#: base -> configuration name (what a result without ``extra["config"]`` is recognised by).
CONFIG_OF_BASE: dict[int, str] = {base: name for name, base in CONFIGS.items()}
#: What ``ipcbench run`` and the entry point run by default (``--full``: every configuration).
DEFAULT_CONFIGS: tuple[str, ...] = ("Small", "Medium", "Large", "XLarge")
FULL_CONFIGS: tuple[str, ...] = CONFIG_NAMES
#: What the ``ragged_payload`` / ``contiguous_payload`` fixtures are parametrized over.
FIXTURE_CONFIGS: tuple[str, ...] = ("Small", "Medium", "Large")

SHAPES: tuple[str, ...] = ("1d", "2d")
PAYLOAD_KINDS: dict[str, str] = {"1d": "array1d", "2d": "ragged2d"}
SHAPE_OF_PAYLOAD: dict[str, str] = {v: k for k, v in PAYLOAD_KINDS.items()}
SHAPE_TITLES: dict[str, str] = {"2d": "2D (ragged rows)", "1d": "1D (contiguous)"}

Data = Any  # np.ndarray (1d) or list[np.ndarray] (2d)


def config_base(name: str) -> int:
    try:
        return CONFIGS[name]
    except KeyError:
        raise ValueError(f"unknown configuration {name!r}; choose from {', '.join(CONFIG_NAMES)}") from None


def config_of_size(nbytes: int) -> str:
    """The configuration of ``nbytes`` of int32 data (``"base N"`` if it is none of them)."""
    base = nbytes // (ELEMENTS_PER_BASE * 4)
    return CONFIG_OF_BASE.get(base, f"base {base}")


def config_nbytes(name: str) -> int:
    """Bytes of int32 data of a configuration (the same for 1D and 2D): ``base * 55 * 4``."""
    return config_base(name) * ELEMENTS_PER_BASE * 4


def check_shape(shape: str) -> str:
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}; choose from {', '.join(SHAPES)}")
    return shape


def payload_spec(config: str, shape: str) -> PayloadSpec:
    """The :class:`PayloadSpec` of the MPI methods' data (``array1d`` or ``ragged2d``) at a configuration."""
    return PayloadSpec(PAYLOAD_KINDS[check_shape(shape)], config_nbytes(config))


def build_data(config: str, shape: str, seed: int = 0) -> Data:
    """The MPI methods' data: 1D ``base * 55`` int32; 2D five int32 rows of ``base * (i + 1) ** 2``."""
    data = payload_spec(config, shape).build(seed)
    assert data_nbytes(data) == config_nbytes(config)
    return data


def parse_configs(text: str | Sequence[str]) -> tuple[str, ...]:
    """``"Small,Medium"`` (case-insensitive), ``"all"``, or a sequence of names."""
    items = [s.strip() for s in text.split(",")] if isinstance(text, str) else list(text)
    if items == ["all"]:
        return CONFIG_NAMES
    lookup = {n.lower(): n for n in CONFIG_NAMES}
    for item in items:
        if item.lower() not in lookup:
            raise ValueError(f"unknown configuration {item!r}; choose from {', '.join(CONFIG_NAMES)}")
    return tuple(lookup[item.lower()] for item in items)


def parse_shapes(text: str | Sequence[str]) -> tuple[str, ...]:
    items = [s.strip() for s in text.split(",")] if isinstance(text, str) else list(text)
    return tuple(check_shape(s) for s in items)


# ------------------------------------------------------------------------------- data helpers


@dataclass(frozen=True)
class ShapeInfo:
    """What the receivers know before a timed transfer: shape, dtype, 1D length / 2D row count."""

    shape: str  # "1d" or "2d"
    dtype: str  # numpy dtype string, e.g. "<i4"
    length: int  # 1d: elements; 2d: number of rows

    @classmethod
    def of(cls, data: Data) -> ShapeInfo:
        """Describe ``data`` (a 1-D array, or a list/tuple of 1-D arrays of one dtype)."""
        if isinstance(data, np.ndarray):
            _check_array(data)
            return cls("1d", data.dtype.str, int(data.size))
        if isinstance(data, (list, tuple)):
            if not data:
                raise ValueError("a ragged 2D payload needs at least one row")
            for row in data:
                _check_array(row)
            dtypes = {row.dtype.str for row in data}
            if len(dtypes) != 1:
                raise ValueError(f"all rows must have one dtype, got {sorted(dtypes)}")
            return cls("2d", data[0].dtype.str, len(data))
        raise TypeError(f"expected a 1-D numpy array or a list of them, got {type(data).__name__}")

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)


def _check_array(a: Any) -> None:
    if not isinstance(a, np.ndarray):
        raise TypeError(f"rows must be numpy arrays, got {type(a).__name__}")
    if a.ndim != 1 or not a.flags.c_contiguous:
        raise ValueError(f"rows must be 1-D C-contiguous arrays, got shape {a.shape}")
    if a.dtype.hasobject:
        raise TypeError("object arrays cannot be sent as MPI buffers")


def data_nbytes(data: Data) -> int:
    if isinstance(data, np.ndarray):
        return int(data.nbytes)
    return int(sum(r.nbytes for r in data))


def _rows(data: Data) -> list[np.ndarray] | None:
    if isinstance(data, np.ndarray):
        return [data]
    if isinstance(data, (list, tuple)) and all(isinstance(r, np.ndarray) for r in data):
        return list(data)
    return None


def data_equal(a: Data, b: Data) -> bool:
    """Exact equality of two payloads of the same shape: dtype, lengths and bytes (so a NaN
    delivered bit for bit is equal)."""
    if isinstance(a, np.ndarray) != isinstance(b, np.ndarray):
        return False
    ra, rb = _rows(a), _rows(b)
    if ra is None or rb is None or len(ra) != len(rb):
        return False
    return all(
        x.dtype == y.dtype and x.shape == y.shape and bool(np.array_equal(x.view(np.uint8), y.view(np.uint8)))
        for x, y in zip(ra, rb)
    )


def flipped(data: Data) -> Data:
    """A copy of ``data`` with every byte inverted: the same shape, different content."""
    if isinstance(data, np.ndarray):
        return (~data.view(np.uint8)).view(data.dtype)
    return [(~row.view(np.uint8)).view(row.dtype) for row in data]
