"""``python -m pytest_ipcbench.seed004``: the older spelling, which the README documents, of
``python -m pytest_ipcbench.mpi_methods``. Import :mod:`pytest_ipcbench.mpi_methods` itself."""

import sys

from pytest_ipcbench.mpi_methods.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
