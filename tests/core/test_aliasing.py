"""core/aliasing.py: a buffer's address, and a place in a page-aligned mapping clear of the
1-63 byte window past the source (exact, over every 16-byte place of a source in its page)."""

from __future__ import annotations

import numpy as np

from pytest_ipcbench.core.aliasing import MIN_BYTES, NEAR, PAGE, buffer_address, clear_of_aliasing


def test_buffer_address_of_arrays_views_and_bytes() -> None:
    a = np.zeros(1000, dtype=np.uint8)
    assert buffer_address(a) == a.__array_interface__["data"][0]
    b = a[17:]
    b.flags.writeable = False
    assert buffer_address(memoryview(b)) == buffer_address(a) + 17
    raw = bytes(100)
    assert buffer_address(raw) == np.frombuffer(raw, np.uint8).__array_interface__["data"][0]


def test_every_source_place_gets_a_destination_clear_of_the_window() -> None:
    room = np.empty(MIN_BYTES + 2 * PAGE, dtype=np.uint8)
    moved = 0
    for src in range(0, PAGE, 16):
        skip = (src - buffer_address(room)) % PAGE
        buf = room[skip : skip + MIN_BYTES]
        for pos in range(0, 2 * PAGE, 64):
            got = clear_of_aliasing(pos, buf, buf.nbytes)
            assert got in (pos, pos + NEAR)
            assert not 0 < (got - buffer_address(buf)) % PAGE < NEAR, (src, pos)
            moved += got != pos
    # a source not 64-byte aligned (192 of the 256 places) has one 64-byte slot per page in its
    # window, met twice in two pages: 384 moves, no more
    assert moved == 192 * 2


def test_small_buffers_keep_their_place() -> None:
    room = np.empty(2 * PAGE, dtype=np.uint8)
    skip = (-buffer_address(room)) % PAGE
    buf = room[skip : skip + MIN_BYTES // 2]  # page-aligned: offset 16 would be in the window
    assert clear_of_aliasing(16, buf, buf.nbytes) == 16
