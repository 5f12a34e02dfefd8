"""asv suite: times the matrix this project declares in [tool.ipcbench] (written by `ipcbench init-ci --asv`).

asv installs this project at each commit; pytest-ipcbench comes from the "matrix" of asv.conf.json
(a git URL or a wheel: it is not on PyPI). `asv run`, `asv continuous main HEAD`, `asv publish`.
"""

from pytest_ipcbench.runner.asv_suite import *  # noqa: F401,F403 (Declared: one benchmark per declared case, setup_cache)
