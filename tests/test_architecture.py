"""The tree shows the pipeline: floors follow the data, no import circles, the spec is a
parse-time leaf, and every DAG task id is exactly one stage module."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from recforge import stages

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "include" / "recforge"

# Lower floors never import higher ones (module-level imports; a room is a module or a
# package). Read bottom-up, this is the data's path: spec → format → engines → run → stages
# → pipeline → the Airflow edge → the command line and dev conveniences.
FLOORS = [
    {"errors", "settings", "kinds", "allocator"},
    {"spec"},
    {"storage", "quarantine", "progress", "phash", "imaging", "format"},
    {"segmentation", "detection", "im2rec", "crash_isolation"},
    {"layouts"},
    {"quality", "bench", "report"},
    {"run", "run_state", "releases", "claims", "alerts", "incremental", "readers", "pull"},
    {"stages"},
    {"pipeline"},
    {"orchestration"},
    {"cli", "dev"},
]
FLOOR = {room: n for n, rooms in enumerate(FLOORS) for room in rooms}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _top_level_imports(path: Path, known: set[str]) -> set[str]:
    """recforge modules imported at module level (not inside functions)."""
    found = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # ``from package import module`` imports that module; a package's own modules
            # importing each other so are its floors, below the façade in its __init__
            subs = [f"{node.module}.{a.name}" for a in node.names]
            names = subs if all(n in known for n in subs) else [node.module, *subs]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found |= {n for n in names if n in known}
    return found


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "recforge"


GRAPH = {m: _top_level_imports(p, set(_modules())) - {m} for m, p in _modules().items()}


def test_every_module_has_a_floor():
    assert sorted({_room(m) for m in GRAPH} - set(FLOOR) - {"recforge"}) == []


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_floors_follow_the_data(module):
    if _room(module) == "recforge":
        return
    higher = sorted(m for m in GRAPH[module] if _room(m) != "recforge"
                    and FLOOR[_room(m)] > FLOOR[_room(module)])
    assert higher == [], f"{module} (floor {FLOOR[_room(module)]}) imports {higher}"


def test_no_import_circle():
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(GRAPH[m]):
            assert state.get(n) != 1, " → ".join([*path, n])
            if n not in state:
                visit(n, [*path, n])
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m, [m])


def test_the_spec_imports_no_engine():
    code = ("import sys, recforge.spec; print(sorted(m for m in sys.modules "
            "if m.split('.')[0] in ('recforge', 'numpy', 'cv2', 'mxnet', 'boto3', "
            "'great_expectations', 'pandas', 'airflow')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    loaded = eval(out)  # a printed list of module names
    light = ("recforge", "recforge.errors", "recforge.kinds", "recforge.spec")
    assert [m for m in loaded if not (m in light or m.startswith("recforge.spec."))] == []


def test_a_task_id_is_exactly_one_stage_module():
    modules = sorted(p.stem for p in (PACKAGE / "stages").glob("*.py") if p.stem != "__init__")
    assert modules == sorted(s.task_id for s in stages.STAGES)
    for s in stages.STAGES:
        entry = stages.entry(s.task_id)
        assert entry.__module__ == f"recforge.stages.{s.task_id}"
        assert entry.__name__ == s.task_id


@pytest.mark.parametrize("path", ["dags/recforge_datasets.py",
                                  "include/recforge/orchestration/dags.py",
                                  "include/recforge/pipeline.py"])
def test_no_module_paths_in_the_dag_or_the_pipeline(path):
    tree = ast.parse((REPO / path).read_text())
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
    strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
               and isinstance(n.value, str) and id(n) not in docstrings]
    assert [s for s in strings if re.search(r"\brecforge\.\w+", s)] == []


def test_the_dag_file_is_the_two_lines_a_team_writes():
    """dags/ stays thin: the factory lives in the package, the DAG file only calls it."""
    text = (REPO / "dags" / "recforge_datasets.py").read_text()
    assert "airflow" in text.lower() and "dag" in text.lower()  # Airflow's safe-mode heuristic
    tree = ast.parse(text)
    body = tree.body[1:] if ast.get_docstring(tree) else tree.body
    assert [ast.unparse(n) for n in body] == [
        "from recforge.orchestration import dataset_dags",
        "globals().update(dataset_dags())"]


def test_stage_entry_points_take_the_run():
    import inspect

    for s in stages.STAGES:
        params = list(inspect.signature(stages.entry(s.task_id)).parameters)
        assert params[:1] == ["run"], s.task_id
        assert ("shard_id" in params) == s.per_shard, s.task_id


def test_s3_requests_are_the_storage_wings():
    """Only ``recforge.storage`` sends S3 requests (through its one retry rule): nothing
    else takes a client from ``storage.s3_client()``."""
    offenders = sorted(m for m, p in _modules().items() if _room(m) != "storage"
                       and "s3_client()" in p.read_text(encoding="utf-8"))
    assert offenders == []


def _private_uses(module: str, path: Path, known: set[str]) -> set[str]:
    """``_private`` names ``module`` takes from another recforge module: imported by name
    (``from recforge.x import _y``) or reached as ``<imported recforge module>._y``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found, aliases = set(), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] == "recforge":
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__"):
                    found.add(f"{node.module}.{a.name}")
                if f"{node.module}.{a.name}" in known:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name in known:
                    aliases[a.asname or a.name] = a.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                and not node.attr.startswith("__") and isinstance(node.value, ast.Name) \
                and aliases.get(node.value.id, module) != module:
            found.add(f"{aliases[node.value.id]}.{node.attr}")
    return {f for f in found if f.rsplit(".", 1)[0] != module}


def test_no_private_name_crosses_a_module():
    known = set(_modules())
    crossing = {m: sorted(_private_uses(m, p, known)) for m, p in _modules().items()}
    assert {m: names for m, names in crossing.items() if names} == {}


def test_the_architecture_room_table_names_every_room():
    """docs/architecture.md's room table names only rooms that exist, and every package
    folder and top-level module of ``include/recforge`` is named."""
    lines = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8").splitlines()
    start = next(n for n, line in enumerate(lines) if re.match(r"\|\s*room\s*\|", line))
    named = set()
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        named |= set(re.findall(r"`([^`]+)`", line.split("|")[1]))
    missing = sorted(r for r in named
                     if not (PACKAGE / r.rstrip("/")).exists()
                     or r.endswith("/") != (PACKAGE / r.rstrip("/")).is_dir())
    assert missing == [], f"the room table names rooms that do not exist: {missing}"
    rooms = {f"{p.name}/" for p in PACKAGE.iterdir()
             if p.is_dir() and (p / "__init__.py").exists()}
    rooms |= {p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
    assert sorted(rooms - named) == [], "rooms missing from docs/architecture.md's room table"


WINGS = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))


def _modules_named(docstring: str) -> set[str]:
    """The modules a wing's docstring names: ``name.py`` in double backticks, the one
    convention, so words that are also module names (``report``, ``records``) never count."""
    return set(re.findall(r"``(\w+)\.py``", docstring))


@pytest.mark.parametrize("wing", WINGS)
def test_a_wings_docstring_names_its_modules(wing):
    """A wing's ``__init__`` docstring is its map: it names every module of the folder as
    ``name.py`` and no module that is not there, so a module added, renamed or removed
    without updating the map fails here."""
    folder = PACKAGE / wing
    doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text(encoding="utf-8")))
    assert doc, f"recforge.{wing} has no module docstring"
    modules = {p.stem for p in folder.glob("*.py") if p.name != "__init__.py"}
    named = _modules_named(doc)
    assert sorted(modules - named) == [], f"recforge.{wing}'s docstring omits these modules"
    assert sorted(named - modules) == [], f"recforge.{wing}'s docstring names missing modules"


LONGEST_FUNCTION = 80  # lines, decorators and docstring included


def test_no_function_in_the_package_is_longer_than_a_screen():
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([d.lineno for d in node.decorator_list] + [node.lineno])
                if node.end_lineno - start + 1 > LONGEST_FUNCTION:
                    long.append(f"{path.relative_to(PACKAGE)}:{node.name} "
                                f"({node.end_lineno - start + 1} lines)")
    assert long == []
