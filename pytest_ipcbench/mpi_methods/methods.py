"""Nine MPI methods: plain classes that move 1D and ragged 2D data from a root to every rank.

One cohesive thing: the nine methods, each a short class over one protocol (:class:`Method`),
read side by side.

Each method (:data:`METHODS`, ``name -> class``) has ``prepare`` (collective, untimed: a private
communicator, RMA windows), ``transfer`` (collective: one move), ``result`` and ``free``, for both
shapes; :mod:`.backend` makes each a harness backend. The rules every transfer follows: receivers
know the shape, dtype, 1D length and 2D row count beforehand (:class:`~.configs.ShapeInfo`), not
the 2D row lengths, which every 2D transfer sends first; receive buffers are reused while the
lengths hold (``pickle`` and ``pkl5`` build new objects, as they do for a user); derived
datatypes are made and freed inside each transfer, RMA windows once in ``prepare``. A method
prepared with several sources (``slots``) sends ``transfer(slot)``'s in turn: the harness
alternates two payloads so that a stale buffer fails verification.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from .configs import Data, ShapeInfo

_TAG_META = 40
_TAG_ROW = 41


def _mpi():
    from mpi4py import MPI

    return MPI


def _mpi_type(dtype: np.dtype) -> Any:
    from mpi4py.util.dtlib import from_numpy_dtype

    return from_numpy_dtype(dtype)


# ------------------------------------------------------------------------------------ methods


class Method:
    """One way to move data from ``root`` to every rank; called collectively by every rank."""

    name: ClassVar[str]
    notes_1d: ClassVar[str]
    notes_2d: ClassVar[str]
    info: ShapeInfo  # what every rank knows beforehand: set by prepare()

    def __init__(self) -> None:
        self.comm: Any = None
        self.root = 0
        self.slots = 1
        self.is_root = False
        self.sources: list[Data] = []  # the root's payloads, one per slot
        self.data: Data = None  # the root: the source of the current transfer
        self._rows: list[np.ndarray] = []  # receive buffers (2D rows; 1D: one element)

    # -- lifecycle
    def prepare(self, comm: Any, data: Data | None, info: ShapeInfo, root: int = 0, *, slots: int = 1) -> None:
        """Collective, untimed. ``info`` must be equal everywhere; ``data`` matters on ``root``
        only: the payload to send, or with ``slots > 1`` a sequence of ``slots`` payloads (the
        sources) that ``transfer(slot)`` sends in turn. ``slots`` must be equal everywhere."""
        if slots < 1:
            raise ValueError(f"slots must be at least 1, got {slots}")
        self.comm = comm.Dup()  # private tag space; freed in free()
        self.root = root
        self.info = info
        self.slots = slots
        self.is_root = self.comm.Get_rank() == root
        self.mpitype = _mpi_type(info.np_dtype)
        if self.is_root:
            if data is None:
                raise ValueError("the root needs the data to send")
            sources = [data] if slots == 1 else list(data)
            if len(sources) != slots:
                raise ValueError(f"the root gave {len(sources)} payloads for {slots} slots")
            for source in sources:
                if ShapeInfo.of(source) != info:
                    raise ValueError(f"data {ShapeInfo.of(source)} does not match {info}")
            self.sources = sources
            self.data = sources[0]
        else:
            self.sources = []
            self.data = None
            if info.shape == "1d":
                self._rows = [np.empty(info.length, info.np_dtype)]
        self._setup()

    def _setup(self) -> None:
        """Method-specific untimed preparation."""

    def transfer(self, slot: int = 0) -> None:
        """Collective: move source ``slot`` from the root to every rank once."""
        if getattr(self, "info", None) is None:
            raise RuntimeError(f"{self.name}: prepare() first")
        if not 0 <= slot < self.slots:
            raise ValueError(f"{self.name}: slot {slot} of {self.slots}")
        if self.is_root:
            self.data = self.sources[slot]
        self._move(slot)

    def _move(self, slot: int) -> None:
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
        if getattr(self, "info", None) is not None and self.info.shape == "1d":
            return self._rows[0] if self._rows else None
        return list(self._rows)

    def free(self) -> None:
        """Collective: release every MPI object this method created."""
        if self.comm is not None:
            self.comm.Free()
            self.comm = None
        self._rows = []
        self.data = None
        self.sources = []

    def __enter__(self) -> Method:
        return self

    def __exit__(self, *exc: object) -> None:
        self.free()

    # -- helpers for 2D receivers
    def _receive_rows(self, lengths: Sequence[int] | np.ndarray) -> list[np.ndarray]:
        """Receive buffers of these lengths; reused when the lengths are unchanged."""
        lengths = [int(n) for n in lengths]
        if [r.size for r in self._rows] != lengths:
            dtype = self.info.np_dtype
            self._rows = [np.empty(n, dtype) for n in lengths]
        return self._rows

    def _lengths_array(self) -> np.ndarray:
        """Row lengths (int64): filled on the root, empty on the others."""
        if self.is_root:
            return np.fromiter((r.size for r in self.data), dtype=np.int64, count=len(self.data))
        return np.empty(self.info.length, np.int64)

    def _bcast_lengths(self) -> np.ndarray:
        lens = self._lengths_array()
        self.comm.Bcast([lens, _mpi().INT64_T], root=self.root)
        return lens


class P2P(Method):
    name = "p2p"
    notes_1d = "root Isends the array to each rank, receivers Irecv + Wait; root Waitall"
    notes_2d = (
        "root Isends the row lengths, then each row, to each rank; receivers Recv the lengths, "
        "then Irecv every row and Waitall; root Waitall"
    )

    def _transfer_1d(self) -> None:
        MPI = _mpi()
        if self.is_root:
            MPI.Request.Waitall([self.comm.Isend([self.data, self.mpitype], dest=r, tag=_TAG_ROW)
                                 for r in range(self.comm.Get_size()) if r != self.root])
        else:
            self.comm.Irecv([self._rows[0], self.mpitype], source=self.root, tag=_TAG_ROW).Wait()

    def _transfer_2d(self) -> None:
        MPI = _mpi()
        lens = self._lengths_array()
        if self.is_root:
            reqs = []
            for r in range(self.comm.Get_size()):
                if r == self.root:
                    continue
                reqs.append(self.comm.Isend([lens, MPI.INT64_T], dest=r, tag=_TAG_META))
                for i, row in enumerate(self.data):
                    reqs.append(self.comm.Isend([row, self.mpitype], dest=r, tag=_TAG_ROW + i))
            MPI.Request.Waitall(reqs)
        else:
            self.comm.Recv([lens, MPI.INT64_T], source=self.root, tag=_TAG_META)
            MPI.Request.Waitall([self.comm.Irecv([row, self.mpitype], source=self.root, tag=_TAG_ROW + i)
                                 for i, row in enumerate(self._receive_rows(lens))])


class Bcast(Method):
    name = "bcast"
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
        n = self.info.length
        size = self.mpitype.Pack_size(n, self.comm)
        buf = self._staging(size)
        if self.is_root:
            self.mpitype.Pack(self.data, buf, 0, self.comm)
        # every rank moves Pack_size bytes (the signatures of a Bcast must match)
        self.comm.Bcast([buf, size, MPI.PACKED], root=self.root)
        if not self.is_root:
            self.mpitype.Unpack(buf[:size], 0, self._rows[0], self.comm)

    def _transfer_2d(self) -> None:
        MPI = _mpi()
        nrows = self.info.length
        head = np.empty(1, np.int64)
        if self.is_root:
            lens = self._lengths_array()
            buf = self._staging(MPI.INT64_T.Pack_size(nrows, self.comm)
                                + sum(self.mpitype.Pack_size(int(n), self.comm) for n in lens))
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
        dt = self.mpitype.Create_hindexed([int(n) for n in lens], [MPI.Get_address(row) for row in rows]).Commit()
        try:
            self.comm.Bcast([MPI.BOTTOM, 1, dt], root=self.root)
        finally:
            dt.Free()


class _RMA(Method):
    """A window on the root per source (1D: ``Win.Create`` over the array; 2D: a dynamic window to
    which the root attaches each row); created in ``prepare`` (untimed), freed in ``free``."""

    def _setup(self) -> None:
        MPI = _mpi()
        self._wins: list[Any] = []
        self._attached: list[tuple[Any, np.ndarray]] = []
        for slot in range(self.slots):
            source = self.sources[slot] if self.is_root else None
            if self.info.shape == "1d":
                itemsize = self.info.np_dtype.itemsize
                self._wins.append(MPI.Win.Create(source, itemsize, comm=self.comm))
            else:
                win = MPI.Win.Create_dynamic(comm=self.comm)
                self._wins.append(win)
                for row in source or ():
                    win.Attach(row)
                    self._attached.append((win, row))
        self.win: Any = self._wins[0]

    def transfer(self, slot: int = 0) -> None:
        if getattr(self, "info", None) is not None and 0 <= slot < len(self._wins):
            self.win = self._wins[slot]
        super().transfer(slot)

    def _bcast_meta(self) -> tuple[np.ndarray, np.ndarray]:
        """Timed: the row lengths and the rows' addresses in the root's dynamic window."""
        MPI = _mpi()
        nrows = self.info.length
        meta = np.empty(2 * nrows, np.int64)
        if self.is_root:
            meta[:nrows] = [r.size for r in self.data]
            meta[nrows:] = [MPI.Get_address(r) for r in self.data]
        self.comm.Bcast([meta, MPI.INT64_T], root=self.root)
        return meta[:nrows], meta[nrows:]

    def _get_1d(self) -> None:
        n = self.info.length
        self.win.Get([self._rows[0], self.mpitype], self.root, target=(0, n, self.mpitype))

    def _get_2d(self, lens: np.ndarray, addrs: np.ndarray) -> None:
        rows = self._receive_rows(lens)
        for row, addr in zip(rows, addrs):
            self.win.Get([row, self.mpitype], self.root, target=(int(addr), row.size, self.mpitype))

    def free(self) -> None:
        for win, row in getattr(self, "_attached", ()):
            win.Detach(row)
        self._attached = []
        for win in getattr(self, "_wins", ()):
            win.Free()
        self._wins = []
        self.win = None
        super().free()


class RMAFence(_RMA):
    name = "rma-fence"
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
    notes_1d = "lowercase comm.bcast of the array (pickled in-band, unpickled into a new array)"
    notes_2d = "lowercase comm.bcast of the list of arrays (one pickle, new arrays on receivers)"

    def _setup(self) -> None:
        self._received: Data = None

    def _send(self, obj: Data) -> Data:
        return self.comm.bcast(obj, root=self.root)

    def _move(self, slot: int) -> None:
        if self.is_root:
            self._send(self.data)
        else:
            self._received = self._send(None)

    def result(self) -> Data:
        return self.data if self.is_root else self._received

    def free(self) -> None:
        self._received = None
        super().free()


class Pkl5Bcast(PickleBcast):
    name = "pkl5"
    notes_1d = "mpi4py.util.pkl5 bcast: pickle protocol 5, array data out-of-band (its own Bcast)"
    notes_2d = "mpi4py.util.pkl5 bcast of the list: one small pickle + one out-of-band Bcast per row"

    def _setup(self) -> None:
        from mpi4py.util import pkl5

        super()._setup()
        self._pcomm = pkl5.Intracomm(self.comm)

    def _send(self, obj: Data) -> Data:
        return self._pcomm.bcast(obj, root=self.root)

    def free(self) -> None:
        self.__dict__.pop("_pcomm", None)  # the wrapper of self.comm goes with it
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


