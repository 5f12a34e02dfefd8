"""Seed 004's MPI method matrix in Python: how fast do MPI methods move 1D and ragged 2D data?

Seed 004 (C++, Google Benchmark, 4 ranks) moved a contiguous ``vector<int>`` and a ragged
``vector<vector<int>>`` (five rows of ``base * (i + 1) ** 2`` ints) from rank 0 to every rank with
seven methods at six sizes. This module does the same with mpi4py, for numpy data:

* **configurations** :data:`CONFIGS` (Small .. XXXLarge = base 50 .. 2,000,000; 11 KB .. 440 MB
  of int32, i.e. ``base * 55 * 4`` bytes; the seed's "420 MB" is the same figure in MiB);
* **methods** :data:`METHODS` (a registry ``name -> class``), each with ``prepare`` / ``transfer`` /
  ``result`` / ``free``; every method works for both shapes;
* **timing** :func:`measure`: warm-up and calibration, then outer samples of an inner loop of ``K``
  transfers timed with ``MPI.Wtime``; one sample = the max over ranks (allreduce MAX) of the
  per-transfer time (seed 004's method). Rank 0 picks ``K`` and the number of samples from the
  calibration and broadcasts them; ``K`` and the samples shrink as the size grows
  (:class:`Plan`);
* **verification**: after the timed samples, every receive buffer is poisoned, one more transfer
  runs and every rank compares what it holds with the expected data (built locally, outside the
  timed region); a mismatch on any rank fails every rank;
* :func:`run_matrix` runs configurations x shapes x methods and returns :class:`~.results.Result`
  records (rank 0) for ``ipcbench run`` and the report (:mod:`.mpi_methods_report`).

What every transfer counts (the rules are the same for every method):

* the receivers know the **shape** (1D or 2D), the **dtype**, the **1D length** and the
  **number of 2D rows** before timing starts (as the seed's receivers, whose ``vector`` is sized
  beforehand); these go through :class:`ShapeInfo`, broadcast once and untimed;
* the **2D row lengths** are not known to the receivers: every timed 2D transfer sends them first
  (the seed's "metadata (sizes) are sent first"), by the method's own means;
* receive buffers are **reused** from one transfer to the next when the lengths did not change
  (what ``std::vector::resize`` to the same size does), so the timing does not include first-touch
  page faults of fresh allocations, except for ``pickle`` and ``pkl5`` which build new objects
  every time (that is what they do for a user);
* derived datatypes are created, committed and freed **inside** each transfer (the layout can
  change between transfers); RMA windows are created once, untimed, in ``prepare``.

Standalone use, under MPI::

    mpiexec -n 4 python -m pytest_ipcbench.seed004.methods --configs Small,Medium --out results.json
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import resource
import sys
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, ClassVar, Iterable, Sequence

import numpy as np

from ..core.units import format_time
from ..core.payloads import SEED004_ELEMENTS_PER_BASE, SEED004_ROWS, PayloadSpec
from ..history.results import Result, ResultSet

SCENARIO = "mpi-method"
MODE = "native"

#: Seed 004's configurations: name -> base (1D = base * 55 int32; 2D rows = base * (i + 1)**2).
CONFIGS: dict[str, int] = {
    "Small": 50,
    "Medium": 500,
    "Large": 5_000,
    "XLarge": 50_000,
    "XXLarge": 500_000,
    "XXXLarge": 2_000_000,
}
CONFIG_NAMES: tuple[str, ...] = tuple(CONFIGS)
#: What ``ipcbench run`` and the entry point run by default (``--full``: every configuration).
DEFAULT_CONFIGS: tuple[str, ...] = ("Small", "Medium", "Large", "XLarge")
FULL_CONFIGS: tuple[str, ...] = CONFIG_NAMES
#: Interleaved rounds of run_matrix (see there).
DEFAULT_ROUNDS = 3
#: What the ``ragged_payload`` / ``contiguous_payload`` fixtures are parametrized over.
FIXTURE_CONFIGS: tuple[str, ...] = ("Small", "Medium", "Large")

SHAPES: tuple[str, ...] = ("1d", "2d")
PAYLOAD_KINDS: dict[str, str] = {"1d": "array1d", "2d": "ragged2d"}
SHAPE_OF_PAYLOAD: dict[str, str] = {v: k for k, v in PAYLOAD_KINDS.items()}

_TAG_META = 40
_TAG_ROW = 41
_POISON = 0xA5

Data = Any  # np.ndarray (1d) or list[np.ndarray] (2d)


# ----------------------------------------------------------------------------- configurations


def config_base(name: str) -> int:
    try:
        return CONFIGS[name]
    except KeyError:
        raise ValueError(f"unknown configuration {name!r}; choose from {', '.join(CONFIG_NAMES)}") from None


def config_nbytes(name: str) -> int:
    """Bytes of int32 data of a configuration (the same for 1D and 2D): ``base * 55 * 4``."""
    return config_base(name) * SEED004_ELEMENTS_PER_BASE * 4


def payload_spec(config: str, shape: str) -> PayloadSpec:
    """The :class:`PayloadSpec` of seed 004's data (``array1d`` or ``ragged2d``) at a configuration."""
    return PayloadSpec(PAYLOAD_KINDS[_check_shape(shape)], config_nbytes(config))


def build_data(config: str, shape: str, seed: int = 0) -> Data:
    """Seed 004's data: 1D ``base * 55`` int32; 2D five int32 rows of ``base * (i + 1) ** 2``."""
    data = payload_spec(config, shape).build(seed)
    assert data_nbytes(data) == config_nbytes(config)
    return data


def parse_configs(text: str | Sequence[str]) -> tuple[str, ...]:
    """``"Small,Medium"`` (case-insensitive), ``"all"``, or a sequence of names."""
    items = [s.strip() for s in text.split(",")] if isinstance(text, str) else list(text)
    if items == ["all"]:
        return CONFIG_NAMES
    lookup = {n.lower(): n for n in CONFIG_NAMES}
    out = []
    for item in items:
        if item.lower() not in lookup:
            raise ValueError(f"unknown configuration {item!r}; choose from {', '.join(CONFIG_NAMES)}")
        out.append(lookup[item.lower()])
    return tuple(out)


def _check_shape(shape: str) -> str:
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}; choose from {', '.join(SHAPES)}")
    return shape


# ------------------------------------------------------------------------------- data helpers


@dataclass(frozen=True)
class ShapeInfo:
    """What the receivers know before a timed transfer: shape, dtype, 1D length / 2D row count."""

    shape: str  # "1d" or "2d"
    dtype: str  # numpy dtype string, e.g. "<i4"
    length: int  # 1d: elements; 2d: number of rows

    @classmethod
    def of(cls, data: Data) -> "ShapeInfo":
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


def data_equal(a: Data, b: Data) -> bool:
    """Exact equality of two payloads of the same shape (dtype, lengths, values)."""

    def eq(x: Any, y: Any) -> bool:
        return (
            isinstance(x, np.ndarray)
            and isinstance(y, np.ndarray)
            and x.dtype == y.dtype
            and x.shape == y.shape
            and bool(np.array_equal(x, y))
        )

    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return eq(a, b)
    return (
        isinstance(a, (list, tuple))
        and isinstance(b, (list, tuple))
        and len(a) == len(b)
        and all(eq(x, y) for x, y in zip(a, b))
    )


def _mpi():
    from mpi4py import MPI

    return MPI


def _mpi_type(dtype: np.dtype) -> Any:
    from mpi4py.util.dtlib import from_numpy_dtype

    return from_numpy_dtype(dtype)


def _comm_of(group_or_comm: Any) -> Any:
    """An mpi4py communicator from an :class:`~.group.MPIGroup` or a communicator."""
    comm = getattr(group_or_comm, "comm", group_or_comm)
    if comm is None or not hasattr(comm, "Get_rank") or not hasattr(comm, "Bcast"):
        raise TypeError("expected an MPIGroup or an mpi4py communicator (the matrix needs MPI)")
    return comm


# ------------------------------------------------------------------------------------ methods


class Method:
    """One way to move data from ``root`` to every rank; called collectively by every rank.

    ``prepare`` (untimed) sets up; ``transfer`` (timed) moves the data once; ``result`` is what
    the rank holds afterwards (the root: its own data); ``free`` releases every MPI object.
    """

    name: ClassVar[str]
    label: ClassVar[str]  # short human label for tables
    notes_1d: ClassVar[str]
    notes_2d: ClassVar[str]

    def __init__(self) -> None:
        self.comm: Any = None
        self.root = 0
        self.info: ShapeInfo | None = None
        self.data: Data = None
        self._rows: list[np.ndarray] = []  # receive buffers (2D rows; 1D: one element)

    # -- lifecycle
    def prepare(self, comm: Any, data: Data | None, info: ShapeInfo, root: int = 0) -> None:
        """Collective, untimed. ``data`` matters on ``root`` only; ``info`` must be equal everywhere."""
        self.comm = comm.Dup()  # private tag space; freed in free()
        self.root = root
        self.info = info
        self.is_root = self.comm.Get_rank() == root
        self.mpitype = _mpi_type(info.np_dtype)
        if self.is_root:
            if data is None:
                raise ValueError("the root needs the data to send")
            if ShapeInfo.of(data) != info:
                raise ValueError(f"data {ShapeInfo.of(data)} does not match {info}")
            self.data = data
        else:
            self.data = None
            if info.shape == "1d":
                self._rows = [np.empty(info.length, info.np_dtype)]
        self._setup()

    def _setup(self) -> None:
        """Method-specific untimed preparation."""

    def transfer(self) -> None:
        if self.info is None:
            raise RuntimeError(f"{self.name}: prepare() first")
        if self.info.shape == "1d":
            self._transfer_1d()
        else:
            self._transfer_2d()

    def _transfer_1d(self) -> None:
        raise NotImplementedError

    def _transfer_2d(self) -> None:
        raise NotImplementedError

    def result(self) -> Data:
        """What this rank holds after the last transfer (the root: its own data)."""
        if self.is_root:
            return self.data
        if self.info is not None and self.info.shape == "1d":
            return self._rows[0] if self._rows else None
        return list(self._rows)

    def poison(self) -> None:
        """Overwrite the receive buffers (so a verification proves a fresh delivery)."""
        for row in self._rows:
            row.view(np.uint8).fill(_POISON)

    def free(self) -> None:
        """Collective: release every MPI object this method created."""
        if self.comm is not None:
            self.comm.Free()
            self.comm = None
        self._rows = []
        self.data = None

    def __enter__(self) -> "Method":
        return self

    def __exit__(self, *exc: object) -> None:
        self.free()

    # -- helpers for 2D receivers
    def _receive_rows(self, lengths: Sequence[int]) -> list[np.ndarray]:
        """Receive buffers of these lengths; reused when the lengths are unchanged."""
        lengths = [int(n) for n in lengths]
        if [r.size for r in self._rows] != lengths:
            dtype = self.info.np_dtype  # type: ignore[union-attr]
            self._rows = [np.empty(n, dtype) for n in lengths]
        return self._rows

    def _lengths_array(self) -> np.ndarray:
        """Row lengths (int64): filled on the root, empty on the others."""
        if self.is_root:
            return np.fromiter((r.size for r in self.data), dtype=np.int64, count=len(self.data))
        return np.empty(self.info.length, np.int64)  # type: ignore[union-attr]

    def _rows_to_send(self) -> list[np.ndarray]:
        if self.info.shape == "1d":  # type: ignore[union-attr]
            return [self.data] if self.is_root else self._rows
        return list(self.data) if self.is_root else self._rows

    def _bcast_lengths(self) -> np.ndarray:
        lens = self._lengths_array()
        self.comm.Bcast([lens, _mpi().INT64_T], root=self.root)
        return lens


class P2P(Method):
    name = "p2p"
    label = "Isend/Irecv"
    notes_1d = "root Isends the array to each rank, receivers Irecv + Wait; root Waitall"
    notes_2d = (
        "root Isends the row lengths, then each row, to each rank; receivers Recv the lengths, "
        "then Irecv every row and Waitall; root Waitall"
    )

    def _transfer_1d(self) -> None:
        MPI = _mpi()
        if self.is_root:
            reqs = [
                self.comm.Isend([self.data, self.mpitype], dest=r, tag=_TAG_ROW)
                for r in range(self.comm.Get_size())
                if r != self.root
            ]
            MPI.Request.Waitall(reqs)
        else:
            self.comm.Irecv([self._rows[0], self.mpitype], source=self.root, tag=_TAG_ROW).Wait()

    def _transfer_2d(self) -> None:
        MPI = _mpi()
        if self.is_root:
            lens = self._lengths_array()
            reqs = []
            for r in range(self.comm.Get_size()):
                if r == self.root:
                    continue
                reqs.append(self.comm.Isend([lens, MPI.INT64_T], dest=r, tag=_TAG_META))
                for i, row in enumerate(self.data):
                    reqs.append(self.comm.Isend([row, self.mpitype], dest=r, tag=_TAG_ROW + i))
            MPI.Request.Waitall(reqs)
        else:
            lens = self._lengths_array()
            self.comm.Recv([lens, MPI.INT64_T], source=self.root, tag=_TAG_META)
            rows = self._receive_rows(lens)
            reqs = [
                self.comm.Irecv([row, self.mpitype], source=self.root, tag=_TAG_ROW + i)
                for i, row in enumerate(rows)
            ]
            MPI.Request.Waitall(reqs)


class Bcast(Method):
    name = "bcast"
    label = "Bcast"
    notes_1d = "one Bcast of the array"
    notes_2d = "Bcast of the row lengths, then one Bcast per row (the seed's approach)"

    def _transfer_1d(self) -> None:
        buf = self.data if self.is_root else self._rows[0]
        self.comm.Bcast([buf, self.mpitype], root=self.root)

    def _transfer_2d(self) -> None:
        lens = self._bcast_lengths()
        rows = self.data if self.is_root else self._receive_rows(lens)
        for row in rows:
            self.comm.Bcast([row, self.mpitype], root=self.root)


class Ibcast(Method):
    name = "ibcast"
    label = "Ibcast"
    notes_1d = "Ibcast of the array + Wait"
    notes_2d = "Bcast of the row lengths, then one Ibcast per row, all in flight, Waitall"

    def _transfer_1d(self) -> None:
        buf = self.data if self.is_root else self._rows[0]
        self.comm.Ibcast([buf, self.mpitype], root=self.root).Wait()

    def _transfer_2d(self) -> None:
        MPI = _mpi()
        lens = self._bcast_lengths()
        rows = self.data if self.is_root else self._receive_rows(lens)
        MPI.Request.Waitall([self.comm.Ibcast([row, self.mpitype], root=self.root) for row in rows])


class Pack(Method):
    name = "pack"
    label = "MPI.Pack"
    notes_1d = "root Packs the array into a byte buffer, Bcast (MPI.PACKED), receivers Unpack"
    notes_2d = (
        "root Packs the row count + lengths header and every row into one buffer; Bcast of the "
        "packed size, Bcast of the buffer, receivers Unpack the header, then every row"
    )

    def _setup(self) -> None:
        self._buf = np.empty(0, np.uint8)  # reused staging buffer (grown as needed)

    def _staging(self, nbytes: int) -> np.ndarray:
        if self._buf.size < nbytes:
            self._buf = np.empty(nbytes, np.uint8)
        return self._buf

    def _transfer_1d(self) -> None:
        MPI = _mpi()
        n = self.info.length  # type: ignore[union-attr]
        size = self.mpitype.Pack_size(n, self.comm)
        buf = self._staging(size)
        if self.is_root:
            self.mpitype.Pack(self.data, buf, 0, self.comm)
            # every rank moves Pack_size bytes (the signatures of a Bcast must match)
            self.comm.Bcast([buf, size, MPI.PACKED], root=self.root)
        else:
            self.comm.Bcast([buf, size, MPI.PACKED], root=self.root)
            self.mpitype.Unpack(buf[:size], 0, self._rows[0], self.comm)

    def _transfer_2d(self) -> None:
        MPI = _mpi()
        nrows = self.info.length  # type: ignore[union-attr]
        head = np.empty(1, np.int64)
        if self.is_root:
            lens = self._lengths_array()
            size = MPI.INT64_T.Pack_size(nrows, self.comm) + sum(
                self.mpitype.Pack_size(int(n), self.comm) for n in lens
            )
            buf = self._staging(size)
            pos = MPI.INT64_T.Pack(lens, buf, 0, self.comm)
            for row in self.data:
                pos = self.mpitype.Pack(row, buf, pos, self.comm)
            head[0] = pos
            self.comm.Bcast([head, MPI.INT64_T], root=self.root)
            self.comm.Bcast([buf, pos, MPI.PACKED], root=self.root)
        else:
            self.comm.Bcast([head, MPI.INT64_T], root=self.root)
            size = int(head[0])
            buf = self._staging(size)
            self.comm.Bcast([buf, size, MPI.PACKED], root=self.root)
            packed = buf[:size]
            lens = np.empty(nrows, np.int64)
            pos = MPI.INT64_T.Unpack(packed, 0, lens, self.comm)
            for row in self._receive_rows(lens):
                pos = self.mpitype.Unpack(packed, pos, row, self.comm)

    def free(self) -> None:
        self._buf = np.empty(0, np.uint8)
        super().free()


class Datatype(Method):
    name = "datatype"
    label = "derived datatype"
    notes_1d = "a contiguous datatype of the whole array, committed, one Bcast of count 1, freed"
    notes_2d = (
        "Bcast of the row lengths; receivers allocate the rows; every rank builds one hindexed "
        "datatype over its rows' absolute addresses (relative to MPI.BOTTOM), commits it, one "
        "Bcast([BOTTOM, 1, type]) moves every row in place (no staging copy), then frees it"
    )

    def _transfer_1d(self) -> None:
        buf = self.data if self.is_root else self._rows[0]
        dt = self.mpitype.Create_contiguous(int(buf.size)).Commit()
        try:
            self.comm.Bcast([buf, 1, dt], root=self.root)
        finally:
            dt.Free()

    def _transfer_2d(self) -> None:
        MPI = _mpi()
        lens = self._bcast_lengths()
        rows = self.data if self.is_root else self._receive_rows(lens)
        dt = self.mpitype.Create_hindexed(
            [int(n) for n in lens], [MPI.Get_address(row) for row in rows]
        ).Commit()
        try:
            self.comm.Bcast([MPI.BOTTOM, 1, dt], root=self.root)
        finally:
            dt.Free()


class _RMA(Method):
    """A window on the root (1D: ``Win.Create`` over the array; 2D: a dynamic window to which the
    root attaches each row); created in ``prepare`` (untimed), freed in ``free``."""

    def _setup(self) -> None:
        MPI = _mpi()
        self.win: Any = None
        self._attached: list[np.ndarray] = []
        self._addresses = np.zeros(self.info.length, np.int64)  # type: ignore[union-attr]
        if self.info.shape == "1d":  # type: ignore[union-attr]
            memory = self.data if self.is_root else None
            self.win = MPI.Win.Create(memory, self.info.np_dtype.itemsize, comm=self.comm)  # type: ignore[union-attr]
        else:
            self.win = MPI.Win.Create_dynamic(comm=self.comm)
            if self.is_root:
                for row in self.data:
                    self.win.Attach(row)
                    self._attached.append(row)

    def _bcast_meta(self) -> tuple[np.ndarray, np.ndarray]:
        """Timed: the row lengths and the rows' addresses in the root's dynamic window."""
        MPI = _mpi()
        nrows = self.info.length  # type: ignore[union-attr]
        meta = np.empty(2 * nrows, np.int64)
        if self.is_root:
            meta[:nrows] = [r.size for r in self.data]
            meta[nrows:] = [MPI.Get_address(r) for r in self.data]
        self.comm.Bcast([meta, MPI.INT64_T], root=self.root)
        return meta[:nrows], meta[nrows:]

    def _get_1d(self) -> None:
        n = self.info.length  # type: ignore[union-attr]
        self.win.Get([self._rows[0], self.mpitype], self.root, target=(0, n, self.mpitype))

    def _get_2d(self, lens: np.ndarray, addrs: np.ndarray) -> None:
        rows = self._receive_rows(lens)
        for row, addr in zip(rows, addrs):
            self.win.Get([row, self.mpitype], self.root, target=(int(addr), row.size, self.mpitype))

    def free(self) -> None:
        if getattr(self, "win", None) is not None:
            for row in self._attached:
                self.win.Detach(row)
            self._attached = []
            self.win.Free()
            self.win = None
        super().free()


class RMAFence(_RMA):
    name = "rma-fence"
    label = "RMA Get, fence"
    notes_1d = "window over the root's array; Fence, every rank Gets the array, Fence"
    notes_2d = (
        "dynamic window with the root's rows attached; Bcast of the row lengths + addresses; "
        "Fence, every rank Gets each row into its buffers, Fence"
    )

    def _transfer_1d(self) -> None:
        MPI = _mpi()
        self.win.Fence(MPI.MODE_NOPRECEDE)
        if not self.is_root:
            self._get_1d()
        self.win.Fence(MPI.MODE_NOSUCCEED)

    def _transfer_2d(self) -> None:
        MPI = _mpi()
        lens, addrs = self._bcast_meta()
        self.win.Fence(MPI.MODE_NOPRECEDE)
        if not self.is_root:
            self._get_2d(lens, addrs)
        self.win.Fence(MPI.MODE_NOSUCCEED)


class RMALock(_RMA):
    name = "rma-lock"
    label = "RMA Get, lock/flush"
    notes_1d = "window over the root's array; each receiver Lock(shared), Get, Flush, Unlock; root idle"
    notes_2d = (
        "dynamic window with the root's rows attached; Bcast of the row lengths + addresses; "
        "each receiver Lock(shared), Gets every row, Flush, Unlock"
    )

    def _transfer_1d(self) -> None:
        if not self.is_root:
            self._locked(self._get_1d)

    def _transfer_2d(self) -> None:
        lens, addrs = self._bcast_meta()
        if not self.is_root:
            self._locked(lambda: self._get_2d(lens, addrs))

    def _locked(self, fn: Callable[[], None]) -> None:
        MPI = _mpi()
        self.win.Lock(self.root, MPI.LOCK_SHARED)
        try:
            fn()
            self.win.Flush(self.root)
        finally:
            self.win.Unlock(self.root)


class PickleBcast(Method):
    name = "pickle"
    label = "comm.bcast (pickle)"
    notes_1d = "lowercase comm.bcast of the array (pickled in-band, unpickled into a new array)"
    notes_2d = "lowercase comm.bcast of the list of arrays (one pickle, new arrays on receivers)"

    def _setup(self) -> None:
        self._received: Data = None

    def _send(self, obj: Data) -> Data:
        return self.comm.bcast(obj, root=self.root)

    def transfer(self) -> None:
        if self.info is None:
            raise RuntimeError(f"{self.name}: prepare() first")
        if self.is_root:
            self._send(self.data)
        else:
            self._received = self._send(None)

    def result(self) -> Data:
        return self.data if self.is_root else self._received

    def poison(self) -> None:
        self._received = None

    def free(self) -> None:
        self._received = None
        super().free()


class Pkl5Bcast(PickleBcast):
    name = "pkl5"
    label = "pkl5 bcast"
    notes_1d = "mpi4py.util.pkl5 bcast: pickle protocol 5, array data out-of-band (its own Bcast)"
    notes_2d = "mpi4py.util.pkl5 bcast of the list: one small pickle + one out-of-band Bcast per row"

    def _setup(self) -> None:
        from mpi4py.util import pkl5

        super()._setup()
        self._pcomm = pkl5.Intracomm(self.comm)

    def _send(self, obj: Data) -> Data:
        return self._pcomm.bcast(obj, root=self.root)

    def free(self) -> None:
        self._pcomm = None
        super().free()


#: name -> method class, in the order of the report.
METHODS: dict[str, type[Method]] = {
    cls.name: cls for cls in (P2P, Bcast, Ibcast, Pack, Datatype, RMAFence, RMALock, PickleBcast, Pkl5Bcast)
}
METHOD_NAMES: tuple[str, ...] = tuple(METHODS)


def get_method(name: str) -> Method:
    try:
        return METHODS[name]()
    except KeyError:
        raise ValueError(f"unknown MPI method {name!r}; choose from {', '.join(METHOD_NAMES)}") from None


def parse_methods(text: str | Sequence[str]) -> tuple[str, ...]:
    items = [s.strip() for s in text.split(",")] if isinstance(text, str) else list(text)
    if items == ["all"]:
        return METHOD_NAMES
    for item in items:
        get_method(item)  # validates
    return tuple(items)


# ------------------------------------------------------------------------------------- timing

# Upper bound of the inner loop by message size (mpi4py.bench / OSU style; the seed goes from
# 10,000 inner iterations for small data down to 10 for XXLarge).
_INNER_CAPS = ((16 * 1024, 10_000), (256 * 1024, 1_000), (4 * 2**20, 100), (64 * 2**20, 10))


def max_inner(nbytes: int) -> int:
    for limit, cap in _INNER_CAPS:
        if nbytes <= limit:
            return cap
    return 1


@dataclass(frozen=True)
class Plan:
    """Iteration rules of one case (rank 0 applies them and broadcasts the outcome).

    * warm-up: at least ``min_warmup`` transfers, more in batches (1, 4, 16, ...) until a batch
      lasts ``calibrate_time``; the last batch gives the time per transfer ``t``;
    * inner loop ``K = clamp(sample_time / t, 1, min(inner_cap(size), volume_cap / size))``;
    * samples ``n = clamp(case_time / (K t), min_samples, max_samples)``.
    """

    sample_time: float = 0.1
    case_time: float = 1.5
    min_samples: int = 3
    max_samples: int = 10
    min_warmup: int = 1
    calibrate_time: float = 0.02
    max_calibrate: int = 1024
    volume_cap: int = 512 * 10**6  # bytes moved per sample (K * size), IMB-style
    inner: int | None = None  # force K
    overrun: float = 3.0  # stop sampling (after min_samples) past overrun * case_time
    samples: int | None = None  # force n

    def choose(self, nbytes: int, per_transfer: float) -> tuple[int, int]:
        """``(K, n)`` for a case of ``nbytes`` whose transfers take ``per_transfer`` seconds."""
        if self.inner is not None:
            k = max(1, self.inner)
        else:
            cap = min(max_inner(nbytes), max(1, self.volume_cap // max(1, nbytes)))
            k = int(min(cap, max(1, round(self.sample_time / max(per_transfer, 1e-9)))))
        if self.samples is not None:
            n = max(1, self.samples)
        else:
            n = int(self.case_time / max(k * per_transfer, 1e-9))
            n = min(self.max_samples, max(self.min_samples, n))
        return k, n


QUICK_PLAN = Plan(inner=1, samples=1, min_warmup=1, max_calibrate=1)  # correctness runs


@dataclass
class Measurement:
    """Timing of one method on one payload (identical on every rank)."""

    method: str
    shape: str
    nbytes: int
    ranks: int
    samples: list[float]  # seconds per transfer, max over ranks, one per outer sample
    inner: int
    warmup: int
    verified: bool | None  # None when nothing to compare with was given
    received: Data = field(default=None, repr=False)  # what this rank holds (its own result)

    @property
    def median(self) -> float:
        return float(np.median(self.samples))

    def summary(self) -> Any:
        from ..history.stats import summarize

        return summarize(self.samples)


class VerificationError(AssertionError):
    """A rank did not receive what the root sent (raised on every rank)."""


def _timed(comm: Any, method: Method, count: int) -> float:
    """Barrier, ``count`` transfers, per-transfer seconds: max over ranks (allreduce MAX)."""
    MPI = _mpi()
    comm.Barrier()
    t0 = MPI.Wtime()
    for _ in range(count):
        method.transfer()
    elapsed = (MPI.Wtime() - t0) / count
    return float(comm.allreduce(elapsed, op=MPI.MAX))


def measure(
    comm: Any,
    method: Method | str,
    data: Data | None,
    *,
    expected: Data | None = None,
    info: ShapeInfo | None = None,
    plan: Plan | None = None,
    root: int = 0,
    keep: bool = True,
) -> Measurement:
    """Collective: time ``method`` moving ``data`` (held by ``root``) to every rank.

    ``info`` (the shape, dtype, 1D length / 2D row count) is broadcast from the root when not
    given. With ``expected`` (on every rank, e.g. built locally) the last transfer is checked
    on every rank; without it, the receivers are checked against nothing (``verified=None``)
    and the caller can check ``received``. ``keep=False`` drops the received data.
    """
    comm = _comm_of(comm)
    plan = plan or Plan()
    method = get_method(method) if isinstance(method, str) else method
    if info is None:
        info = comm.bcast(ShapeInfo.of(data) if comm.Get_rank() == root else None, root=root)
    nbytes = int(comm.bcast(data_nbytes(data) if comm.Get_rank() == root else None, root=root))
    method.prepare(comm, data if comm.Get_rank() == root else None, info, root)
    try:
        # warm-up + calibration: batches of 1, 4, 16 ... until one lasts calibrate_time
        warmup, batch = 0, 1
        per = _timed(comm, method, max(1, plan.min_warmup))
        warmup += max(1, plan.min_warmup)
        while per * batch < plan.calibrate_time and batch < plan.max_calibrate:
            batch = min(plan.max_calibrate, batch * 4)
            per = _timed(comm, method, batch)
            warmup += batch
        choice = plan.choose(nbytes, per) if comm.Get_rank() == root else None
        inner, nsamples = comm.bcast(choice, root=root)
        samples: list[float] = []
        spent = 0.0
        for _ in range(nsamples):
            samples.append(_timed(comm, method, inner))
            spent += samples[-1] * inner  # the same on every rank (allreduced)
            if spent > plan.overrun * plan.case_time and len(samples) >= min(nsamples, plan.min_samples):
                break  # the calibration was optimistic (a burst of load): stop early, everywhere
        # verification: poison, one more (untimed) transfer, compare on every rank
        method.poison()
        comm.Barrier()
        method.transfer()
        received = method.result()
        verified: bool | None = None
        if expected is not None:
            ok = data_equal(received, expected)
            bad = comm.allgather(None if ok else comm.Get_rank())
            bad = [r for r in bad if r is not None]
            if bad:
                raise VerificationError(
                    f"{method.name} {info.shape}: ranks {bad} did not receive the root's data"
                )
            verified = True
    finally:
        method.free()
    return Measurement(
        method=method.name,
        shape=info.shape,
        nbytes=nbytes,
        ranks=comm.Get_size(),
        samples=samples,
        inner=inner,
        warmup=warmup,
        verified=verified,
        received=received if keep else None,
    )


def transfer_once(comm: Any, method: Method | str, data: Data | None, root: int = 0) -> Data:
    """Collective: move ``data`` from ``root`` once with ``method``; every rank gets the data."""
    comm = _comm_of(comm)
    method = get_method(method) if isinstance(method, str) else method
    info = comm.bcast(ShapeInfo.of(data) if comm.Get_rank() == root else None, root=root)
    method.prepare(comm, data if comm.Get_rank() == root else None, info, root)
    try:
        method.transfer()
        return method.result()
    finally:
        method.free()


# ------------------------------------------------------------------------------------- matrix


def _peak_rss_bytes() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux: KiB


def run_matrix(
    group: Any,
    configs: Iterable[str] = DEFAULT_CONFIGS,
    methods: Iterable[str] = METHOD_NAMES,
    shapes: Iterable[str] = SHAPES,
    progress: Callable[[str], None] | None = None,
    plan: Plan | None = None,
    root: int = 0,
    rounds: int = DEFAULT_ROUNDS,
) -> list[Result]:
    """Collective: every configuration x shape x method; rank ``root`` gets the Results, others [].

    ``group`` is an :class:`~.group.MPIGroup` (or an mpi4py communicator). ``progress`` (called
    on the root) gets one line per finished case. Every rank builds the payload itself (the
    root's is sent, the others' is the expected value), outside the timed region.

    The methods of one configuration and shape are measured in ``rounds`` interleaved rounds
    (round r visits the methods in an order rotated by r), each with its own warm-up,
    calibration (``K`` and the sample count) and verification.
    A burst of load from another process then hits every method alike instead of one. The
    samples of every round are pooled into one Result.
    """
    MPI = _mpi()
    comm = _comm_of(group)
    configs = parse_configs(list(configs))
    methods = parse_methods(list(methods))
    shapes = tuple(_check_shape(s) for s in shapes)
    plan = plan or Plan()
    rounds = max(1, int(rounds))
    rank = comm.Get_rank()
    first = _per_round(plan, rounds)
    out: list[Result] = []
    for config in configs:
        for shape in shapes:
            spec = payload_spec(config, shape)
            data = build_data(config, shape)  # root: sent; others: expected
            info = ShapeInfo.of(data)
            samples: dict[str, list[float]] = {name: [] for name in methods}
            inner: dict[str, list[int]] = {name: [] for name in methods}
            warmups = dict.fromkeys(methods, 0)
            wall = dict.fromkeys(methods, 0.0)
            loads: dict[str, list[float]] = {name: [] for name in methods}
            for rnd in range(rounds):
                shift = rnd % len(methods)
                for name in methods[shift:] + methods[:shift]:
                    t0 = time.perf_counter()
                    m = measure(
                        comm,
                        name,
                        data if rank == root else None,
                        expected=data,
                        info=info,
                        plan=first,
                        root=root,
                        keep=False,
                    )
                    inner[name].append(m.inner)
                    samples[name].extend(m.samples)
                    warmups[name] += m.warmup
                    gc.collect()
                    wall[name] += float(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
                    loads[name].append(_load1())
            peak = int(comm.allreduce(_peak_rss_bytes(), op=MPI.MAX))
            if rank == root:
                for name in methods:
                    result = Result(
                        scenario=SCENARIO,
                        backend=name,
                        mode=MODE,
                        payload=spec.kind,
                        size=spec.size,
                        ranks=comm.Get_size(),
                        samples={"completion": samples[name]},
                        nbytes=spec.size,
                        extra={
                            "config": config,
                            "base": config_base(config),
                            "shape": shape,
                            "rows": 1 if shape == "1d" else SEED004_ROWS,
                            "elements": spec.size // 4,
                            "inner": inner[name],  # K of each round
                            "rounds": rounds,
                            "warmup": warmups[name],
                            "verified": True,  # measure() raised otherwise, on every rank
                            "timing": "MPI.Wtime over an inner loop, per transfer, max over ranks",
                            "metadata_timed": shape == "2d",
                            "wall_s": round(wall[name], 3),
                            "load1": round(max(loads[name]), 2),
                            "peak_rss_max_rank": peak,
                        },
                    )
                    out.append(result)
                    if progress is not None:
                        progress(_progress_line(result))
            del data
            gc.collect()
    return out


def _per_round(plan: Plan, rounds: int) -> Plan:
    """The plan of one round: the sample count and the case time shared among the rounds."""
    if rounds == 1:
        return plan
    return replace(
        plan,
        case_time=plan.case_time / rounds,
        min_samples=max(1, -(-plan.min_samples // rounds)),
        max_samples=max(1, -(-plan.max_samples // rounds)),
        samples=None if plan.samples is None else max(1, -(-plan.samples // rounds)),
    )


def _load1() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def _progress_line(r: Result) -> str:
    med = float(np.median(r.samples["completion"]))
    return (
        f"{r.extra['config']:>8} {r.extra['shape']} {r.backend:<9} {format_time(med):>10}  "
        f"(K={'/'.join(map(str, r.extra['inner']))}, n={len(r.samples['completion'])}, {r.extra['wall_s']:.1f} s, "
        f"load {r.extra['load1']:.1f})"
    )


def mpi_environment(comm: Any) -> dict[str, Any]:
    """Environment record (MPI vendor and version, ranks, cores, Python, versions)."""
    import mpi4py

    MPI = _mpi()
    return {
        "mpi_library": MPI.Get_library_version().splitlines()[0].strip(),
        "mpi_version": ".".join(map(str, MPI.Get_version())),
        "mpi4py": mpi4py.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "ranks": comm.Get_size(),
        "cores": os.cpu_count(),
        "units": "seconds per transfer; MB = 10**6 bytes",
    }


# -------------------------------------------------------------------------------- entry point


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m pytest_ipcbench.seed004.methods",
        description="Seed 004's MPI method matrix (run under mpiexec, e.g. mpiexec -n 4).",
    )
    p.add_argument("--configs", default=",".join(DEFAULT_CONFIGS), help="comma list or 'all'")
    p.add_argument("--full", action="store_true", help="every configuration, up to XXXLarge (440 MB)")
    p.add_argument("--methods", default="all", help=f"comma list of {', '.join(METHOD_NAMES)}")
    p.add_argument("--shapes", default="1d,2d")
    p.add_argument("--out", default=None, help="results JSON file (written by rank 0)")
    p.add_argument("--report", default=None, help="also write the markdown tables and plot here")
    p.add_argument("--sample-time", type=float, default=Plan.sample_time)
    p.add_argument("--case-time", type=float, default=Plan.case_time)
    p.add_argument("--max-samples", type=int, default=Plan.max_samples)
    p.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, help="interleaved rounds per case")
    p.add_argument("--quiet", action="store_true")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        from mpi4py import MPI
    except ImportError:
        print("mpi_methods: mpi4py is not installed (pip install 'pytest-ipcbench[mpi]')", file=sys.stderr)
        return 2
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    try:
        configs = FULL_CONFIGS if args.full else parse_configs(args.configs)
        methods = parse_methods(args.methods)
        shapes = tuple(_check_shape(s.strip()) for s in args.shapes.split(","))
    except ValueError as exc:
        if rank == 0:
            print(f"mpi_methods: {exc}", file=sys.stderr)
        return 2
    plan = Plan(sample_time=args.sample_time, case_time=args.case_time, max_samples=args.max_samples)
    env = mpi_environment(comm)
    say = (lambda line: print(line, flush=True)) if rank == 0 and not args.quiet else None
    if say:
        say(
            f"# {env['mpi_library']}, mpi4py {env['mpi4py']}, {env['ranks']} ranks on "
            f"{env['cores']} cores; configs {','.join(configs)}"
        )
    t0 = time.perf_counter()
    results = run_matrix(comm, configs, methods, shapes, progress=say, plan=plan, rounds=args.rounds)
    peaks = comm.gather(_peak_rss_bytes(), root=0)
    if rank == 0:
        try:  # the harness's environment record, when available
            from ..core.envinfo import collect

            env = collect(comm.Get_size(), group_kind="mpi", mode=MODE, extra={"mpi_methods": env})
        except Exception:  # noqa: BLE001 - the record is optional; keep ours
            pass
        env["peak_rss_per_rank"] = peaks
        env["wall_s"] = round(time.perf_counter() - t0, 1)
        env["command"] = " ".join(sys.argv)
        if say:
            say(
                f"# done in {env['wall_s']} s; peak RSS per rank (MB): "
                + ", ".join(f"{p / 1e6:.0f}" for p in peaks)
                + f"; sum {sum(peaks) / 1e6:.0f} MB"
            )
        if args.out:
            rs = ResultSet(env=env)
            rs.extend(results)
            print(f"results: {rs.save(args.out)}")
        if args.report:
            from ..report.seed004 import write_mpi_method_report

            for path in write_mpi_method_report(results, args.report):
                print(f"report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
