"""The references moved to :mod:`pytest_ipcbench.backends.references` (beside their backends);
this module keeps the old import path working."""

from ..backends.references import *  # noqa: F401,F403
from ..backends.references import __all__  # noqa: F401
