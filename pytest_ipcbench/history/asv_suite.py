"""The asv suite for another project, at the path its ``benchmarks/bench_ipcbench.py`` imports.

The code is :mod:`pytest_ipcbench.runner.asv_suite` (it runs ``ipcbench run``'s matrix, a floor
above history); this path stays because adopters' asv suites name it (``ipcbench init-ci --asv``
writes ``from pytest_ipcbench.history.asv_suite import *``).
"""

from ..runner import asv_suite as _suite
from ..runner.asv_suite import *  # noqa: F401,F403 (Declared; DeclaredCounters where counters are measured)
from ..runner.asv_suite import DeclaredCounters, tracked_counters  # noqa: F401

__all__ = list(_suite.__all__)
