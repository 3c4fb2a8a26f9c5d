"""The layout DESIGN.md promises, read from the code: imports run one way
(audit <- portal <- instances <- billing <- demo), no import cycles, no module past ~500 lines.

Every import counts, at module level or inside a function: an import hidden in a function is
still a dependency, and hiding one is how cycles were kept before.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = {"audit": 0, "portal": 1, "instances": 2, "billing": 3, "demo": 4}
# The places that gather every app (DESIGN: the root URLconf and settings).
GATHERERS = {"portal.urls", "portal.settings", "portal.celery", "portal.wsgi"}
MAX_LINES = 520


def _modules() -> dict[str, Path]:
    found = {}
    for app in LAYERS:
        for path in (ROOT / app).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                lines.update(range(inner.lineno, inner.end_lineno + 1))
    return lines


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The application modules ``name`` imports (resolved to the longest known module)."""
    tree = ast.parse(path.read_text())
    skip = _type_checking_lines(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            candidates = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for candidate in candidates:
            while candidate and candidate not in modules:
                candidate = candidate.rpartition(".")[0]
            if candidate and candidate != name:
                targets.add(candidate)
    return targets


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def test_imports_run_one_way():
    upward = [
        f"{name} imports {target}"
        for name, targets in _graph().items()
        if name not in GATHERERS
        for target in targets
        if LAYERS[target.split(".")[0]] > LAYERS[name.split(".")[0]]
    ]
    assert upward == []


def _cycles(graph: dict[str, set[str]]) -> list[str]:
    cycles, state = [], {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for target in sorted(graph.get(node, ())):
            # A package's __init__ re-exporting its own modules is not a cycle with them.
            if node.startswith(target + "."):
                continue
            if state.get(target) == "open":
                cycles.append(" -> ".join([*path[path.index(target) :], target]))
            elif target not in state:
                visit(target, [*path, target])
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    return cycles


def test_no_import_cycles():
    assert _cycles(_graph()) == []


def test_no_module_past_the_size_a_reader_can_hold():
    long = {
        name: count
        for name, path in _modules().items()
        if (count := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_the_checks_see_what_they_should():
    """The graph resolves the shapes of import the code uses, and a cycle is found."""
    graph = _graph()
    assert "instances.services.queue" in graph["instances.services.orders"]  # from x.y import z
    assert "portal.permissions" in graph["instances.services.hosts"]  # from x import module
    assert "instances.services" in graph["instances.tasks"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a -> b -> c -> a"]
