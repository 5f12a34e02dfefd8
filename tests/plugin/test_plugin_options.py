"""Options, ini keys and markers of the ipcbench plugin: parsing, layers, errors, test ids."""

from __future__ import annotations

import pytest

from pytest_ipcbench.backends.base import backend_names
from pytest_ipcbench.core.checks import OptionError
from pytest_ipcbench.plugin.session import IpcSession, backend_fixtures, payload_specs
from pytest_ipcbench.plugin.settings import OPTIONS, Settings, default_ranks


def check(field: str, value: object, where: str = "--opt") -> object:
    return OPTIONS[field].checked(value, where)


# ------------------------------------------------------------------------- the options' checks


def test_lists_keep_order_and_drop_repeats() -> None:
    """A repeated value counts once: `--ipc-sizes 1KB,1KB` must not run every case twice."""
    assert check("backends", "shm, lmdb,shm") == ("shm", "lmdb")
    assert check("backends", "all") == backend_names()
    assert check("backends", ["zmq", "mp-queue"]) == ("zmq", "mp-queue")
    assert check("modes", "both") == ("bytes", "native")
    assert check("modes", "native") == ("native",)
    assert check("payloads", "tiny,ndarray") == ("tiny", "ndarray")
    assert check("sizes", "1KB, 1MB,64KiB,1KB,1000") == (1000, 10**6, 65536)
    assert check("sizes", ["600MB"]) == (600 * 10**6,)
    assert check("ranks", "2,4,2") == (2, 4)
    assert check("ranks", 3) == (3,)
    assert check("timeout", "10") == 10.0
    assert check("timeout", "2.5s") == 2.5
    assert check("count", "yes") is True and check("count", "false") is False


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("backends", "shmm", "--opt: unknown backend 'shmm' (choose from lmdb, mp-queue, mpi-bcast"),
        ("backends", "", "--opt: no backend given"),
        ("modes", "fast", "--opt: unknown mode 'fast'"),
        ("payloads", "json", "--opt: unknown payload kind 'json'"),
        ("sizes", "1QB", "--opt: bad size '1QB'"),
        ("sizes", "0", "--opt: bad size '0' (must be more than 0 bytes)"),
        ("sizes", "１０KB", "--opt: bad size '１０KB'"),
        ("sizes", ",".join(f"{n}KB" for n in range(1, 100)), "--opt: 99 sizes: at most 64"),
        ("ranks", "two", "--opt: must be a whole number from 1 to 256"),
        ("ranks", "0", "--opt: must be a whole number from 1 to 256"),
        ("ranks", "１０", "--opt: must be a whole number from 1 to 256; got '１０', which holds characters other"),
        ("ranks", "٣", "--opt: must be a whole number from 1 to 256; got '٣'"),
        ("ranks", "100000", "--opt: must be a whole number from 1 to 256"),
        ("timeout", "soon", "--opt: must be a finite number of seconds > 0, at most 604800"),
        ("timeout", "0", "--opt: must be a finite number of seconds > 0"),
        ("timeout", "-1", "--opt: must be a finite number of seconds > 0"),
        ("timeout", "inf", "--opt: must be a finite number of seconds > 0, at most 604800"),
        ("timeout", "1e12", "--opt: must be a finite number of seconds > 0, at most 604800"),
        ("count", "maybe", "--opt: must be true or false"),
    ],
)
def test_errors_name_the_value_and_its_source(field: str, value: str, expected: str) -> None:
    with pytest.raises(OptionError) as info:
        check(field, value)
    assert str(info.value).startswith(expected)


def test_default_ranks() -> None:
    assert default_ranks(None) == (2, 4)  # local
    assert default_ranks(4) == (2, 4)
    assert default_ranks(2) == (2,)
    assert default_ranks(3) == (2, 3)
    assert default_ranks(1) == (2,)  # skipped with a reason, not silently nothing


def test_tiny_appears_once_not_per_size() -> None:
    specs = payload_specs(["ndarray", "tiny"], [1000, 10**6])
    assert [s.id for s in specs] == ["ndarray-1KB", "ndarray-1MB", "tiny-64B"]


# ---------------------------------------------------------------------------- the matrix


def _ids(session: IpcSession, names: list[str], marker: dict | None = None) -> list[str]:
    matrix = session.matrix(names, marker or {})
    assert matrix is not None
    return matrix.ids


def test_matrix_ids_read_backend_payload_size_ranks_mode() -> None:
    s = IpcSession(Settings(backends=("shm", "zmq"), sizes=(10**6,), ranks=(4,), payloads=("ndarray",)))
    ids = _ids(s, ["ipc_group", "ipc_ranks", "ipc_backend", "ipc_mode", "ipc_payload"])
    assert ids == [
        "shm-ndarray-1MB-r4-bytes",
        "shm-ndarray-1MB-r4-native",
        "zmq-ndarray-1MB-r4-bytes",
        "zmq-ndarray-1MB-r4-native",
    ]


def test_matrix_per_backend_fixture_and_marker() -> None:
    s = IpcSession(Settings(sizes=(1000,), payloads=("dict", "tiny")))
    names = ["shm_backend", "ipc_mode", "ipc_payload"]
    assert _ids(s, names, {"modes": ("native",)}) == ["shm-dict-1KB-native", "shm-tiny-64B-native"]
    assert _ids(s, names, {"modes": ("native",), "sizes": (2000,), "payloads": ("dict",)}) == [
        "shm-dict-2KB-native"
    ]
    assert s.matrix(["tmp_path"], {}) is None


def test_matrix_skips_what_cannot_run_with_the_reason() -> None:
    s = IpcSession(Settings(backends=("mpi-bcast",), ranks=(2,), modes=("bytes",)))
    matrix = s.matrix(["ipc_backend", "ipc_mode", "ipc_ranks"], {})
    assert matrix is not None and matrix.ids == ["mpi-bcast-r2-bytes"]
    (param,) = matrix.values
    (mark,) = param.marks
    assert mark.name == "skip" and "mpi" in mark.kwargs["reason"].lower()


def test_matrix_keeps_the_local_backends_locally() -> None:
    s = IpcSession(Settings(backends=("mp-queue", "shm", "lmdb", "zmq"), ranks=(2, 4), modes=("bytes",)))
    matrix = s.matrix(["ipc_backend", "ipc_mode", "ipc_ranks"], {})
    assert matrix is not None and len(matrix.ids) == 8
    assert [list(p.marks) for p in matrix.values] == [[]] * 8


def test_matrix_marker_that_excludes_everything_gives_one_skipped_item() -> None:
    s = IpcSession(Settings(backends=("shm",)))
    matrix = s.matrix(["ipc_backend", "ipc_mode"], {"backends": ("zmq",)})
    assert matrix is not None and matrix.ids == ["unselected"]
    assert "nothing selected for ipc_backend" in matrix.values[0].marks[0].kwargs["reason"]


def test_backend_fixture_names() -> None:
    fixtures = backend_fixtures()
    assert fixtures["mpi_pkl5_backend"] == "mpi-pkl5"
    assert fixtures["mp_queue_backend"] == "mp-queue"
    assert fixtures["mpi_shm_win_backend"] == "mpi-shm-win"
    assert len(fixtures) == len(backend_names()) >= 8


# ------------------------------------------------------------------- through pytest itself


def test_bad_option_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--ipc-backends", "shm,shmm")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--ipc-backends: unknown backend 'shmm' (choose from lmdb, mp-queue, *, shm, zmq*"])


def test_bad_ini_value_names_the_ini_key(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nipc_sizes = 1KB, 1QB\n")
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini ipc_sizes: bad size '1QB'*"])


def test_bad_environment_value_names_the_variable(pytester: pytest.Pytester, monkeypatch) -> None:
    monkeypatch.setenv("IPCBENCH_RANKS", "2,x")
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*env IPCBENCH_RANKS: must be a whole number from 1 to 256 (got 'x')*"])


def test_a_size_beyond_the_machine_is_a_usage_error_naming_both(pytester: pytest.Pytester, monkeypatch) -> None:
    monkeypatch.setenv("IPCBENCH_SIZES", "1KB,99999999999999999999GB")
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*env IPCBENCH_SIZES: size '99999999999999999999GB' (1.00e+29 bytes) is more than this machine's "
         "memory (* GB)*"]
    )


def test_layers_command_line_over_env_over_ini(pytester: pytest.Pytester, monkeypatch) -> None:
    pytester.makeini("[pytest]\nipc_sizes = 1KB\nipc_modes = native\nipc_ranks = 3\n")
    monkeypatch.setenv("IPCBENCH_MODES", "bytes")
    pytester.makepyfile(
        """
        from pytest_ipcbench.plugin.session import get_session
        def test_settings(request):
            s = get_session(request.config).settings
            assert s.sizes == (2000,) and s.sources["sizes"] == "--ipc-sizes"
            assert s.modes == ("bytes",) and s.sources["modes"] == "env IPCBENCH_MODES"
            assert s.ranks == (3,) and s.sources["ranks"] == "ini ipc_ranks"
            assert s.timeout == 300 and s.sources["timeout"] == "default"
        """
    )
    result = pytester.runpytest("--ipc-sizes", "2KB")
    result.assert_outcomes(passed=1)


def test_marker_keywords_are_checked(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        @pytest.mark.ipcbench(size="1MB")
        def test_x(ipc_payload): pass
        """
    )
    result = pytester.runpytest()
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*@pytest.mark.ipcbench got unknown keyword 'size' (allowed: backends, sizes, ranks, modes*"])


def test_marker_sets_sizes_and_ranks(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        @pytest.mark.ipcbench(sizes=["3KB"], ranks=3, payloads="array1d")
        def test_x(ipc_payload, ipc_ranks):
            assert ipc_payload.size == 3000 and ipc_ranks == 3
        """
    )
    result = pytester.runpytest("-v")
    result.stdout.fnmatch_lines(["*test_x[[]array1d-3KB-r3[]] PASSED*"])
    result.assert_outcomes(passed=1)


def test_without_mpi_the_tests_are_not_marked_mpi(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_x(ipc_ranks, request):
            assert request.node.get_closest_marker("mpi") is None
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=2)  # r2, r4: run locally, not skipped by pytest-mpi


def test_fixture_modules_of_the_package_are_registered(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--fixtures")
    listed = result.stdout.str()
    for name in ("ipc_group", "ipc_backend", "mp_queue_backend", "shared_array", "mpi_method"):
        assert f"\n{name} -- " in listed, name


def test_results_go_to_the_report_hook_only_when_recorded(pytester: pytest.Pytester, monkeypatch) -> None:
    import sys
    import types

    calls: list[tuple[object, object]] = []
    fake = types.ModuleType("pytest_ipcbench.report")
    fake.write_report = lambda resultset, folder: calls.append((resultset, folder))  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pytest_ipcbench.report", fake)
    pytester.makepyfile(
        """
        from pytest_ipcbench.results.results import Result
        from pytest_ipcbench.plugin.session import get_session

        def test_records(request):
            get_session(request.config).record(
                Result("bcast", "shm", "bytes", "ndarray", 1000, 2, {"completion": [0.1, 0.2]})
            )
        """
    )
    result = pytester.runpytest("--ipc-report", "out")
    result.assert_outcomes(passed=1)
    ((resultset, folder),) = calls
    # the recorded result, and the in-run references added for `ipcbench compare`
    assert [r.key for r in resultset.results if r.scenario not in ("copy", "reference")] == [
        "bcast/shm/bytes/ndarray/1000/r2"]
    # copies are references too, when an earlier test of this process measured some (a module cache)
    assert {"bcast", "reference"} <= {r.scenario for r in resultset.results} <= {"bcast", "reference", "copy"}
    assert str(folder) == "out"
    calls.clear()
    pytester.makepyfile("def test_records():\n    pass\n")
    pytester.runpytest("--ipc-report", "out").assert_outcomes(passed=1)
    assert calls == []  # nothing recorded: no report


def test_ipc_report_onto_a_file_is_a_clear_failure(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        from pytest_ipcbench.results.results import Result
        from pytest_ipcbench.plugin.session import get_session

        def test_records(request):
            get_session(request.config).record(
                Result("bcast", "shm", "bytes", "ndarray", 1000, 2, {"completion": [0.1, 0.2]})
            )
        """
    )
    (pytester.path / "taken").write_text("a file")
    result = pytester.runpytest("--ipc-report", "taken")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*ipcbench: could not write the report*", "*taken is not a folder*"])
    assert "Traceback" not in result.stdout.str()


def test_get_session_without_the_plugin(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        from pytest_ipcbench.plugin.session import get_session

        def test_x(request):
            with pytest.raises(RuntimeError, match="not active"):
                get_session(request.config)
        """
    )
    pytester.runpytest("-p", "no:ipcbench").assert_outcomes(passed=1)


def test_ipc_wait_layers_and_errors(pytester: pytest.Pytester, monkeypatch) -> None:
    monkeypatch.delenv("IPCBENCH_WAIT", raising=False)
    pytester.makeini("[pytest]\nipc_wait = backoff\n")
    pytester.makepyfile(
        """
        from pytest_ipcbench.backends.base import default_wait
        from pytest_ipcbench.plugin.session import get_session
        def test_settings(request):
            s = get_session(request.config).settings
            assert s.wait == "block" and s.sources["wait"] == "--ipc-wait"
            assert default_wait() == "block"  # every backend made in this run waits so
        """
    )
    result = pytester.runpytest("--ipc-wait", "block")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*wait=block*"])
    result = pytester.runpytest("--ipc-wait", "nap")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*--ipc-wait: must be one of auto, block, backoff (got 'nap')*"])


def test_a_plugin_adds_to_the_environment_record(pytester: pytest.Pytester) -> None:
    """The session owns the environment record; ``pytest_ipcbench_update_environment`` extends it."""
    pytester.makeconftest(
        """
        def pytest_ipcbench_update_environment(config, env):
            env["partition"] = "debug"
            env["cores_seen_by_plugin"] = env["cores"]
        """
    )
    pytester.makepyfile(
        """
        from pytest_ipcbench.results.results import Result
        from pytest_ipcbench.plugin.session import get_session

        def test_records(request):
            session = get_session(request.config)
            session.record(Result("bcast", "shm", "bytes", "ndarray", 1000, 2, {"completion": [0.1, 0.2]}))
            env = session.run_record.env
            assert env["partition"] == "debug" and env["cores_seen_by_plugin"] == env["cores"] > 0
            assert "python" in env and "mpi" in env  # what envinfo.collect builds is there too
        """
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)


@pytest.mark.parametrize(("env", "expected"), [
    ({"IPCBENCH_TIMEOUT": "0"}, "env IPCBENCH_TIMEOUT: must be a finite number of seconds > 0"),
    ({"IPCBENCH_INJECT": "bogus=2"}, "env IPCBENCH_INJECT: unknown backend 'bogus'"),
    ({"IPCBENCH_NODE": "nan"}, "env IPCBENCH_NODE='nan': set by ipcbench itself"),
    ({"IPCBENCH_RANKS": "٣"}, "env IPCBENCH_RANKS: must be a whole number from 1 to 256; got '٣'"),
])
def test_bad_environment_values_are_usage_errors_naming_the_variable(pytester: pytest.Pytester, monkeypatch,
                                                                      env: dict, expected: str) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    pytester.makepyfile("def test_x(ipc_ranks): pass")
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{expected}*"])


def test_repeated_sizes_do_not_multiply_the_matrix(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(ipc_payload): pass")
    result = pytester.runpytest("--ipc-sizes", "1KB,1KB,1000", "--ipc-payloads", "ndarray", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["*1 test collected*"])
