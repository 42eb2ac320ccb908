"""The package's layout: the root of ``ldpclient/`` holds only the front door, no module imports itself back through
another, every documented import works, a fixed-seed run's labels are the pinned ones, no function or class is too
long, and the package cites no issue.
"""

from __future__ import annotations

import ast
import importlib
import json
import re
from pathlib import Path

import numpy as np
from PIL import Image
from typer.testing import CliRunner

import mock_server
from ldpclient.cli.commands import app

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ldpclient"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# The labels this command writes (seed 11), pinned: a change of layout must leave them as they are.
PINNED_LABELS = [2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 4, 5, 5, 5, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _targets(node: ast.Import | ast.ImportFrom, package: str) -> set[str]:
    """The ``ldpclient`` modules (and, for ``from X import n``, the candidates ``X.n``) one import names, relative
    ones resolved against ``package``."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name.startswith("ldpclient")}
    if node.level:
        base = package.split(".")[: len(package.split(".")) - node.level + 1]
        target = ".".join([*base, node.module] if node.module else base)
    else:
        target = node.module or ""
    return {target, *(f"{target}.{a.name}" for a in node.names)} if target.startswith("ldpclient") else set()


def _package(path: Path) -> str:
    here = _module_name(path)
    return here if path.name == "__init__.py" else here.rpartition(".")[0]


def _imports(path: Path) -> set[str]:
    """The ``ldpclient`` modules ``path`` imports anywhere: at module level, inside a function, or for the type
    checker only (``TYPE_CHECKING``). An import inside a function runs later, but a circle through it is still
    two modules that each need the other."""
    return _imports_in(path.read_text(encoding="utf-8"), _package(path))


def _imports_in(source: str, package: str) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.update(_targets(node, package))
    return found


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        edges = {t for t in _imports(path) if t in modules and t != name}
        # importing a.b.c runs a/__init__ and a/b/__init__ first
        for target in list(edges):
            parts = target.split(".")
            edges.update(".".join(parts[:k]) for k in range(1, len(parts)) if ".".join(parts[:k]) in modules)
        graph[name] = edges - {name} - {p for p in edges if name.startswith(p + ".")}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def test_the_root_holds_only_the_front_door() -> None:
    loose = sorted(p.name for p in PACKAGE.iterdir() if p.is_file())
    assert loose == ["__init__.py", "api.py", "py.typed"]


def test_no_module_imports_itself_back() -> None:
    graph = _graph()
    assert len(graph) > 100
    assert _cycles(graph) == []


#: The layers of docs/development.md, top first: a module imports (even inside a function) only its own layer or below.
LAYERS = {"cli": 0, "api": 0, "run": 1, "report": 2, "cluster": 2, "transfer": 3, "teachers": 3, "audit": 3,
          "privacy": 4, "io": 5, "state": 5, "names": 5}


def _every_import(path: Path) -> set[str]:
    """Every ``ldpclient`` module ``path`` names in an import, wherever the import is."""
    package = _package(path)
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.update(_targets(node, package))
    # a name of the front door itself ('from .. import label') is an import of the front door
    return {name if (PACKAGE / name.split(".")[1]).is_dir() or (PACKAGE / f"{name.split('.')[1]}.py").is_file()
            else "ldpclient.api" for name in found if name.startswith("ldpclient.")}


def test_imports_point_down_the_layers() -> None:
    up = []
    for path in PACKAGE.rglob("*.py"):
        layer = (_module_name(path).split(".") + ["api"])[1]  # the package's __init__: the front door
        for target in _every_import(path):
            if LAYERS[target.split(".")[1]] < LAYERS[layer]:
                up.append(f"{_module_name(path)} imports {target}")
    assert sorted(up) == []


def test_the_mock_teacher_imports_neither_the_command_line_nor_a_run() -> None:
    """The mock server is a test server below the command line: it may borrow the library's models and text
    handling, never the command line or a run (``cli``, ``api``, ``run``)."""
    borrowed = sorted(f"{path.name} imports {target}" for path in (ROOT / "mock_server").glob("*.py")
                      for target in _every_import(path) if LAYERS[target.split(".")[1]] <= LAYERS["run"])
    assert borrowed == []


def test_the_cycle_check_sees_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_cycle_check_counts_imports_in_functions_and_for_the_type_checker() -> None:
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .label import Images\n"
              "def f():\n    from ..teachers import client\n")
    assert {"ldpclient.run.label", "ldpclient.teachers.client"} <= _imports_in(source, "ldpclient.run")


def _documented_imports() -> set[tuple[str, str]]:
    """``(module, name)`` of every ``from ldpclient... import name`` in the pages' code, and of every dotted
    ``ldpclient.module.name`` the pages quote."""
    found: set[tuple[str, str]] = set()
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for module, names in re.findall(r"from (ldpclient[\w.]*) import (\([^)]*\)|[\w, ]+)", text):
            found.update((module, n.strip()) for n in names.strip("()").split(",") if n.strip())
        for dotted in re.findall(r"`(ldpclient(?:\.\w+)+)", text):
            module, _, name = dotted.rpartition(".")
            found.add((module, name))
    return found


def test_every_documented_import_works() -> None:
    documented = _documented_imports()
    assert ("ldpclient", "label") in {(m, n) for m, n in documented} or len(documented) > 20
    broken = []
    for module, name in sorted(documented):
        try:
            if not hasattr(importlib.import_module(module), name):
                importlib.import_module(f"{module}.{name}")
        except ImportError as exc:
            broken.append(f"{module}.{name}: {exc}")
    assert broken == []


def test_labels_for_a_fixed_seed_are_the_pinned_ones(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    private = tmp_path / "private"
    private.mkdir()
    for k in range(24):
        level = 20 + 9 * k  # brightness across the range: the trivial teacher answers by it
        Image.fromarray(rng.integers(level - 20, level + 20, (12, 12)).astype(np.uint8)).save(private / f"p{k:02d}.png")
    out = tmp_path / "labels.csv"
    with mock_server.serve(model="trivial", image_size=12, channels=1) as srv:
        done = CliRunner().invoke(app, ["label", str(private), "--teacher", srv.model_url, "--seed", "11",
                                        "--queries", "240", "--epochs", "8", "--state-dir", str(tmp_path / "state"),
                                        "--output", str(out), "--json"])
    assert done.exit_code == 0, done.output
    labels = [int(line.split(",")[1]) for line in out.read_text().splitlines()[1:]]
    assert json.loads(done.stdout)["counts"]["labelled"] == 24
    assert labels == sorted(labels)  # the trivial teacher answers by brightness: the labels follow it
    assert labels == PINNED_LABELS, str(labels)


def test_the_package_cites_no_issue_and_no_benchmark_section() -> None:
    """Comments and help say why the code is as it is now: issue numbers and BENCHMARKS.md sections are history
    and cross-references that go stale; they belong in git, docs/ and BENCHMARKS.md."""
    cited = [f"{path.relative_to(ROOT)}:{n}" for path in sorted(PACKAGE.rglob("*.py"))
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
             if re.search(r"(?i:issue [0-9])|BENCHMARKS", line)]
    assert cited == []


def test_the_tests_say_what_they_check_not_which_issue_asked() -> None:
    """A test's docstring and comments describe the behaviour it checks as it is now; the issue that asked for it
    is history (git keeps it). The test files of the layout checks themselves are left out (they name the pattern)."""
    cited = [f"{path.relative_to(ROOT)}:{n}" for path in sorted((ROOT / "tests").rglob("*.py"))
             if path.name != "test_layout.py"
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
             if re.search(r"\bissues? [0-9]", line, re.IGNORECASE)]
    assert cited == []


#: Functions and classes above the limits, each with why; a new one fails the test below.
SIZE_ALLOWED: dict[str, str] = {
    "ldpclient/audit/report.py:run_audit": "the audit's entry point: its 25 keyword arguments and their docstring",
}
MOST_FUNCTION_LINES = 60
MOST_CLASS_LINES = 300


def _lines(node: ast.AST) -> int:
    """Lines of a function or class from its ``def`` (or ``class``) to its end, docstring included."""
    assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    return node.end_lineno - node.lineno + 1  # type: ignore[operator]


def test_no_function_over_60_lines_and_no_class_over_300() -> None:
    too_long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                most = MOST_CLASS_LINES if isinstance(node, ast.ClassDef) else MOST_FUNCTION_LINES
                name = f"{path.relative_to(ROOT)}:{node.name}"
                if _lines(node) > most and name not in SIZE_ALLOWED:
                    too_long.append(f"{name} ({_lines(node)} lines)")
    assert too_long == []


def test_the_orchestrator_and_the_commands_stay_short() -> None:
    assert len((PACKAGE / "transfer" / "pipeline.py").read_text(encoding="utf-8").splitlines()) < 200
    assert len((PACKAGE / "run" / "label.py").read_text(encoding="utf-8").splitlines()) < 200
    tree = ast.parse((PACKAGE / "cli" / "commands.py").read_text(encoding="utf-8"))
    commands = [node for node in tree.body if isinstance(node, ast.FunctionDef)
                and any("command" in ast.unparse(d) for d in node.decorator_list)]
    assert {c.name for c in commands} >= {"label", "noise", "budget", "demo"}
    assert [c.name for c in commands if c.end_lineno - c.lineno + 1 >= 40] == []  # type: ignore[operator]


#: The modules holding the defaults (one function per default).
DEFAULTS = {"ldpclient.transfer.defaults", "ldpclient.privacy.defaults"}
#: Who may read them: where options are declared with their defaults (the command line, the library's option and
#: settings objects, the demo's and the audit's), where a run's settings are resolved (the transfer's ``resolve``,
#: the run's plan and its mechanism), and the report's note on the epsilon ceiling. No stage of a run is here.
READS_DEFAULTS = {
    "ldpclient.cli.audit", "ldpclient.cli.commands", "ldpclient.cli.options", "ldpclient.run.options",
    "ldpclient.run.demo", "ldpclient.run.audit", "ldpclient.transfer.settings",
    "ldpclient.transfer.resolve", "ldpclient.run.plan", "ldpclient.run.mechanism",
    "ldpclient.report.notes", "ldpclient.transfer.defaults",
}


def test_no_stage_reads_a_default_and_the_transfer_resolves_in_one_place() -> None:
    graph = _graph()
    assert {name for name, edges in graph.items() if edges & DEFAULTS} <= READS_DEFAULTS
    # the stages read the settings ``resolve`` made (through their context); the orchestrator and the run's plan
    # call it, the context holds its result
    callers = {name for name, edges in graph.items() if "ldpclient.transfer.resolve" in edges}
    assert callers == {"ldpclient.transfer.pipeline", "ldpclient.run.plan", "ldpclient.transfer.context"}
    assert not any(name.startswith("ldpclient.transfer.stages") for name in callers)


def test_the_default_check_sees_a_stage_that_reads_one() -> None:
    assert "ldpclient.transfer.defaults" in _imports_in("from ..defaults import epochs\n", "ldpclient.transfer.stages")


#: What the transfer may take from the privacy defaults: constants, none of them a function of epsilon.
TRANSFER_TAKES_FROM_PRIVACY_DEFAULTS = {"MIN_RELEASED_SIDE"}


def _privacy_defaults_taken(source: str, package: str) -> set[str]:
    """The names ``source`` (a module of ``package``) takes from ``ldpclient.privacy.defaults``; ``*`` for the
    module itself."""
    taken: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            taken.update("*" for a in node.names if a.name == "ldpclient.privacy.defaults")
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = parts[: len(parts) - node.level + 1] if node.level else []
            module = ".".join([*base, node.module] if node.module else base) if node.level else (node.module or "")
            if module == "ldpclient.privacy.defaults":
                taken.update(a.name for a in node.names)
            elif module == "ldpclient.privacy" and any(a.name == "defaults" for a in node.names):
                taken.add("*")
    return taken


def test_epsilon_runs_one_way_the_transfer_asks_no_privacy_default_of_it() -> None:
    """``--epsilon`` runs from the command line through the run's plan into the privacy package (its defaults and
    the mechanism) and does not come back: the transfer gets the ``Mechanism``, and for a pooled release's default
    post-processing the per-element level the plan worked out (``run/plan.py`` ``shape_settings``). No module of
    the transfer takes a privacy default but a constant."""
    taken = {str(path.relative_to(ROOT)): names for path in sorted((PACKAGE / "transfer").rglob("*.py"))
             if (names := _privacy_defaults_taken(path.read_text(encoding="utf-8"), _package(path))
                 - TRANSFER_TAKES_FROM_PRIVACY_DEFAULTS)}
    assert taken == {}
    # the check sees both ways of asking
    assert _privacy_defaults_taken("from ...privacy.defaults import epsilon_element\n",
                                   "ldpclient.transfer.stages") == {"epsilon_element"}
    assert _privacy_defaults_taken("from ..privacy import defaults\n", "ldpclient.transfer") == {"*"}


def _bare_any(annotation: ast.expr | None) -> bool:
    return (isinstance(annotation, ast.Name) and annotation.id == "Any") or (
        isinstance(annotation, ast.Constant) and annotation.value == "Any")


def test_few_parameters_or_fields_are_typed_any() -> None:
    """The teacher, the client, the ledger, the journal and the cluster have types (Protocols where duck typing is
    meant); what stays ``Any`` is a parsed JSON document or a value inspected at run time. ``*args: Any``,
    ``**kwargs: Any`` and ``dict[str, Any]`` do not count."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
                found += [f"{path.relative_to(ROOT)}:{a.lineno} {a.arg}" for a in args if _bare_any(a.annotation)]
            elif isinstance(node, ast.AnnAssign) and _bare_any(node.annotation):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert len(found) < 20, found


#: ``Any`` in the package's source (its name as a token: imports, annotations, casts), as counted now. What is left
#: is where values cross a boundary by name or from a library without types: an adapter's ``**opts`` through the
#: registry, options built into a dataclass by name, psycopg and Ray (optional, untyped), typer's vendored click, a
#: user's duck-typed teacher, a peer's JSON before it is checked. JSON documents are ``io.document`` values
#: (``object``), read through its typed readers. The count may only fall.
MOST_ANY = 72


def test_any_is_not_used_more_than_now() -> None:
    import io
    import tokenize

    count = sum(1 for path in PACKAGE.rglob("*.py")
                for token in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline)
                if token.type == tokenize.NAME and token.string == "Any")
    assert count <= MOST_ANY < 100


def test_the_module_map_names_every_module() -> None:
    """docs/development.md's row for each package names each of its modules."""
    rows = dict(re.findall(r"^\| `ldpclient/([a-z_]+)/` \| (.*) \|$", (ROOT / "docs" / "development.md").read_text(
        encoding="utf-8"), re.M))
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert packages <= set(rows)
    unnamed = [f"{package}: {path.relative_to(PACKAGE / package)}" for package in sorted(packages)
               for path in sorted((PACKAGE / package).rglob("*.py"))
               if not path.name.startswith("__") and path.stem not in re.findall(r"[a-z_]+", rows[package])]
    assert unnamed == []


def _default_literals(path: Path) -> set[tuple[str, str]]:
    """``(name, literal)`` of every default written as a literal in ``path``: a field's or a parameter's default, and
    a typer option's first argument (named by its field, or by its flag when declared apart)."""
    found: set[tuple[str, str]] = set()

    def literal(node: ast.expr | None) -> str | None:
        return repr(node.value) if isinstance(node, ast.Constant) and node.value is not None else None

    def option_default(call: ast.expr) -> str | None:
        if isinstance(call, ast.Call) and ast.unparse(call.func).endswith("Option") and call.args:
            return literal(call.args[0])
        return None

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            value = literal(node.value) or option_default(node.value)
            if value is not None:
                found.add((node.target.id, value))
        elif isinstance(node, ast.Assign) and (value := option_default(node.value)) is not None:
            flags = [a.value for a in node.value.args[1:] if isinstance(a, ast.Constant)]  # type: ignore[attr-defined]
            if flags:
                found.add((str(flags[0]).split("/")[0].lstrip("-").replace("-", "_"), value))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args.posonlyargs + node.args.args
            pairs = [*zip(args[len(args) - len(node.args.defaults):], node.args.defaults, strict=True),
                     *zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True)]
            found.update((arg.arg, value) for arg, default in pairs if (value := literal(default)) is not None)
    return found


#: Where a label run's settings are declared, resolved and handed on: the command line, the front door, the run, and the
#: transfer's settings, their resolution and its orchestrator. The building blocks below them (the mechanisms'
#: factories, the student's trainer, the query plan) are library functions with defaults of their own.
SPEC_MODULES = ("ldpclient.cli.", "ldpclient.api", "ldpclient.run.", "ldpclient.transfer.settings",
                "ldpclient.transfer.resolve", "ldpclient.transfer.pipeline", "ldpclient.transfer.defaults",
                "ldpclient.privacy.defaults")


def _spec_defaults() -> set[tuple[str, str]]:
    """``(name, literal)`` of each default a label run's settings hold (the options of ``label`` and the transfer's
    settings objects) but a switch that is off (False) unless given."""
    import dataclasses

    from ldpclient.run.options import LabelOptions
    from ldpclient.transfer.settings import SETTINGS

    return {(f.name, repr(f.default)) for cls in (LabelOptions, *SETTINGS) for f in dataclasses.fields(cls)
            if isinstance(f.default, (bool, int, float, str)) and f.default is not False}


def _spread_settings(source: str) -> list[str]:
    """The calls in ``source`` that spread an object's fields as keywords: ``**x._asdict()``, ``**asdict(x)``,
    ``**vars(x)`` or ``**x.__dict__``."""
    def spreads(value: ast.expr) -> bool:
        if isinstance(value, ast.Attribute):
            return value.attr == "__dict__"
        if not isinstance(value, ast.Call):
            return False
        func = value.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        return name in {"_asdict", "asdict", "vars"}

    return [ast.unparse(node)[:80] for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
            and any(k.arg is None and spreads(k.value) for k in node.keywords)]


def test_no_stage_receives_a_spread_dict_of_settings() -> None:
    """A label run's settings travel as the typed objects that hold them (the plan, its ``Resolved``, the settings
    objects by name): no module of the settings' path, nor a stage, spreads an object's fields into a call."""
    spread = {str(path.relative_to(ROOT)): calls for path in sorted(PACKAGE.rglob("*.py"))
              if _module_name(path).startswith((*SPEC_MODULES, "ldpclient.transfer."))
              and (calls := _spread_settings(path.read_text(encoding="utf-8")))}
    assert spread == {}
    assert _spread_settings("KnowledgeTransfer(t, m, **plan.settings._asdict())\n") != []  # the check sees one
    assert len(_spread_settings("f(**dataclasses.asdict(s))\nf(**vars(s))\nf(**s.__dict__)\n")) == 3
    assert _spread_settings("f(**teacher_options)\n") == []


def test_each_default_of_a_label_setting_is_written_in_one_module() -> None:
    """Each default of a label run's settings is written in one module: the option, field or parameter of that name
    elsewhere refers to it (a function of ``transfer/defaults.py`` or ``privacy/defaults.py``, or the spec's field)
    or takes None, "the default"."""
    wanted = _spec_defaults()
    assert ("decode", "'none'") in wanted and ("adapt", "True") in wanted
    where: dict[tuple[str, str], set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        module = _module_name(path)
        if module.startswith(SPEC_MODULES):
            for pair in _default_literals(path) & wanted:
                where.setdefault(pair, set()).add(module)
    assert {k: sorted(v) for k, v in where.items() if len(v) > 1} == {}


def test_the_repeat_check_sees_a_default_written_twice(tmp_path: Path) -> None:
    first, second = tmp_path / "a.py", tmp_path / "b.py"
    first.write_text('import typer\nX = typer.Option("none", "--decode")\n', encoding="utf-8")
    second.write_text('def f(*, decode: str = "none") -> None: ...\n', encoding="utf-8")
    assert _default_literals(first) == _default_literals(second) == {("decode", "'none'")}
