"""The receiver's cache of idle mappings: a segment mapped before is not opened and mapped again.

When the last local array over a *received* segment dies, :mod:`.segment` gives back the
reference and the lock but parks the mapping and its descriptor here; the next handle of that
segment locks the kept descriptor and reuses the mapping. An idle entry holds no lock and no
reference, so for every other process it does not exist.

Bounds (docs/shared-arrays.md): at most :data:`MAX_ENTRIES` (least recently used evicted); a
sweeper thread, alive only while entries exist, unmaps unlinked files every
:data:`SWEEP_INTERVAL` and drops entries idle for :data:`IDLE_TIMEOUT`; the dead-holder probe runs
when an entry is swept, evicted or flushed at exit; a forked child drops inherited entries.
Entries are opaque: :mod:`.segment` gives ``close(entry)`` and ``check(entry, now)``.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

#: Idle mappings kept per process (each costs one mapping and one file descriptor).
MAX_ENTRIES = 32
#: How often the sweeper looks for unlinked files and runs the deferred liveness probes.
SWEEP_INTERVAL = 0.5
#: An entry nobody received again for this long is unmapped.
IDLE_TIMEOUT = 30.0


class MappingCache:
    """LRU of idle entries by segment name, with a sweeper thread while it is not empty."""

    def __init__(self, close: Callable[[Any], None], check: Callable[[Any, float], bool]) -> None:
        self._close = close
        self._check = check
        self._entries: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.enabled = os.environ.get("IPCB_MAP_CACHE", "1") != "0"
        self.hits = 0
        self.misses = 0
        os.register_at_fork(before=self._before_fork, after_in_parent=self._after_fork_parent,
                            after_in_child=self._after_fork_child)

    def __len__(self) -> int:
        return len(self._entries)

    def names(self) -> list[str]:
        with self._lock:
            return list(self._entries)

    def take(self, name: str) -> Any | None:
        """Remove and return the idle entry of ``name`` (None if there is none)."""
        if not self._entries:  # nothing to take: no lock needed to know it
            return None
        with self._lock:
            return self._entries.pop(name, None)

    def put(self, name: str, entry: Any) -> None:
        """Keep ``entry`` idle; evict the least recently used beyond :data:`MAX_ENTRIES`."""
        out = []
        with self._lock:
            old = self._entries.pop(name, None)
            if old is not None:
                out.append(old)
            self._entries[name] = entry
            while len(self._entries) > MAX_ENTRIES:
                out.append(self._entries.popitem(last=False)[1])
            if self._thread is None:
                self._thread = threading.Thread(target=self._sweep_loop, name="ipcb-shm-cache", daemon=True)
                self._thread.start()
        for e in out:
            self._evict(e)

    def _evict(self, entry: Any) -> None:
        self._check(entry, float("inf"))  # runs a deferred probe; any verdict drops it
        self._close(entry)

    def sweep(self, now: float | None = None) -> int:
        """Drop the entries ``check`` condemns (unlinked, orphaned, idle too long); how many."""
        now = time.monotonic() if now is None else now
        with self._lock:
            doomed = [n for n, e in self._entries.items() if self._check(e, now)]
            out = [self._entries.pop(n) for n in doomed]
        for e in out:
            self._close(e)
        return len(out)

    def clear(self) -> int:
        """Drop every entry now (deferred probes run first); how many there were."""
        with self._lock:
            out = list(self._entries.values())
            self._entries.clear()
        for e in out:
            self._evict(e)
        return len(out)

    def stop(self) -> None:
        """Exit hook: stop the sweeper and drop everything."""
        thread = self._thread
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(2 * SWEEP_INTERVAL + 1)
        self.clear()
        self._wake.clear()

    def _sweep_loop(self) -> None:
        while not self._wake.wait(SWEEP_INTERVAL):
            self.sweep()
            with self._lock:
                if not self._entries:  # nothing to watch: the thread ends, put() starts another
                    self._thread = None
                    return
        with self._lock:
            self._thread = None

    def _before_fork(self) -> None:
        self._lock.acquire()  # no fork while another thread changes the entries

    def _after_fork_parent(self) -> None:
        self._lock.release()

    def _after_fork_child(self) -> None:
        # The entries are the parent's: unmap our copies, close our copies of its descriptors.
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._thread = None
        out = list(self._entries.values())
        self._entries.clear()
        for e in out:
            self._close(e)
