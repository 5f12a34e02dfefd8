"""Our transports through the fixtures a user's own tests take: ipc_group, ipc_bench."""

from pytest_ipcbench import assert_delivered, deliver


def test_every_reader_gets_the_payload(ipc_group, ipc_backend, ipc_payload):
    assert_delivered(ipc_group.run(deliver, ipc_backend, ipc_payload))


def test_benchmarked(ipc_bench, ipc_group, ipc_backend, ipc_payload):
    result = ipc_bench(ipc_backend, ipc_payload, time_budget=0.05)
    assert result.verified.failed == 0
