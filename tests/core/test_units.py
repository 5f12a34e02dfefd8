"""core/units.py: the one place that formats times, sizes, rates, shares and ratios."""

from __future__ import annotations

import math

import pytest

from pytest_ipcbench.core.units import (
    duration_label,
    format_bytes,
    format_percent,
    format_rate,
    format_ratio,
    format_time,
    parse_size,
)


def test_format_time_picks_the_unit() -> None:
    assert format_time(2.5e-6) == "2.5 µs"
    assert format_time(510e-6) == "510 µs"
    assert format_time(0.0123) == "12.3 ms"
    assert format_time(2) == "2 s"
    assert format_time(3.268, digits=4) == "3.268 s"
    assert format_time(4e-10) == "0.4 ns"
    assert format_time(None) == format_time(math.nan) == "-"


def test_sizes_rates_shares_ratios() -> None:
    assert format_bytes(11_000) == "11 KB" and format_bytes(1_100_000) == "1.1 MB"
    assert format_bytes(602_000_000) == "602 MB" and format_bytes(12) == "12 B"
    assert format_rate(1.5e9) == "1,500 MB/s" and format_rate(2.5e7) == "25 MB/s"
    assert format_percent(0.004) == "0.4%" and format_percent(0.42) == "42%" and format_percent(None) == "-"
    assert format_ratio(1.234) == "1.23x" and format_ratio(12.34) == "12.3x" and format_ratio(123.4) == "123x"


def test_duration_labels_are_exact_and_compact() -> None:
    assert [duration_label(s) for s in (0, 1e-5, 1e-4, 1e-3, 1e-2, 1.5)] == ["0", "10us", "100us", "1ms", "10ms", "1.5s"]


def test_fractional_bytes_are_refused() -> None:
    # 1.5B was silently taken as 1 byte
    with pytest.raises(ValueError, match=r"bad size '1.5B': 1.5 bytes is not a whole number of bytes"):
        parse_size("1.5B")
    with pytest.raises(ValueError, match="not a whole number of bytes"):
        parse_size("0.0001KB")
    assert parse_size("1.5KB") == 1500 and parse_size("0.5KiB") == 512 and parse_size("2.0B") == 2


def test_a_size_that_fits_in_memory_but_not_with_every_ranks_copies_is_refused(monkeypatch) -> None:
    from pytest_ipcbench.core import units

    monkeypatch.setattr(units, "available_memory", lambda: 24 * 2**30)
    units.admit_sizes([10**9], [4])  # 9 GB of copies in 24 GiB: admitted
    with pytest.raises(units.SizeTooLarge, match=r"size 10GiB \(10.7 GB\) with 4 ranks needs about 96.6 GB "
                                                 r"\(9 copies: 2 a rank and 1 shared\), but 25.8 GB of memory"):
        units.admit_sizes([1000, 10 * 2**30], [2, 4])


def test_a_size_whose_segment_does_not_fit_in_dev_shm_is_refused_for_a_backend_that_puts_it_there(monkeypatch) -> None:
    from pytest_ipcbench.core import units

    monkeypatch.setattr(units, "available_memory", lambda: 24 * 2**30)
    monkeypatch.setattr(units, "shm_free", lambda: 64 * 2**20)
    units.admit_sizes([100 * 10**6], [2], "--sizes: size")  # lmdb, zmq...: /dev/shm does not matter
    with pytest.raises(units.SizeTooLarge, match=r"--sizes: size 100MB \(100 MB\) needs 100 MB in /dev/shm "
                                                 r"\(the backend keeps the payload there\), but /dev/shm has 67.1 MB free"):
        units.admit_sizes([100 * 10**6], [2], "--sizes: size", in_shm=True)


def test_backends_that_keep_the_payload_in_dev_shm_say_so() -> None:
    from pytest_ipcbench.backends import holds_payload_in_shm

    assert holds_payload_in_shm("shm") and holds_payload_in_shm(["lmdb", "mpi-shm-win"])
    assert not holds_payload_in_shm(["lmdb", "zmq", "no-such-backend"])


def test_available_memory_is_read_from_this_machine() -> None:
    from pytest_ipcbench.core.units import available_memory, machine_memory

    assert 0 < available_memory() <= machine_memory()
