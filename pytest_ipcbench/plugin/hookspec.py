"""Hooks that other pytest plugins (or a conftest.py) implement to extend pytest-ipcbench.

Declared with pytest's own hook machinery (``pytest_addhooks``), as pytest-benchmark does: a
plugin implements a function of the same name; pytest calls every implementation.
"""

from __future__ import annotations

from typing import Any

import pytest


@pytest.hookspec
def pytest_ipcbench_update_environment(config: pytest.Config, env: dict[str, Any]) -> None:
    """Add to (or change) the environment record of this run, once, before the first result is
    recorded; it goes into results.json and the report header. ``env`` is the record that
    :func:`pytest_ipcbench.core.envinfo.collect` built (host, CPU, cores, MPI, packages, git...).

    Example (conftest.py)::

        def pytest_ipcbench_update_environment(config, env):
            env["cluster_partition"] = os.environ.get("SLURM_JOB_PARTITION", "")
    """
