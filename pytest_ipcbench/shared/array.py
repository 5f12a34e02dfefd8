"""SharedNDArray: a numpy array over a shared segment that pickles to a handle, not its data.

Pickling (multiprocessing, :class:`~pytest_ipcbench.shared.Queue`, mpi4py's ``send``, plain
``pickle``) takes an in-transit reference and sends ``(segment name, byte offset, shape, strides,
dtype, read-only)``; unpickling maps the same memory and adopts that reference. Views and slices
(negative strides included) travel the same way, and a received array can be forwarded again.

:meth:`SharedNDArray.from_numpy_array` keeps the dtype exactly and Fortran order for
Fortran-only-contiguous inputs; everything else becomes C-contiguous. Below
:data:`INLINE_BELOW` bytes the array lives in ordinary memory and pickles *by value*
(``is_shared`` is False): there a segment's fixed costs exceed copying the bytes through a pipe
(docs/shared-arrays.md); ``inline_below=0`` forces a segment. Object dtypes are refused
(TypeError): their items are pointers into one process's heap.
"""

from __future__ import annotations

import contextlib
import contextvars
import marshal
import math
from collections.abc import Iterator
from typing import Any, Literal, SupportsIndex, cast

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from ..core import nodes as _nodes
from ..core.errors import IpcbenchError
from ..core.nodes import this_node
from . import segment as _segment
from .segment import Segment

#: Arrays with fewer bytes than this are kept in process memory and pickled by value.
INLINE_BELOW = 256 * 1024

_sent: contextvars.ContextVar[list[Segment] | None] = contextvars.ContextVar("ipcb_sent", default=None)


@contextlib.contextmanager
def collect_sends() -> Iterator[list[Segment]]:
    """Record the in-transit references pickling takes, so a failed send can give them back."""
    sent: list[Segment] = []
    token = _sent.set(sent)
    try:
        yield sent
    finally:
        _sent.reset(token)


def _check_dtype(dtype: np.dtype) -> None:
    if dtype.hasobject:
        raise TypeError(
            f"SharedNDArray cannot hold dtype {dtype!r}: object items are pointers into one "
            "process's memory and mean nothing in another; convert to a fixed-size dtype first"
        )


def _strides(shape: tuple[int, ...], itemsize: int, order: str) -> tuple[int, ...]:
    strides = [0] * len(shape)
    step = itemsize
    dims = range(len(shape)) if order == "F" else reversed(range(len(shape)))
    for i in dims:
        strides[i] = step
        step *= max(shape[i], 1)
    return tuple(strides)


def _over(seg: Segment, offset: int, shape: tuple[int, ...], strides: tuple[int, ...],
          dtype: np.dtype, readonly: bool = False, cls: type | None = None) -> SharedNDArray:
    """An array of ``cls`` over ``seg`` whose ``base`` is an anchor of the segment.

    numpy checks that the items stay inside the segment (ValueError otherwise).
    """
    # a ctypes array is a buffer (numpy's stubs declare the buffer protocol from Python 3.12 on only)
    arr = _new_array(cls or SharedNDArray, shape, dtype, seg.anchor(), offset, strides)  # type: ignore[arg-type]
    arr._ipcb_seg = seg
    arr._ipcb_off = offset  # the data pointer of an array never moves: pickling needs no lookup
    if readonly:  # as sent; like any read-only view of writable memory, it may be made writable
        arr.flags.writeable = False
    return arr


_new_array = np.ndarray.__new__  # (cls, shape, dtype, buffer, offset, strides): one call, no views


def _use_inline(nbytes: int, dtype: np.dtype, inline_below: int | None) -> bool:
    limit = INLINE_BELOW if inline_below is None else inline_below
    return nbytes < limit or dtype.itemsize == 0


Order = Literal["C", "F"]


def _new_shared(shape: tuple[int, ...], dtype: np.dtype, order: Order,
                segment: Segment | None = None) -> SharedNDArray:
    nbytes = math.prod(shape) * dtype.itemsize
    seg = segment if segment is not None else _segment.create(nbytes)
    return _over(seg, 0, shape, _strides(shape, dtype.itemsize, order), dtype)


def _layout(a: np.ndarray) -> Order:
    return "F" if a.flags.f_contiguous and not a.flags.c_contiguous else "C"


class SharedNDArray(np.ndarray):
    """numpy array in shared memory; pickles to a handle, views keep the segment alive.

    Ufunc results are plain ndarrays (they live in private memory); ``copy()`` gives an array
    in private memory that pickles by value.
    """

    _ipcb_seg: Segment | None = None
    _ipcb_off: int | None = None  # set on arrays made over a segment; views compute theirs

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_numpy_array(cls, a: ArrayLike, *, inline_below: int | None = None) -> SharedNDArray:
        """A shared copy of ``a`` (dtype and values exact; layout per the module docstring)."""
        src = np.asarray(a)
        _check_dtype(src.dtype)
        order = _layout(src)
        if _use_inline(src.nbytes, src.dtype, inline_below):
            return np.array(src, order=order, copy=True).view(cls)
        out = _new_shared(src.shape, src.dtype, order)
        np.copyto(out.view(np.ndarray), src, casting="no")
        return out if cls is SharedNDArray else out.view(cls)

    @classmethod
    def empty(cls, shape: int | tuple[int, ...], dtype: DTypeLike = float, order: Order = "C",
              *, inline_below: int | None = None) -> SharedNDArray:
        """An uninitialised shared array to fill in place (segments start zeroed)."""
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(n) for n in shape)
        dt = np.dtype(dtype)
        _check_dtype(dt)
        if order not in ("C", "F"):
            raise ValueError("order must be 'C' or 'F'")
        nbytes = math.prod(shape) * dt.itemsize
        if _use_inline(nbytes, dt, inline_below):
            return np.empty(shape, dt, order=order).view(cls)
        out = _new_shared(shape, dt, order)
        return out if cls is SharedNDArray else out.view(cls)

    def __array_finalize__(self, obj: Any) -> None:
        # Views inherit the segment (like np.memmap keeps its mmap); arrays that own their data
        # (copies, astype, ...) do not, so they neither pin the segment nor pickle as a handle.
        seg = getattr(obj, "_ipcb_seg", None)
        if seg is not None and self.base is not None:
            self._ipcb_seg = seg

    # ------------------------------------------------------------------ introspection
    @property
    def is_shared(self) -> bool:
        """True if this array lives in a segment this process holds (it pickles as a handle)."""
        seg = self._ipcb_seg
        return seg is not None and seg.held and self._offset() is not None

    @property
    def segment_name(self) -> str | None:
        """The segment's name in /dev/shm, or None for an array in private memory."""
        seg = self._ipcb_seg
        return seg.name if seg is not None else None

    def release(self) -> None:
        """Drop this process's reference to the segment now instead of at garbage collection.

        Arrays over it stay valid here until they are collected, but pickle by value.
        """
        if self._ipcb_seg is not None:
            self._ipcb_seg.release()

    def _offset(self) -> int | None:
        """Byte offset of our first element in the segment, None if not inside it."""
        seg = self._ipcb_seg
        if seg is None:
            return None
        if self._ipcb_off is not None:
            return self._ipcb_off
        if self.size == 0:
            return 0
        offset = self.__array_interface__["data"][0] - seg.data_addr
        return offset if 0 <= offset < max(seg.capacity, 1) else None

    # ------------------------------------------------------------------ pickling
    def _send_args(self, plain: bool | None = None) -> tuple | None:
        """Take an in-transit reference and return the handle (the arguments of ``_rebuild``);
        None, with nothing taken, if this array does not travel by handle.  ``plain``: whether
        the dtype travels as its string, if the caller knows already."""
        seg = self._ipcb_seg
        if seg is None:
            return None
        offset = self._ipcb_off
        if offset is None:
            offset = self._offset()
            if offset is None:
                return None
        generation = seg.try_send_ref()
        if generation is None:
            return None
        dt = self.dtype
        if plain is None:
            plain = _plain(dt)
        return (seg.name, generation, offset, self.shape, self.strides, dt.str if plain else dt,
                not self.flags.writeable, this_node())

    def __reduce_ex__(self, protocol: SupportsIndex) -> tuple:
        args = self._send_args()
        if args is not None:
            sent, seg = _sent.get(), self._ipcb_seg
            if sent is not None and seg is not None:  # args: it has a segment
                sent.append(seg)
            cls = type(self)
            return (_rebuild, args if cls is SharedNDArray else args + (cls,))
        return (_by_value, (self.view(np.ndarray), type(self)))

    def __reduce__(self) -> tuple:
        return self.__reduce_ex__(2)

    # ------------------------------------------------------------------ numpy protocol
    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        """Compute on plain views: results are plain ndarrays; ``out=`` arrays are returned as given."""
        args = tuple(x.view(np.ndarray) if isinstance(x, SharedNDArray) else x for x in inputs)
        out = kwargs.get("out")
        if out is not None:
            plain = tuple(o.view(np.ndarray) if isinstance(o, SharedNDArray) else o for o in out)
            kwargs["out"] = plain
        result = getattr(ufunc, method)(*args, **kwargs)
        if out is None:
            return result

        def back(r: Any) -> Any:
            for p, o in zip(plain, out):
                if r is p:
                    return o
            return r

        return tuple(back(r) for r in result) if isinstance(result, tuple) else back(result)

    def __array_wrap__(self, obj: np.ndarray, context: Any = None, return_scalar: bool = False) -> Any:
        if return_scalar:
            return obj[()]
        return obj if type(obj) is np.ndarray else obj.view(np.ndarray)


class OtherNodeError(IpcbenchError, RuntimeError):
    """A handle was received on another node than the one whose memory holds the array."""


def _rebuild(name: str, generation: int, offset: int, shape: tuple[int, ...], strides: tuple[int, ...],
             dtype: np.dtype | str, readonly: bool, node: str | None = None,
             cls: type = SharedNDArray) -> SharedNDArray:
    """Unpickle a handle: map the segment (adopting the in-transit reference) and view it.

    A mapping this process made before is reused (see :mod:`.segment`); a handle whose
    generation is not the segment's raises :class:`~.segment.SegmentGone`. A handle is refused
    on another node (its segment is in the sender node's memory): the data must travel instead,
    e.g. ``np.asarray(a)`` through a backend, or a store backend, which keeps one copy per node.
    """
    here = this_node()
    if node is not None and node != here:
        try:  # give back the in-transit reference where the segment is reachable (simulated nodes)
            _segment.give_back(name, generation)
        except OSError:
            pass
        raise OtherNodeError(
            f"a SharedNDArray handle ({name}, shape {tuple(shape)}) made on node {node} was received on "
            f"node {here}: shared arrays live in one node's memory; send the data instead "
            "(np.asarray(a) through a backend, or a store backend, which keeps one copy per node)"
        )
    seg = _segment.attach(name, True, generation)
    return _over(seg, offset, shape, strides, np.dtype(dtype), readonly, cls)  # tuples as pickled


def _plain(dt: np.dtype) -> bool:
    """A dtype that travels as its string (cheaper to send and rebuild than the object)."""
    return dt.fields is None and dt.subdtype is None and dt.metadata is None and dt.kind != "V"


#: First byte of a bare handle on :class:`~.queue.Queue` (a pickle of protocol 2+ starts with 0x80).
WIRE_MARK = 0x48
_WIRE_PREFIX = bytes((WIRE_MARK,))


def to_wire(arr: Any) -> tuple[bytes, Segment] | None:
    """A bare handle of ``arr`` for our Queue, with its in-transit reference taken: ``marshal``
    of the handle's fields, no pickler, no global to look up on either side.  None (nothing
    taken) when ``arr`` must be pickled: not exactly a SharedNDArray, a structured dtype, or
    an array that travels by value.  The caller gives the reference back if the send fails."""
    if type(arr) is not SharedNDArray or not _plain(arr.dtype):
        return None
    args, seg = arr._send_args(True), arr._ipcb_seg
    if args is None or seg is None:  # (a handle always has its segment)
        return None
    return _WIRE_PREFIX + marshal.dumps(args, 4), seg


#: Bare handles already parsed here, by their bytes (the handle, dtype object, node checked).
#: The same array sent again -- a pool's buffers, a premade array -- has the same bytes, so a
#: receiver skips marshal, the dtype lookup and the node check, a third of a cold receive.
#: Bounded: cleared when full.
_wire_memo: dict[bytes, tuple] = {}
WIRE_MEMO_MAX = 256


def from_wire(data: bytes) -> SharedNDArray:
    """The array of a bare handle made by :func:`to_wire` (maps it, adopts the reference)."""
    if type(data) is not bytes:
        data = bytes(data)
    hit = _wire_memo.get(data)
    if hit is None or hit[7] != _nodes._node:  # the node changes only when a test simulates nodes
        args = marshal.loads(memoryview(data)[1:])
        if len(args) != 8 or args[7] != this_node():
            return _rebuild(*args)  # refuses it, naming the problem
        hit = args[:5] + (np.dtype(args[5]),) + args[6:]
        if len(_wire_memo) >= WIRE_MEMO_MAX:
            _wire_memo.clear()
        _wire_memo[data] = hit
    name, generation, offset, shape, strides, dtype, readonly, _node = hit
    return _over(_segment.attach(name, True, generation), offset, shape, strides, dtype, readonly)


def _by_value(a: np.ndarray, cls: type = SharedNDArray) -> SharedNDArray:
    return cast(SharedNDArray, a.view(cls))


def from_segment(seg: Segment, shape: tuple[int, ...], dtype: np.dtype, order: Order) -> SharedNDArray:
    """A fresh array over the start of ``seg`` (used by the pool)."""
    return _new_shared(shape, dtype, order, segment=seg)
