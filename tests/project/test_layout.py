"""The package's layout holds: no import cycle between modules, dependencies point one way."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "pytest_ipcbench"
# a subpackage may import only from the ones listed (and itself)
ALLOWED = {
    "core": {"core", "shared", "backends"},  # cleanup reclaims shared arrays; group replays backend registrations
    "backends": {"core", "backends"},
    "shared": {"core", "shared"},
    "harness": {"core", "backends", "shared", "harness", "history"},
    "history": {"core", "history"},
    "report": {"core", "backends", "history", "report", "seed004"},
    "seed004": {"core", "backends", "harness", "history", "seed004"},
    "runner": {"core", "backends", "shared", "harness", "history", "report", "seed004", "runner", "plugin"},
    "plugin": {"core", "backends", "shared", "harness", "history", "report", "seed004", "plugin"},
    "commands": {"core", "backends", "shared", "harness", "history", "report", "seed004", "runner", "commands"},
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Modules of the package that ``path`` imports at module level (not inside functions)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("pytest_ipcbench"):
                for alias in node.names:  # "from . import names" imports a module
                    candidate = f"{target}.{alias.name}"
                    sub = PACKAGE.parent / Path(*candidate.split("."))
                    found.add(candidate if sub.with_suffix(".py").exists() or sub.is_dir() else target)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("pytest_ipcbench")}
    return found


def _graph() -> dict[str, set[str]]:
    return {_module_name(p): _imports(p) for p in PACKAGE.rglob("*.py")}


def test_no_import_cycle() -> None:
    graph = _graph()
    done: set[str] = set()

    def visit(node: str, stack: list[str]) -> None:
        if node in stack:
            cycle = stack[stack.index(node):] + [node]
            raise AssertionError("import cycle: " + " -> ".join(cycle))
        if node in done:
            return
        for nxt in graph.get(node, ()):
            if nxt in graph and nxt != node and not node.startswith(nxt + "."):  # a package's own __init__
                visit(nxt, stack + [node])
        done.add(node)

    for module in graph:
        visit(module, [])


def test_dependencies_point_one_way() -> None:
    wrong = []
    for module, imports in _graph().items():
        parts = module.split(".")
        if len(parts) < 2 or parts[1] not in ALLOWED:
            continue
        for target in imports:
            tparts = target.split(".")
            if len(tparts) > 1 and tparts[1] in ALLOWED and tparts[1] not in ALLOWED[parts[1]]:
                wrong.append(f"{module} imports {target}")
    assert not wrong, "\n".join(wrong)
