"""The shape of the code, checked: the import graph of workcenter/ and dashboard/ (migrations
aside, function-local imports included) has no cycle and runs down the declared layers, the pure
domain imports nothing that touches the database, no module reaches into another's private
names, no module is over 700 lines, few imports are function-local and each says why, nothing
above the database layer (workcenter/db/) formats SQL or holds a fragment of it, every named
guard is used, every named statement has its header and a caller that live code reaches, and the
services call exactly the fault points services/hooks.py names."""
from __future__ import annotations

import ast
import re
import sys
from fnmatch import fnmatchcase
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("workcenter", "dashboard")
MAX_LINES = 700
MAX_LOCAL_IMPORTS = 8
SQL_WORDS = re.compile(r"\b(SELECT|UPDATE|INSERT INTO|DELETE FROM)\b")


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


MODULES = _modules()


def _package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _resolve(target: str) -> str | None:
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target or None


def _imports(name: str, path: Path):
    """(imported module, imported name or None, node, local?) for every import of a module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    local = {id(sub) for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
             for sub in ast.walk(node) if isinstance(sub, (ast.Import, ast.ImportFrom))}
    package = _package_of(name, path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None, node, id(node) in local
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield (full if full in MODULES else base), alias.name, node, id(node) in local


def _graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {name: set() for name in MODULES}
    for name, path in MODULES.items():
        for target, _, _, _ in _imports(name, path):
            resolved = _resolve(target)
            if resolved and resolved != name:
                edges[name].add(resolved)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
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
                found.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_has_no_cycle():
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# The layers, bottom up: a module may import its own layer and the layers below it, never one above.
# Every module of workcenter/ and dashboard/ stands in exactly one layer (a pattern is a module
# name or ends in `.*` for a package's modules).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # the vocabulary, the wire's shapes and the process's own tools: nothing here reads the store
    ("foundations", (
        "workcenter", "workcenter.apps", "workcenter.choices", "workcenter.constants", "workcenter.errors",
        "workcenter.clock", "workcenter.event_types", "workcenter.schemas_out", "workcenter.render",
        "workcenter.instruments", "workcenter.security", "workcenter.security_headers", "workcenter.settings",
        "workcenter.redis_layer", "workcenter.memory_layer", "workcenter.send_loop", "workcenter.serving",
        "workcenter.demo_login", "workcenter.work_dirs",
    )),
    # the worker program: it reaches the store over HTTP (or through local_store, which imports it)
    ("worker", ("workcenter.worker", "workcenter.worker_journal", "workcenter.worker_log", "workcenter.executors",
                "workcenter.executors.*")),
    # the store's pure rules and shapes (see test_the_domain_touches_no_database)
    ("domain", ("workcenter.domain", "workcenter.domain.*")),
    ("models", ("workcenter.fields", "workcenter.models")),
    ("database toolkit", ("workcenter.db", "workcenter.db.*")),
    ("events and auth", ("workcenter.events", "workcenter.auth")),
    ("services", ("workcenter.services", "workcenter.services.*")),
    ("reads", ("workcenter.selectors", "workcenter.overview", "workcenter.worker_figures", "workcenter.item_page_state",
               "workcenter.stage_durations", "workcenter.inbox", "workcenter.run_logs")),
    # what a request, a command, a worker in this process or a page comes in by
    ("ways in", (
        "workcenter.api", "workcenter.api_inbox", "workcenter.dispatch", "workcenter.dispatch.*", "workcenter.schemas_in",
        "workcenter.admin", "workcenter.importer",
        "workcenter.local_store", "workcenter.health", "workcenter.metrics", "workcenter.webhook_sender",
        "workcenter.api_webhooks", "workcenter.api_run_logs", "workcenter.admin_webhooks", "workcenter.admin_parts",
        "workcenter.management", "workcenter.management.*", "dashboard", "dashboard.*",
    )),
    # the web process's front: the ASGI application, its handler, middleware, routes and static files
    ("front", ("workcenter.asgi", "workcenter.handlers", "workcenter.middleware", "workcenter.urls",
               "workcenter.staticfiles")),
]
# (importing module, imported module): why this one import runs up. At most one may stand here.
UPWARD_ALLOWED: dict[tuple[str, str], str] = {}
# what the domain may import from this tree besides itself
DOMAIN_MAY_IMPORT = ("workcenter.choices", "workcenter.constants", "workcenter.errors", "workcenter.clock")


def _layers_of(name: str) -> list[int]:
    return [i for i, (_, patterns) in enumerate(LAYERS) if any(fnmatchcase(name, p) for p in patterns)]


def _in_layer(name: str, layer: str) -> bool:
    return [LAYERS[i][0] for i in _layers_of(name)] == [layer]


def _upward(edges: dict[str, set[str]]) -> list[str]:
    """Every import from a lower layer up to a higher one, but those UPWARD_ALLOWED names."""
    found = []
    for name in sorted(edges):
        for target in sorted(edges[name]):
            (low,), (high,) = _layers_of(name), _layers_of(target)
            if high > low and (name, target) not in UPWARD_ALLOWED:
                found.append(f"{name} ({LAYERS[low][0]}) imports {target} ({LAYERS[high][0]})")
    return found


def test_every_module_stands_in_exactly_one_layer():
    misplaced = {name: [LAYERS[i][0] for i in layers] for name in MODULES if len(layers := _layers_of(name)) != 1}
    assert misplaced == {}, "place each module in one layer of LAYERS"


def test_every_layer_pattern_names_a_module():
    assert [p for _, patterns in LAYERS for p in patterns if not any(fnmatchcase(n, p) for n in MODULES)] == []


def test_imports_run_down_the_layers():
    assert len(UPWARD_ALLOWED) <= 1
    assert _upward(_graph()) == []


def test_the_layer_check_finds_an_upward_import():
    edges = {
        "workcenter.domain.rules": {"workcenter.choices", "workcenter.services.common"},
        "workcenter.services.common": {"workcenter.domain.rules", "workcenter.services.hooks"},
        "workcenter.services.hooks": set(),
        "workcenter.choices": set(),
    }
    assert _upward(edges) == ["workcenter.domain.rules (domain) imports workcenter.services.common (services)"]


def test_the_domain_touches_no_database():
    """The domain imports the standard library, Django utilities and DOMAIN_MAY_IMPORT only."""
    found = []
    for name, path in MODULES.items():
        if not _in_layer(name, "domain"):
            continue
        for target, _, node, _ in _imports(name, path):
            top = target.split(".")[0]
            resolved = _resolve(target)
            if resolved is not None:
                ok = resolved in DOMAIN_MAY_IMPORT or _in_layer(resolved, "domain")
            else:
                ok = top in sys.stdlib_module_names or target.startswith("django.utils")
            if not ok:
                found.append(f"{name}:{node.lineno} imports {target}")
    assert found == []


def test_no_module_uses_another_modules_private_names():
    found = []
    for name, path in MODULES.items():
        aliases = {}
        for target, imported, node, _ in _imports(name, path):
            resolved = _resolve(target)
            if resolved is None or resolved == name:
                continue
            if imported and imported.startswith("_") and not imported.startswith("__"):
                found.append(f"{name}:{node.lineno} imports {resolved}.{imported}")
            if imported is None or target in MODULES and target.endswith("." + imported):
                aliases[(node.names[0].asname or imported or target).split(".")[0]] = resolved
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                found.append(f"{name}:{node.lineno} uses {aliases[node.value.id]}.{node.attr}")
    assert found == []


def test_no_module_is_over_700_lines():
    long = {name: n for name, path in MODULES.items()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}


def test_function_local_imports_are_few_and_say_why():
    local = []
    for name, path in MODULES.items():
        lines = path.read_text(encoding="utf-8").splitlines()
        seen = set()
        for _target, _, node, is_local in _imports(name, path):
            if not is_local or id(node) in seen:
                continue
            seen.add(id(node))
            text = lines[node.lineno - 1] + " " + (lines[node.lineno - 2] if node.lineno > 1 else "")
            local.append((f"{name}:{node.lineno}", "#" in text))
    assert len(local) <= MAX_LOCAL_IMPORTS, local
    assert [where for where, commented in local if not commented] == []


def test_nothing_above_the_database_toolkit_formats_sql():
    found = []
    for name, path in MODULES.items():
        if _in_layer(name, "database toolkit"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.JoinedStr):
                text = "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
                if SQL_WORDS.search(text):
                    found.append(f"{name}:{node.lineno}")
    assert found == []


def test_every_named_statement_has_a_header_and_a_caller():
    from workcenter import db

    statements = db.catalogue()
    assert statements, "the catalogue is empty"
    sources = "\n".join(p.read_text(encoding="utf-8") for n, p in MODULES.items()
                        if not _in_layer(n, "database toolkit"))
    for name, statement in statements.items():
        assert "Locks:" in statement.header, name
        assert f'"{name}"' in sources, f"{name} is never used"
        assert set(statement.text) == set(db.VENDORS)


@pytest.mark.parametrize("vendor", ["postgresql", "sqlite"])
def test_every_named_statement_expands_on_both_databases(vendor):
    from django.db import connection

    from workcenter import db

    for name, statement in db.catalogue().items():
        text = db.expand(statement.text[vendor], vendor, connection.ops.quote_name)
        assert "{" not in text.replace("{ids}", "").replace("{values}", "").replace("{prev}", ""), name


# --- SQL fragments and the code that reaches the catalogue ----------------------------------------

# A piece of SQL in a string: a quoted column compared or tested, AND/OR between quoted columns, a
# comparison with a placeholder, a clause over columns or placeholders, or a lone quoted column.
SQL_FRAGMENT = re.compile(
    r'"\w+"\s*(?:=|<>|!=|<=|>=|<|>|\bIS\b|\bIN\b|\bLIKE\b|\bBETWEEN\b)'
    r'|"\w+".*\b(?:AND|OR)\b.*"\w+"'
    r'|(?:\s(?:=|<>|!=|<=|>=|<|>)|\b(?:IN|IS|LIKE))\s*\(?\s*%s'
    r'|\bIS (?:NOT )?NULL\b'
    r'|\b(?:WHERE|RETURNING|ORDER BY|GROUP BY|HAVING|LIMIT|OFFSET|JOIN|FROM|SET|VALUES)\b.*(?:%s|"\w+")'
    r'|^"\w+"$'
)


def _sql_fragments(source: str) -> list[tuple[int, str]]:
    """(line, text) of every string of a module that holds SQL; an f-string is read with each of
    its fields as `x`; docstrings and other bare string statements are prose and not read."""
    tree = ast.parse(source)
    prose = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    parts = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "x"
                           for v in node.values)
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose
              and id(node) not in parts):
            text = node.value
        else:
            continue
        if SQL_FRAGMENT.search(text):
            found.append((node.lineno, text))
    return found


def test_nothing_above_the_database_layer_holds_a_sql_fragment():
    found = [f"{name}:{line}: {text[:80]!r}" for name, path in MODULES.items()
             if not _in_layer(name, "database toolkit")
             for line, text in _sql_fragments(path.read_text(encoding="utf-8"))]
    assert found == [], "name the guard in workcenter/db/guards.py or the statement in workcenter/queries.sql"


def test_the_fragment_check_sees_fragments_and_not_prose():
    source = '''
"""A docstring may say WHERE "status" = %s."""
GUARD = '"status" = %s AND "lease_epoch" = %s'
IN_LIST = '"status" IN (%s, %s)'
NULL = 'current_run_id IS NULL'
COLUMN = '"progress_revision"'
BUILT = f'{col} = %s'
LOG = "event %s %s item=%s"
MESSAGE = f"Cannot start WorkItem in {status}"
'''
    assert [line for line, _ in _sql_fragments(source)] == [3, 4, 5, 6, 7]


def _names(nodes) -> set[str]:
    out: set[str] = set()
    for node in nodes:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name):
                out.add(sub.id)
            elif isinstance(sub, ast.Attribute):
                out.add(sub.attr)
            elif isinstance(sub, (ast.Import, ast.ImportFrom)):
                out.update((a.asname or a.name).split(".")[0] for a in sub.names)
    return out


def _call_graph(sources: dict[str, str]):
    """From module sources: ({function: the names its body refers to}, {function: the strings of its
    body}, the names and strings referred to outside any function body: module and class level,
    decorators). A nested function is part of its outer function's body. The roots: module and
    class level code, every decorated function (its decorator may register it: a route, a
    receiver) and every method (a framework or an instance calls it by name)."""
    bodies: dict[str, set[str]] = {}
    strings: dict[str, set[str]] = {}
    roots: set[str] = set()
    root_strings: set[str] = set()
    for source in sources.values():
        tree = ast.parse(source)
        methods = {id(n) for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for n in c.body}
        in_body: set[int] = set()
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or id(node) in in_body:
                continue
            body = [b for b in node.body + node.args.defaults + node.args.kw_defaults if b is not None]
            in_body |= {id(sub) for b in body for sub in ast.walk(b)}
            bodies.setdefault(node.name, set()).update(_names(body))
            strings.setdefault(node.name, set()).update(
                sub.value for b in body for sub in ast.walk(b)
                if isinstance(sub, ast.Constant) and isinstance(sub.value, str))
            if node.decorator_list or id(node) in methods:
                roots.add(node.name)
        outside = [n for n in ast.walk(tree) if id(n) not in in_body]
        roots |= _names(n for n in outside if isinstance(n, (ast.Name, ast.Attribute, ast.Import, ast.ImportFrom)))
        root_strings |= {n.value for n in outside if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    return bodies, strings, roots, root_strings


def _live(bodies: dict[str, set[str]], roots: set[str]) -> set[str]:
    """The functions reached from the roots: called, passed or named by live code."""
    live: set[str] = set()
    todo = [n for n in roots if n in bodies]
    while todo:
        name = todo.pop()
        if name not in live:
            live.add(name)
            todo.extend(r for r in bodies[name] if r in bodies and r not in live)
    return live


def test_the_dead_code_finder_finds_dead_code():
    sources = {"m": '''
def used():
    return helper()
def helper():
    return "statement_live"
def unused():
    return only_from_unused()
def only_from_unused():
    return "statement_dead"
@register
def view():
    return "statement_of_a_route"
class Command:
    def handle(self):
        return "statement_of_a_method"
used()
'''}
    bodies, strings, roots, _ = _call_graph(sources)
    live = _live(bodies, roots)
    assert sorted(set(bodies) - live) == ["only_from_unused", "unused"]
    assert set().union(*(strings[f] for f in live)) == {
        "statement_live", "statement_of_a_route", "statement_of_a_method"}


def test_no_named_statement_is_reached_only_from_dead_code():
    from workcenter import db

    sources = {n: p.read_text(encoding="utf-8") for n, p in MODULES.items()}
    bodies, _, roots, _ = _call_graph(sources)
    live = _live(bodies, roots)
    _, strings, _, root_strings = _call_graph(
        {n: s for n, s in sources.items() if not _in_layer(n, "database toolkit")})
    reached = root_strings.union(*(s for f, s in strings.items() if f in live))
    unreached = {name: sorted(f for f, s in strings.items() if name in s) for name in db.catalogue()
                 if name not in reached}
    assert unreached == {}, "statements named only by functions nobody calls (and those functions): delete both"


def test_every_named_guard_is_named_once_and_used():
    from workcenter.db import guards

    named = {k: v for k, v in vars(guards).items() if isinstance(v, guards.Guard)}
    assert named, "no guard is named"
    assert {k: g.name for k, g in named.items() if g.name != k.lower()} == {}
    assert len({g.name for g in named.values()}) == len(named)
    bodies, _, roots, _ = _call_graph({n: p.read_text(encoding="utf-8") for n, p in MODULES.items()
                                       if not _in_layer(n, "database toolkit")})
    used = set().union(*(bodies[f] for f in _live(bodies, roots)))
    assert sorted(k for k in named if k not in used) == [], "a guard no live code writes under"


# --- the fault points -----------------------------------------------------------------------------

def _fault_point_calls(sources: dict[str, str]) -> tuple[set[str], list[str]]:
    """(the names the `fault_point` calls give, where a call gives no literal name)."""
    names: set[str] = set()
    unnamed: list[str] = []
    for module, source in sources.items():
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if called != "fault_point":
                continue
            arg = node.args[0] if len(node.args) == 1 and not node.keywords else None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                names.add(arg.value)
            else:
                unnamed.append(f"{module}:{node.lineno}")
    return names, unnamed


def test_the_fault_point_finder_reads_literal_names_only():
    source = '''
fault_point("a")
hooks.fault_point("b")
fault_point(name)
fault_hook("c")
'''
    assert _fault_point_calls({"m": source}) == ({"a", "b"}, ["m:4"])


def test_every_named_fault_point_is_called_and_every_called_one_named():
    from workcenter.services import hooks

    called, unnamed = _fault_point_calls({n: p.read_text(encoding="utf-8") for n, p in MODULES.items()})
    assert unnamed == [], "call fault_point with its name written out"
    assert sorted(set(hooks.FAULT_POINTS) - called) == [], "named in hooks.FAULT_POINTS, called nowhere"
    assert sorted(called - set(hooks.FAULT_POINTS)) == [], "called, not named in hooks.FAULT_POINTS"
