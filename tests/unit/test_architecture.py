"""Architecture rules: the `packages` list matches the folders, and imports only run downward.

Layers (docs/architecture.md §1): admin -> {broker, gc} -> managed_ledger -> bookkeeper.client ->
bookkeeper.{protocol, metadata, runtime}; the bookie uses protocol, metadata and runtime; AutoRecovery
(bookkeeper.autorecovery) uses the client, protocol, metadata and runtime; gc uses
managed_ledger and bookkeeper, and of the bookie only the storage engine's face for GC
(``bookkeeper.bookie.storage.gc_seam``; no bookkeeper module imports gc). Inside the bookie, the storage
engine (``bookkeeper.bookie.storage``) imports nothing of the server side. Nothing imports admin.

Inside the broker: the wire formats (``broker.wire``) import nothing of the server, so clients import them
alone; the protocol-neutral core (``broker.core``) imports the wire formats and the storage layers, never a
protocol adapter, a frame codec or the rest of the broker; the adapters (``broker.protocols``) sit on the
core, the wire formats and their shared helpers only, never the rest of the broker; the session front door
(``broker.sessions``) and the owner proxy (``broker.owner_proxy``) use the adapters; the broker's rooms
(ownership, security, policies, schemas, metrics) sit below them; the composition root at the broker's top
(service, settings, HTTP app) composes them all and no room imports it. No two folders import each other.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PACKAGE_DIRS: dict[str, str] = PYPROJECT["tool"]["setuptools"]["package-dir"]
TOP_FOLDERS = {folder: pkg for pkg, folder in PACKAGE_DIRS.items()}

STORAGE = {"magnetar.bookkeeper", "magnetar.managed_ledger"}
"""The storage layers, which everything above them may import."""

GC_SEAM = "magnetar.bookkeeper.bookie.storage.gc_seam"
"""The one module of the bookie that garbage collection may import: the storage engine's face for GC."""

# layer -> layers (or single modules) it may import (besides itself and its own sublayers). Layers are matched
# by longest prefix; a new subpackage gets its own row here.
ALLOWED: dict[str, set[str]] = {
    "magnetar.bookkeeper.runtime": set(),
    "magnetar.bookkeeper.protocol": {"magnetar.bookkeeper.runtime"},
    "magnetar.bookkeeper.metadata": {"magnetar.bookkeeper.runtime"},
    "magnetar.bookkeeper.bookie": {
        "magnetar.bookkeeper.runtime",
        "magnetar.bookkeeper.protocol",
        "magnetar.bookkeeper.metadata",
    },
    # the storage engine: nothing of the server side; of the protocol (its face) only the status codes its
    # errors carry
    "magnetar.bookkeeper.bookie.storage": {
        "magnetar.bookkeeper.runtime",
        "magnetar.bookkeeper.protocol",
    },
    "magnetar.bookkeeper.client": {
        "magnetar.bookkeeper.runtime",
        "magnetar.bookkeeper.protocol",
        "magnetar.bookkeeper.metadata",
    },
    "magnetar.bookkeeper.autorecovery": {
        "magnetar.bookkeeper.runtime",
        "magnetar.bookkeeper.protocol",
        "magnetar.bookkeeper.metadata",
        "magnetar.bookkeeper.client",
    },
    "magnetar.bookkeeper": {
        "magnetar.bookkeeper.runtime",
        "magnetar.bookkeeper.protocol",
        "magnetar.bookkeeper.metadata",
    },
    "magnetar.managed_ledger": {
        "magnetar.bookkeeper.runtime",
        "magnetar.bookkeeper.metadata",
        "magnetar.bookkeeper.protocol",
        "magnetar.bookkeeper.client",
    },
    # the managed ledger's message index prefix, in front of every stored entry: a leaf (standard library
    # only) that every reader of stored bytes uses, the Spark source included
    "magnetar.managed_ledger.entry_prefix": set(),
    "magnetar.broker.wire": set(),
    "magnetar.broker.core": {
        "magnetar.bookkeeper.runtime",
        "magnetar.bookkeeper.metadata",
        "magnetar.bookkeeper.client",
        "magnetar.managed_ledger",
        "magnetar.broker.wire",
    },
    # protocol adapters: the core, the wire formats and the shared helpers of broker.protocols (the
    # package's own modules), never the rest of the broker - the front door and the owner proxy import them
    "magnetar.broker.protocols": {
        "magnetar.bookkeeper.runtime",
        "magnetar.broker.core",
        "magnetar.broker.wire",
    },
    # the broker's rooms, each on the ones below it; none imports the composition root at the top
    # (service, settings, HTTP app): the service satisfies the hosts' protocols (sessions.host,
    # owner_proxy.host, ownership.lookup) instead
    "magnetar.broker.policies": {"magnetar.bookkeeper.metadata", "magnetar.broker.wire"},
    "magnetar.broker.schemas": {"magnetar.bookkeeper.metadata", "magnetar.broker.wire"},
    "magnetar.broker.metrics": {"magnetar.broker.core"},
    "magnetar.broker.security": {
        "magnetar.bookkeeper.runtime",
        "magnetar.bookkeeper.metadata",
        "magnetar.bookkeeper.protocol",
        "magnetar.bookkeeper.client",
        "magnetar.broker.core",
        "magnetar.broker.wire",
        "magnetar.broker.policies",
    },
    "magnetar.broker.ownership": {
        "magnetar.bookkeeper.runtime",
        "magnetar.bookkeeper.metadata",
        "magnetar.broker.core",
        "magnetar.broker.wire",
        "magnetar.broker.protocols",
        "magnetar.broker.policies",
        "magnetar.broker.security",
    },
    "magnetar.broker.owner_proxy": {
        "magnetar.bookkeeper.runtime",
        "magnetar.broker.core",
        "magnetar.broker.wire",
        "magnetar.broker.protocols",
        "magnetar.broker.metrics",
        "magnetar.broker.ownership",
    },
    "magnetar.broker.sessions": {
        "magnetar.bookkeeper.runtime",
        "magnetar.broker.core",
        "magnetar.broker.wire",
        "magnetar.broker.protocols",
        "magnetar.broker.policies",
        "magnetar.broker.schemas",
        "magnetar.broker.security",
        "magnetar.broker.owner_proxy",
    },
    "magnetar.broker": {
        "magnetar.bookkeeper.runtime",
        "magnetar.bookkeeper.metadata",
        "magnetar.bookkeeper.protocol",
        "magnetar.bookkeeper.client",
        "magnetar.managed_ledger",
    },
    "magnetar.gc": {
        "magnetar.bookkeeper.runtime",
        "magnetar.bookkeeper.metadata",
        "magnetar.bookkeeper.protocol",
        "magnetar.bookkeeper.client",
        GC_SEAM,
        "magnetar.managed_ledger",
    },
    # admin, by kind (admin/__init__.py says what each subpackage holds). The package itself holds nothing
    # but its docstring; range_frames (REST API and Spark source) and pulsar_batch (REST API and the admin
    # client) are wire formats shared by two kinds.
    "magnetar.admin": set(),
    "magnetar.admin.range_frames": {"magnetar.broker.wire", "magnetar.managed_ledger.entry_prefix"},
    "magnetar.admin.pulsar_batch": set(),
    "magnetar.admin.rest": {
        *STORAGE,
        "magnetar.broker",
        "magnetar.gc",
        "magnetar.admin.range_frames",
        "magnetar.admin.pulsar_batch",
    },
    # a client of the REST API: only the broker's wire formats (so Spark workers import it cheaply)
    "magnetar.admin.spark": {
        "magnetar.broker.wire",
        "magnetar.managed_ledger.entry_prefix",
        "magnetar.admin.range_frames",
    },
    "magnetar.admin.processes": {*STORAGE, "magnetar.broker", "magnetar.gc", "magnetar.admin.rest"},
    "magnetar.admin.perf": {*STORAGE, "magnetar.broker", "magnetar.gc", "magnetar.admin.processes"},
    # the front door: it may reach every kind, and no other kind may import it
    "magnetar.admin.cli": {
        *STORAGE,
        "magnetar.broker",
        "magnetar.gc",
        "magnetar.admin.processes",
        "magnetar.admin.perf",
        "magnetar.admin.rest",
        "magnetar.admin.spark",
        "magnetar.admin.pulsar_batch",
    },
}
LAYERS = sorted(ALLOWED, key=len, reverse=True)


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer_of(module: str) -> str | None:
    for layer in LAYERS:
        if module == layer or module.startswith(layer + "."):
            return layer
    return None


def module_files() -> list[tuple[str, Path]]:
    out = []
    for pkg, folder in PACKAGE_DIRS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out.append((".".join([pkg, *parts]), path))
    return out


def imports_of(module: str, path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
                found.append(target)
            elif node.module:
                found.append(node.module)
    return found


def test_packages_list_matches_folders() -> None:
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    on_disk = set()
    for pkg, folder in PACKAGE_DIRS.items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base)
            on_disk.add(".".join([pkg, *rel.parts]))
        for py in base.rglob("*.py"):
            assert (py.parent / "__init__.py").exists(), f"{py} is in a folder without __init__.py"
    assert listed == on_disk, f"pyproject packages differ from folders: {sorted(listed ^ on_disk)}"


def test_every_package_is_typed() -> None:
    for pkg in PYPROJECT["tool"]["setuptools"]["packages"]:
        top, *rest = pkg.split(".")[1:]
        folder = ROOT / PACKAGE_DIRS[f"magnetar.{top}"] / Path(*rest) if rest else ROOT / PACKAGE_DIRS[pkg]
        assert (folder / "py.typed").exists(), f"{pkg} lacks py.typed"


def test_imports_run_downward() -> None:
    violations = []
    for module, path in module_files():
        own = layer_of(module)
        assert own is not None, f"{module} is in no layer"
        for target in imports_of(module, path):
            head = target.split(".")[0]
            if head in TOP_FOLDERS or head in {"broker", "admin", "managed_ledger", "bookkeeper"}:
                violations.append(f"{module}: bare import {target!r} (use magnetar.{target})")
                continue
            if not target.startswith("magnetar."):
                continue
            other = layer_of(target)
            if other is None or other == own or other.startswith(own + "."):
                continue
            if not any(_within(target, a) for a in ALLOWED[own]):
                violations.append(f"{module} imports {target} ({own} may not import {other})")
    assert not violations, "\n".join(violations)


def test_layer_rule_detects_a_violation() -> None:
    """The checker itself must reject an upward import (guards against a vacuous pass)."""
    assert "magnetar.broker" not in ALLOWED["magnetar.managed_ledger"]
    assert layer_of("magnetar.bookkeeper.client.ops") == "magnetar.bookkeeper.client"
    assert layer_of("magnetar.bookkeeper.errors") == "magnetar.bookkeeper"
    assert all("magnetar.admin" not in allowed for allowed in ALLOWED.values())
    # garbage collection sits on the storage engine's face for GC, not on the rest of the bookie; the engine
    # never reaches up into gc
    assert GC_SEAM in ALLOWED["magnetar.gc"]
    assert not any(_within(a, "magnetar.bookkeeper.bookie") and a != GC_SEAM for a in ALLOWED["magnetar.gc"])
    assert not any(_within("magnetar.bookkeeper.bookie.server", a) for a in ALLOWED["magnetar.gc"])
    assert layer_of("magnetar.bookkeeper.bookie.storage.journal") == "magnetar.bookkeeper.bookie.storage"
    assert not any(_within("magnetar.bookkeeper.bookie.server", a) for a in ALLOWED[layer_of(GC_SEAM) or ""])
    assert all(
        "magnetar.gc" not in ALLOWED[layer] for layer in ALLOWED if layer.startswith("magnetar.bookkeeper")
    )
    # the adapters sit on the core and the wire formats: the circle broker -> protocols -> broker.* is shut
    assert not any(a == "magnetar.broker" for a in ALLOWED["magnetar.broker.protocols"])
    assert layer_of("magnetar.broker.policies.publish_gate") == "magnetar.broker.policies"
    # no room of the broker reaches the composition root at its top (the folder circle is shut)
    rooms = [layer for layer in ALLOWED if layer.startswith("magnetar.broker.")]
    assert len(rooms) >= 9
    assert not any(a == "magnetar.broker" for room in rooms for a in ALLOWED[room])
    assert layer_of("magnetar.admin.cli.cmd_broker") == "magnetar.admin.cli"
    assert all(
        "magnetar.admin.cli" not in allowed
        for layer, allowed in ALLOWED.items()
        if layer != "magnetar.admin.cli"
    )


CITED_OUTSIDE = re.compile(r"DESIGN\.md|reference/[a-z]+\.md|\breference §|\.\./shared")
"""A citation of a document that is not in the repository (the project's working notes)."""

ISSUE_NUMBER = re.compile(r"\b[Ii]ssues? #?\d+|\(#\d+\)")
"""An issue number: this project's issues mean nothing to a reader of the repository, so a comment says what
it means instead; an upstream project's issue is cited with the project's name just before it."""
UPSTREAM = re.compile(r"(BookKeeper|Pulsar|ZooKeeper|kazoo)\W*$")


def cites_an_issue_of_ours(line: str) -> bool:
    return any(not UPSTREAM.search(line[: found.start()]) for found in ISSUE_NUMBER.finditer(line))


def test_comments_cite_only_documents_in_the_repository() -> None:
    """Code and documents cite docs/ (architecture.md, upstream.md), never notes outside the repository,
    nor this project's issue numbers."""
    folders = [*PACKAGE_DIRS.values(), "tests", "docs", "helm"]
    paths = [ROOT / "README.md", ROOT / "Makefile", ROOT / "pyproject.toml"]
    for folder in folders:
        paths.extend(
            p for p in (ROOT / folder).rglob("*") if p.suffix in {".py", ".md", ".yaml", ".tpl", ".txt"}
        )
    this = Path(__file__).resolve()
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in paths
        if path.resolve() != this and path.is_file()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if CITED_OUTSIDE.search(line) or cites_an_issue_of_ours(line)
    ]
    assert not found, found
    assert cites_an_issue_of_ours("the data path must not notice them (issue #26).")
    assert cites_an_issue_of_ours("## Issue 24, item 3: garbage collection")
    assert cites_an_issue_of_ours("aim (#5)")
    assert not cites_an_issue_of_ours("unless isForceGCAllowWhenNoSpace, see BookKeeper issue #571) unless")
    assert not cites_an_issue_of_ours("a redirect loop (Pulsar issue #13946) ends")
    assert not cites_an_issue_of_ours("a PKCS#8 private key")
    for document in ("architecture.md", "upstream.md"):
        assert (ROOT / "docs" / document).is_file()


def _import_graph(prefix: str) -> dict[str, set[str]]:
    """Module -> the modules of the project it imports (any import, ``TYPE_CHECKING`` ones included), for
    the modules under ``prefix``; an imported name that is not a module is resolved to its module."""
    modules = dict(module_files())
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        if not (module == prefix or module.startswith(prefix + ".")):
            continue
        targets = set()
        for imported in imports_of(module, path):
            target = imported
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target:
                targets.add(target)
        graph[module] = targets
    return graph


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        module = todo.pop()
        for target in graph.get(module, set()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


FRAME_CODECS = (
    "magnetar.broker.wire.magnetar_v1",
    "magnetar.broker.protocols",
    "magnetar.bookkeeper.runtime.http",
)
"""Modules that encode or carry client frames: the core reaches none of them."""


def test_the_core_imports_no_frame_codec() -> None:
    graph = _import_graph("magnetar")
    core = [module for module in graph if module.startswith("magnetar.broker.core.")]
    assert "magnetar.broker.core.topic" in core
    reached = {target: module for module in core for target in _reachable(graph, module)}
    assert "magnetar.managed_ledger.ledger" in reached  # the walk follows imports out of the core
    codecs = sorted(t for t in reached if any(t == c or t.startswith(c + ".") for c in FRAME_CODECS))
    assert codecs == [], f"the broker core reaches frame codecs: {codecs}"


def test_the_core_modules_import_no_circle() -> None:
    graph = _import_graph("magnetar.broker.core")
    core = {module: {t for t in targets if t in graph} for module, targets in graph.items()}
    circles = sorted(module for module in core if module in _reachable(core, module))
    assert circles == [], f"core modules in an import circle: {circles}"


def folder_of(module: str, modules: dict[str, Path]) -> str:
    """The package (folder) holding ``module``; a package's ``__init__`` is in its own folder."""
    return module if modules[module].name == "__init__.py" else module.rpartition(".")[0]


def folder_graph() -> dict[str, set[str]]:
    """Folder -> the other folders its modules import (any import, ``TYPE_CHECKING`` ones included)."""
    modules = dict(module_files())
    folders: dict[str, set[str]] = {}
    for module, targets in _import_graph("magnetar").items():
        own = folder_of(module, modules)
        folders.setdefault(own, set()).update(
            other for other in (folder_of(target, modules) for target in targets) if other != own
        )
    return folders


def test_no_circle_between_folders() -> None:
    """No two folders of the tree import each other, directly or around a longer circle: a package's
    modules sit above or below another's, never both."""
    folders = folder_graph()
    assert "magnetar.broker.sessions" in folders["magnetar.broker"]  # the walk sees the composition root
    circles = sorted(folder for folder in folders if folder in _reachable(folders, folder))
    assert circles == [], f"folders in an import circle: {circles}"


def test_the_circle_check_sees_a_circle() -> None:
    """The checks above must be able to fail (guards against a vacuous pass)."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert [m for m in graph if m in _reachable(graph, m)] == ["a", "b", "c"]
    assert folder_of("magnetar.broker.sessions", dict(module_files())) == "magnetar.broker.sessions"
    assert folder_of("magnetar.broker.service", dict(module_files())) == "magnetar.broker"
    assert _import_graph("magnetar.broker.sessions")["magnetar.broker.sessions.front_door"] >= {
        "magnetar.broker.core",
        "magnetar.broker.sessions.registry",
    }


def test_protocol_adapters_import_only_shared_helpers() -> None:
    """An adapter (a folder under ``broker.protocols``) imports no other adapter, and of ``broker.protocols``
    only the shared helpers at its top (adding a protocol is one folder and one registry line); nothing in
    ``broker.protocols`` reaches the front door, the owner proxy or the rest of the broker."""
    graph = _import_graph("magnetar.broker.protocols")
    adapters = {m.split(".")[3] for m in graph if m.count(".") >= 4}
    assert {"pulsar_ws", "magnetar_v1"} <= adapters
    wrong = []
    for module, targets in graph.items():
        own = module.split(".")[3] if module.count(".") >= 4 else None
        for target in targets:
            if not target.startswith("magnetar.broker."):
                continue
            area = target.split(".")[2]
            if area in {"core", "wire"}:
                continue
            if area != "protocols":
                wrong.append(f"{module} imports {target}")
            elif target.count(".") >= 4 and target.split(".")[3] != own:
                wrong.append(f"{module} imports another adapter's {target}")
    assert wrong == [], wrong
    from magnetar.broker.sessions import registry

    registered = {type(adapter).__module__.split(".")[3] for adapter in registry.ADAPTERS}
    registered |= set(registry.CONNECTION_ADAPTERS)
    assert registered == adapters, "every adapter folder is registered once in broker.sessions.registry"


def test_the_wire_formats_import_without_the_server() -> None:
    """What clients import (the admin command line, the Spark source, the perf tools) loads no server code
    and no server dependency."""
    wire = sorted(m for m in dict(module_files()) if m.startswith("magnetar.broker.wire."))
    server_side = ("trio", "pydantic", "h11", "wsproto", "kazoo", "rocksdict", "magnetar.managed_ledger",
                   "magnetar.bookkeeper", "magnetar.gc", "magnetar.admin")  # fmt: skip
    probe = (
        f"import sys, importlib\nfor m in {wire!r}: importlib.import_module(m)\n"
        f"print('|'.join(sorted(m for m in sys.modules if m.startswith({server_side!r}))))\n"
        "print('|'.join(sorted(m for m in sys.modules if m.startswith('magnetar.broker.'))))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    server, broker = result.stdout.splitlines()
    assert server == ""
    assert all(
        m == "magnetar.broker.wire" or m.startswith("magnetar.broker.wire.") for m in broker.split("|")
    )
    assert "magnetar.broker.wire.magnetar_v1" in broker.split("|")


def test_gc_reaches_the_bookie_only_through_its_seam() -> None:
    """``magnetar.gc`` imports of the bookie only the storage engine's face for GC; the engine's modules and
    the bookie's server side are reached through it or not at all."""
    graph = _import_graph("magnetar.gc")
    assert "magnetar.gc.compaction_job" in graph
    reached = {t for targets in graph.values() for t in targets if _within(t, "magnetar.bookkeeper.bookie")}
    assert reached == {GC_SEAM}, f"gc imports bookie modules besides its seam: {sorted(reached - {GC_SEAM})}"
