"""``shm``: a store in POSIX shared memory (files in /dev/shm, mapped by every rank).

One cohesive thing: one backend, its segment layout, its writer and its readers (a seqlock).

Layout: a one-page **control segment** that never moves, and a **data segment** that the writer
replaces by a bigger one when a payload does not fit.

The control page holds a sequence number ``seq`` (the last value published), ``wseq`` (the last
value the writer *started* to write), the state (a value, or the writer's error message), the
length of the value and the name and generation of the current data segment; at its end a
layout word (bumped whenever anything but the data changes) and the number of readers asleep.
The writer bumps ``wseq``, writes (growing the data segment if needed), then sets ``seq``: a
seqlock. A reader waits until ``seq`` is newer than the last value it read -- under ``block``
(a core per rank) polling the word, then sleeping on a futex on it; under ``backoff`` (ranks
outnumber cores) sleeping at once; the writer makes the wake system call only when a reader
sleeps -- follows the data segment if its generation changed (by name, from the control page:
no collective inside ``read()``), reads, and checks that ``wseq`` did not move meanwhile. A
plain array laid out as the last one (the layout word unchanged) is the same view again.

Growth: the new segment gets a new name; the writer publishes it in the control page and then
unlinks the old one at once. Readers still mapping the old one keep their mapping (an unlinked
segment lives until its last mapping goes), and a reader that finds a name already gone re-reads
the control page. Segments are created with ``O_CREAT | O_EXCL`` mode 0o600, sized with
``ftruncate`` and ``posix_fallocate`` (a full /dev/shm fails at allocation, not with SIGBUS on
first touch). We do not use :class:`multiprocessing.shared_memory.SharedMemory`: its resource
tracker unlinks segments it did not create when a process exits (CPython gh-82300).

Modes:

* ``bytes``: pickle at write, copy the bytes into the segment; a reader unpickles them from the
  segment (then checks that the writer did not start a newer value meanwhile).
* ``native``: a plain numpy array as its (dtype, shape) and its bytes, without pickling it; any
  other object with pickle protocol 5 and out-of-band buffers; the buffers are laid out in the segment
  (64-byte aligned) and a reader unpickles with zero-copy, read-only views of its mapping.
  **Such an object is valid until the writer's next write** (the writer then overwrites the
  segment in place); keep a copy if you need it longer. The mapping itself stays alive as long
  as a view does, so a stale view shows newer data but never crashes.

Where a value goes in the data segment: a buffer of 64 KiB or more is moved 64 bytes further
when its copy would start 1-63 bytes past its source modulo a page, which copies 3-4x slower when
readers on another core have just read the destination (``core/aliasing.py``); in bytes mode the
pickle's start is recorded in the control page.

The owner (the root) unlinks both segments at ``close()``; close is local (no collective), which
is safe because an unlinked segment stays mapped for readers that still use it.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import pickle
import platform
import struct
import sys
import time
import weakref
from typing import Any

import numpy as np

from ..core import names
from ..core.aliasing import MIN_BYTES, clear_of_aliasing
from ..core.wait import Spin
from .base import (
    ArrayDescriptions,
    Backend,
    PayloadError,
    dumps,
    dumps_oob,
    loads,
    loads_oob,
)

CTRL_SIZE = 4096
MAGIC = b"IPCBSHM2"
ALIGN = 64
STATE_VALUE, STATE_ERROR = 0, 1

# control page: magic, seq, wseq, state, start (bytes mode: where the pickle begins), nbytes,
# gen, name length; then name, message
_CTRL = struct.Struct("<8sQQIIQQH")
_SEQ_OFF, _WSEQ_OFF = 8, 16
_NAME_OFF = _CTRL.size
_NAME_MAX = 200
_MSG_OFF = 256
_MSG_LEN = struct.Struct("<I")
# the control page as 64-bit words: seq, wseq; at its end the layout word (the writer bumps it
# whenever anything but the data changes: table, head, state, length, segment) and the number of
# readers asleep on the futex (their own cache line, away from seq)
_WSEQ, _SEQ = _WSEQ_OFF // 8, _SEQ_OFF // 8
_LAYOUT_OFF = CTRL_SIZE - 128
_SLEEPERS_OFF = CTRL_SIZE - 64
_LAYOUT, _SLEEPERS = _LAYOUT_OFF // 8, _SLEEPERS_OFF // 8
_MSG_MAX = _LAYOUT_OFF - _MSG_OFF - _MSG_LEN.size
# native data segment: number of buffers, layout flag, header offset, header length; then per
# buffer (offset, length)
_TABLE = struct.Struct("<IIQQ")
_PICKLED, _ARRAY = 0, 1  # the table's layout flag: a pickle-5 header, or a plain array's (dtype, shape)
_ENTRY = struct.Struct("<QQ")
_ARRAY_HEAD_OFF = (_TABLE.size + _ENTRY.size + ALIGN - 1) // ALIGN * ALIGN  # a plain array's header
# the control page's fields a reader needs, after magic, seq and wseq: state, start, nbytes, gen, name length
_FIELDS = struct.Struct("<IIQQH")


class _Futex:
    """A reader sleeps on the low 32 bits of ``seq`` (FUTEX_WAIT); the writer wakes it
    (FUTEX_WAKE) only when the sleepers word says someone sleeps: a publish with nobody asleep
    makes no system call (docs/method.md rule 18). ctypes: the system call, libatomic's add. A
    reader killed asleep leaves the count up: the writer then makes a needless wake call per
    write, nothing worse."""

    _WAIT, _WAKE, _ALL = 0, 1, 0x7FFFFFFF  # shared (not FUTEX_PRIVATE): other processes' mappings
    #: the longest sleep between two looks at the word: how late a timeout is noticed, and what a
    #: lost wake-up could cost. The writer's store of seq and its look at the sleepers word are not
    #: fenced; the reader's add is, and the kernel reads seq again microseconds later: a wake-up is
    #: lost only if the store stays held back in the writer's CPU that long
    CHUNK = 2e-3

    def __init__(self) -> None:
        nr = {"x86_64": 202, "aarch64": 98, "riscv64": 98}.get(platform.machine())
        if nr is None or not sys.platform.startswith("linux") or sys.byteorder != "little":
            raise OSError("no futex system call known here")
        syscall = ctypes.CDLL(None, use_errno=True).syscall
        syscall.restype = ctypes.c_long
        syscall.argtypes = [ctypes.c_long, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p,
                            ctypes.c_void_p, ctypes.c_int]
        add = getattr(ctypes.CDLL("libatomic.so.1"), "__atomic_fetch_add_8")  # (a name in a class is mangled)
        add.restype = ctypes.c_uint64
        add.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int]
        self._nr, self._syscall, self._add = nr, syscall, add
        chunk = struct.pack("<qq", 0, int(self.CHUNK * 1e9))
        self._chunk = ctypes.create_string_buffer(chunk, len(chunk))

    def wait(self, word: int, sleepers: int, seq: int, words: memoryview) -> None:
        """Sleep (up to CHUNK) while the word at ``word`` still holds ``seq``'s low 32 bits."""
        self._add(sleepers, 1, 5)  # seq_cst: this add is a full fence before the look at seq
        try:
            if words[_SEQ] == seq:
                self._syscall(self._nr, word, self._WAIT, seq & 0xFFFFFFFF, self._chunk, None, 0)
        finally:
            self._add(sleepers, (1 << 64) - 1, 5)

    def wake(self, word: int) -> None:
        self._syscall(self._nr, word, self._WAKE, self._ALL, None, None, 0)


try:
    _FUTEX: _Futex | None = _Futex()
except (OSError, AttributeError):  # not Linux, no libatomic: readers poll with the pacer
    _FUTEX = None


def _address(mm: mmap.mmap) -> int:
    """Where a writable mapping starts (it stays there until closed)."""
    probe = ctypes.c_char.from_buffer(mm)
    try:
        return ctypes.addressof(probe)
    finally:
        del probe


def _align(n: int, to: int = ALIGN) -> int:
    return (n + to - 1) // to * to


def _create_segment(name: str, size: int) -> mmap.mmap:
    """A new segment of ``size`` bytes in /dev/shm, allocated now, mapped read-write."""
    path = names.SHM_DIR / name
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        os.ftruncate(fd, size)
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            raise OSError(
                exc.errno,
                f"shm: cannot allocate {size} bytes in {names.SHM_DIR} ({exc.strerror}); "
                f"free space there or use a smaller payload",
            ) from None
        return mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    except BaseException:
        _unlink(name)
        raise
    finally:
        os.close(fd)


def _attach_segment(name: str, writable: bool = False) -> mmap.mmap:
    """Map an existing segment, read-only unless ``writable`` (FileNotFoundError when it is gone)."""
    fd = os.open(names.SHM_DIR / name, os.O_RDWR if writable else os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        return mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0))
    finally:
        os.close(fd)


def _unlink(name: str | None) -> None:
    if name:
        try:
            os.unlink(names.SHM_DIR / name)
        except FileNotFoundError:
            pass


def _close_map(mm: mmap.mmap | None) -> None:
    """Unmap unless a view still uses the mapping (then it goes with its last view)."""
    if mm is not None:
        try:
            mm.close()
        except BufferError:
            pass


class SharedMemoryBackend(Backend):
    """A store in POSIX shared memory; see the module docstring for the protocol."""

    name = "shm"
    payload_in_shm = True  # admitted against /dev/shm's free space too
    run_in = "mpi"  # ipcbench run: measured among MPI ranks, as it always was (its history continues)
    delivery = "store"
    reference = "ref-shm"
    #: data bytes of the first data segment; a bigger payload makes a bigger one
    initial_capacity = 1 << 20

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._ctrl_name: str | None = None
        self._ctrl: mmap.mmap | None = None
        self._data_name: str | None = None
        self._data: mmap.mmap | None = None
        self._old_name: str | None = None  # the replaced data segment, unlinked after publishing
        self._new_name: str | None = None  # a data segment being made, until it is ours below
        self._gen = 0
        self._seq = 0  # writer: last published; reader: last read
        self._owner = False
        self._meta = ArrayDescriptions()  # writer: a plain array's pickled (dtype, shape)
        self._desc: dict[bytes, Any] = {}  # reader: pickled description -> (dtype, shape)
        # the per-message work of a plain array, done once (issue 40): the writer's last layout
        # in the data segment (dtype, shape, head, data offset, size, generation), so a write of
        # the same layout copies the data only; the reader's last view and the layout word it
        # was made under, returned again while that word has not moved
        self._last_layout: tuple[Any, ...] | None = None
        self._ctrl_fields: tuple[int, int] | None = None  # writer: (start, nbytes) in the control page
        self._places: dict[int, tuple[Any, int, int]] = {}  # writer: id(source) -> (weakref, pos, placed pos)
        self._layout = -1  # writer: its layout word; reader: the word its view was made under
        self._view: Any = None
        self._words: memoryview | None = None  # the control page as 64-bit words
        self._seq_addr = self._sleepers_addr = 0  # where seq and the sleepers word are (the futex)

    @classmethod
    def unavailable(cls, group: Any = None) -> str | None:
        if not names.SHM_DIR.is_dir():
            return f"shm needs POSIX shared memory in {names.SHM_DIR} (Linux)"
        return super().unavailable(group)

    @property
    def capacity(self) -> int:
        """Data bytes the current data segment holds (writer side)."""
        return len(self._data) if self._data is not None else 0

    # ------------------------------------------------------------------ setup and close

    def setup(self) -> None:
        self.open_collectively(self._create_named, self._attach, "create its segment")

    def _create_named(self) -> str:
        self._create()
        return self._ctrl_name or ""

    def _attach(self, ctrl_name: str) -> None:
        if self.group.rank == self.root:
            return
        self._ctrl_name = ctrl_name
        self._ctrl = _attach_segment(ctrl_name, writable=True)  # readers count themselves asleep there
        if self._ctrl[:8] != MAGIC:
            raise RuntimeError(f"{ctrl_name} is not an ipcbench control segment")
        self._map_words()
        self._seq = self._words[_SEQ]  # type: ignore[index]

    def _map_words(self) -> None:
        assert self._ctrl is not None
        self._words = memoryview(self._ctrl).cast("Q")
        self._seq_addr = _address(self._ctrl) + _SEQ_OFF
        self._sleepers_addr = self._seq_addr - _SEQ_OFF + _SLEEPERS_OFF

    def _create(self) -> None:
        self._owner = True
        self._ctrl_name = names.resource_name("shm")
        self._ctrl = _create_segment(self._ctrl_name, CTRL_SIZE)
        self._new_data_segment(max(ALIGN, int(self.initial_capacity)))
        _CTRL.pack_into(self._ctrl, 0, MAGIC, 0, 0, STATE_VALUE, 0, 0, self._gen, 0)
        self._write_name()
        self._map_words()
        self._layout = 0

    def _new_data_segment(self, size: int) -> None:
        # named first, so that close() removes it even when a Ctrl-C lands between its creation
        # and the assignment below
        name = self._new_name = names.resource_name("shm-data")
        mm = _create_segment(name, size)
        old_name, old = self._data_name, self._data
        self._data_name, self._data, self._gen = name, mm, self._gen + 1
        self._new_name = None
        _close_map(old)
        _unlink(self._old_name)  # an older one never published (a write that failed)
        self._old_name = old_name  # unlinked once the new name is published

    def _write_name(self) -> None:
        assert self._ctrl is not None and self._data_name is not None
        raw = self._data_name.encode()
        if len(raw) > _NAME_MAX:
            raise RuntimeError(f"shm: segment name too long: {self._data_name}")
        struct.pack_into("<QH", self._ctrl, 40, self._gen, len(raw))
        self._ctrl[_NAME_OFF : _NAME_OFF + len(raw)] = raw

    def close(self) -> None:
        if self._owner:
            _unlink(self._ctrl_name)
            _unlink(self._data_name)
            _unlink(self._old_name)
            _unlink(self._new_name)
        words, self._words, self._view = self._words, None, None
        if words is not None:
            words.release()
        _close_map(self._data)
        _close_map(self._ctrl)
        self._data = self._ctrl = None
        self._owner = False

    # ------------------------------------------------------------------ writer

    def write(self, obj: Any) -> None:
        if self._ctrl is None or not self._owner:
            raise RuntimeError("shm: write() is for the root, after setup()")
        if self.mode == "native" and type(obj) is np.ndarray and obj.flags.c_contiguous and not obj.dtype.hasobject:
            self._write_array(obj)
        else:
            self._write_object(obj)

    def _write_object(self, obj: Any) -> None:
        """Anything but a plain array in native mode: a pickle (bytes mode) or a pickle-5 head
        and its buffers laid out in the segment."""
        self._last_layout = None
        try:
            start = 0
            if self.mode == "bytes":
                parts: list[Any] = [dumps(obj)]
                start = clear_of_aliasing(0, parts[0], len(parts[0]))
                offsets = [start]
                end = start + len(parts[0])
                table = b""
            else:
                head, buffers = dumps_oob(obj)  # (a plain array went to _write_array)
                try:
                    raws = [b.raw() for b in buffers]
                except BufferError as exc:
                    raise PayloadError(
                        f"cannot lay out a non-contiguous buffer of {type(obj).__name__}: {exc}"
                    ) from exc
                pos = _align(_TABLE.size + _ENTRY.size * len(raws))
                head_off, pos = pos, _align(pos + len(head))
                offsets, parts = [head_off], [head]
                entries = []
                for raw in raws:
                    pos = clear_of_aliasing(pos, raw, raw.nbytes)
                    offsets.append(pos)
                    parts.append(raw)
                    entries.append(_ENTRY.pack(pos, raw.nbytes))
                    pos = _align(pos + raw.nbytes)
                end = pos
                table = _TABLE.pack(len(raws), _PICKLED, head_off, len(head)) + b"".join(entries)
        except PayloadError as exc:
            self._publish_error(str(exc))
            raise
        seq = self._seq + 1
        assert self._words is not None
        self._words[_WSEQ] = seq
        try:
            if end > self.capacity:
                self._new_data_segment(_align(max(end, 2 * self.capacity), 1 << 20))
                self._write_name()
            data = self._data
            assert data is not None
            if table:
                data[: len(table)] = table
            for off, part in zip(offsets, parts):
                n = part.nbytes if isinstance(part, memoryview) else len(part)
                data[off : off + n] = part
        except Exception as exc:  # e.g. /dev/shm full: the readers fail too, instead of waiting
            self._publish_error(f"{type(exc).__name__}: {exc}")
            raise
        self._publish(seq, start, end - start)

    def _publish(self, seq: int, start: int, nbytes: int) -> None:
        """Make value ``seq`` visible (a value that went through the full path: a new layout)."""
        ctrl, words = self._ctrl, self._words
        assert ctrl is not None and words is not None
        if self._ctrl_fields != (start, nbytes):
            struct.pack_into("<IIQ", ctrl, 24, STATE_VALUE, start, nbytes)
            self._ctrl_fields = (start, nbytes)
        self._layout += 1
        words[_LAYOUT] = self._layout
        self._release(seq)

    def _release(self, seq: int) -> None:
        """Store ``seq`` (the seqlock's publish), wake sleeping readers if any, unlink the old segment."""
        words = self._words
        assert words is not None
        words[_SEQ] = self._seq = seq
        if words[_SLEEPERS] and _FUTEX is not None:
            _FUTEX.wake(self._seq_addr)
        if self._old_name is not None:
            old, self._old_name = self._old_name, None
            _unlink(old)

    def _write_array(self, obj: np.ndarray) -> None:
        """A plain C-contiguous array laid out as the last write's (the same dtype object, shape
        and place, in the same segment: a new one clears _last_layout): only its data is copied,
        table, head and fields stay. Kept short: under the counting pass's tracing every call
        makes a frame object as large as the function's frame (docs/floor.md)."""
        layout = self._last_layout
        if layout is None or layout[0] is not obj.dtype or layout[1] != obj.shape:
            return self._write_layout(obj)
        n = obj.nbytes
        if n >= MIN_BYTES and self._place(layout[3], obj, n) != layout[4]:
            return self._write_layout(obj)
        seq = self._seq + 1
        self._words[_WSEQ] = seq  # type: ignore[index]
        if n:
            # a C-contiguous array exports its bytes as one simple buffer (numpy's stubs declare the
            # buffer protocol from Python 3.12 on only)
            self._data[layout[4] : layout[4] + n] = obj  # type: ignore[call-overload,index]
        self._release(seq)

    def _write_layout(self, obj: np.ndarray) -> None:
        """A plain C-contiguous array in a new layout: its cached (dtype, shape) as the head, a
        table, its bytes, no pickling."""
        n, seq = obj.nbytes, self._seq + 1
        words, data = self._words, self._data
        assert words is not None and data is not None
        head = self._meta.of(obj)
        first = (_ARRAY_HEAD_OFF + len(head) + ALIGN - 1) // ALIGN * ALIGN
        pos = self._place(first, obj, n) if n >= MIN_BYTES else first
        end = (pos + n + ALIGN - 1) // ALIGN * ALIGN
        words[_WSEQ] = seq
        self._last_layout = None
        try:
            if end > len(data):
                self._new_data_segment(_align(max(end, 2 * len(data)), 1 << 20))
                self._write_name()
                data = self._data
                assert data is not None
            table = _TABLE.pack(1, _ARRAY, _ARRAY_HEAD_OFF, len(head)) + _ENTRY.pack(pos, n)
            data[: len(table)] = table
            data[_ARRAY_HEAD_OFF : _ARRAY_HEAD_OFF + len(head)] = head
            if n:
                data[pos : pos + n] = obj  # type: ignore[call-overload]
        except Exception as exc:  # e.g. /dev/shm full: the readers fail too, instead of waiting
            self._publish_error(f"{type(exc).__name__}: {exc}")
            raise
        self._last_layout = (obj.dtype, obj.shape, head, first, pos)
        self._publish(seq, 0, end)

    def _place(self, pos: int, obj: np.ndarray, n: int) -> int:
        """:func:`clear_of_aliasing` for this source array, asked once per array object: finding
        a buffer's address costs a ctypes call, microseconds, more than the 64 KiB copy it
        places (docs/floor.md). A stale answer (the object's memory moved) costs speed only."""
        hit = self._places.get(id(obj))
        if hit is not None and hit[0]() is obj and hit[1] == pos:
            return hit[2]
        placed = clear_of_aliasing(pos, obj, n)
        if len(self._places) >= 8:
            self._places.clear()
        self._places[id(obj)] = (weakref.ref(obj), pos, placed)
        return placed

    def _publish_error(self, message: str) -> None:
        """Tell the readers that this write failed (their read() raises PayloadError)."""
        assert self._ctrl is not None and self._words is not None
        seq = self._seq + 1
        raw = message.encode("utf-8", "replace")[:_MSG_MAX]
        self._words[_WSEQ] = seq
        _MSG_LEN.pack_into(self._ctrl, _MSG_OFF, len(raw))
        self._ctrl[_MSG_OFF + _MSG_LEN.size : _MSG_OFF + _MSG_LEN.size + len(raw)] = raw
        struct.pack_into("<I", self._ctrl, 24, STATE_ERROR)
        self._ctrl_fields = None  # the next value writes its state again
        self._last_layout = None
        self._layout += 1
        self._words[_LAYOUT] = self._layout
        self._release(seq)

    # ------------------------------------------------------------------ reader

    def read(self) -> Any:
        words, ctrl = self._words, self._ctrl
        if words is None or ctrl is None or self._owner:
            raise RuntimeError("shm: read() is for the readers, after setup()")
        pace = None
        while True:
            seq = words[_SEQ]
            if seq == self._seq:
                seq = self._wait_newer(words)
            if words[_LAYOUT] == self._layout and words[_WSEQ] == seq:
                # a plain array laid out as last time (the layout word did not move): the same
                # view of the mapping; wseq read after it says no newer value began meanwhile
                self._seq = seq
                return self._view
            done, value = self._try_read(ctrl, words, seq)
            if done:
                return value
            if pace is None:  # torn by a newer write: poll until that one is published
                pace = self.pacer()
            if not pace.wait():
                raise self._timeout()

    def _timeout(self) -> Exception:
        return self.timeout_error(f"a value newer than number {self._seq} in shared memory segment {self._ctrl_name}")

    def _wait_newer(self, words: memoryview) -> int:
        """Wait until ``seq`` moves past the last value read; return it (docs/method.md rule 18).

        ``block`` (a core per rank): poll the word back to back for ``Spin.SPIN``, then with
        ``sched_yield`` between polls up to ``Spin.YIELD`` (as :class:`~..core.wait.Spin`), then
        sleep on the futex; ``backoff`` (ranks outnumber cores): sleep on the futex at once,
        where a polling reader would take the writer's core. Without a futex (not Linux, no
        libatomic), the pacer's polls."""
        last = self._seq
        start = time.monotonic()
        if self.wait == "block" or _FUTEX is None:
            spin_end, poll_end, polls = start + Spin.SPIN, start + Spin.YIELD, 0
            while words[_SEQ] == last:
                polls += 1
                if polls & 15 == 0 and time.monotonic() >= spin_end:
                    break
            else:
                return int(words[_SEQ])
            while words[_SEQ] == last:
                os.sched_yield()
                if time.monotonic() >= poll_end:
                    break
            else:
                return int(words[_SEQ])
        if _FUTEX is None:
            pace = self.pacer()
            while words[_SEQ] == last:
                if not pace.wait():
                    raise self._timeout()
            return int(words[_SEQ])
        deadline = start + self.timeout
        while words[_SEQ] == last:
            if time.monotonic() >= deadline:
                raise self._timeout()
            _FUTEX.wait(self._seq_addr, self._sleepers_addr, last, words)
        return int(words[_SEQ])

    def _try_read(self, ctrl: mmap.mmap, words: memoryview, seq: int) -> tuple[bool, Any]:
        """Read value ``seq``; (False, None) if the writer moved on meanwhile (then poll again)."""
        layout = words[_LAYOUT]  # read before the fields: a view made now is valid under it
        state, start, nbytes, gen, name_len = _FIELDS.unpack_from(ctrl, 24)
        if state == STATE_ERROR:
            (n,) = _MSG_LEN.unpack_from(ctrl, _MSG_OFF)
            at = _MSG_OFF + _MSG_LEN.size
            message = ctrl[at : at + min(n, _MSG_MAX)].decode("utf-8", "replace")
            if words[_WSEQ] != seq:
                return False, None
            self._seq = seq
            raise self.writer_failed(message)
        if gen != self._gen or self._data is None:
            name = ctrl[_NAME_OFF : _NAME_OFF + name_len].decode()
            if words[_WSEQ] != seq:
                return False, None
            try:
                mm = _attach_segment(name)
            except FileNotFoundError:  # replaced again meanwhile: read the control page again
                return False, None
            self._layout, self._view = -1, None
            _close_map(self._data)
            self._data, self._data_name, self._gen = mm, name, gen
        data = self._data
        if start + nbytes > len(data):
            return False, None
        try:
            if self.mode == "bytes":
                # unpickle straight from the mapping (no copy of the bytes first), then check
                # that the writer did not start another value meanwhile
                with memoryview(data) as view, view[start : start + nbytes] as raw:
                    value = loads(raw)
                if words[_WSEQ] != seq:
                    return False, None
            else:
                view = memoryview(data)
                count, flag, head_off, head_len = _TABLE.unpack_from(data, 0)
                if _TABLE.size + count * _ENTRY.size > nbytes or head_off + head_len > nbytes:
                    return False, None  # a table being rewritten: the writer moved on
                buffers = []
                for i in range(count):
                    off, length = _ENTRY.unpack_from(data, _TABLE.size + i * _ENTRY.size)
                    buffers.append(view[off : off + length])
                head = data[head_off : head_off + head_len]
                if words[_WSEQ] != seq:
                    return False, None
                if flag == _ARRAY and count == 1:
                    desc = self._desc.get(head)
                    if desc is None:
                        if len(self._desc) > 64:
                            self._desc.clear()
                        desc = self._desc[head] = pickle.loads(head)
                    value = np.frombuffer(buffers[0], dtype=np.uint8).view(desc[0]).reshape(desc[1])
                    # returned again by read() until the layout word moves
                    self._layout, self._view = layout, value
                else:
                    value = loads_oob(head, buffers)
        except Exception:
            if words[_WSEQ] != seq:  # torn by a newer write: retry
                return False, None
            raise
        self._seq = seq
        return True, value


__all__ = ["SharedMemoryBackend"]
