"""The MPI methods for 1D and ragged 2D data, timed by the one harness.

* :mod:`.configs`: configurations, shapes, the MPI methods' data, what receivers know (:class:`ShapeInfo`);
* :mod:`.methods`: the nine methods (plain classes: prepare / transfer / result / free);
* :mod:`.backend`: each method as a harness backend; :func:`bench_method`, :func:`transfer_once`;
* :mod:`.matrix`: :func:`run_matrix`, configurations x shapes x methods, interleaved rounds;
* ``python -m pytest_ipcbench.mpi_methods`` (:mod:`.__main__`): the command line, under ``mpiexec``.
"""

from .backend import (
    DEFAULT_SETTINGS,
    METRIC,
    QUICK_SETTINGS,
    DataPayload,
    Measurement,
    MethodBackend,
    backend_name,
    bench_method,
    method_backend,
    transfer_once,
    with_transfer_metric,
)
from .configs import (
    CONFIG_NAMES,
    CONFIG_OF_BASE,
    CONFIG_ORDER,
    CONFIGS,
    DEFAULT_CONFIGS,
    FIXTURE_CONFIGS,
    FULL_CONFIGS,
    MODE,
    PAYLOAD_KINDS,
    SCENARIO,
    SHAPE_OF_PAYLOAD,
    SHAPE_TITLES,
    SHAPES,
    Data,
    ShapeInfo,
    build_data,
    config_base,
    config_nbytes,
    config_of_size,
    data_equal,
    data_nbytes,
    parse_configs,
    parse_shapes,
    payload_spec,
)
from .matrix import DEFAULT_CASE_TIME, DEFAULT_ROUNDS, case_line, matrix_settings, run_matrix
from .methods import METHOD_NAMES, METHODS, Method, get_method, parse_methods

__all__ = [
    "CONFIGS", "CONFIG_NAMES", "CONFIG_OF_BASE", "CONFIG_ORDER", "DEFAULT_CASE_TIME", "DEFAULT_CONFIGS",
    "DEFAULT_ROUNDS", "DEFAULT_SETTINGS", "METRIC", "FIXTURE_CONFIGS", "FULL_CONFIGS", "METHODS", "METHOD_NAMES",
    "MODE", "PAYLOAD_KINDS", "QUICK_SETTINGS", "SCENARIO", "SHAPES", "SHAPE_OF_PAYLOAD", "SHAPE_TITLES",
    "Data", "DataPayload", "Measurement", "Method", "MethodBackend", "ShapeInfo", "backend_name",
    "bench_method", "build_data", "case_line", "config_base", "config_nbytes", "config_of_size",
    "data_equal", "data_nbytes", "get_method", "matrix_settings", "method_backend", "parse_configs",
    "parse_methods", "parse_shapes", "payload_spec", "run_matrix", "transfer_once", "with_transfer_metric",
]
