"""The MPI methods' package keeps to the layout: small modules, no import of the report, one harness."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest_ipcbench

PACKAGE = Path(pytest_ipcbench.__file__).resolve().parent
MAX_LINES = 600


def _modules() -> list[Path]:
    return sorted((PACKAGE / "mpi_methods").glob("*.py")) + [PACKAGE / "report" / "mpi_methods.py"]


def _imported(path: Path) -> set[str]:
    """Every module named by an import anywhere in ``path`` (functions included), relative ones
    resolved against the package."""
    package = ["pytest_ipcbench", *path.parent.relative_to(PACKAGE).parts]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            found.add(".".join(base + ([node.module] if node.module else [])))
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


def test_no_module_is_over_the_size_limit() -> None:
    sizes = {p.relative_to(PACKAGE).as_posix(): len(p.read_text().splitlines()) for p in _modules()}
    assert [name for name, n in sizes.items() if n > MAX_LINES] == [], sizes


def test_the_methods_never_import_the_report_nor_a_timer_of_its_own() -> None:
    for path in sorted((PACKAGE / "mpi_methods").glob("*.py")):
        imported = _imported(path)
        assert not [m for m in imported if m.startswith("pytest_ipcbench.report")], path.name
        source = path.read_text()
        assert "Wtime" not in source and "getloadavg" not in source, path.name


def test_the_report_takes_the_methods_constants_from_the_package() -> None:
    import pytest_ipcbench.mpi_methods as s4
    import pytest_ipcbench.report.mpi_methods as rep

    assert rep.SCENARIO is s4.SCENARIO and rep.CONFIG_ORDER is s4.CONFIG_ORDER
    assert rep.SHAPE_OF_PAYLOAD is s4.SHAPE_OF_PAYLOAD and rep.SHAPE_TITLES is s4.SHAPE_TITLES
    source = (PACKAGE / "report" / "mpi_methods.py").read_text()
    assert '"Small"' not in source.split("CPP_SIZE_LABELS")[0]  # no copied configuration map
    assert "2000000" not in source and "2_000_000" not in source
