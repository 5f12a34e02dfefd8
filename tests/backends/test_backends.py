"""The local backends (lmdb, shm, zmq, mp-queue) over local process groups, with plain pytest,
beyond the conformance suite (test_conformance.py).

One LocalWorld of 4 processes serves the whole module (spawning is slow); every test checks that
it left nothing of ours in /dev/shm or the temp dir. The MPI backends are in test_backends_mpi.py.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import support as progs  # tests/ is on sys.path (rootdir conftest, no package)

from pytest_ipcbench.backends import BackendSpec, BackendUnavailable, PayloadError, get_backend
from pytest_ipcbench.backends.base import backend_names, unavailable_reason
from pytest_ipcbench.core import names
from pytest_ipcbench.core.local import LocalWorld
from pytest_ipcbench.core.payloads import PayloadSpec
from pytest_ipcbench.harness.transfer import assert_delivered, deliver

LOCAL = ("lmdb", "shm", "zmq", "mp-queue")
STORES = ("lmdb", "shm")
MPI_ONLY = ("mpi-bcast", "mpi-pkl5", "mpi-buffer", "mpi-p2p")
MODES = ("bytes", "native")
KB, MB = 10**3, 10**6


@pytest.fixture(scope="module")
def world() -> Iterator[LocalWorld]:
    with LocalWorld(4, timeout=120) as w:
        yield w


def _children(pid: int) -> set[int]:
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.add(int(stat.parent.name))
    return found


@pytest.fixture(autouse=True)
def no_leftovers() -> Iterator[None]:
    """Nothing of this process or its workers is left in /dev/shm or the temp dir."""
    before = {item.path for item in names.find_ours()}
    ours = {os.getpid()} | _children(os.getpid())
    yield
    ours |= _children(os.getpid())
    left = [item.path for item in names.find_ours() if item.path not in before and item.pid in ours]
    for path in left:
        names.remove(path)
    assert not left, f"left behind: {left}"


# Delivery of every payload kind in both modes at 2 and 4 ranks, writer errors, timeouts and
# cleanup are the conformance suite's (test_conformance.py); this file covers what is beyond it.


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", LOCAL)
def test_delivers_64mb(world: LocalWorld, name: str, mode: str) -> None:
    assert_delivered(world.run(deliver, BackendSpec(name, mode), PayloadSpec("ndarray", 64 * MB), 1, ranks=3))


@pytest.mark.parametrize("name", LOCAL)
def test_writer_other_than_rank0(world: LocalWorld, name: str) -> None:
    results = world.run(deliver, BackendSpec(name, "native", root=2), PayloadSpec("ragged2d", 10 * KB), ranks=4)
    assert_delivered(results)
    assert [d.role for d in results] == ["reader", "reader", "writer", "reader"]


# --------------------------------------------------------------------------- edge cases

ODD_OBJECTS = [
    b"",
    np.empty(0),
    [],
    {},
    np.empty((0, 602), dtype=np.float32),
    [np.empty(0, dtype=np.int32), np.arange(3)],
    np.arange(24, dtype=np.int16).reshape(4, 6)[:, ::2],  # not contiguous
    np.asfortranarray(np.arange(12.0).reshape(3, 4)),
    np.array(3.5),  # 0-d
    np.array([1, "a", None], dtype=object),
    np.zeros(3, dtype=[("x", np.int32), ("y", np.float64)]),
    np.arange(4).astype("datetime64[s]"),
    (np.arange(3), np.ones(2, dtype=np.uint8)),
    {"nested": [np.arange(5), {"b": b"\x00" * 100_000, "s": "text"}], "n": None},
    b"x" * 3_000_000,
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", LOCAL)
def test_empty_and_odd_payloads(world: LocalWorld, name: str, mode: str) -> None:
    results = world.run(progs.roundtrip, BackendSpec(name, mode), ODD_OBJECTS, ranks=3)
    assert results[0] == ["sent"] * len(ODD_OBJECTS)
    for reader in results[1:]:
        assert reader == ["ok"] * len(ODD_OBJECTS)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", LOCAL)
def test_unpicklable_raises_on_writer_and_readers(world: LocalWorld, name: str, mode: str) -> None:
    results = world.run(progs.unpicklable, BackendSpec(name, mode), ranks=3)
    writer_error, writer_next = results[0]
    assert writer_error.startswith("PayloadError: ") and "pickle" in writer_error, writer_error
    assert writer_next == "sent"
    for reader_error, reader_next in results[1:]:
        assert reader_error.startswith("PayloadError: ") and "could not send" in reader_error, reader_error
        assert reader_next == "ok"


@pytest.mark.parametrize("name", ["shm", "lmdb"])
def test_store_grows_beyond_initial_capacity(
    world: LocalWorld, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the root is this process: a small first segment / map forces several growths
    cls = get_backend(name)
    monkeypatch.setattr(cls, "initial_capacity" if name == "shm" else "initial_map_size", 1 << 16)
    monkeypatch.setattr(cls, "headroom", 1, raising=False)
    sizes = [10, 200_000, 100, 3_000_000, 0, 12_000_000, 1000]
    for mode in MODES:
        results = world.run(progs.roundtrip_sizes, BackendSpec(name, mode), sizes, ranks=4)
        for reader in results[1:]:
            assert reader == ["ok"] * len(sizes), mode


@pytest.mark.parametrize("name", ["shm", "lmdb"])
def test_store_reader_follows_several_growths_at_once(
    world: LocalWorld, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cls = get_backend(name)
    monkeypatch.setattr(cls, "initial_capacity" if name == "shm" else "initial_map_size", 1 << 16)
    monkeypatch.setattr(cls, "headroom", 1, raising=False)
    sizes = [80, 800_000, 8_000_000, 200_000]  # grows twice between two reads, then shrinks
    for mode in MODES:
        results = world.run(progs.newest_wins_sizes, BackendSpec(name, mode), sizes, ranks=3)
        assert results == ["writer", "ok", "ok"], mode


@pytest.mark.parametrize("name", LOCAL)
def test_read_before_write_waits(world: LocalWorld, name: str) -> None:
    results = world.run(progs.read_before_write, BackendSpec(name, "native", timeout=30), 0.5, ranks=3)
    for result, waited in results[1:]:
        assert result == "ok"
        assert waited >= 0.4


@pytest.mark.parametrize("name", LOCAL)
def test_read_times_out_clearly(world: LocalWorld, name: str) -> None:
    results = world.run(progs.read_timeout, BackendSpec(name, "bytes", timeout=0.3), ranks=3)
    for result in results[1:]:
        assert result.startswith("TimeoutError: "), result
        assert name in result and "0.3 s" in result and "gave up" in result


@pytest.mark.parametrize("name", LOCAL)
def test_exception_inside_with_releases_everything(world: LocalWorld, name: str) -> None:
    assert world.run(progs.raise_inside, BackendSpec(name, "native"), ranks=3) == ["boom"] * 3


@pytest.mark.parametrize("name", LOCAL)
def test_unread_message_does_not_leak_into_next_instance(world: LocalWorld, name: str) -> None:
    world.run(progs.abandon, BackendSpec(name, "native"), ranks=3)
    assert_delivered(world.run(deliver, BackendSpec(name, "native"), PayloadSpec("array1d", 10 * KB), ranks=3))


def test_writer_raises_payload_error_locally(world: LocalWorld) -> None:
    """The writer's own error is a PayloadError with a message naming the object's type."""
    from pytest_ipcbench.backends.base import dumps, dumps_oob

    with pytest.raises(PayloadError, match="cannot pickle function"):
        dumps(lambda: None)
    with pytest.raises(PayloadError, match="cannot pickle dict"):
        dumps_oob({"f": lambda: None})


# --------------------------------------------------------------------------- availability


@pytest.mark.parametrize("name", MPI_ONLY)
def test_mpi_backends_are_unavailable_on_a_local_group(world: LocalWorld, name: str) -> None:
    group = world.group(2)
    reason = unavailable_reason(name, group)
    assert reason and "MPI" in reason
    with pytest.raises(BackendUnavailable, match="needs MPI"):
        BackendSpec(name).open(group)


BUILT_INS = LOCAL + MPI_ONLY


def test_every_built_in_backend_is_an_entry_point() -> None:
    assert set(BUILT_INS) <= set(backend_names())
    for name in BUILT_INS:
        assert get_backend(name).name == name
    assert {get_backend(n).delivery for n in STORES} == {"store"}
    assert {get_backend(n).delivery for n in BUILT_INS if n not in STORES} == {"channel"}


def test_mp_queue_needs_mailboxes() -> None:
    class NoMailboxes:
        is_mpi = False
        size = 2
        mailboxes: list[object] = []

    reason = unavailable_reason("mp-queue", NoMailboxes())  # type: ignore[arg-type]
    assert reason and "LocalWorld" in reason


# --------------------------------------------------------------------------- in-process units


class _OneProcessGroup:
    """Just enough of a LocalGroup to drive a writer and a reader in this process."""

    is_mpi = False

    def __init__(self, rank: int, mailboxes: list[object]) -> None:
        self.rank, self.size, self.mailboxes = rank, len(mailboxes), mailboxes
        self.shared: dict[str, object] = {}

    def bcast(self, obj: object, root: int = 0) -> object:
        if self.rank == root:
            self.shared["bcast"] = obj
        return self.shared["bcast"]

    def barrier(self) -> None:
        pass


@pytest.mark.parametrize("mode", MODES)
def test_mp_queue_in_one_process(mode: str) -> None:
    """mp-queue's writer and reader driven by hand: a stranger's message is dropped, an
    unpicklable object fails both sides, and write() never waits for a reader (three 1 MB
    messages, far more than a pipe holds, go out before anything is read)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    boxes = [ctx.Queue(), ctx.Queue()]
    try:
        boxes[1].put(("someone", "else", 0, None))
        writer_group = _OneProcessGroup(0, boxes)
        reader_group = _OneProcessGroup(1, boxes)
        reader_group.shared = writer_group.shared
        spec = BackendSpec("mp-queue", mode, timeout=10)
        writer = spec.open(writer_group)  # type: ignore[arg-type]
        writer.setup()
        reader = spec.open(reader_group)  # type: ignore[arg-type]
        reader.setup()
        with pytest.raises(PayloadError, match="cannot pickle dict"):
            writer.write({"f": lambda: None})
        with pytest.raises(PayloadError, match="could not send"):
            reader.read()
        values = [np.full(125_000, i, dtype=np.float64) for i in range(3)]
        for value in values:
            writer.write(value)
        for value in values:
            assert progs.same(reader.read(), value)
    finally:
        for box in boxes:
            box.close()
            box.join_thread()


@pytest.mark.parametrize("mode", MODES)
def test_mpi_buffer_encoding_round_trips_without_mpi(mode: str) -> None:
    """mpi-buffer / mpi-p2p's encoding (meta + raw buffers), with a memcpy as the transport."""
    from pytest_ipcbench.backends.mpi import encode, finish, receive_plan

    for obj in ODD_OBJECTS + [PayloadSpec("ragged2d", 10 * KB).build(), PayloadSpec("dict", KB).build()]:
        meta, sent = encode(obj, mode)
        plan, received = receive_plan(bytearray(meta), mode)
        assert len(sent) == len(received)
        for src, dst in zip(sent, received):
            memoryview(dst).cast("B")[:] = memoryview(src).cast("B")
        assert progs.same(finish(plan), obj), type(obj)
    if mode == "native":  # arrays travel as raw buffers, not pickled
        meta, sent = encode([np.arange(1000, dtype=np.int32)] * 2, mode)
        assert len(meta) < 200 and [len(b) for b in sent] == [4000, 4000]


def test_shm_native_copy_never_lands_just_past_its_source(world: LocalWorld) -> None:
    # every 16-byte place of the source in its page: a 1-63 byte distance modulo a page made a
    # 1 MB copy 3-4x slower (core/aliasing.py); before the fix 3 of these 256 places landed there
    offsets = list(range(0, 4096, 16))
    results = world.run(progs.shm_distances, BackendSpec("shm", "native"), 100_000, offsets, ranks=2)
    distances, reader = results
    assert reader == ["ok"] * len(offsets)
    assert [d for d in distances if 0 < d < 64] == []


def test_shm_bytes_reads_a_pickle_that_does_not_start_the_segment(world: LocalWorld) -> None:
    objects = [np.arange(n, dtype=np.float64) for n in (10, 20_000, 200_000)]
    results = world.run(progs.shm_bytes_moved, BackendSpec("shm", "bytes"), objects, ranks=3)
    assert results == [["sent"] * 3, ["ok"] * 3, ["ok"] * 3]
