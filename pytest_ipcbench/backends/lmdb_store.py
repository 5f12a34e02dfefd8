"""``lmdb``: a store in an LMDB environment that the root creates and every reader maps.

The root creates the environment in a private folder (``names.private_dir("lmdb")``) and
broadcasts its path; each reader opens its own :class:`lmdb.Environment` in ``setup()`` (never
shared across fork, rule 13). The writer uses ``writemap=True`` (one copy into the map) and
``sync=False, metasync=False`` (IPC, not durability).

One write is one write transaction: key ``seq`` (sequence number, state, buffer count) and the
value (``data`` in bytes mode; ``head`` and ``buf<i>`` in native mode; a plain array's description
rides in the ``seq`` record, after the three numbers, and its bytes go as ``buf000000``: two keys a
message, as the reference's). A reader polls ``seq`` in
a fresh read transaction (paced by the wait strategy) until it is newer than its last.

The writer sizes the map to three times the value plus slack (a reader may pin the previous
version) and grows it on ``MapFullError``; a reader adopts a new size on ``MapResizedError``.
Before each transaction the writer ``posix_fallocate``s the pages it may write, so a full
filesystem is an ``OSError`` naming the folder, not a SIGBUS.

Modes: ``bytes`` (pickle; a reader copies the bytes out and unpickles) and ``native`` (a plain
numpy array as dtype, shape and bytes; anything else pickle-5 with its buffers under their own
keys; a reader unpickles over zero-copy, read-only views into the map and keeps the transaction
open until its next ``read()`` or ``close()``: **do not use such an object after that**, its
pages may be reused or unmapped).

The owner removes the folder at ``close()``, which is local (readers' environments keep working
on unlinked files).
"""

from __future__ import annotations

import errno
import os
import pickle
import struct
from pathlib import Path
from typing import Any

import lmdb
import numpy as np

from ..core import names
from ..core.units import format_bytes
from .base import ArrayDescriptions, Backend, PayloadError, dumps, dumps_oob, loads, loads_oob

STATE_VALUE, STATE_ERROR, STATE_ARRAY = 0, 1, 2  # STATE_ARRAY: the seq record carries a plain array's (dtype, shape)
_SEQ = struct.Struct("<QII")  # sequence number, state, number of out-of-band buffers
_KEY_SEQ, _KEY_DATA, _KEY_HEAD, _KEY_ERROR = b"seq", b"data", b"head", b"error"
_MIB = 1 << 20
_SMALL_TXN = 64 * 1024  # what a transaction of small keys may add: a few pages and the tree
_RESERVE_AHEAD = 2 * _MIB  # the data file is allocated at least this far past its last used page
_FULL_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


def _buf_key(i: int) -> bytes:
    return b"buf%06d" % i


_KEY_BUF0 = _buf_key(0)


class LMDBBackend(Backend):
    """A store in an LMDB environment; see the module docstring."""

    name = "lmdb"
    run_in = "mpi"  # ipcbench run: measured among MPI ranks, as it always was (its history continues)
    delivery = "store"
    reference = "ref-lmdb"
    #: map size of a new environment; a bigger payload grows it
    initial_map_size = 64 * _MIB
    #: a write sizes the map to at least this many times the payload (versions pinned by readers)
    headroom = 3

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.path: Path | None = None
        self._env: lmdb.Environment | None = None
        self._txn: lmdb.Transaction[bytes | memoryview] | None = None  # a reader's open snapshot (native mode)
        self._seq = 0
        self._owner = False
        self._map_known = 0  # writer: a map size known to be set (saves env.info() per write)
        self._meta = ArrayDescriptions()  # writer: a plain array's pickled (dtype, shape)
        self._desc: dict[bytes, Any] = {}  # reader: pickled description -> (dtype, shape)
        self._last_desc: tuple[bytes, Any] = (b"", None)  # reader: the last description and its (dtype, shape)
        self._reserved_to = 0  # the writer's data file is allocated up to here (bytes)
        self._used_bound = 0  # and used at most up to here
        self._psize = 0

    # ------------------------------------------------------------------ setup and close

    def setup(self) -> None:
        self.open_collectively(self._create, self._attach, "create the environment")

    def _create(self) -> str:
        self._owner = True
        with names.interrupts_deferred():  # made and recorded together: close() removes it
            self.path = names.private_dir("lmdb")
        self._env = lmdb.open(
            str(self.path),
            map_size=int(self.initial_map_size),
            subdir=True,
            writemap=True,
            sync=False,
            metasync=False,
            readahead=False,
            meminit=False,
            max_dbs=0,
            mode=0o600,  # data and lock file: readable by their owner only, like the folder
        )
        self._reserved_to = self._used_bound = 0
        self._reserve(_SMALL_TXN)
        with self._env.begin(write=True) as txn:
            txn.put(_KEY_SEQ, _SEQ.pack(0, STATE_VALUE, 0))
        return str(self.path)

    def _attach(self, path: str) -> None:
        if self.group.rank == self.root:
            return
        self.path = Path(path)
        self._env = lmdb.open(path, subdir=True, readonly=True, create=False, lock=True, readahead=False, max_dbs=0)
        with self._begin() as txn:
            self._seq = _SEQ.unpack_from(txn.get(_KEY_SEQ, b""))[0]

    def close(self) -> None:
        try:
            if self._txn is not None:
                self._txn.abort()
                self._txn = None
            if self._env is not None:
                self._env.close()
                self._env = None
        finally:  # a Ctrl-C inside the closing above (or the removal) must not leave the folder
            if self._owner and self.path is not None:
                names.remove(self.path)
            self._owner = False

    @property
    def map_size(self) -> int:
        return int(self._env.info()["map_size"]) if self._env is not None else 0

    # ------------------------------------------------------------------ writer

    def write(self, obj: Any) -> None:
        env = self._env
        if env is None or not self._owner:
            raise RuntimeError("lmdb: write() is for the root, after setup()")
        state, desc = STATE_VALUE, b""
        try:
            if self.mode == "bytes":
                items: list[tuple[bytes, Any]] = [(_KEY_DATA, dumps(obj))]
                nbuf = 0
            elif type(obj) is np.ndarray and obj.flags.c_contiguous and not obj.dtype.hasobject:
                # a plain array without pickling: its (dtype, shape), cached, in the seq record, and
                # its bytes (a flat memoryview, else -- a dtype without a buffer format -- a uint8 view)
                arr: Any = obj  # (numpy's stubs declare the buffer protocol from Python 3.12 on only)
                try:
                    raw: Any = memoryview(arr).cast("B")
                except (TypeError, ValueError):
                    raw = obj.reshape(-1).view(np.uint8)
                items, desc = [(_KEY_BUF0, raw)], self._meta.of(obj)
                nbuf, state = 1, STATE_ARRAY
            else:
                head, buffers = dumps_oob(obj)
                items = [(_KEY_HEAD, head)]
                try:
                    items += [(_buf_key(i), b.raw()) for i, b in enumerate(buffers)]
                except BufferError as exc:
                    raise PayloadError(f"cannot store a non-contiguous buffer of {type(obj).__name__}: {exc}") from exc
                nbuf = len(buffers)
        except PayloadError as exc:
            self._commit([(_KEY_ERROR, str(exc).encode("utf-8", "replace"))], STATE_ERROR, 0)
            raise
        try:
            self._commit(items, state, nbuf, desc)
        except Exception as exc:  # e.g. a full disk: tell the readers, if that still works
            try:
                self._commit([(_KEY_ERROR, f"{type(exc).__name__}: {exc}".encode())], STATE_ERROR, 0)
            except Exception:
                pass
            raise


    def _commit(self, items: list[tuple[bytes, Any]], state: int, nbuf: int, desc: bytes = b"") -> None:
        env = self._env
        assert env is not None
        nbytes = sum(memoryview(v).nbytes for _, v in items) + len(desc)
        # every value on its own overflow pages, plus a page each and the tree
        needed = nbytes + (len(items) + 16) * 4096
        want = self.headroom * needed + 4 * _MIB
        if self._map_known < want and self.map_size < want:  # env.info() only when it may be short
            env.set_mapsize(_grow(self.map_size, want))
        self._map_known = max(self._map_known, want)
        seq = self._seq + 1
        for _attempt in range(8):
            self._reserve(needed, nbytes)
            try:
                with env.begin(write=True) as txn:
                    for key, value in items:
                        txn.put(key, value)
                    txn.put(_KEY_SEQ, _SEQ.pack(seq, state, nbuf) + desc)
                break
            except lmdb.MapFullError:
                env.set_mapsize(_grow(self.map_size, 2 * self.map_size))
        else:
            raise PayloadError(f"lmdb: {nbytes} bytes do not fit in a map of {self.map_size} bytes")
        self._seq = seq

    def _reserve(self, nbytes: int, value: int = 0) -> None:
        """Allocate the file's pages that the next transaction (of a ``value`` of that many bytes)
        may write: up to ``nbytes`` past the last used page.

        With ``writemap`` LMDB writes through a mapping of a sparse file: on a full filesystem
        that is SIGBUS, which kills the process. Pages past the last used one are allocated
        first (``posix_fallocate``, as the shm backend does), so a full filesystem is an error.
        """
        env = self._env
        assert env is not None and self.path is not None
        # a transaction adds at most nbytes past the last used page: while that bound stays in
        # what is reserved, no need to ask LMDB (most small writes skip every call below)
        if self._used_bound + nbytes <= self._reserved_to:
            self._used_bound += nbytes
            return
        info = env.info()
        self._psize = self._psize or int(env.stat()["psize"])
        start = (int(info["last_pgno"]) + 1) * self._psize
        self._used_bound = start + nbytes
        map_end = int(info["map_size"])
        need_end = min(start + nbytes, map_end)  # a bigger one fails MapFullError first, then grows
        ahead_end = min(start + max(nbytes, _RESERVE_AHEAD), map_end)
        try:
            self._fallocate(ahead_end)
        except OSError as exc:
            if ahead_end > need_end and exc.errno in _FULL_ERRNOS:
                try:  # the filesystem may hold the transaction but not the slack ahead of it
                    self._fallocate(need_end)
                    return
                except OSError as again:
                    exc = again
            if exc.errno not in _FULL_ERRNOS:
                raise
            st = os.statvfs(self.path)
            raise OSError(
                exc.errno,
                f"lmdb: cannot reserve {format_bytes(need_end - start)} in {self.path} for a value of "
                f"{format_bytes(value)}: "
                f"{format_bytes(st.f_bavail * st.f_frsize)} free of {format_bytes(st.f_blocks * st.f_frsize)} on its "
                f"filesystem ({exc.strerror}); set TMPDIR to a folder with more space or use a smaller payload",
            ) from None

    def _fallocate(self, end: int) -> None:
        """Allocate the data file up to ``end`` bytes (from where it is reserved already)."""
        assert self.path is not None
        if end <= self._reserved_to:
            return
        fd = os.open(self.path / "data.mdb", os.O_RDWR | os.O_CLOEXEC)
        try:
            os.posix_fallocate(fd, self._reserved_to, end - self._reserved_to)
        except OSError as exc:
            if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL):  # cannot reserve here: LMDB as it is
                self._reserved_to = end
                return
            raise
        finally:
            os.close(fd)
        self._reserved_to = end

    # ------------------------------------------------------------------ reader

    def _begin(self, buffers: bool = False) -> lmdb.Transaction[bytes | memoryview]:
        """A read transaction; adopts a map the writer grew (only when no transaction is open)."""
        env = self._env
        assert env is not None
        for _attempt in range(8):
            try:
                return env.begin(buffers=True) if buffers else env.begin()
            except lmdb.MapResizedError:
                env.set_mapsize(0)
        return env.begin(buffers=True) if buffers else env.begin()

    def read(self) -> Any:
        if self._env is None or self._owner:
            raise RuntimeError("lmdb: read() is for the readers, after setup()")
        if self._txn is not None:  # the previous native snapshot: its views end here
            self._txn.abort()
            self._txn = None
        pace = None
        native = self.mode == "native"
        while True:
            txn = self._begin(buffers=native)
            ours = True  # this loop ends the transaction (not once aborted, nor once kept as the snapshot)
            try:
                # b"" (typed as the buffer it is): the writer put each key read here before its number
                record = txn.get(_KEY_SEQ, b"")
                seq, state, nbuf = _SEQ.unpack_from(record)
                if seq > self._seq:
                    self._seq = seq
                    if state == STATE_ERROR:
                        raise self.writer_failed(bytes(txn.get(_KEY_ERROR, b"")).decode("utf-8", "replace"))
                    if not native:
                        data = txn.get(_KEY_DATA, b"")  # a copy (buffers=False)
                        txn.abort()
                        ours = False
                        return loads(data)
                    if state == STATE_ARRAY:
                        meta = record[_SEQ.size :]
                        desc = self._last_desc[1]
                        if meta != self._last_desc[0]:  # another layout than the last message's
                            meta = bytes(meta)
                            desc = self._desc.get(meta)
                            if desc is None:
                                if len(self._desc) > 64:
                                    self._desc.clear()
                                desc = self._desc[meta] = pickle.loads(meta)
                            self._last_desc = (meta, desc)
                        # one read-only array over the map's bytes (shape, dtype, buffer)
                        value = np.ndarray(desc[1], desc[0], txn.get(_KEY_BUF0, b""))
                    else:
                        head = txn.get(_KEY_HEAD, b"")
                        value = loads_oob(head, [txn.get(_buf_key(i), b"") for i in range(nbuf)])
                    self._txn, ours = txn, False  # keep the snapshot while the views live
                    return value
            finally:
                if ours:
                    txn.abort()
            if pace is None:
                pace = self.pacer()
            if not pace.wait():
                raise self.timeout_error(f"a value newer than number {self._seq} in LMDB environment {self.path}")


def _grow(current: int, want: int) -> int:
    """A new map size: at least ``want``, at least double, in whole MiB."""
    size = max(want, 2 * current)
    return (size + _MIB - 1) // _MIB * _MIB


__all__ = ["LMDBBackend"]
