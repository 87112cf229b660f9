"""The layout's promises (docs/architecture.md), checked on the source: apps depend one way, the
engine imports no Django, nothing imports the simulated cluster, no import hides in a function
to dodge a cycle, every import is absolute, only portal/roles.py reads who is an admin, and the
production image leaves the simulator out."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ("portal", "queues", "chargeback", "simcluster")

# Sub-packages of queues in dependency order: each may import those before it, never after.
LAYERS = [
    ("queues.admission", "queues.cluster"),  # the pure engine; the Kubernetes adapter
    ("queues.models", "queues.rates", "queues.audit", "queues.counters"),
    ("queues.policy",),
    ("queues.catalog",),
    ("queues.reconcile",),
    ("queues.jobs",),
    ("queues.operations",),  # the admin side
    ("queues.notifications",),  # reads the timeline, drains and quota decisions; nobody imports it
]


def modules(package: str) -> list[Path]:
    return [p for p in (ROOT / package).rglob("*.py") if "migrations" not in p.parts]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, *, top_level_only: bool = False) -> list[tuple[str, int, bool]]:
    """(module, line, inside a function) for each import of ``path``."""
    tree = ast.parse(path.read_text())
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, nested: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = nested or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.Import):
                found.extend((alias.name, child.lineno, nested) for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                found.append((child.module, child.lineno, nested))
            visit(child, inner)

    visit(tree, False)
    return [i for i in found if not (top_level_only and i[2])]


def test_queues_never_imports_chargeback():
    offending = [
        f"{p.relative_to(ROOT)}:{line} imports {name}"
        for p in modules("queues")
        for name, line, _ in imports(p)
        if name.split(".")[0] == "chargeback"
    ]
    assert offending == []


def test_nothing_imports_the_operations_dashboard():
    # The operations dashboard (chargeback/ops/) sits on top: it reads queues and chargeback,
    # nothing reads it.
    offending = [
        f"{p.relative_to(ROOT)}:{line} imports {name}"
        for package in ("portal", "queues", "chargeback")
        for p in modules(package)
        if "ops" not in p.relative_to(ROOT).parts
        for name, line, _ in imports(p)
        if name == "chargeback.ops" or name.startswith("chargeback.ops.")
    ]
    assert offending == []


def test_the_engine_imports_no_django_kubernetes_or_other_portal_code():
    offending = [
        f"{p.relative_to(ROOT)}:{line} imports {name}"
        for p in modules("queues/admission")
        for name, line, _ in imports(p)
        if name.split(".")[0] in ("django", "kubernetes", "rest_framework", "portal", "chargeback")
        or (name.startswith("queues.") and not name.startswith("queues.admission"))
    ]
    assert offending == []


def test_the_portal_app_imports_nothing_of_the_other_apps_but_its_url_roots():
    offending = [
        f"{p.relative_to(ROOT)}:{line} imports {name}"
        for p in modules("portal")
        for name, line, _ in imports(p)
        if name.split(".")[0] in ("queues", "chargeback")
    ]
    assert offending == []


def test_nothing_the_product_runs_imports_the_simulated_cluster():
    offending = [
        f"{p.relative_to(ROOT)}:{line} imports {name}"
        for package in ("portal", "queues", "chargeback")
        for p in modules(package)
        for name, line, _ in imports(p)
        if name.split(".")[0] == "simcluster"
    ]
    assert offending == []


def test_the_queues_sub_packages_depend_one_way():
    rank = {name: i for i, layer in enumerate(LAYERS) for name in layer}

    def layer_of(module: str) -> int | None:
        for name, i in rank.items():
            if module == name or module.startswith(name + "."):
                return i
        return None

    offending = []
    for path in modules("queues"):
        own = layer_of(module_name(path))
        if own is None:
            continue
        for name, line, _ in imports(path):
            other = layer_of(name)
            if other is not None and other > own:
                offending.append(f"{path.relative_to(ROOT)}:{line} imports {name} (a later layer)")
    assert offending == []


@pytest.mark.parametrize("package", ["portal", "queues", "chargeback"])
def test_no_project_import_hides_inside_a_function(package):
    # An import inside a function is how a cycle gets dodged; the layout has none to dodge.
    offending = [
        f"{p.relative_to(ROOT)}:{line} imports {name}"
        for p in modules(package)
        for name, line, nested in imports(p)
        # apps.py's ready() is where Django wants app code imported that needs the registry
        if nested and name.split(".")[0] in PROJECT and p.name != "apps.py"
    ]
    assert offending == []


@pytest.mark.parametrize("package", [*PROJECT, "gpuportal", "bench", "tests"])
def test_every_import_is_absolute(package):
    # A relative import ("from .models import Job") names no package, so the layer and
    # dependency checks above could not see it: the code base writes every import in full.
    offending = [
        f"{p.relative_to(ROOT)}:{node.lineno} imports {'.' * node.level}{node.module or ''}"
        for p in (ROOT / package).rglob("*.py")
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.ImportFrom) and node.level > 0
    ]
    assert offending == []


def _staff_reads(path: Path) -> list[str]:
    """Where ``path`` reads or writes ``is_staff``: an attribute, a keyword of a query
    (``is_staff=True``, ``is_staff__in``), or a field named in a string (``update_fields``).
    A class that declares the attribute for a principal that is not a user is no read."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr == "is_staff":
            found.append(node.lineno)
        elif isinstance(node, ast.keyword) and (node.arg or "").split("__")[0] == "is_staff":
            found.append(node.value.lineno)
        elif isinstance(node, ast.Constant) and node.value == "is_staff":
            found.append(node.lineno)
    return [f"{path.relative_to(ROOT)}:{line}" for line in found]


def test_only_portal_roles_decides_who_is_an_admin():
    # One home for access checks: everything else asks portal.roles (is_admin, is_finance,
    # admins_and_finance), templates its context (user_is_admin, user_is_finance).
    offending = [
        where
        for package in ("portal", "queues", "chargeback")
        for p in modules(package)
        if p != ROOT / "portal" / "roles.py"
        for where in _staff_reads(p)
    ]
    offending += [
        f"{p.relative_to(ROOT)}"
        for p in (ROOT / "templates").rglob("*.html")
        if "is_staff" in p.read_text()
    ]
    assert offending == []
    assert _staff_reads(ROOT / "portal" / "roles.py")  # the check sees a read where there is one


def test_the_command_line_client_imports_no_django_and_nothing_of_the_portal():
    # gpuportal/ is a thin client of the REST API: pip-installed on a laptop, it needs neither
    # Django nor the portal's code, and the portal's rules stay on the server.
    offending = [
        f"{p.relative_to(ROOT)}:{line} imports {name}"
        for p in modules("gpuportal")
        for name, line, _ in imports(p)
        if name.split(".")[0] in ("django", "rest_framework", "kubernetes", "celery", *PROJECT)
    ]
    assert offending == []
    assert modules("gpuportal")


def test_nothing_of_the_portal_imports_the_command_line_client():
    offending = [
        f"{p.relative_to(ROOT)}:{line} imports {name}"
        for package in PROJECT
        for p in modules(package)
        for name, line, _ in imports(p)
        if name.split(".")[0] == "gpuportal"
    ]
    assert offending == []


def test_the_production_image_leaves_the_simulated_cluster_out():
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    copied = [line.split()[1] for line in dockerfile.splitlines() if line.startswith("COPY ")]
    pyproject = (ROOT / "pyproject.toml").read_text()

    assert "simcluster" not in copied
    assert {"portal", "queues", "chargeback"} <= set(copied)
    assert 'include = ["portal*", "queues*", "chargeback*", "gpuportal*"]' in pyproject
