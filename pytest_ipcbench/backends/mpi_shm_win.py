"""``mpi-shm-win``: MPI-3 shared-memory windows (``MPI.Win.Allocate_shared``): MPI's own zero-copy
within a node.

The writer allocates two windows on the node's communicator: a small **control** window (the
sequence number of the last value, its state and length, one acknowledgement slot per rank) and
a **data** window; the readers allocate nothing and map the writer's memory with
``Win.Shared_query``. Every rank holds a passive epoch (``Lock_all``) for the backend's life and
calls ``Win.Sync`` (a memory barrier) around each access to the control words.

A channel with one slot: ``write()`` waits until every reader acknowledged the previous value,
writes the new one into the data window and publishes its number; ``read()`` polls the number
(with :class:`~.base.Backoff`, ``TimeoutError`` after ``timeout``), reads, acknowledges.

Modes, as ``shm``:

* ``bytes``: pickle into the window; readers unpickle from it (one copy, into the object);
* ``native``: pickle protocol 5, the out-of-band buffers laid out in the window (64-byte
  aligned); readers unpickle with zero-copy, read-only views of the writer's memory. **Such an
  object is valid until the writer's next write**; keep a copy if you need it longer (so the
  ``stream`` scenario, which keeps a window of values, runs in bytes mode only).

Growth: a payload that does not fit makes a bigger data window, collectively: the writer
announces the size in the control window, and every reader, waiting in ``read()``, joins
``Allocate_shared``. Replaced windows are freed at ``close()`` (views of them stay valid until
then).

Across nodes (a group that spans several), ``BackendSpec.open`` runs it once per node and moves
the value between nodes by MPI (backends/hierarchy.py): the windows exist once per node.
"""

from __future__ import annotations

import pickle
import struct
from typing import Any, ClassVar

import mpi4py  # noqa: F401  (the optional dependency; MPI is initialized lazily)
import numpy as np

from ..core.nodes import layout_of
from .base import ArrayDescriptions, Backend, Backoff, PayloadError, dumps, dumps_oob, loads, loads_oob, register

ALIGN = 64
STATE_VALUE, STATE_ERROR = 0, 1
# control window, as uint64 words: seq, state, nbytes, grow generation, grow size, message length
_SEQ, _STATE, _NBYTES, _GROW_GEN, _GROW_SIZE, _MSG_LEN = range(6)
_MSG_OFF, _MSG_MAX = 64, 1024  # message bytes
_ACK_OFF = _MSG_OFF + _MSG_MAX  # one uint64 per rank: the last value it read
# native data: count, header offset, header length, what the header is (_PICKLED, _ARRAY, _BYTES,
# _BYTEARRAY), then (offset, length) per buffer (uint64)
_TABLE = 4
#: the header: a pickle-5 header with out-of-band buffers; a plain array's pickled (dtype, shape)
#: (cached on both sides); or nothing, the one buffer is the value (bytes, bytearray): no pickling
_PICKLED, _ARRAY, _BYTES, _BYTEARRAY = 0, 1, 2, 3


def _align(n: int, to: int = ALIGN) -> int:
    return (n + to - 1) // to * to


class MPIShmWinBackend(Backend):
    """A one-slot channel in MPI shared-memory windows; see the module docstring."""

    name = "mpi-shm-win"
    payload_in_shm = True  # admitted against /dev/shm's free space too
    delivery = "channel"
    needs_mpi = True
    node_local = True  # the windows live on one node: across nodes, one per node (hierarchy.py)
    #: data bytes of the first data window; a bigger payload makes a bigger one
    initial_capacity = 1 << 20
    #: native values are views of the window, overwritten by the next write (no stream scenario)
    native_views_until_next_write = True
    reference: ClassVar[str | None] = "ref-mpi-shm-win"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.comm: Any = None
        self._wins: list[Any] = []  # every window made (freed at close)
        self._ctrl_win: Any = None
        self._ctrl: np.ndarray | None = None  # uint64 words of the control window
        self._ctrl_bytes: np.ndarray | None = None
        self._data_win: Any = None
        self._data: np.ndarray | None = None  # uint8 view of the data window
        self._data_view: Any = None  # ... as a memoryview, and read-only (what readers unpickle over)
        self._data_ro: Any = None
        self._seq = 0
        self._grow_gen = 0
        self.owner_bytes = 0  # bytes of window memory this rank allocated (the writer's only)
        self._descs = ArrayDescriptions()  # writer: a plain array's pickled (dtype, shape)
        self._last_table: bytes | None = None  # writer: the table and header in the window now
        self._views: dict[bytes, Any] = {}  # reader: (table, header) -> the array view of the window
        self._acks: np.ndarray | None = None  # the acknowledgement words, one per rank
        self._readers = self.readers

    # ------------------------------------------------------------------ setup and close

    def setup(self) -> None:
        from mpi4py import MPI

        self.MPI = MPI
        group: Any = self.group
        if getattr(group, "nodes", 1) > 1:
            raise RuntimeError(
                f"{self.name}: this group spans {layout_of(group)}; open it with BackendSpec.open, "
                "which runs one window per node"
            )
        self.comm = group.comm
        ctrl_size = _ACK_OFF + 8 * self.group.size
        self._ctrl_win, buf = self._allocate(ctrl_size)
        self._ctrl_bytes = np.frombuffer(buf, dtype=np.uint8, count=ctrl_size)
        self._ctrl = self._ctrl_bytes.view(np.uint64)
        self._acks = self._ctrl_bytes[_ACK_OFF : _ACK_OFF + 8 * self.group.size].view(np.uint64)
        if self.group.rank == self.root:
            self._ctrl_bytes[:] = 0
        self._grow(self.initial_capacity)
        self.comm.Barrier()  # the control words are zero before anyone polls them

    def _allocate(self, size: int) -> tuple[Any, Any]:
        """Collective: a window of ``size`` bytes on the root (0 elsewhere), mapped by everyone."""
        MPI = self.MPI
        mine = size if self.group.rank == self.root else 0
        win = MPI.Win.Allocate_shared(mine, 1, comm=self.comm)
        self.owner_bytes += mine
        self._wins.append(win)
        win.Lock_all(MPI.MODE_NOCHECK)
        buf, _ = win.Shared_query(self.root)
        return win, buf

    def _grow(self, size: int) -> None:
        """Collective: a new data window of ``size`` bytes (the old one stays until close)."""
        self._data_win, buf = self._allocate(size)
        self._data = np.frombuffer(buf, dtype=np.uint8, count=size)
        self._data_view = self._data.data
        self._data_ro = self._data_view.toreadonly()
        self._last_table = None
        self._views.clear()

    def close(self) -> None:
        if not self._wins:
            return
        wins, self._wins = self._wins, []
        self._ctrl = self._ctrl_bytes = self._data = self._data_view = self._data_ro = self._acks = None
        self._views.clear()
        for win in wins:
            win.Unlock_all()
        # Win.Free is collective: free only when every rank of the node came to close(), so
        # that a rank that failed early cannot wait here for one still reading (leak, not hang)
        request = self.comm.Ibarrier()
        backoff = Backoff(self.timeout)
        while not request.Test():
            if not backoff.wait():
                return
        for win in wins:
            win.Free()
        self.comm = None

    # ------------------------------------------------------------------ writer

    def _sync(self) -> None:
        self._ctrl_win.Sync()

    def write(self, obj: Any) -> None:
        ctrl = self._ctrl
        if ctrl is None or self.group.rank != self.root:
            raise RuntimeError(f"{self.name}: write() is for the root (rank {self.root}), after setup()")
        try:
            parts, offsets, end, table = self._layout(obj)
        except PayloadError as exc:
            self._wait_acks()
            self._publish_error(str(exc))
            raise
        self._wait_acks()
        data = self._data
        assert data is not None  # setup() made it
        if end > len(data):
            size = _align(max(end, 2 * len(data)), 1 << 20)
            ctrl[_GROW_SIZE] = size
            self._sync()
            ctrl[_GROW_GEN] = self._grow_gen = self._grow_gen + 1
            self._sync()
            self._grow(size)
        window = self._data_view
        if table is not None and table != self._last_table:  # else the window holds it already
            window[: len(table)] = table
        self._last_table = table
        for off, part in zip(offsets, parts):
            raw = part if type(part) is np.ndarray else memoryview(part).cast("B")
            window[off : off + raw.nbytes] = raw
        ctrl[_STATE] = STATE_VALUE
        ctrl[_NBYTES] = end
        self._data_win.Sync()
        self._sync()
        ctrl[_SEQ] = self._seq = self._seq + 1
        self._sync()

    def _layout(self, obj: Any) -> tuple[list[Any], list[int], int, bytes | None]:
        """(parts, their offsets, bytes used, native table) of ``obj`` in the data window."""
        if self.mode == "bytes":
            data = dumps(obj)
            return [data], [0], len(data), None
        kind = type(obj)
        if kind is np.ndarray and obj.flags.c_contiguous and not obj.dtype.hasobject:
            return self._layout_one(_ARRAY, self._descs.of(obj), obj.reshape(-1).view(np.uint8))
        if kind is bytes or kind is bytearray:
            return self._layout_one(_BYTES if kind is bytes else _BYTEARRAY, b"", obj)
        head, buffers = dumps_oob(obj)
        try:
            raws = [b.raw() for b in buffers]
        except BufferError as exc:
            raise PayloadError(f"cannot lay out a non-contiguous buffer of {type(obj).__name__}: {exc}") from exc
        # struct, not numpy: for small objects these few words cost more than the data
        pos = _align(8 * (_TABLE + 2 * len(raws)))
        parts: list[bytes | memoryview] = [head]
        offsets, words = [pos], [len(raws), pos, len(head), _PICKLED]
        pos = _align(pos + len(head))
        for raw in raws:
            words += (pos, raw.nbytes)
            offsets.append(pos)
            parts.append(raw)
            pos = _align(pos + raw.nbytes)
        return parts, offsets, pos, struct.pack(f"<{len(words)}Q", *words)

    def _layout_one(self, kind: int, head: bytes, raw: Any) -> tuple[list[Any], list[int], int, bytes | None]:
        """One buffer, no pickling: the table with the header after it, then the buffer."""
        head_off = _align(8 * (_TABLE + 2))
        pos = _align(head_off + len(head))
        n = len(raw)
        table = struct.pack("<6Q", 1, head_off, len(head), kind, pos, n)
        return [raw], [pos], _align(pos + n), table + bytes(head_off - len(table)) + head

    def _wait_acks(self) -> None:
        """Until every reader read the previous value (a one-slot channel)."""
        if self._seq == 0:
            return
        acks, readers, seq, sync = self._acks, self._readers, self._seq, self._ctrl_win.Sync
        assert acks is not None
        backoff = None
        while True:
            sync()
            if all(acks[r] >= seq for r in readers):
                return
            if backoff is None:
                backoff = self.pacer()
            if not backoff.wait():
                late = [r for r in readers if int(acks[r]) < self._seq]
                raise TimeoutError(
                    f"{self.name} ({self.mode} mode): the writer (rank {self.root}) waited {self.timeout:g} s "
                    f"for rank(s) {late} to read value {self._seq} and gave up"
                )

    def _publish_error(self, message: str) -> None:
        assert self._ctrl is not None and self._ctrl_bytes is not None
        raw = np.frombuffer(message.encode("utf-8", "replace")[:_MSG_MAX], dtype=np.uint8)
        self._ctrl_bytes[_MSG_OFF : _MSG_OFF + raw.size] = raw
        self._ctrl[_MSG_LEN] = raw.size
        self._ctrl[_STATE] = STATE_ERROR
        self._sync()
        self._ctrl[_SEQ] = self._seq = self._seq + 1
        self._sync()

    # ------------------------------------------------------------------ readers

    def read(self) -> Any:
        ctrl = self._ctrl
        if ctrl is None or self.group.rank == self.root:
            raise RuntimeError(f"{self.name}: read() is for the readers, after setup()")
        backoff = None
        sync = self._ctrl_win.Sync
        while True:
            sync()
            if ctrl[_GROW_GEN] > self._grow_gen:
                size = int(ctrl[_GROW_SIZE])
                self._grow_gen = int(ctrl[_GROW_GEN])
                self._grow(size)  # collective with the writer, who waits in write()
                backoff = None
                continue
            seq = int(ctrl[_SEQ])
            if seq > self._seq:
                break
            if backoff is None:
                backoff = self.pacer()
            if not backoff.wait():
                raise self.timeout_error(f"value number {self._seq + 1} in the shared window")
        self._data_win.Sync()
        try:
            if int(ctrl[_STATE]) == STATE_ERROR:
                assert self._ctrl_bytes is not None
                n = int(ctrl[_MSG_LEN])
                raise self.writer_failed(bytes(self._ctrl_bytes[_MSG_OFF : _MSG_OFF + n]).decode("utf-8", "replace"))
            value = self._decode(int(ctrl[_NBYTES]))
        finally:
            self._seq = seq
            assert self._acks is not None
            self._acks[self.group.rank] = seq
            self._sync()
        return value

    def _decode(self, nbytes: int) -> Any:
        data = self._data
        assert data is not None
        if self.mode == "bytes":
            return loads(data.data[:nbytes])
        view = self._data_ro
        count, head_off, head_len, kind = struct.unpack_from("<4Q", view, 0)
        if kind != _PICKLED:
            off, n = struct.unpack_from("<2Q", view, 8 * _TABLE)
            if kind == _BYTES:
                return bytes(view[off : off + n])
            if kind == _BYTEARRAY:
                return bytearray(view[off : off + n])
            # a plain array: the same read-only view of the window as last time when the table
            # and header are the same (no unpickling, no new array per message)
            key = bytes(view[: head_off + head_len])
            value = self._views.get(key)
            if value is None:
                dtype, shape = pickle.loads(view[head_off : head_off + head_len])
                value = np.frombuffer(view, dtype=np.uint8, count=n, offset=off).view(dtype).reshape(shape)
                if len(self._views) > 64:
                    self._views.clear()
                self._views[key] = value
            return value
        entries = struct.unpack_from(f"<{2 * count}Q", view, 8 * _TABLE)
        buffers = [view[entries[2 * i] : entries[2 * i] + entries[2 * i + 1]] for i in range(count)]
        return loads_oob(view[head_off : head_off + head_len], buffers)


@register
class RefMPIShmWin(MPIShmWinBackend):
    """The reference (``ipcbench selfcheck``): the same windows, version word and acknowledgements,
    moving the raw bytes of a buffer in native mode (a reader gets a flat ``uint8`` copy) and the
    pickled object in bytes mode: what is left of mpi-shm-win's cost is the window itself."""

    name = "ref-mpi-shm-win"
    internal = True
    reference = None
    native_views_until_next_write = False  # readers copy

    def _layout(self, obj: Any) -> tuple[list[Any], list[int], int, bytes | None]:
        if self.mode == "bytes":
            return super()._layout(obj)
        from .references import raw_bytes

        raw = raw_bytes(obj, self.name)
        return [raw], [0], raw.nbytes, None

    def _decode(self, nbytes: int) -> Any:
        if self.mode == "bytes":
            return super()._decode(nbytes)
        assert self._data is not None
        return self._data[:nbytes].copy()


__all__ = ["MPIShmWinBackend", "RefMPIShmWin"]
