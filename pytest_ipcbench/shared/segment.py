"""Shared-memory segments: creation, attach, the cross-process reference count, crash safety.

One cohesive thing: the segment protocol (header, reference count, generation, reclaim), whose
parts share one per-process table, one lock order and one header layout.

A segment is the plain POSIX file ``/dev/shm/<name>`` (``name`` from
:func:`pytest_ipcbench.core.names.resource_name`, so ``names.find_ours`` and ``ipcbench clean`` see it),
opened with ``os.open(O_CREAT | O_EXCL, 0o600)`` and mapped with ``mmap(2)``.  No
``multiprocessing.shared_memory``: CPython's resource tracker (before 3.13) would unlink a segment
it did not create when an attaching process exits, behind our reference count.

Layout: a 4096-byte header (so the data is page aligned), then the data.  Header words::

    0  u32 magic       8  u32 refs                  24  u64 capacity (data bytes)
    4  u16 version    16  u64 transit word:          32  i32 creator pid
    6  u16 counter          high 32 bits = send seq  36  i32 creator process group
       back end             low 32 bits  = in transit 40  u64 generation

Generation: random at creation, +1 each time a pool reuses the segment for new data.  A handle
carries the generation it was sent at; the receiver checks it against the header it maps, so a
handle can never show data of another incarnation of the name (a file unlinked and recreated
under the same name starts at an unrelated random value) or of a later reuse.

Reference count (``refs``).  One reference per *holding process* (one :class:`Segment` object
per name per process, shared by all arrays and views of it there) plus one per *handle in
transit*.  Pickling an array (``__reduce__``, on the caller's thread) adds an in-transit
reference: ``transit += 1, seq += 1`` (one atomic add on the transit word) then ``refs += 1``.
The receiver adopts it on unpickle: it takes its holder lock, then ``transit -= 1`` and keeps the
``refs`` unit as its process reference (or drops it if it already holds the segment).  A process
releases its reference when its last array/view is garbage collected (or at exit):
``old = refs.fetch_add(-1)``, and **only the process that saw old == 1 unlinks** -- the decision
is taken on the result of the atomic decrement, never on a later re-read.

Crash safety.  The counter alone cannot tell a dead holder from a live one, so every holding
process also holds an OFD read lock on byte ``LOCK_BASE + pid`` of the segment file.  The lock
belongs to the open file description, which the mapping keeps alive after we close the fd: it is
released by ``munmap`` or by the kernel when the process dies (SIGKILL included).  Every
legitimate reference is therefore either a live lock or an in-transit handle (a holder takes its
lock *before* it counts and drops it *after* it uncounted; a receiver locks before it decrements
``transit``).  So a segment with no lock holders and ``transit == 0`` -- read twice around the
lock probe, with an unchanged send seq -- is orphaned, whatever ``refs`` says.  That test runs:

* when a process drops its reference and the count stays above zero (survivors of a killed
  holder reclaim at their last drop);
* in :func:`reclaim_orphans` (``ipcbench clean``, pool close), which can also treat handles
  that were pickled but never unpickled as dead (``in_transit``; by default when their
  creator is dead);
* in :meth:`Segment.probe`, which the pool uses: it reuses a segment only when no other process
  holds a lock, nothing is in transit and no local array exists -- kernel-owned liveness, not a
  counter alone -- and then resets ``refs`` to its own single reference.

Fork: at fork the child takes its own reference and lock for every inherited segment that an
inherited array can reach (so a pool in the parent will not reuse memory the child can still
see) and unmaps the others.  Processes ending through ``multiprocessing`` or ``atexit`` release
their references without unmapping (arrays may still be reachable during shutdown); a process
that ends with ``os._exit`` or a signal leaves its count, which the lock test above discounts.

Receiver's mapping cache (:mod:`._cache`): a received segment keeps its descriptor (up to
:data:`FD_BUDGET`); when its last local array dies the process uncounts, unlocks and parks the
mapping there, and the next handle of that name locks the kept descriptor again, checks the
generation and adopts the in-transit reference (docs/shared-arrays.md). Inherited (fork)
mappings are never cached: they carry the parent's lock.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import errno
import multiprocessing.util
import os
import stat as stat_mod
import struct
import threading
import time
import weakref

# what WeakValueDictionary uses: atomic under the GIL (private: typeshed does not list it)
from _weakref import _remove_dead_weakref  # type: ignore[attr-defined]
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..core import names as _names
from ..core.errors import IpcbenchError
from ..core.units import format_bytes
from . import _atomic, _cache, _libc

HEADER_SIZE = 4096
KIND = "nd"
MAGIC = 0x42435049  # b"IPCB" little-endian
VERSION = 2  # 2: generation word, handles carry it

#: File descriptors this process keeps for received segments (to cache their mappings).
FD_BUDGET = 256

_HDR = struct.Struct("=IHHIIQQiiQ")
_OFF_REFS = 8
_OFF_TRANSIT = 16
_OFF_GEN = 40
_TRANSIT_SEND = (1 << 32) | 1  # seq += 1 and in-transit += 1 in one atomic add
_U64 = ctypes.c_uint64
_LOW32 = (1 << 32) - 1
_HOT_ADDS = ((_OFF_TRANSIT, _TRANSIT_SEND, 8), (_OFF_REFS, 1, 4), (_OFF_TRANSIT, -1, 8), (_OFF_REFS, -1, 4))


class SharedMemoryFull(IpcbenchError, OSError):
    """/dev/shm cannot hold a new segment (raised at allocation, instead of a later SIGBUS)."""


class SegmentGone(IpcbenchError, FileNotFoundError):
    """A handle names a segment that no longer exists (released or reclaimed before receipt)."""


def shm_path(name: str) -> Path:
    """Where segment ``name`` lives (``/dev/shm/<name>``)."""
    return _names.SHM_DIR / name


_SHM_DIR = str(_names.SHM_DIR)


def _path(name: str) -> str:
    return f"{_SHM_DIR}/{name}"  # a plain string: pathlib costs more than the syscall


def _full_error(size: int, cause: OSError | None = None) -> SharedMemoryFull:
    st = os.statvfs(_names.SHM_DIR)
    free, total = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
    return SharedMemoryFull(
        errno.ENOSPC,
        f"cannot reserve {format_bytes(size)} in {_names.SHM_DIR} for a shared array: "
        f"{format_bytes(free)} free of {format_bytes(total)}"
        + (f" ({cause.strerror})" if cause is not None and cause.strerror else ""),
    )


#: This process's id, kept here because the handle path asks for it several times per handle
#: (a system call each); the fork hook below sets it in a child before anything else runs.
_pid = os.getpid()

_flip_lock = threading.RLock()
_fds = 0  # descriptors kept by this process's _State objects (a soft bound: FD_BUDGET)


class _State:
    """What the finalizer needs to release one mapping; never references the Segment.

    Also the entry the mapping cache keeps once the Segment is gone (``cacheable``: a received
    segment with its descriptor kept, mapped by this process itself, not inherited at fork).
    """

    __slots__ = ("name", "addr", "size", "capacity", "mode", "fd", "pid", "held", "mapped",
                 "cacheable", "probe_due", "idle_since", "buftype", "gen", "_hot")

    def __init__(self, name: str, addr: int, size: int, capacity: int, mode: int, fd: int | None,
                 cacheable: bool = False) -> None:
        global _fds
        self.name, self.addr, self.size, self.capacity, self.mode, self.fd = name, addr, size, capacity, mode, fd
        if fd is not None:
            _fds += 1
        self.pid = _pid
        self.held = True
        self.mapped = True
        self.cacheable = cacheable and fd is not None
        self.probe_due = False  # a drop left others counted and nobody checked they live
        self.idle_since = 0.0
        self.buftype: type[ctypes.Array] | None = None  # ctypes char[capacity], made at first use
        self.gen = _U64.from_address(addr + _OFF_GEN)  # made once: every handle reads it
        # The counts every handle takes, bound once (libatomic only): send, send, adopt, uncount.
        hot = [_atomic.bind(mode, addr + off, delta, width) for off, delta, width in _HOT_ADDS]
        bound = [f for f in hot if f is not None]
        self._hot = tuple(bound) if len(bound) == len(hot) else None

    def add(self, offset: int, delta: int, width: int) -> int:
        return _atomic.fetch_add(self.mode, self.addr + offset, delta, width, self.fd)

    # The counts of the handle path (the same adds as ``add``, with arguments bound once).
    def count_send(self) -> None:
        """A handle leaves: in transit += 1 (and its send seq), then refs += 1."""
        if self._hot is None:
            self.add(_OFF_TRANSIT, _TRANSIT_SEND, 8)
            self.add(_OFF_REFS, 1, 4)
        else:
            self._hot[0]()
            self._hot[1]()

    def adopt(self) -> None:
        """A handle arrived and its reference is now ours: in transit -= 1."""
        if self._hot is None:
            self.add(_OFF_TRANSIT, -1, 8)
        else:
            self._hot[2]()

    def uncount(self) -> int:
        """refs -= 1; the old value (only the process that saw 1 unlinks)."""
        return self.add(_OFF_REFS, -1, 4) if self._hot is None else self._hot[3]()

    def load(self, offset: int, width: int) -> int:
        return _atomic.load(self.mode, self.addr + offset, width)

    def generation(self) -> int:
        return self.gen.value

    def drop_hold(self) -> None:
        """Give back this process's reference; unlink if it was the last one (or all others died)."""
        with _flip_lock:  # explicit release() and a finalizer may race on another thread
            if not self.held or self.pid != _pid:
                self.held = False
                return
            self.held = False
        old = self.uncount()
        if old <= 1:
            if old == 0:  # pragma: no cover - never expected; keep the word sane
                self.add(_OFF_REFS, 1, 4)
            _unlink(self.name)
        elif _orphaned(self.name, exclude_pid=self.pid, state=self) is True:
            _unlink(self.name)

    def release(self, unmap: bool = True) -> None:
        self.drop_hold()
        if unmap:
            self.unmap()

    def unmap(self) -> None:
        """Unmap and close our descriptor: releases our holder lock (the OFD goes away)."""
        if self.mapped:
            self.mapped = False
            _libc.munmap(self.addr, self.size)
        self.close_fd()

    def close_fd(self) -> None:
        global _fds
        fd, self.fd = self.fd, None
        if fd is not None:
            _fds -= 1
            os.close(fd)

    def retire(self) -> None:
        """Finalizer: the last local array died.  Uncount, then unlock and park the mapping in
        the cache (received segments), or unmap (everything else)."""
        if not (self.cacheable and self.mapped and _map_cache.enabled and self.pid == _pid):
            self.release()
            return
        with _flip_lock:
            held, self.held = self.held, False
        if not held:  # released explicitly before: nothing counted, just unmap
            self.unmap()
            return
        old = self.uncount()
        if old <= 1:
            if old == 0:  # pragma: no cover - never expected; keep the word sane
                self.add(_OFF_REFS, 1, 4)
            _unlink(self.name)
            self.unmap()
            return
        assert self.fd is not None
        try:
            _libc.drop_lock(self.fd, self.pid)  # after we uncounted, as every holder does
        except OSError:  # pragma: no cover - cannot unlock: let the kernel do it
            self.unmap()
            return
        self.probe_due = True  # the dead-holder probe runs in the cache, off the receive path
        self.idle_since = time.monotonic()
        _map_cache.put(self.name, self)


def _unlink(name: str) -> None:
    try:
        os.unlink(_path(name))
    except FileNotFoundError:
        pass


def _probe_fd(st: _State, in_transit: bool = False) -> bool | None:
    """:func:`_orphaned` through our kept descriptor: one fstat and one ``F_OFD_GETLK``.

    Locks of our own open file description never conflict with a probe made through it, so
    our own holder lock (if any) is not counted without excluding our pid.
    """
    assert st.fd is not None
    if os.fstat(st.fd).st_nlink == 0:
        return None
    word = st.addr + _OFF_TRANSIT
    w1 = _atomic.load(st.mode, word, 8)
    holders = _libc.any_holder(st.fd)
    w2 = _atomic.load(st.mode, word, 8)
    if holders or w1 != w2:
        return False
    return in_transit or (w1 & _LOW32) == 0


def _orphaned(name: str, exclude_pid: int | None = None, in_transit: bool = False,
              state: _State | None = None) -> bool | None:
    """True if nobody (but ``exclude_pid``) holds ``name`` and no handle is in transit.

    ``None`` when the file is gone or is not a complete segment of ours.  With ``in_transit``,
    handles pickled but never unpickled do not keep it alive.  ``state``: our own mapping of it,
    read instead of mapping the header again (and its descriptor, if kept, instead of opening).
    """
    if state is not None and state.fd is not None and state.mapped:
        return _probe_fd(state, in_transit)
    try:
        fd = os.open(_path(name), os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    addr = None
    try:
        if state is not None:
            mode, word = state.mode, state.addr + _OFF_TRANSIT
        else:
            header = os.pread(fd, _HDR.size, 0)
            if len(header) < _HDR.size or os.fstat(fd).st_size < HEADER_SIZE:
                return None
            magic, version, mode, *_ = _HDR.unpack(header)
            if magic != MAGIC or version != VERSION or not _atomic.available(mode):
                return None
            addr = _libc.mmap(fd, HEADER_SIZE)
            word = addr + _OFF_TRANSIT
        w1 = _atomic.load(mode, word, 8)
        holders = _libc.any_holder(fd, exclude_pid)
        w2 = _atomic.load(mode, word, 8)
        if holders or w1 != w2:
            return False
        return in_transit or (w1 & _LOW32) == 0
    finally:
        if addr is not None:
            _libc.munmap(addr, HEADER_SIZE)
        os.close(fd)


_dying: dict[weakref.ref[Segment], _State] = {}


def _segment_gone(ref: weakref.ref[Segment]) -> None:
    # After the exit hook (or once shutdown cleared this module: None), nothing: the hook
    # released our references already, and arrays may be reachable until the very end.
    if _exiting is not False:
        return
    state = _dying.pop(ref, None)
    if state is not None:
        _remove_dead_weakref(_registry, state.name)  # only if no live Segment took the name
        state.retire()


class _AnchorRef(weakref.ref):
    """A weak reference to an anchor, hashed by identity (ctypes arrays are unhashable)."""

    __slots__ = ()
    __hash__ = object.__hash__
    __eq__ = object.__eq__


class Segment:
    """This process's mapping of one segment and its single reference to it.

    Shared by every array over the segment in this process (see :func:`attach`); released when
    the last of them is garbage collected.
    """

    __slots__ = ("_state", "_anchors", "capacity", "__weakref__")

    def __init__(self, state: _State) -> None:
        self._state = state
        self.capacity = state.capacity
        # weak references to the live anchors, each removing itself when its anchor dies (a
        # plain set: a WeakSet costs more to make than the rest of a receive)
        self._anchors: set[_AnchorRef] = set()
        # Released when every array and view over it is gone (each holds an anchor that holds
        # us), by a weakref callback: cheaper than weakref.finalize (this runs once per received
        # handle), and unlike __del__ it runs after every weak reference to us is cleared, so
        # attach() can never pick a dying Segment out of the registry.  The same reference is
        # our registry entry (a WeakValueDictionary would make a second one).
        ref = weakref.ref(self, _segment_gone)
        with _registry_lock:
            _registry[state.name] = ref
        _dying[ref] = state
        if _hook_pid != state.pid:
            _ensure_exit_hook()

    @property
    def name(self) -> str:
        return self._state.name

    @property
    def data_addr(self) -> int:
        return self._state.addr + HEADER_SIZE

    @property
    def held(self) -> bool:
        return self._state.held and self._state.pid == _pid

    def refs(self) -> int:
        return self._state.load(_OFF_REFS, 4)

    def in_transit(self) -> int:
        return self._state.load(_OFF_TRANSIT, 8) & _LOW32

    @property
    def generation(self) -> int:
        """Random at creation, +1 at each pool reuse; handles carry it (see the module doc)."""
        return self._state.generation()

    def anchor(self) -> ctypes.Array:
        """A new buffer over the segment's data (a ctypes ``char`` array of its capacity) that
        keeps this Segment alive, for numpy to build an array on.

        numpy keeps a buffer as the array's ``base``, and every view of that array ends at it
        (numpy stops collapsing a base chain at a subclass), so the mapping outlives every array
        that can touch it, and ``_anchors`` (weak) tells whether any local array exists.  numpy
        also checks that shape, strides and offset stay inside the buffer.
        """
        st = self._state
        buftype = st.buftype
        if buftype is None:  # one type per mapping: making a ctypes type costs more than a handle
            buftype = st.buftype = ctypes.c_char * st.capacity
        a: Any = buftype.from_address(st.addr + HEADER_SIZE)
        a.segment = self  # the anchor keeps its segment alive
        self._anchors.add(_AnchorRef(a, self._anchors.discard))
        return a

    def try_send_ref(self) -> int | None:
        """Take the in-transit reference for one pickled handle (caller's thread, before sending)
        and return the generation the handle carries; None (nothing taken) if this process does
        not hold the segment."""
        st = self._state
        if not st.held or st.pid != _pid:
            return None
        st.count_send()
        return st.gen.value

    def unsend_ref(self) -> None:
        """Give back an in-transit reference whose handle was never sent (failed put)."""
        self._state.add(_OFF_REFS, -1, 4)  # we still hold ours: cannot reach zero
        self._state.add(_OFF_TRANSIT, -1, 8)

    def release(self) -> None:
        """Drop this process's reference now; the mapping stays until the last local array dies.

        Afterwards arrays over it still work locally but travel by value, not by handle.
        """
        with _registry_lock:
            if _registered(self.name) is self:
                del _registry[self.name]
        self._state.drop_hold()

    def probe(self) -> str:
        """``"free"`` if no local array, no other process and no in-transit handle uses it;
        ``"gone"`` if its file was removed behind our back; ``"busy"`` otherwise."""
        if len(self._anchors) or not self.held or self.in_transit():  # cheap checks first
            return "busy"
        verdict = _orphaned(self.name, exclude_pid=self._state.pid, state=self._state)
        return "gone" if verdict is None else "free" if verdict else "busy"

    def claim_for_reuse(self) -> bool:
        """If free (see :meth:`probe`), reset the count to our one reference, bump the
        generation and return True.

        Counts left by killed holders are dropped here: their locks are gone, so the kernel
        says they no longer hold it.  Nobody can add a reference meanwhile: that needs a local
        array, a live holder elsewhere or a handle in transit, all excluded.
        """
        if self.probe() != "free":
            return False
        extra = self.refs() - 1
        if extra:
            self._state.add(_OFF_REFS, -extra, 4)
        self._state.add(_OFF_GEN, 1, 8)  # new data: handles of the old contents no longer match
        return True


#: name -> weak reference to this process's Segment of it (the one whose callback retires it).
_registry: dict[str, weakref.ref[Segment]] = {}
_registry_lock = threading.RLock()


def _registered(name: str) -> Segment | None:
    ref = _registry.get(name)
    return None if ref is None else ref()


def _segments() -> list[Segment]:
    """Every live Segment of this process."""
    return [seg for seg in (ref() for ref in list(_registry.values())) if seg is not None]


def _cache_check(st: _State, now: float) -> bool:
    """For the cache: True to drop idle entry ``st`` (unlinked, orphaned, or idle too long).

    Runs the deferred dead-holder probe: if nobody else holds it and nothing is in transit,
    the holders still counted are dead, and we unlink it as their last drop would have.
    """
    try:
        assert st.fd is not None  # only a mapping with its descriptor is cached
        if os.fstat(st.fd).st_nlink == 0:
            return True  # unlinked: unmap now, our mapping alone keeps its pages allocated
        if st.probe_due:
            st.probe_due = False
            if _probe_fd(st) is True:
                _unlink(st.name)
                return True
    except OSError:  # pragma: no cover - a descriptor we own: not expected
        return True
    return now - st.idle_since > _cache.IDLE_TIMEOUT


_map_cache = _cache.MappingCache(close=_State.unmap, check=_cache_check)


def cache_info() -> dict[str, int]:
    """The receiver's mapping cache: ``entries`` (idle mappings), ``hits``, ``misses``, ``fds``."""
    return {"entries": len(_map_cache), "hits": _map_cache.hits, "misses": _map_cache.misses, "fds": _fds}


def clear_cache() -> int:
    """Unmap every idle cached mapping now (their deferred probes run first); how many."""
    return _map_cache.clear()


def _check_free(size: int) -> None:
    st = os.statvfs(_names.SHM_DIR)
    if size > st.f_bavail * st.f_frsize:
        raise _full_error(size)


def create(nbytes: int, keep_fd: bool = False) -> Segment:
    """A new segment with ``nbytes`` of data, pages reserved now (``posix_fallocate``).

    ``keep_fd``: keep the descriptor open (the pool does, so its liveness probes need no open).
    """
    if nbytes < 0:
        raise ValueError("negative size")
    size = HEADER_SIZE + nbytes
    _check_free(size)
    name = _names.resource_name(KIND)
    path = _path(name)
    mode = _atomic.DEFAULT_MODE
    pid = os.getpid()
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    addr = None
    try:
        _libc.hold_lock(fd, pid)  # before anything else: a locked file is never an orphan
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.ENOMEM):
                raise _full_error(size, exc) from None
            raise
        addr = _libc.mmap(fd, size, populate=True)
        hdr = (ctypes.c_char * _HDR.size).from_address(addr)
        generation = int.from_bytes(os.urandom(8), "little") >> 1  # unrelated to a former file
        _HDR.pack_into(hdr, 0, 0, VERSION, mode, 1, 0, 0, nbytes, pid, os.getpgid(0), generation)
        ctypes.c_uint32.from_address(addr).value = MAGIC  # written last: header complete
    except BaseException:
        _unlink(name)
        if addr is not None:
            _libc.munmap(addr, size)
        os.close(fd)
        raise
    keep = keep_fd or mode == _atomic.FCNTL
    if not keep:
        os.close(fd)
    return Segment(_State(name, addr, size, nbytes, mode, fd if keep else None))


def attach(name: str, adopt: bool = True, generation: int | None = None) -> Segment:
    """This process's Segment for ``name``, adopting one in-transit reference if ``adopt``.

    ``generation``: the handle's; a segment at another generation raises :class:`SegmentGone`
    (the handle is stale) without adopting anything.  Reuses a cached idle mapping if any.
    """
    with _registry_lock:
        ref = _registry.get(name)
        seg = None if ref is None else ref()
        if seg is not None and seg.held:
            _check_generation(seg._state, generation)
            if adopt:  # we already hold one: give the in-transit reference back
                seg.unsend_ref()
            return seg
        st = _map_cache.take(name)
        seg = _revive(st, generation) if st is not None else None
        if seg is None:
            _map_cache.misses += 1
            seg = _map_existing(name, generation)
        else:
            _map_cache.hits += 1
        if adopt:
            seg._state.adopt()  # after our lock is in place
        return seg


def give_back(name: str, generation: int | None = None) -> None:
    """Give back the in-transit reference of a handle that is refused instead of received.

    A process that holds the segment already just uncounts the handle; one that does not maps
    it to count right, then drops the reference it adopted (never a reference it held before:
    its arrays over the segment stay shared).
    """
    with _registry_lock:
        seg = _registered(name)
        held = seg is not None and seg.held
        seg = attach(name, True, generation)
        if not held:
            seg.release()


def _stale(name: str, handle: int, now: int) -> SegmentGone:
    return SegmentGone(
        errno.ESTALE,
        f"stale handle: shared array segment {name} is at generation {now}, the handle was sent at "
        f"{handle} (the segment was reused or recreated after this handle was written off)",
    )


def _check_generation(st: _State, generation: int | None) -> None:
    if generation is not None:
        now = st.generation()
        if now != generation:
            raise _stale(st.name, generation, now)


def _revive(st: _State, generation: int | None) -> Segment | None:
    """A Segment over the cached idle mapping ``st``, or None if its file was unlinked.

    Lock first (as a fresh attach does), then check that the handle's generation is the one
    our mapping shows; only then count (the caller adopts).  The generation identifies the
    file too (random at creation), so a matching one needs no ``fstat``: a name unlinked and
    recreated shows another generation, and only then do we look at ``st_nlink`` to tell a
    stale handle (the pool reused the file) from a new file (mapped afresh by the caller).
    """
    assert st.fd is not None
    pid = _pid
    try:
        _libc.hold_lock(st.fd, pid)
    except OSError:  # pragma: no cover - a descriptor we own: not expected
        st.unmap()
        return None
    if generation is None or st.gen.value != generation:
        try:
            linked = os.fstat(st.fd).st_nlink > 0
        except OSError:  # pragma: no cover - a descriptor we own: not expected
            linked = False
        if not linked:
            st.unmap()  # the lock goes with the descriptor and the mapping
            return None
        if generation is not None:
            now = st.generation()
            _libc.drop_lock(st.fd, pid)
            _map_cache.put(st.name, st)  # still good for current handles
            raise _stale(st.name, generation, now)
    st.held = True
    st.probe_due = False  # we count again: our next drop decides anew
    return Segment(st)


def _map_existing(name: str, generation: int | None = None) -> Segment:
    path = _path(name)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        raise SegmentGone(
            errno.ENOENT,
            f"shared array segment {path} no longer exists: it was released or reclaimed before "
            "this handle was received (was the sender's pool closed, or `ipcbench clean` run, "
            "while it was in flight?)",
        ) from None
    try:
        _libc.hold_lock(fd, os.getpid())
        size = os.fstat(fd).st_size
        header = os.pread(fd, _HDR.size, 0)
        magic, version, mode, _refs, _pad, _transit, capacity, _creator, _pgid, gen = _HDR.unpack(header)
        if size < HEADER_SIZE or magic != MAGIC or version != VERSION:
            raise ValueError(f"{path} is not a complete shared array segment")
        if not _atomic.available(mode):
            raise RuntimeError(f"{path} uses a counter back end unavailable here (libatomic missing)")
        if generation is not None and gen != generation:
            raise _stale(name, generation, gen)
        addr = _libc.mmap(fd, size)
    except BaseException:
        os.close(fd)
        raise
    # Keep the descriptor (to unlock later without unmapping, i.e. to cache the mapping) while
    # within the budget; the fcntl counter needs it anyway.  Otherwise the mapping alone keeps
    # the open file description (and our holder lock) alive.
    keep = mode == _atomic.FCNTL or (_map_cache.enabled and _fds < FD_BUDGET)
    if not keep:
        os.close(fd)
    return Segment(_State(name, addr, size, capacity, mode, fd if keep else None, cacheable=True))


def reclaim_orphans(*, in_transit: bool | None = None, names: Iterable[str] | None = None,
                    dry_run: bool = False, judge: Callable[[str, int], bool] | None = None,
                    skipped: list[tuple[str, str]] | None = None) -> list[str]:
    """Unlink our segments that no live process holds; return their names.

    A holder is a process with the segment mapped (its OFD lock is alive), so segments of
    SIGKILLed holders qualify once every survivor dropped theirs; so do segments whose last
    holder died between its final decrement and the unlink.  Segments kept alive only by
    handles pickled but never unpickled (in transit) are reclaimed when ``in_transit`` is True
    (nothing can be in flight any more: pool close, cleaning after a run), never when False,
    and by default (None) only if their creator process is dead -- the same rule as
    ``ipcbench clean`` for other resources, never one a live process maps.  Incomplete
    files (creator died before writing the header) go when their creator is dead.  Safe to run
    while other sessions work.  ``names`` restricts the scan.

    ``dry_run`` only lists them.  ``judge(name, owner_pid)`` says whether the creator counts as
    dead (default: its pid is not running here).  Entries that are not regular files (a FIFO
    named like a segment) or that cannot be opened are left alone and, with ``skipped``, added
    to it as ``(name, reason)``.
    """
    if names is None:
        try:
            candidates = [p.name for p in _names.SHM_DIR.iterdir()]
        except OSError:
            return []
    else:
        candidates = list(names)
    dead = judge or (lambda _name, pid: not _names.pid_alive(pid))
    removed = []
    for name in candidates:
        owner = _names.owner_pid(name)
        if owner is None or not name.endswith(f"-{KIND}"):
            continue
        try:
            st = os.lstat(_path(name))
            if not stat_mod.S_ISREG(st.st_mode):
                raise _Odd("not a regular file")
            transit_ok = in_transit if in_transit is not None else dead(name, owner)
            verdict = _orphaned(name, in_transit=transit_ok)
            if verdict is None:
                verdict = dead(name, owner) and _incomplete_unheld(name)
        except FileNotFoundError:
            continue
        except (OSError, ValueError, _Odd) as exc:
            if skipped is not None:
                skipped.append((name, getattr(exc, "strerror", None) or str(exc)))
            continue
        if verdict:
            if not dry_run:
                _unlink(name)
            removed.append(name)
            idle = _map_cache.take(name)
            if idle is not None:  # our own idle mapping would keep its pages allocated
                idle.unmap()
    return removed


class _Odd(Exception):
    pass


def _incomplete_unheld(name: str) -> bool:
    try:
        fd = os.open(_path(name), os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return False
    try:
        return not _libc.any_holder(fd)
    finally:
        os.close(fd)


def creator_pgid(name: str) -> int | None:
    """The process group recorded by the creator of segment ``name`` (None if unreadable)."""
    try:
        with open(_path(name), "rb") as f:
            header = f.read(_HDR.size)
    except OSError:
        return None
    if len(header) < _HDR.size:
        return None
    fields = _HDR.unpack(header)
    return fields[8] if fields[0] == MAGIC else None


# ----------------------------------------------------------------------------- process events
_exiting = False


def _release_all() -> None:
    """Exit hook: give back every reference this process holds, keep the mappings."""
    global _exiting
    _exiting = True
    for seg in _segments():
        seg._state.release(unmap=False)
    _map_cache.stop()  # idle mappings: their deferred probes run, then they are unmapped


_hook_pid: int | None = None


def _ensure_exit_hook() -> None:
    """Run :func:`_release_all` at exit, including multiprocessing children (they os._exit)."""
    global _hook_pid
    if _hook_pid == os.getpid():
        return
    _hook_pid = os.getpid()
    multiprocessing.util.Finalize(None, _release_all, exitpriority=-1)


atexit.register(_release_all)


class _AfterFork:
    """multiprocessing clears its finalizers in a child; this re-arms ours after that."""

    def __call__(self, _obj: object) -> None:
        global _hook_pid
        _hook_pid = None
        if len(_registry):
            _ensure_exit_hook()


_after_fork_marker = _AfterFork()
multiprocessing.util.register_after_fork(_after_fork_marker, _after_fork_marker)


def _rehold_in_child() -> None:
    """After fork: hold every inherited segment some inherited array can reach; unmap the rest.

    A segment with live arrays gets the child's own reference and lock (a pool in the parent
    must not reuse memory the child can still see).  One without (e.g. kept free by a pool)
    is unmapped in the child at once, so the child neither pins it nor keeps the parent's lock.
    """
    global _fds, _pid
    pid = _pid = os.getpid()
    for seg in _segments():
        st = seg._state
        if st.pid == pid:
            continue
        was_held, st.held, st.pid = st.held, False, pid
        st.cacheable = False  # the inherited mapping carries the parent's lock: never park it
        st.close_fd()
        if not was_held or not len(seg._anchors):
            with contextlib.suppress(KeyError):
                del _registry[st.name]
            if st.mapped and not len(seg._anchors):
                st.mapped = False
                _libc.munmap(st.addr, st.size)
            continue
        try:
            fd = os.open(_path(st.name), os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            _libc.hold_lock(fd, pid)
            old = _atomic.fetch_add(st.mode, st.addr + _OFF_REFS, 1, 4, fd)
            if old == 0:  # the parent dropped the last reference meanwhile: do not revive
                _atomic.fetch_add(st.mode, st.addr + _OFF_REFS, -1, 4, fd)
                os.close(fd)
                continue
        except OSError:
            os.close(fd)
            continue
        st.fd = fd  # the lock lives on this new open file description: keep it
        _fds += 1
        st.held = True
    global _hook_pid
    _hook_pid = None
    if len(_registry):
        _ensure_exit_hook()


os.register_at_fork(after_in_child=_rehold_in_child)
