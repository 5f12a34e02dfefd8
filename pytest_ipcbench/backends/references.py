"""References: the plainest correct use of each backend's mechanism, timed by the same harness.

One cohesive thing: the references side by side, one short class per mechanism, so that they
read as one table (docs/references.md).

A backend names its reference (``Backend.reference``); ``ipcbench selfcheck`` and the reference
tests time the two interleaved, so a figure labelled "zmq" is known to be ZeroMQ's cost and not
our wrapper's (docs/method.md rule 17). Each reference is a small :class:`~..backends.base.Backend`
marked ``internal`` (never offered as a user backend), registered as ``ref-<backend>``:

==================  =================================================================
``ref-zmq``         one PAIR socket per reader over ``ipc://``; ``send(copy=False)``,
                    ``recv(copy=False)`` (pyzmq copies below its 64 KiB threshold)
``ref-mpi-p2p``     ``comm.Send`` / ``comm.Recv`` of the bytes (mpi4py.bench's ping-pong)
``ref-mpi-buffer``  ``comm.Bcast`` of the bytes
``ref-mpi-bcast``   ``comm.bcast(obj)``
``ref-mpi-pkl5``    ``pkl5.Intracomm(comm).bcast(obj)``
``ref-shm``         ``multiprocessing.shared_memory`` (no resource tracker), a version word,
                    the bytes after it; readers poll the word
``ref-lmdb``        one write transaction puts a version and the value; readers poll the
                    version in a read transaction and get the value from the same snapshot
``ref-mp-queue``    ``multiprocessing.Queue.put(obj)`` / ``get()`` (the group's mailboxes)
==================  =================================================================

Modes, as the backends': ``bytes`` pickles at write and unpickles at read; ``native`` moves the
raw bytes of a buffer (a numpy array, bytes) and a reader gets a flat ``uint8`` array; the
references for pickling mechanisms (``comm.bcast``, pkl5, mp.Queue) send the object itself.
Like mpi4py.bench and OSU, the native MPI point-to-point and Bcast references learn the size
from the first message and receive every later one into a buffer of that size: the harness sends
one size per case. ``ref-mpi-p2p`` and ``ref-mpi-buffer`` receive into **one reused buffer** (what
the plain programs do); ``ref-mpi-p2p-fresh`` and ``ref-mpi-buffer-fresh`` allocate a fresh array
per message, so the difference is the cost of allocation (first touch of new pages).

Waiting follows the run's wait strategy (``block`` or ``backoff``) as the backends do: a
blocking call (MPI ``Recv``/``Bcast``, zmq ``recv``, ``Queue.get``) or a poll paced by
:meth:`~..backends.base.Backend.pacer` (shm, lmdb; MPI under ``backoff``).
"""

from __future__ import annotations

import os
import pickle
import queue
import shutil
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..core import names
from ..core.group import comm_of
from .base import Backend, BackendUnavailable, PayloadError, mailboxes_of, register

_TAG = 0x1CBF


def raw_bytes(obj: Any, who: str) -> memoryview:
    """The bytes of a buffer, flat; PayloadError for an object that is not one."""
    if isinstance(obj, np.ndarray):
        return np.ascontiguousarray(obj).reshape(-1).view(np.uint8).data
    try:
        return memoryview(obj).cast("B")
    except TypeError:
        raise PayloadError(f"{who} moves buffers in native mode, not {type(obj).__name__}") from None


class _Reference(Backend):
    internal = True
    #: native MPI readers: receive into one buffer reused for every message, or a fresh array
    reuse: ClassVar[bool] = True

    def _dump(self, obj: Any) -> Any:
        if self.mode == "bytes":
            return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        return raw_bytes(obj, self.name)


# ------------------------------------------------------------------------------------ MPI


class _MPIReference(_Reference):
    delivery = "channel"
    needs_mpi = True

    def setup(self) -> None:
        from mpi4py import MPI

        self.MPI = MPI
        self.comm = comm_of(self.group)
        self._buf: np.ndarray | None = None
        # blocking and nonblocking collectives do not match: every rank takes the root's strategy
        self.wait = self.comm.bcast(self.wait, root=self.root)
        self._readers = tuple(self.readers)
        self._byte = MPI.BYTE
        #: the last two arrays written and their messages: what a plain program builds once
        #: (mpi4py.bench hands the same ``[buffer, BYTE]`` to every Send)
        self._sent: list[Any] = [None, None, None, None]
        #: native, block, one reused buffer: the reader's ``[buffer, BYTE]``, from the second message on
        self._recv_msg: list[Any] | None = None

    def _complete(self, request: Any, what: str) -> None:
        """Backoff strategy: poll a nonblocking request with the pacer (block: not used)."""
        pace = self.pacer()
        while not request.Test():
            if not pace.wait():
                raise self.timeout_error(what)

    def _message(self, obj: Any) -> Any:
        """What Send/Bcast take: a C-contiguous array as ``[array, BYTE]`` (its bytes, made once per
        array, as mpi4py.bench hands over its buffer), else the bytes (or pickle) of _dump."""
        sent = self._sent
        if obj is sent[0]:
            return sent[1]
        if obj is sent[2]:
            return sent[3]
        if self.mode == "native" and type(obj) is np.ndarray and obj.flags.c_contiguous:
            msg = [obj, self._byte]
            sent[2], sent[3], sent[0], sent[1] = sent[0], sent[1], obj, msg
            return msg
        return self._dump(obj)

    def _buffer(self, n: int) -> np.ndarray:
        if self.reuse and self._buf is not None and self._buf.nbytes == n:
            if self.wait == "block" and self.mode == "native":
                self._recv_msg = [self._buf, self._byte]
            return self._buf
        buf = np.empty(n, dtype=np.uint8)
        if self.reuse:
            self._buf = buf
        return buf


@register
class RefMPIP2P(_MPIReference):
    """``comm.Send`` to each reader, ``comm.Recv`` on the reader (bytes: a probed size)."""

    name = "ref-mpi-p2p"

    def setup(self) -> None:
        super().setup()
        self._size = -1  # native: the size of every message, from the first one

    def write(self, obj: Any) -> None:
        data, send = self._message(obj), self.comm.Send
        for reader in self._readers:
            send(data, reader, _TAG)

    def read(self) -> Any:
        msg = self._recv_msg
        if msg is not None:  # the plain loop: one Recv into the same buffer
            self.comm.Recv(msg, self.root, _TAG)
            return msg[0]
        comm, root = self.comm, self.root
        if self.mode == "bytes" or self._size < 0:
            status = self.MPI.Status()
            if self.wait == "block":
                comm.Probe(source=root, tag=_TAG, status=status)
            else:
                pace = self.pacer()
                while not comm.Iprobe(source=root, tag=_TAG, status=status):
                    if not pace.wait():
                        raise self.timeout_error("a message (Iprobe)")
            n = status.Get_count(self.MPI.BYTE)
            if self.mode == "bytes":
                data = bytearray(n)
                comm.Recv(data, source=root, tag=_TAG)
                return pickle.loads(data)
            self._size = n
        buf = self._buffer(self._size)
        if self.wait == "block":
            comm.Recv(buf, source=root, tag=_TAG)
        else:
            self._complete(comm.Irecv(buf, source=root, tag=_TAG), "a message (Irecv)")
        return buf


@register
class RefMPIP2PFresh(RefMPIP2P):
    """``ref-mpi-p2p`` receiving into a fresh array per message."""

    name = "ref-mpi-p2p-fresh"
    reuse = False


@register
class RefMPIBuffer(_MPIReference):
    """``comm.Bcast`` of the bytes; the size goes first (every time in bytes mode, once in native)."""

    name = "ref-mpi-buffer"

    def setup(self) -> None:
        super().setup()
        self._size = np.full(1, -1, dtype=np.int64)
        self._sized = False  # native: the size went (once)

    def _bcast(self, buf: Any, what: str) -> None:
        if self.wait == "block":
            self.comm.Bcast(buf, self.root)
        elif self.group.rank == self.root:
            self.comm.Ibcast(buf, root=self.root).Wait()
        else:
            self._complete(self.comm.Ibcast(buf, root=self.root), what)

    def write(self, obj: Any) -> None:
        data = self._message(obj)
        if self.mode == "bytes" or not self._sized:
            self._size[0] = (obj.nbytes if isinstance(data, list) else data.nbytes if isinstance(data, memoryview)
                             else len(data))
            self._bcast(self._size, "the size")
            self._sized = self.mode == "native"
        self._bcast(data, "the data")

    def read(self) -> Any:
        msg = self._recv_msg
        if msg is not None:  # the plain loop: one Bcast into the same buffer
            self.comm.Bcast(msg, self.root)
            return msg[0]
        if self.mode == "bytes":
            self._bcast(self._size, "the size")
            data = bytearray(int(self._size[0]))
            self._bcast(data, "the data")
            return pickle.loads(data)
        if not self._sized:
            self._bcast(self._size, "the size")
            self._sized = True
        buf = self._buffer(int(self._size[0]))
        self._bcast(buf, "the data")
        return buf


@register
class RefMPIBufferFresh(RefMPIBuffer):
    """``ref-mpi-buffer`` receiving into a fresh array per message."""

    name = "ref-mpi-buffer-fresh"
    reuse = False


@register
class RefMPIBcast(_MPIReference):
    """``comm.bcast(obj)`` (bytes mode: of the pickled bytes)."""

    name = "ref-mpi-bcast"

    def _bcast_fn(self) -> Any:
        return self.comm.bcast

    def write(self, obj: Any) -> None:
        self._bcast_fn()(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL) if self.mode == "bytes" else obj,
                         root=self.root)

    def read(self) -> Any:
        got = self._bcast_fn()(None, root=self.root)
        return pickle.loads(got) if self.mode == "bytes" else got


@register
class RefMPIPkl5(RefMPIBcast):
    """``mpi4py.util.pkl5.Intracomm(comm).bcast(obj)``."""

    name = "ref-mpi-pkl5"

    def setup(self) -> None:
        super().setup()
        from mpi4py.util import pkl5

        self._pkl5 = pkl5.Intracomm(self.comm)

    def _bcast_fn(self) -> Any:
        return self._pkl5.bcast


# ------------------------------------------------------------------------------------ ZeroMQ


@register
class RefZMQ(_Reference):
    """One PAIR socket per reader over ``ipc://``; blocking ``recv`` with a receive timeout."""

    name = "ref-zmq"
    delivery = "channel"
    timing_counters = frozenset({"syscalls.data", "io.syscr", "io.syscw"})  # as zmq's (backends/zmq_ipc.py)

    def setup(self) -> None:
        import zmq

        self.zmq = zmq
        ctx = zmq.Context()
        self._ctx: zmq.Context[Any] | None = ctx
        self._socks: list[Any] = []
        self._dir: Path | None = None

        def bind() -> list[str]:
            self._dir = names.private_dir("zmq-ref")
            endpoints = []
            for reader in self.readers:
                sock = ctx.socket(zmq.PAIR)
                sock.setsockopt(zmq.LINGER, 0)
                endpoints.append(f"ipc://{self._dir}/{reader}")
                sock.bind(endpoints[-1])
                self._socks.append(sock)
            return endpoints

        def connect(endpoints: list[str]) -> None:
            if self.group.rank == self.root:
                return
            sock = ctx.socket(zmq.PAIR)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RCVTIMEO, int(self.timeout * 1000))
            sock.connect(endpoints[self.readers.index(self.group.rank)])
            self._socks.append(sock)

        self.open_collectively(bind, connect, "bind its PAIR sockets")

    def close(self) -> None:
        for sock in getattr(self, "_socks", []):
            sock.close(linger=0)
        self._socks = []
        ctx, folder = getattr(self, "_ctx", None), getattr(self, "_dir", None)
        if ctx is not None:
            ctx.term()
            self._ctx = None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
            self._dir = None

    def write(self, obj: Any) -> None:
        data = self._dump(obj)
        for sock in self._socks:
            sock.send(data, copy=False)

    def read(self) -> Any:
        try:
            frame = self._socks[0].recv(copy=False)
        except self.zmq.Again:
            raise self.timeout_error("a message on its PAIR socket") from None
        if self.mode == "bytes":
            return pickle.loads(frame.buffer)
        return np.frombuffer(frame.buffer, dtype=np.uint8)


# ------------------------------------------------------------------------------ shared memory


@register
class RefSharedMemory(_Reference):
    """``multiprocessing.shared_memory``: a version word, the length, then the bytes.

    The writer copies the bytes in, then bumps the version; a reader polls the version and
    returns a view of the segment (native; valid until the next write, like ``shm``'s) or
    unpickles straight from it (bytes). No seqlock: the harness never writes while a reader
    reads. The segment has a fixed ``capacity`` (sparse: pages cost only once written).
    """

    name = "ref-shm"
    delivery = "store"
    capacity: ClassVar[int] = 1 << 26
    DATA = 64

    def setup(self) -> None:
        from multiprocessing import shared_memory

        self._shm: Any = None

        def create() -> str:
            name = names.resource_name("shm-ref")
            self._shm = _shared_memory(shared_memory, name, create=True, size=self.DATA + self.capacity)
            return name

        def attach(name: str) -> None:
            if self._shm is None:
                self._shm = _shared_memory(shared_memory, name)
            self._words = self._shm.buf[:16].cast("Q")
            self._seq = int(self._words[0])

        self.open_collectively(create, attach, "create its segment")

    def close(self) -> None:
        words, self._words = getattr(self, "_words", None), None
        if words is not None:
            words.release()
        shm, self._shm = getattr(self, "_shm", None), None
        if shm is None:
            return
        try:
            shm.close()
        except BufferError:  # a returned view still maps it: the mapping goes with the view
            pass
        if self.group.rank == self.root:  # not shm.unlink(): it would ask the resource tracker
            try:
                os.unlink(names.SHM_DIR / shm.name.lstrip("/"))
            except FileNotFoundError:
                pass

    def write(self, obj: Any) -> None:
        data = self._dump(obj)
        n = data.nbytes if isinstance(data, memoryview) else len(data)
        if n > self.capacity:
            raise PayloadError(f"{self.name}: {n} bytes do not fit in its {self.capacity}-byte segment")
        self._shm.buf[self.DATA : self.DATA + n] = data
        self._words[1] = n
        self._seq += 1
        self._words[0] = self._seq

    def read(self) -> Any:
        words, pace = self._words, None
        while words[0] == self._seq:
            if pace is None:
                pace = self.pacer()
            if not pace.wait():
                raise self.timeout_error("a new version word")
        self._seq = int(words[0])
        n = int(words[1])
        if self.mode == "bytes":
            return pickle.loads(self._shm.buf[self.DATA : self.DATA + n])
        return np.frombuffer(self._shm.buf, dtype=np.uint8, count=n, offset=self.DATA)


def _shared_memory(module: Any, name: str, create: bool = False, size: int = 0) -> Any:
    """SharedMemory without the resource tracker (it unlinks what it did not create: gh-82300)."""
    try:
        return module.SharedMemory(name=name, create=create, size=size, track=False)  # Python >= 3.13
    except TypeError:
        pass
    shm = module.SharedMemory(name=name, create=create, size=size)
    from multiprocessing import resource_tracker

    resource_tracker.unregister(shm._name, "shared_memory")  # the documented workaround
    return shm


# -------------------------------------------------------------------------------------- LMDB


@register
class RefLMDB(_Reference):
    """One write transaction puts ``seq`` and ``data``; readers poll ``seq`` in a read transaction
    and take ``data`` from the same snapshot (native: a view, kept until the next read)."""

    name = "ref-lmdb"
    delivery = "store"
    map_size: ClassVar[int] = 1 << 30

    def setup(self) -> None:
        import lmdb

        self._env: Any = None
        self._txn: Any = None
        self._seq = 0
        self._path: Path | None = None

        def create() -> str:
            self._path = names.private_dir("lmdb-ref")
            self._env = lmdb.open(str(self._path), map_size=self.map_size, sync=False, metasync=False, max_dbs=0)
            return str(self._path)

        def attach(path: str) -> None:
            if self._env is None:
                self._env = lmdb.open(path, map_size=self.map_size, readonly=True, create=False, lock=True, max_dbs=0)

        self.open_collectively(create, attach, "create the environment")

    def close(self) -> None:
        if getattr(self, "_txn", None) is not None:
            self._txn.abort()
            self._txn = None
        if getattr(self, "_env", None) is not None:
            self._env.close()
            self._env = None
        folder = getattr(self, "_path", None)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
            self._path = None

    def write(self, obj: Any) -> None:
        data = self._dump(obj)
        self._seq += 1
        with self._env.begin(write=True) as txn:
            txn.put(b"data", data)
            txn.put(b"seq", self._seq.to_bytes(8, "little"))

    def read(self) -> Any:
        if self._txn is not None:
            self._txn.abort()
            self._txn = None
        pace = None
        while True:
            txn = self._env.begin(buffers=True)
            seq = txn.get(b"seq")
            if seq is not None and int.from_bytes(seq, "little") > self._seq:
                break
            txn.abort()
            if pace is None:
                pace = self.pacer()
            if not pace.wait():
                raise self.timeout_error("a new version in the LMDB environment")
        self._seq = int.from_bytes(seq, "little")
        data = txn.get(b"data")
        if self.mode == "bytes":
            value = pickle.loads(data)
            txn.abort()
            return value
        self._txn = txn  # the view lives in this snapshot
        return np.frombuffer(data, dtype=np.uint8)


# ------------------------------------------------------------------------- multiprocessing


@register
class RefMPQueue(_Reference):
    """``Queue.put(obj)`` into each reader's mailbox, ``get()`` from one's own."""

    name = "ref-mp-queue"
    delivery = "channel"
    local_only = True

    @classmethod
    def unavailable(cls, group: Any = None) -> str | None:
        from .mp_queue import MPQueueBackend

        return MPQueueBackend.unavailable(group)

    def setup(self) -> None:
        self.group.barrier()

    def write(self, obj: Any) -> None:
        msg = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL) if self.mode == "bytes" else obj
        for reader in self.readers:
            mailboxes_of(self.group)[reader].put(msg)

    def read(self) -> Any:
        try:
            got = mailboxes_of(self.group)[self.group.rank].get(timeout=self.timeout)
        except queue.Empty:
            raise self.timeout_error("a message in its mailbox") from None
        return pickle.loads(got) if self.mode == "bytes" else got


def reference_of(name: str) -> str:
    """The reference backend's name for backend ``name``; BackendUnavailable if it has none."""
    from .base import get_backend

    ref = get_backend(name).reference
    if not ref:
        raise BackendUnavailable(f"backend {name} names no reference (set its class attribute `reference`)")
    get_backend(ref)
    return ref


__all__ = [
    "RefLMDB",
    "RefMPIBcast",
    "RefMPIBuffer",
    "RefMPIBufferFresh",
    "RefMPIP2P",
    "RefMPIP2PFresh",
    "RefMPIPkl5",
    "RefMPQueue",
    "RefSharedMemory",
    "RefZMQ",
    "raw_bytes",
    "reference_of",
]
