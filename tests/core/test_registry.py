"""The extension registries: names, errors, run-time registrations and their replay in spawned workers."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import plugin_support  # tests/ is on sys.path (rootdir conftest, no package)
import pytest
from plugin_support import FileStore, records_kind

from pytest_ipcbench import (
    BackendSpec,
    ExtensionError,
    Kind,
    PayloadSpec,
    backend_names,
    payload_kinds,
    register_backend,
    register_payload,
)
from pytest_ipcbench.backends.base import BACKENDS, Backend, get_backend
from pytest_ipcbench.core import names
from pytest_ipcbench.core.group import GroupError, in_mpi_job
from pytest_ipcbench.core.local import LocalWorld
from pytest_ipcbench.core.payloads import PAYLOADS
from pytest_ipcbench.harness.transfer import assert_delivered, deliver

BUILT_IN_BACKENDS = {"lmdb", "shm", "zmq", "mpi-bcast", "mpi-pkl5", "mpi-buffer", "mpi-p2p", "mp-queue"}
BUILT_IN_KINDS = {"dict", "ndarray", "array1d", "ragged2d", "tiny"}
local_only = pytest.mark.skipif(in_mpi_job(), reason="local process groups: not inside an MPI job")


@pytest.fixture
def clean_registry() -> Iterator[None]:
    """Forget what a test registered (the registries are process-wide)."""
    before_b, before_p = set(BACKENDS.names()), set(PAYLOADS.names())
    yield
    for name in set(BACKENDS.names()) - before_b:
        BACKENDS.unregister(name)
    for name in set(PAYLOADS.names()) - before_p:
        PAYLOADS.unregister(name)


# ----------------------------------------------------------------------------- entry points


def test_the_built_ins_are_entry_points_of_this_distribution() -> None:
    assert BUILT_IN_BACKENDS <= set(backend_names())
    assert BUILT_IN_KINDS <= set(payload_kinds())
    for name in BUILT_IN_BACKENDS:
        assert "of pytest-ipcbench" in BACKENDS.origin(name) and "pytest_ipcbench.backends" in BACKENDS.origin(name)
    for name in BUILT_IN_KINDS:
        assert "of pytest-ipcbench" in PAYLOADS.origin(name)
        assert isinstance(PAYLOADS.get(name), Kind)
    assert PAYLOADS.get("tiny").fixed_size == 64 and PAYLOADS.get("dict").fixed_size is None


def test_unknown_names_name_the_available_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown backend 'fifo'; choose from lmdb, .*shm, zmq"):
        BackendSpec("fifo")
    with pytest.raises(ValueError, match=r"unknown backend 'fifo'; choose from lmdb"):
        get_backend("fifo")
    with pytest.raises(ValueError, match=r"unknown payload kind 'json'; choose from array1d, dict, ndarray"):
        PayloadSpec("json", 10)


# ------------------------------------------------------------------------ run-time registration


def test_register_backend_and_payload(clean_registry: None) -> None:
    assert "test-filestore" not in backend_names()
    assert register_backend(FileStore) is FileStore
    assert backend_names()[-1] == "test-filestore" and get_backend("test-filestore") is FileStore
    assert "registered at run time from plugin_support:FileStore" == BACKENDS.origin("test-filestore")
    register_backend(FileStore)  # the same class again (a module imported twice): fine
    kind = register_payload("test-records", records_kind)
    assert kind.build(160, 1).shape == (10,)
    spec = PayloadSpec("test-records", 1600)
    assert spec.id == "test-records-1600B" and spec.nbytes == 1600 and spec.equal(spec.build(2), spec.build(2))
    register_payload("test-records2", plugin_support.RECORDS)  # a Kind instance works too
    assert PayloadSpec("test-records2", 32).build().shape == (2,)


class _NotABackend:
    name = "test-nope"


class _OldStyle(Backend):
    name, kind = "test-oldstyle", "channel"  # before 0.2: ``kind`` (now ``delivery``)

    def write(self, obj: object) -> None: ...

    def read(self) -> object: ...


class _NoDelivery(Backend):
    name = "test-nokind"

    def write(self, obj: object) -> None: ...

    def read(self) -> object: ...


class _BadResources(FileStore):
    name = "test-badres"
    resources = ("/tmp/no-pid-here-*",)


class _ShmClash(FileStore):
    name = "shm"


def test_bad_registrations_say_what_is_wrong(clean_registry: None) -> None:
    with pytest.raises(ExtensionError, match=r"the name is taken by entry point 'shm = pytest_ipcbench.backends.shm:SharedMemoryBackend'.* of pytest-ipcbench"):
        register_backend(_ShmClash)
    with pytest.raises(ExtensionError, match="expected a subclass of Backend"):
        register_backend(_NotABackend)  # type: ignore[arg-type]
    with pytest.raises(ExtensionError, match="delivery must be 'store' or 'channel'"):
        register_backend(_NoDelivery)
    with pytest.raises(ExtensionError, match=r"resources: bad resource pattern '/tmp/no-pid-here-\*'.*\{pid\}"):
        register_backend(_BadResources)
    with pytest.raises(ExtensionError, match="bad backend name 'all'"):
        register_backend(FileStore, name="all")
    with pytest.raises(ExtensionError, match="its class says name = 'test-filestore'"):
        register_backend(FileStore, name="other")

    class Local(FileStore):
        name = "test-local"

    with pytest.raises(ExtensionError, match="defined inside a function; spawned worker processes"):
        register_backend(Local)
    with pytest.raises(ExtensionError, match="expected a Kind, or a factory returning an object with build"):
        register_payload("test-bad", plugin_support.not_a_kind)
    with pytest.raises(ExtensionError, match="the name is taken by entry point 'dict = "):
        register_payload("dict", records_kind)
    assert "test-local" not in backend_names() and "test-bad" not in payload_kinds()


# ------------------------------------------------------------------ spawned workers see them too


@local_only
def test_a_plugin_that_says_kind_still_registers(clean_registry: None) -> None:
    """Backends written before 0.2 said ``kind = "store"``; their files keep working, with a warning."""
    with pytest.warns(DeprecationWarning, match="`kind` is now `delivery`"):
        register_backend(_OldStyle)
    assert get_backend("test-oldstyle").delivery == "channel"


def test_spawned_workers_see_registrations_made_after_import(clean_registry: None) -> None:
    """The issue's bug: a conftest registered a backend, spawned workers said `unknown backend`.

    Nothing in plugin_support registers on import, and ``deliver`` is ours: a worker knows the
    backend and the payload kind only if the parent's registrations are replayed there.
    """
    with LocalWorld(3, timeout=60) as world:
        world.run(plugin_support.worker_pid)  # the workers are up before anything is registered
        register_backend(FileStore)
        register_payload("test-records", records_kind)
        results = world.run(deliver, BackendSpec("test-filestore", "native"), PayloadSpec("test-records", 4000), 3)
        assert_delivered(results)
        register_payload("test-records2", plugin_support.RECORDS)  # a later registration follows
        assert_delivered(world.run(deliver, BackendSpec("test-filestore"), PayloadSpec("test-records2", 400)))


@local_only
def test_a_registration_a_worker_cannot_find_fails_clearly(clean_registry: None, tmp_path) -> None:
    module = tmp_path / "gone_plugin.py"
    module.write_text("from plugin_support import FileStore\n\nclass Gone(FileStore):\n    name = 'test-gone'\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import gone_plugin

        register_backend(gone_plugin.Gone)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("gone_plugin", None)
    module.unlink()  # the workers cannot import it any more
    with LocalWorld(2, timeout=60) as world:
        with pytest.raises(GroupError, match=r"rank 1: could not make rank 0's registrations .* here: .*gone_plugin"):
            world.run(plugin_support.worker_pid)


# ----------------------------------------------------------------------- declared resources


class _Declared(FileStore):
    name = "test-declared"
    resources = ("{tmp}/ipcbtest-declared-{pid}-*",)


def test_declared_resources_are_found_and_cleaned(clean_registry: None, tmp_path, capsys) -> None:
    import tempfile

    from pytest_ipcbench.backends.base import declared_resources
    from pytest_ipcbench.commands import main

    register_backend(_Declared)
    assert "{tmp}/ipcbtest-declared-{pid}-*" in declared_resources()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    mine = os.path.join(tempfile.gettempdir(), f"ipcbtest-declared-{os.getpid()}-a")
    orphan = os.path.join(tempfile.gettempdir(), f"ipcbtest-declared-{dead_pid}-b")
    os.mkdir(mine)
    os.mkdir(orphan)
    try:
        found = {str(x.path): x for x in names.find_ours(patterns=declared_resources())}
        assert found[mine].pid == os.getpid() and found[mine].alive
        assert found[orphan].pid == dead_pid and not found[orphan].alive
        # this process's own: the declared one (a session-long segment of another test may be there too)
        assert [str(x.path) for x in names.find_ours(os.getpid(), declared_resources())
                if "ipcbtest-declared" in str(x.path)] == [mine]
        # a dry run only: a real one would remove other dead processes' leftovers on this machine
        assert main(["clean", "--dry-run", "--min-age", "0"]) == 0  # the orphan is new
        out = capsys.readouterr().out
        assert f"would remove {orphan} (owner {dead_pid}, dead)" in out and mine not in out
    finally:
        names.remove(names.Path(mine))
        names.remove(names.Path(orphan))


# ----------------------------------------------------------------------------- ipcbench run


def test_ipcbench_run_checks_names_against_the_registry_and_runs_plugins(clean_registry: None, capsys) -> None:
    from pytest_ipcbench.commands import main
    from pytest_ipcbench.runner.job import RunOptions
    from pytest_ipcbench.runner.matrix import build_matrix

    with pytest.raises(ValueError, match=r"unknown backend 'fifo'; choose from lmdb, .*, zmq"):
        RunOptions(backends=["fifo"])
    with pytest.raises(ValueError, match=r"unknown payload kind 'json'; choose from array1d, .*, tiny, or buffer"):
        RunOptions(kinds=["json"])
    assert main(["run", "--backends", "shm,fifo", "--list"]) == 2
    assert "ipcbench run: unknown backend 'fifo'; choose from lmdb" in capsys.readouterr().err

    register_backend(FileStore)
    register_payload("test-records", records_kind)
    assert "test-filestore" in RunOptions().backends  # the default: every registered backend
    ours = build_matrix("quick", backends=["test-filestore"], kinds=["test-records", "buffer"],
                        scenarios=["broadcast", "stream", "pingpong"], modes=["native"])
    assert [c.label for c in ours] == [  # the level's ndarray sizes; no stream: a store
        "broadcast test-filestore/native test-records-10KB r4",
        "broadcast test-filestore/native test-records-1MB r4",
        "pingpong test-filestore/native buffer-1B r2",
        "pingpong test-filestore/native buffer-1MB r2",
    ]
    default = build_matrix("quick", scenarios=["broadcast"], modes=["bytes"])
    assert {c.payload_kind for c in default} == {"dict", "ndarray", "test-records"}  # a plugin kind runs by default
    assert {"test-filestore", "shm"} <= {c.backend for c in default}
