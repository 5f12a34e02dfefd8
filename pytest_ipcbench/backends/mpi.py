"""MPI channels over the group's communicator: ``mpi-bcast``, ``mpi-pkl5``, ``mpi-buffer``,
``mpi-p2p``. The writer's ``write()`` and the readers' ``read()`` are the two sides of one
operation, so every rank of the group must take part in every transfer.

One cohesive thing: the four MPI channels, each a variant of one life cycle (``_MPIBackend``)
and one encoding of bytes and arrays.

======================  ===============================================  ===========================================
backend                 bytes mode                                       native mode
======================  ===============================================  ===========================================
``mpi-bcast``           ``comm.bcast`` of the pickled bytes              ``comm.bcast(obj)`` (mpi4py pickles)
``mpi-pkl5``            ``pkl5.Intracomm(comm).bcast`` of the bytes      ``pkl5...bcast(obj)`` (pickle-5 out-of-band)
``mpi-buffer``          size, then ``comm.Bcast`` of the pickled bytes   arrays and lists of arrays: dtype and shape,
                                                                         then one ``Bcast`` per array, no pickling;
                                                                         anything else: pickle-5 header + buffers
``mpi-p2p``             size, then ``Isend``/``Recv`` of the bytes       as mpi-buffer, with ``Isend``/``Recv``
                        to every reader                                  to every reader
======================  ===============================================  ===========================================

In every mode an object that cannot be pickled raises PayloadError in ``write()``, after the
writer has sent an error marker in place of the value, so the readers' ``read()`` raises
PayloadError too instead of waiting in a collective that never completes. For the native
``comm.bcast`` (which pickles before it communicates, then unpickles a copy on the root too) the
writer sends ``(obj, mark)``: the mark is pickled after the object, so whether it was pickled
tells whether the failure came before any communication.

Waiting (docs/method.md rule 18): under the ``block`` wait (every rank has a core) ``mpi-buffer`` and
``mpi-p2p`` readers wait for the head message in MPI itself (a blocking ``Bcast``, ``Wait`` on a
persistent receive): no read timeout then, the harness's watchdog covers a hang. Under ``backoff``
they poll a nonblocking operation with the pacer (:meth:`~.base.Backend.pacer`: a reader does not
spin while the writer is still busy) and give up after ``timeout`` with TimeoutError. The data
itself then moves with blocking calls, which progress fastest. A timed-out ``mpi-p2p`` receive is cancelled, so the
communicator stays usable; a timed-out ``mpi-buffer`` Ibcast cannot be cancelled (MPI has no
cancel for collectives), so after that TimeoutError the group's communicator is unusable.
``mpi-bcast`` and ``mpi-pkl5`` block in mpi4py's collective (there is no timeout there: the
harness's watchdog covers a hang).

``import mpi4py`` at the top only checks that the package exists: MPI itself is initialized when
a backend is set up on an MPI group.
"""

from __future__ import annotations

import pickle
import struct
import sys
from typing import Any

import mpi4py  # noqa: F401  (the optional dependency; MPI is initialized lazily)
import numpy as np

from ..core.group import comm_of
from .base import Backend, PayloadError, dumps, dumps_oob, loads, loads_oob

_TAG_HEAD, _TAG_META, _TAG_DATA, _TAG_NOTE, _TAG_ACK = 0x1CB0, 0x1CB1, 0x1CB2, 0x1CB3, 0x1CB4
#: a head's status: a value; the writer's error message; a value laid out as the previous one (its
#: meta is in the head all the same: a reader without the fast path reads it as a value)
_OK, _FAILED, _SAME = 0, 1, 2


class _Failed:
    """Sent by the writer of a pickled bcast in place of a value it could not pickle."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Failed, (self.message,))


class _Mark:
    """Pickled after the object: if pickling failed before it, nothing was sent yet."""

    __slots__ = ("pickled",)

    def __init__(self) -> None:
        self.pickled = False

    def __reduce__(self) -> tuple[Any, ...]:
        self.pickled = True
        return (int, ())


class _MPIBackend(Backend):
    delivery = "channel"
    needs_mpi = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.comm: Any = None

    def setup(self) -> None:
        from mpi4py import MPI

        self.MPI = MPI
        self.comm = comm_of(self.group)

    def close(self) -> None:
        self.comm = None

    def _check(self, writer: bool) -> None:
        if self.comm is None:
            raise RuntimeError(f"{self.name}: use it after setup() and before close()")
        if writer != (self.group.rank == self.root):
            side = "write() is for the root" if writer else "read() is for the readers"
            raise RuntimeError(f"{self.name}: {side}")

    # a pickled collective (mpi4py's bcast, pkl5's bcast) guarded against unpicklable objects
    def _bcast_obj(self, bcast: Any, obj: Any) -> None:
        if self.mode == "bytes":
            try:
                data = dumps(obj)
            except PayloadError as exc:
                bcast(_Failed(str(exc)), root=self.root)
                raise
            bcast(data, root=self.root)
            return
        mark = _Mark()
        try:
            bcast((obj, mark), root=self.root)
        except Exception as exc:
            if mark.pickled:  # sent; the root's own unpickled copy failed (so will the readers')
                raise PayloadError(f"{type(obj).__name__} was sent but cannot be unpickled: {exc}") from exc
            message = f"cannot pickle {type(obj).__name__}: {exc}"
            bcast(_Failed(message), root=self.root)
            raise PayloadError(message) from exc

    def _recv_obj(self, bcast: Any) -> Any:
        got = bcast(None, root=self.root)
        if isinstance(got, _Failed):
            raise self.writer_failed(got.message)
        if self.mode == "bytes":
            return loads(got)
        return got[0]


class MPIBcastBackend(_MPIBackend):
    """``comm.bcast``: mpi4py's pickled broadcast."""

    name = "mpi-bcast"
    reference = "ref-mpi-bcast"
    no_read_timeout = "its read() waits inside mpi4py's blocking bcast, which MPI cannot abandon"

    def write(self, obj: Any) -> None:
        self._check(writer=True)
        self._bcast_obj(self.comm.bcast, obj)

    def read(self) -> Any:
        self._check(writer=False)
        return self._recv_obj(self.comm.bcast)


class MPIPkl5Backend(_MPIBackend):
    """``mpi4py.util.pkl5``: pickle-5 out-of-band buffers, no 2 GiB limit."""

    name = "mpi-pkl5"
    reference = "ref-mpi-pkl5"
    no_read_timeout = "its read() waits inside pkl5's blocking bcast, which MPI cannot abandon"

    def setup(self) -> None:
        super().setup()
        from mpi4py.util import pkl5

        self._pkl5 = pkl5.Intracomm(self.comm)

    def close(self) -> None:
        self.__dict__.pop("_pkl5", None)  # the wrapper of self.comm goes with it
        super().close()

    def write(self, obj: Any) -> None:
        self._check(writer=True)
        self._bcast_obj(self._pkl5.bcast, obj)

    def read(self) -> Any:
        self._check(writer=False)
        return self._recv_obj(self._pkl5.bcast)


# ----------------------------------------------------------------- buffer-based transports


def _plain_array(obj: Any) -> bool:
    return type(obj) is np.ndarray and not obj.dtype.hasobject and obj.dtype.itemsize > 0


def _as_bytes(arr: np.ndarray) -> np.ndarray:
    """A flat uint8 view of a C-contiguous array (works for every dtype, unlike memoryview)."""
    return arr.reshape(-1).view(np.uint8)


def _raw(arr: Any) -> memoryview:
    """A C-contiguous array's bytes as a flat memoryview: slices assign and compare without numpy.
    (Typed Any: numpy's stubs declare the buffer protocol from Python 3.12 on only.)"""
    return memoryview(arr).cast("B")


def _encode_array(arr: np.ndarray) -> tuple[tuple[Any, ...], np.ndarray]:
    if arr.flags.c_contiguous:
        return (arr.dtype, arr.shape, False), arr
    if arr.flags.f_contiguous:  # send the C-contiguous transpose; the reader transposes back
        return (arr.dtype, arr.shape, True), arr.T
    return (arr.dtype, arr.shape, False), np.ascontiguousarray(arr)


def _empty_array(spec: tuple[Any, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(value, C-contiguous receive buffer) for an encoded array spec."""
    dtype, shape, fortran = spec
    if fortran:
        buf = np.empty(shape[::-1], dtype)
        return buf.T, buf
    buf = np.empty(shape, dtype)
    return buf, buf


def encode(obj: Any, mode: str) -> tuple[bytes, list[Any]]:
    """(meta, buffers) to move; raises PayloadError if ``obj`` cannot be sent.

    bytes mode: meta is the pickled object, no buffers. native mode: meta is a small pickled
    description; arrays (and lists or tuples of arrays) are sent as raw buffers without
    pickling, anything else as a pickle-5 header (in meta) plus its out-of-band buffers.
    """
    if mode == "bytes":
        return dumps(obj), []
    if _plain_array(obj):
        spec, arr = _encode_array(obj)
        return pickle.dumps(("array", spec), protocol=5), [_as_bytes(arr)]
    if type(obj) in (list, tuple) and all(_plain_array(a) for a in obj):
        encoded = [_encode_array(a) for a in obj]
        meta = ("arrays", type(obj) is tuple, [spec for spec, _ in encoded])
        return pickle.dumps(meta, protocol=5), [_as_bytes(arr) for _, arr in encoded]
    head, buffers = dumps_oob(obj)
    try:
        raws = [b.raw() for b in buffers]
    except BufferError as exc:
        raise PayloadError(f"cannot send a non-contiguous buffer of {type(obj).__name__}: {exc}") from exc
    return pickle.dumps(("pickle", head, [r.nbytes for r in raws]), protocol=5), raws


def receive_plan(meta: Any, mode: str) -> tuple[Any, list[Any]]:
    """(how to finish, receive buffers) for ``meta`` as received."""
    if mode == "bytes":
        return ("bytes", meta), []
    desc = pickle.loads(meta)
    if desc[0] == "array":
        value, buf = _empty_array(desc[1])
        return ("value", value), [_as_bytes(buf)]
    if desc[0] == "arrays":
        made = [_empty_array(spec) for spec in desc[2]]
        values = [v for v, _ in made]
        return ("value", tuple(values) if desc[1] else values), [_as_bytes(b) for _, b in made]
    _, head, sizes = desc
    bufs = [bytearray(n) for n in sizes]
    return ("pickle", head, bufs), bufs


def finish(plan: Any) -> Any:
    if plan[0] == "bytes":
        return loads(plan[1])
    if plan[0] == "value":
        return plan[1]
    return loads_oob(plan[1], plan[2])


# status, meta length, meta in the head?, buffers in the head?, size of the next head, whether the
# next array laid out as this one goes alone (its bytes, no head)
_HEAD = struct.Struct("<qqqqqq")


class _BufferBackend(_MPIBackend):
    """Shared by mpi-buffer and mpi-p2p: one head message, then what did not fit in it.

    The head holds the status, the meta (the pickled bytes, or the small description of the
    arrays) and, when everything fits in ``HEAD_MAX`` bytes, the data too: a small object is one
    message, as in a plain ``Send``. Larger buffers follow as their own messages, received
    straight into the arrays returned. The readers' head buffer is made once; an array returned
    by ``read()`` is recycled for the next message of the same dtype and shape once nobody else
    holds it (its reference count says so), otherwise a fresh one is allocated: no first-touch
    page faults when the caller drops what it read, and no value overwritten that it kept.

    Steady state (issue 40): a plain C-contiguous array laid out as the previous message goes as
    its bytes only -- the head packed last time stays in the buffer, its status says ``_SAME``,
    and the reader fills the array it returned last time in place. An array larger than any head
    goes alone, without the head (the head before says so): one message. ``mpi-p2p``'s reader tells
    it from a head by its size; ``mpi-buffer``'s, by a notice the writer sends before a broadcast
    that is not that array's bytes.
    """

    HEAD_MAX = 512  # the first head's size (and the smallest)
    #: a head may grow to carry the next object inline, up to this: the writer announces the next
    #: head's size in each head (as large as this object needed: the next is likely the same)
    HEAD_CAP = 512

    def setup(self) -> None:
        super().setup()
        # blocking and nonblocking collectives do not match: every rank takes the root's strategy
        self.wait = self.comm.bcast(self.wait, root=self.root)
        self._head = np.zeros(max(self.HEAD_MAX, self.HEAD_CAP), dtype=np.uint8)
        self._head_view = self._head.data
        self._head_size = self.HEAD_MAX  # both sides: the size of the next head
        self._meta_cache: dict[Any, bytes] = {}  # writer: array spec -> pickled meta
        self._desc_cache: dict[bytes, Any] = {}  # reader: meta -> description
        # reader: description -> (the last array returned, [its flat bytes], its plan)
        self._spare: dict[Any, tuple[Any, ...]] = {}
        self._last_meta: tuple[bytes, Any] | None = None  # reader: the last meta and its description
        self._readers = self.readers
        # the steady state of a plain array sent again and again, its head already in the buffer
        # (issue 40): writer (dtype, shape, strides, the data's place in the head or None, what
        # _send_again sends), its heads marked _SAME; reader [the array returned, its bytes, the
        # data's place in the head or None, whether the data comes alone (the head before said so)]
        self._wfast: tuple[Any, ...] | None = None
        self._rfast: list[Any] | None = None
        self._walone = 0  # writer: the next message goes alone unless it says otherwise: its size
        self._alone_count = 0  # arrays sent (writer) or received (reader) alone since the head said so

    def close(self) -> None:
        self._wfast = self._rfast = None  # the fast paths skip _check: after close() they must be gone
        super().close()

    def _encode(self, obj: Any) -> tuple[bytes, list[Any]]:
        if self.mode == "native" and _plain_array(obj):  # the common case, without pickling
            spec, arr = _encode_array(obj)
            key = (spec[0].str, spec[1], spec[2])
            meta = self._meta_cache.get(key)
            if meta is None:
                if len(self._meta_cache) > 64:
                    self._meta_cache.clear()
                meta = self._meta_cache[key] = pickle.dumps(("array", spec), protocol=5)
            return meta, [_as_bytes(arr)]
        return encode(obj, self.mode)

    def write(self, obj: Any) -> None:
        fast = self._wfast
        if (fast is not None and type(obj) is np.ndarray and obj.dtype is fast[0] and obj.shape == fast[1]
                and obj.strides == fast[2]):
            # the same layout as the last message: the head in the buffer holds its status and meta
            # already; only the data moves (into the head, or as the message after it)
            raw = _raw(obj)
            if fast[3] is not None:
                fast[3][:] = raw
                self._send_again(fast[4], None)
            else:
                self._send_again(fast[4], raw)
            return
        self._wfast = None
        self._check(writer=True)
        failure: PayloadError | None = None
        try:
            meta, buffers = self._encode(obj)
            status = _OK
        except PayloadError as exc:
            failure = exc
            meta, buffers, status = str(exc).encode("utf-8", "replace"), [], _FAILED
        limit = self._head_size
        size = _HEAD.size + len(meta)
        meta_in = size <= limit
        data = sum(b.nbytes if isinstance(b, (memoryview, np.ndarray)) else len(b) for b in buffers)
        bufs_in = meta_in and size + data <= limit
        # the next head as large as this object needed, up to HEAD_CAP; when the data do not fit
        # even then they go on their own, so the head need only hold the status and meta
        whole = size + data if size + data <= self.HEAD_CAP else size
        next_head = max(self.HEAD_MAX, min(self.HEAD_CAP, whole)) if status == _OK else limit
        # the head is packed into the one buffer made at setup (no bytes joined per message)
        hv = self._head_view
        _HEAD.pack_into(hv, 0, status, len(meta), meta_in, bufs_in, next_head, 0)
        used = _HEAD.size
        if meta_in:
            hv[used : used + len(meta)] = meta
            used += len(meta)
            if bufs_in:
                for buf in buffers:
                    n = buf.nbytes if isinstance(buf, (memoryview, np.ndarray)) else len(buf)
                    hv[used : used + n] = buf
                    used += n
        fast = None
        if (status == _OK and meta_in and next_head == limit and self.mode == "native" and _plain_array(obj)
                and obj.flags.c_contiguous):
            fast = self._steady(obj, hv[used - data : used] if bufs_in else None, used)
        alone = fast is not None and not bufs_in and data > self.HEAD_CAP
        if alone:  # the head tells the readers: the next array like this one comes alone
            _HEAD.pack_into(hv, 0, status, len(meta), meta_in, bufs_in, next_head, 1)
        self._send(used, None if meta_in else meta, [] if bufs_in else buffers)
        self._head_size = next_head
        self._walone, self._alone_count = (data if alone else 0), 0
        if failure is not None:
            raise failure
        self._wfast = fast
        if fast is not None:
            hv[0] = _SAME  # the status of the heads sent again (the low byte of a little-endian word)

    def _steady(self, obj: np.ndarray, slot: Any, used: int) -> tuple[Any, ...] | None:
        """The writer's fast path for more arrays like ``obj`` (None when its bytes cannot be a memoryview)."""
        try:
            if obj.nbytes == 0 or _raw(obj).nbytes != obj.nbytes:
                return None
        except (TypeError, ValueError):  # e.g. datetime64: no buffer format
            return None
        return (obj.dtype, obj.shape, obj.strides, slot, self._again(used))

    def read(self) -> Any:
        fast = self._rfast
        hv = self._head_view
        if fast is None:
            self._check(writer=False)
            self._recv_head()
        else:
            value = fast[0]
            if sys.getrefcount(value) > 4:  # the list, its bytes, this name, the argument: the caller kept it
                value = fast[0] = _empty_array(self._last_meta[1][1])[0]  # type: ignore[index]
                fast[1] = _raw(value)
            if fast[3]:  # the data may come alone, straight into the array
                if self._recv_alone(fast[1]):
                    return value
            else:
                self._recv_head()
            if hv[0] == _SAME:  # laid out as the last message: the same array, the same head
                if fast[2] is not None:
                    fast[1][:] = fast[2]
                else:
                    self._recv_buffers([fast[1]])
                return value
            self._rfast = None
        status, meta_len, meta_in, bufs_in, next_head, alone = _HEAD.unpack_from(hv)
        steady = next_head == self._head_size
        self._head_size = next_head
        if meta_in:
            meta: Any = hv[_HEAD.size : _HEAD.size + meta_len]
        else:
            meta = bytearray(meta_len)
            self._recv_bytes(meta)
        if status == _FAILED:
            raise self.writer_failed(bytes(meta).decode("utf-8", "replace"))
        if self.mode == "bytes":
            return loads(meta)
        plan, buffers = self._receive_plan(meta)
        pos = _HEAD.size + meta_len
        if bufs_in:
            for buf in buffers:
                n = len(buf)
                buf[:] = hv[pos : pos + n]
                pos += n
        else:
            self._recv_buffers(buffers)
        if plan[0] != "value":
            return finish(plan)
        if alone or (steady and status != _FAILED and meta_in and self._last_meta is not None
                     and not self._last_meta[1][1][2]):
            self._rfast = self._steady_reader(pos if bufs_in else None, bool(alone))
        return plan[1]

    def _steady_reader(self, end: int | None, alone: bool) -> list[Any] | None:
        """The reader's fast path for more messages with this head (None when the array's bytes
        cannot be a memoryview): an array of its own, filled in place while nobody else holds it."""
        value = _empty_array(self._last_meta[1][1])[0]  # type: ignore[index]
        try:
            raw = _raw(value)
        except (TypeError, ValueError):
            return None
        if raw.nbytes == 0:
            return None
        if alone:
            self._expect_alone()
        return [value, raw, None if end is None else self._head_view[end - raw.nbytes : end], alone]

    def _receive_plan(self, meta: Any) -> tuple[Any, list[Any]]:
        last = self._last_meta  # the same meta as the last message: its description, no lookup
        if last is not None and last[0] == meta:
            desc = last[1]
        else:
            meta = bytes(meta)
            desc = self._desc_cache.get(meta)
            if desc is None:
                desc = pickle.loads(meta)
                if desc[0] != "array":
                    self._last_meta = None
                    return receive_plan(meta, self.mode)
                if len(self._desc_cache) > 64:
                    self._desc_cache.clear()
                    self._spare.clear()
                self._desc_cache[meta] = desc
            self._last_meta = (meta, desc)
        spec = desc[1]
        if spec[2]:  # Fortran order: a view's base would be the buffer, not the value: no recycling
            value, buf = _empty_array(spec)
            return ("value", value), [_as_bytes(buf)]
        spare = self._spare.get(spec)
        # refcount 3 (the dict, the name, the argument) for the value, 2 for its flat view kept
        # beside it: nobody else holds it, nor a view of it (a view's base is the array itself)
        if spare is None or sys.getrefcount(spare[0]) > 4:
            value = _empty_array(spec)[0]
            spare = self._spare[spec] = (value, [_as_bytes(value)], ("value", value))
        return spare[2], spare[1]

    def _wait(self, request: Any, what: str, cancel: bool = False, status: Any = None) -> None:
        """Wait for one nonblocking request by the wait strategy; TimeoutError after timeout.

        With ``cancel`` (a receive) the request is cancelled on timeout, so that it cannot steal
        a later message; if the message arrived meanwhile, the wait succeeds after all. ``status``,
        if given, is filled as the request completes.
        """
        if request.Test(status):
            return
        pace = self.pacer()
        test = request.Test
        while not test(status):
            if not pace.wait():
                if cancel:
                    request.Cancel()
                    status = status if status is not None else self.MPI.Status()
                    request.Wait(status)
                    if not status.Is_cancelled():
                        return
                raise self.timeout_error(what)

    # the steps each subclass provides
    def _expect_alone(self) -> None:
        """Reader: the next array like the last one comes alone (its bytes, no head)."""

    def _recv_alone(self, raw: Any) -> bool:
        """Receive the next message: True if it was the data alone (into ``raw``), False if a head."""
        raise NotImplementedError

    def _again(self, used: int) -> Any:
        """What :meth:`_send_again` sends: the head of ``used`` bytes as packed now."""
        raise NotImplementedError

    def _send_again(self, head: Any, data: Any) -> None:
        """Send the head as :meth:`_again` made it, then ``data`` if not None."""
        raise NotImplementedError

    def _send(self, used: int, meta: bytes | None, buffers: list[Any]) -> None:
        """Send the head (its first ``used`` bytes are packed), then the meta and buffers if given."""
        raise NotImplementedError

    def _recv_head(self) -> None:
        raise NotImplementedError

    def _recv_bytes(self, meta: bytearray) -> None:
        raise NotImplementedError

    def _recv_buffers(self, buffers: list[Any]) -> None:
        raise NotImplementedError


class MPIBufferBackend(_BufferBackend):
    """A head (``Bcast``) as large as the previous object needed, then ``Bcast`` of what did not fit.

    Under the ``block`` wait the head is a blocking ``Bcast`` (the way MPI waits best when every
    rank has a core; its read then has no timeout: the harness's watchdog covers a hang); under
    ``backoff`` an ``Ibcast`` polled by the pacer, which gives up after ``timeout``.

    One broadcast per message in the steady state at every size: up to 16 KiB the head carries
    the data; above, an array laid out as the last one goes alone, its bytes straight into the
    reader's array. A broadcast carries no size or tag, so when the writer next sends something
    else it first sends each reader a notice holding how many arrays went alone before, waits for
    each reader's acknowledgement, then broadcasts the head padded to the size the readers expect.
    A reader waits for its broadcast or the notice, whichever comes first (``Waitany``): a
    broadcast that completes before the notice is an array, since the head follows the
    acknowledgements; once the notice is in, the count says whether this broadcast or a later one
    is the head. While arrays go alone every broadcast is nonblocking on both sides (``Ibcast``:
    a blocking and a nonblocking collective do not match), so the reader can wait for both.
    Matching alone (an ``Issend`` completes once the receive is matched) is not enough: a reader
    may see its broadcast complete before its matched notice (seen with two simulated nodes).
    """

    name = "mpi-buffer"
    reference = "ref-mpi-buffer"
    HEAD_CAP = 16384 + 512  # objects of the same size up to 16 KiB travel in one Bcast
    # it does time out, but the pending Ibcast leaves the communicator unusable for later tests
    no_read_timeout = ("its read() waits in a blocking Bcast under the block wait, and a timed-out Ibcast "
                       "(backoff) cannot be cancelled (MPI has no cancel for collectives)")

    def setup(self) -> None:
        super().setup()
        self._heads: dict[int, Any] = {}  # head size -> the head buffer's first bytes (one view each)
        self._note = np.zeros(1, dtype=np.int64)  # a notice: how many arrays went alone before the head
        self._pad = np.zeros(0, dtype=np.uint8)  # writer: a head padded to the size the readers expect
        self._head_next = False  # reader: the notice came: the next broadcast is the head
        self._noticed = False  # reader: the notice came since the arrays began to go alone
        self._ack = np.zeros(len(self.readers) if self.group.rank == self.root else 1, dtype=np.int8)
        self._notice = None  # reader: the persistent receive of the notice, started while data may come alone
        if self.group.rank != self.root:
            self._notice = self.comm.Recv_init(self._note, source=self.root, tag=_TAG_NOTE)

    def close(self) -> None:
        notice, self._notice = getattr(self, "_notice", None), None
        if notice is not None:
            if not notice.Test():  # still posted: the writer sent nothing else since (cancel it)
                notice.Cancel()
                notice.Wait()
            notice.Free()
        super().close()

    def _head_of(self, size: int) -> Any:
        head = self._heads.get(size)
        if head is None:
            head = self._heads[size] = self._head[:size]
        return head

    def _send(self, used: int, meta: bytes | None, buffers: list[Any]) -> None:
        comm, root = self.comm, self.root
        head = self._head_of(self._head_size)
        if self._walone:  # the readers expect an array alone: a notice each, their acknowledgements,
            self._note[0] = self._alone_count  # then the head padded to its size, as a nonblocking broadcast
            self.MPI.Request.Waitall([comm.Isend(self._note, reader, _TAG_NOTE) for reader in self._readers]
                                     + [comm.Irecv(self._ack[i : i + 1], reader, _TAG_ACK)
                                        for i, reader in enumerate(self._readers)])
            if len(self._pad) != self._walone:
                self._pad = np.zeros(self._walone, dtype=np.uint8)
            self._pad[: len(head)] = head
            comm.Ibcast(self._pad, root=root).Wait()
        elif self.wait == "block":
            comm.Bcast(head, root=root)
        else:
            comm.Ibcast(head, root=root).Wait()
        if meta is not None:
            comm.Bcast(meta, root=root)
        for buf in buffers:
            if len(buf):
                comm.Bcast(buf, root=root)

    def _again(self, used: int) -> Any:
        return self._head_of(self._head_size)

    def _send_again(self, head: Any, data: Any) -> None:
        if self._walone:  # alone: a nonblocking broadcast, as the readers wait for it or a notice
            self._alone_count += 1
            self.comm.Ibcast(data, root=self.root).Wait()
            return
        if self.wait == "block":
            self.comm.Bcast(head, root=self.root)
        else:
            self.comm.Ibcast(head, root=self.root).Wait()
        if data is not None:
            self.comm.Bcast(data, root=self.root)

    def _expect_alone(self) -> None:
        assert self._notice is not None, "a reader after setup()"
        self._notice.Start()
        self._alone_count, self._head_next, self._noticed = 0, False, False

    def _recv_alone(self, raw: Any) -> bool:
        """One broadcast while arrays may come alone: True if it was an array, False if the head."""
        data = self.comm.Ibcast(raw, root=self.root)
        if not self._head_next:
            if not self._noticed:
                if self._first_of(data, self._notice) == 0:
                    self._alone_count += 1  # before the notice: an array (the head waits for our acknowledgement)
                    return True
                self._noticed = True
                self.comm.Send(self._ack, self.root, _TAG_ACK)
            self._complete(data, "the data broadcast (Ibcast)")
            if self._alone_count < int(self._note[0]):  # the writer sent more arrays alone than came: one of them
                self._alone_count += 1
                self._head_next = self._alone_count == int(self._note[0])
                return True
        else:
            self._complete(data, "the head broadcast (Ibcast)")
        self._head_next = False
        n = self._head_size  # the head, padded
        self._head_view[:n] = raw[:n]
        return False

    def _complete(self, request: Any, what: str) -> None:
        """MPI's own wait under ``block`` (no timeout: the harness's watchdog covers a hang), the
        pacer's under ``backoff``."""
        if self.wait == "block":
            request.Wait()
        else:
            self._wait(request, what)

    def _first_of(self, data: Any, notice: Any) -> int:
        """0 if the broadcast completes first, 1 if the notice does (MPI waits under ``block``; the
        pacer polls under ``backoff``)."""
        if self.wait == "block":
            return int(self.MPI.Request.Waitany([data, notice]))
        pace = self.pacer()
        while True:
            index, done = self.MPI.Request.Testany([data, notice])
            if done:
                return int(index)
            if not pace.wait():
                raise self.timeout_error("the data broadcast (Ibcast) or the writer's notice")

    def _recv_head(self) -> None:
        head = self._head_of(self._head_size)
        if self.wait == "block":
            self.comm.Bcast(head, root=self.root)
        else:
            self._wait(self.comm.Ibcast(head, root=self.root), "the head broadcast (Ibcast)")

    def _recv_bytes(self, meta: bytearray) -> None:
        if len(meta):
            self.comm.Bcast(meta, root=self.root)

    def _recv_buffers(self, buffers: list[Any]) -> None:
        for buf in buffers:
            if len(buf):
                self.comm.Bcast(buf, root=self.root)


class MPIP2PBackend(_BufferBackend):
    """``Send``/``Isend`` from the writer to each reader (head, then the rest), ``Recv`` on the readers.

    A reader receives the head through one persistent request (``Recv_init`` at setup, started
    for each message): no request made per message. Under the ``block`` wait it waits in MPI's
    ``Wait``; under ``backoff`` it polls with the pacer and gives up after ``timeout``.
    """

    name = "mpi-p2p"
    reference = "ref-mpi-p2p"
    HEAD_MAX = HEAD_CAP = 16384  # a head message is as long as it needs, up to this
    no_read_timeout = ("under the block wait its read() waits in MPI's Wait (the watchdog covers a hang); under "
                       "backoff it gives up after timeout")

    def setup(self) -> None:
        super().setup()
        MPI = self.MPI
        self._head_request = None
        if self.group.rank != self.root:
            self._head_request = self.comm.Recv_init(self._head, source=self.root, tag=_TAG_HEAD)
        self._byte = MPI.BYTE
        self._status = MPI.Status()

    def close(self) -> None:
        request, self._head_request = getattr(self, "_head_request", None), None
        if request is not None:
            request.Free()
        super().close()

    def _send(self, used: int, meta: bytes | None, buffers: list[Any]) -> None:
        comm = self.comm
        readers = self._readers
        head = [self._head, used, self._byte]
        if len(readers) == 1 and meta is None and not buffers:  # one small message: a plain Send
            comm.Send(head, dest=readers[0], tag=_TAG_HEAD)
            return
        requests = []
        for reader in readers:
            requests.append(comm.Isend(head, dest=reader, tag=_TAG_HEAD))
            if meta is not None and len(meta):
                requests.append(comm.Isend(meta, dest=reader, tag=_TAG_META))
            for buf in buffers:
                if len(buf):
                    requests.append(comm.Isend(buf, dest=reader, tag=_TAG_DATA))
        self.MPI.Request.Waitall(requests)

    def _again(self, used: int) -> Any:
        return [self._head, used, self._byte]

    def _send_again(self, head: Any, data: Any) -> None:
        readers = self._readers
        if data is not None and data.nbytes > self.HEAD_CAP:  # alone, with the head's tag
            for reader in readers:
                self.comm.Send(data, dest=reader, tag=_TAG_HEAD)
            return
        if len(readers) != 1:
            self._send(head[1], None, [] if data is None else [data])
            return
        self.comm.Send(head, dest=readers[0], tag=_TAG_HEAD)
        if data is not None:
            self.comm.Send(data, dest=readers[0], tag=_TAG_DATA)

    def _recv_alone(self, raw: Any) -> bool:
        # one plain receive straight into the array, as the reference's: a head (never larger
        # than HEAD_CAP, smaller than the array) may land there instead, told by its size and
        # moved to the head buffer; the persistent head request is not started meanwhile (it
        # would take either). The array is one nobody holds (read() checked), so a head may
        # scribble on it.
        comm, status = self.comm, self._status
        if self.wait == "block":
            comm.Recv(raw, self.root, _TAG_HEAD, status)
        else:
            self._wait(comm.Irecv(raw, self.root, _TAG_HEAD), "the next message (Irecv)", cancel=True, status=status)
        n = status.Get_count(self._byte)
        if n == len(raw):
            return True
        self._head_view[:n] = raw[:n]
        return False

    def _recv_head(self) -> None:
        request = self._head_request
        assert request is not None, "read() after setup()"
        request.Start()
        if self.wait == "block":
            request.Wait()  # MPI's own wait, the fastest with a core per rank (method.md rule 18)
        else:
            self._wait(request, "the head message (Irecv)", cancel=True)

    def _recv_bytes(self, meta: bytearray) -> None:
        if len(meta):
            self.comm.Recv(meta, source=self.root, tag=_TAG_META)

    def _recv_buffers(self, buffers: list[Any]) -> None:
        for buf in buffers:
            if len(buf):
                self.comm.Recv(buf, source=self.root, tag=_TAG_DATA)


__all__ = ["MPIBcastBackend", "MPIPkl5Backend", "MPIBufferBackend", "MPIP2PBackend", "encode", "receive_plan", "finish"]
