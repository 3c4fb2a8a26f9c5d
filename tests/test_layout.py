"""The layout docs/design.md promises (rule 9, Layers, rule 14), read from the code: imports
run one way (audit <- portal <- instances <- billing <- demo), no import cycles, no module past
~500 lines,
and an app in one idiom: at its top only the files with a Django role, then layer folders
(models/, services/, selectors/, views/, api/) whose modules are named by the app's topic words,
the same words in every layer.

Every import counts, at module level or inside a function: an import hidden in a function is
still a dependency, and hiding one is how cycles were kept before.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = {"audit": 0, "portal": 1, "instances": 2, "billing": 3, "demo": 4}
# The places that gather every app (docs/design.md rule 9: the root URLconf and settings).
GATHERERS = {"portal.urls", "portal.settings", "portal.celery", "portal.wsgi", "portal.asgi"}
MAX_LINES = 520

# The idiom (docs/design.md, Layers). At an app's top: the files with a Django role, the layer
# folders, and the folders any app may have.
# middleware, signals and context_processors are Django's own conventional module names
# (MIDDLEWARE's dotted paths, the receivers an AppConfig.ready() imports, TEMPLATES' context
# processors), and permissions is DRF's, so they count as roles too.
DJANGO_ROLES = frozenset(
    {
        "apps",
        "admin",
        "urls",
        "tasks",
        "panels",
        "metrics",
        "forms",
        "middleware",
        "signals",
        "context_processors",
        "permissions",
    }
)
LAYER_FOLDERS = ("models", "services", "selectors", "views", "api")
ANY_APP_FOLDERS = frozenset({"lib", "management", "migrations", "templatetags"})


@dataclass(frozen=True)
class Idiom:
    """What one app adds to the idiom: its own top-level folders (or files), the topic words its
    layers' modules are named by, the few modules a layer has that are not a topic (helpers of
    that layer), and the parts of a topic that is a sub-package in a layer."""

    folders: frozenset[str] = frozenset()
    topics: frozenset[str] = frozenset()
    helpers: dict[str, frozenset[str]] = field(default_factory=dict)
    parts: dict[str, frozenset[str]] = field(default_factory=dict)


IDIOMS = {
    "instances": Idiom(
        # providers/: the cloud adapters; data/: the catalog's data files; agent/: the host
        # agent, a program of its own.
        folders=frozenset({"providers", "data", "agent"}),
        topics=frozenset(
            {
                "catalog",
                "orders",
                "admission",
                "approvals",
                "hosts",
                "jobs",
                "pools",
                "telemetry",
                "spot_recovery",
                "leases",
                "idle",
                "quotas",
                "costs",
                "headroom",
                "cloud",
                "reconcile",
                "simulated",
                "webhooks",
                "notebooks",
                "clusters",
                "mig",
            }
        ),
        helpers={
            "models": frozenset({"fields"}),
            "services": frozenset({"transitions", "queue"}),
            "api": frozenset({"fields"}),
        },
        parts={
            "pools": frozenset({"lifecycle", "checks", "schedules", "plan", "autoscaler"}),
            "jobs": frozenset({"lifecycle", "submit", "runs", "recovery"}),
        },
    ),
    # The demo has one layer: what seed_demo plays. session is one order of history's script.
    "demo": Idiom(
        topics=frozenset({"history", "pools", "jobs", "present", "sample_cur"}),
        helpers={"services": frozenset({"session"})},
    ),
    # registry.py is audit's own top-level file, not a folder: the project-wide wiring registry
    # (docs/design.md rule 9), like NetBox's netbox/registry.py. verify_rows is the third pass
    # of verify, kept apart for its size.
    "audit": Idiom(
        folders=frozenset({"registry"}),
        topics=frozenset(
            {"events", "chain", "retention", "export", "witness", "verify", "filters", "status"}
        ),
        helpers={"services": frozenset({"verify_rows"})},
    ),
    # billing has no folders of its own (static/ holds no Python). filters documents the cost
    # report's query parameters for the API's schema, a helper of the api layer.
    "billing": Idiom(
        topics=frozenset({"prices", "metering", "rollups", "budgets", "cur", "reports"}),
        helpers={"api": frozenset({"filters"})},
    ),
    # portal is also the Django project: its settings, Celery app and WSGI and ASGI entry
    # points sit at its top (GATHERERS above); lib/ holds the plumbing every app uses.
    "portal": Idiom(
        folders=frozenset({"settings", "celery", "wsgi", "asgi"}),
        topics=frozenset(
            {
                "people",
                "notices",
                "tokens",
                "webhooks",
                "sso",
                "account",
                "dashboard",
                "health",
                "errors",
                "metrics",
            }
        ),
    ),
}


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


def _python_entries(folder: Path) -> dict[str, Path]:
    """The modules and packages directly in ``folder`` by name (a folder counts when it holds
    Python anywhere below it; __init__, caches and folders of templates or static files do not)."""
    found = {}
    for path in folder.iterdir():
        if path.suffix == ".py" and path.stem != "__init__":
            found[path.stem] = path
        elif path.is_dir() and path.name != "__pycache__" and any(path.rglob("*.py")):
            found[path.name] = path
    return found


def _strays(app: str, idiom: Idiom, root: Path = ROOT) -> list[str]:
    """What sits at an app's top outside its Django roles, layers and folders; and a layer that
    is a module, not a folder of topic modules."""
    allowed = DJANGO_ROLES | set(LAYER_FOLDERS) | ANY_APP_FOLDERS | idiom.folders
    entries = _python_entries(root / app)
    strays = [f"{app}/{entries[name].name}" for name in sorted(set(entries) - allowed)]
    strays += [
        f"{app}/{name}.py is a layer: make it a folder of topic modules"
        for name in LAYER_FOLDERS
        if name in entries and entries[name].is_file()
    ]
    return strays


def _misnamed(app: str, idiom: Idiom, root: Path = ROOT) -> list[str]:
    """Modules of an app's layers named by no topic word of the app (nor a helper of that
    layer), and parts of a topic sub-package the idiom does not list."""
    wrong = []
    for layer in LAYER_FOLDERS:
        folder = root / app / layer
        if not folder.is_dir():
            continue
        allowed = idiom.topics | idiom.helpers.get(layer, frozenset())
        for name, path in sorted(_python_entries(folder).items()):
            if name not in allowed:
                wrong.append(f"{app}/{layer}/{path.name}")
            elif path.is_dir():
                extra = set(_python_entries(path)) - idiom.parts.get(name, frozenset())
                wrong += [f"{app}/{layer}/{name}/{part}.py" for part in sorted(extra)]
    return wrong


def test_every_app_is_in_the_idiom():
    assert set(IDIOMS) == set(LAYERS)


def test_an_apps_top_holds_only_its_django_roles_and_layers():
    assert [stray for app, idiom in IDIOMS.items() for stray in _strays(app, idiom)] == []


def test_an_apps_layers_are_named_by_its_topic_words():
    """The same word in every layer: a topic is pools in models, services, selectors, views
    and api alike, never pool_reads or pool_views beside them."""
    assert [name for app, idiom in IDIOMS.items() for name in _misnamed(app, idiom)] == []


def test_every_topic_word_names_a_module():
    """The list of words stays the app's vocabulary, not a list of allowances."""
    for app, idiom in IDIOMS.items():
        used = {
            name
            for layer in LAYER_FOLDERS
            if (ROOT / app / layer).is_dir()
            for name in _python_entries(ROOT / app / layer)
        }
        assert sorted(idiom.topics - used) == [], app


# The gpu command-line tool installs on a laptop without Django (pyproject's cli extra): it
# talks to the portal only through the REST API, never by importing it.
CLI_PACKAGE = "gpucli"
CLI_FORBIDDEN = ("django", "rest_framework", "celery", *LAYERS, "tests")


def _cli_imports() -> dict[str, set[str]]:
    found = {}
    for path in sorted((ROOT / CLI_PACKAGE).rglob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names.add(node.module or "")
        found[str(path.relative_to(ROOT))] = names
    return found


def test_the_cli_imports_neither_django_nor_the_portals_apps():
    wrong = {
        module: sorted(name for name in names if name.split(".")[0] in CLI_FORBIDDEN)
        for module, names in _cli_imports().items()
    }
    assert {module: names for module, names in wrong.items() if names} == {}
    assert "gpucli/main.py" in wrong


def test_no_cli_module_past_the_size_a_reader_can_hold():
    long = {
        str(path.relative_to(ROOT)): count
        for path in (ROOT / CLI_PACKAGE).rglob("*.py")
        if (count := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_the_checks_see_what_they_should():
    """The graph resolves the shapes of import the code uses, and a cycle is found."""
    graph = _graph()
    assert "instances.services.hosts" in graph["instances.services.orders"]  # from x.y import z
    assert "portal.permissions" in graph["instances.services.hosts"]  # from x import module
    assert "instances.services" in graph["instances.tasks"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a -> b -> c -> a"]


def test_the_idiom_checks_find_what_breaks_it(tmp_path):
    """A stray module at the top, a layer left a module, a synonym in a layer and an unlisted
    part of a topic sub-package are all found (the instances tree passes, see above)."""
    app = tmp_path / "shop"
    for name in (
        "apps.py",
        "urls.py",
        "pool_views.py",
        "selectors.py",
        "models/__init__.py",
        "models/orders.py",
        "models/fields.py",
        "services/__init__.py",
        "services/pools/__init__.py",
        "services/pools/lifecycle.py",
        "services/pools/extra.py",
        "services/recovery.py",
        "api/fields.py",
        "api/serializers.py",
        "static/shop/chart.js",
    ):
        (app / name).parent.mkdir(parents=True, exist_ok=True)
        (app / name).write_text("")
    idiom = Idiom(
        topics=frozenset({"orders", "pools"}),
        helpers={"models": frozenset({"fields"})},
        parts={"pools": frozenset({"lifecycle"})},
    )
    assert _strays("shop", idiom, root=tmp_path) == [
        "shop/pool_views.py",
        "shop/selectors.py is a layer: make it a folder of topic modules",
    ]
    assert _misnamed("shop", idiom, root=tmp_path) == [
        "shop/services/pools/extra.py",
        "shop/services/recovery.py",
        "shop/api/fields.py",
        "shop/api/serializers.py",
    ]


def test_one_spelling_of_utilization():
    """docs/design.md's one word per thing: utilization, never utilisation, in the code, its
    pages and its docs (the migrations keep what they said when they were written)."""
    roots = [*LAYERS, "templates", "docs"]
    found = sorted(
        str(path.relative_to(ROOT))
        for root in roots
        for path in (ROOT / root).rglob("*")
        if path.suffix in {".py", ".html", ".md", ".js"}
        and "migrations" not in path.parts
        and "utilis" in path.read_text(encoding="utf-8").lower()
    )
    assert found == []
