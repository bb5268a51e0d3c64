"""Packages are imported through their faces.

A package's face is its ``__init__``'s ``__all__``: the names other packages use, each imported there from
the module that defines it. Another package imports ``from magnetar.bookkeeper.protocol import Digester``,
not ``from magnetar.bookkeeper.protocol.digest import Digester``, so a package's modules can be split or
regrouped without touching its users. Definitions (what a package is, how a subpackage relates to its parent,
what counts as a bypass) are in ``tests/tools/face_imports.py``; in short, every folder with ``__init__.py``
is a package of its own, a parent and its subpackages included, in both directions.

The rules:

- no module of the project names a module of another package for a name that package's face gives
  (``tests/tools/face_imports.py --fix`` rewrites such imports);
- a package with a face is imported only through it, except the modules its ``__init__`` names in
  ``_OWN_FACES`` (imported by their own names so that the package's face does not load them: the
  ``magnetar.v1`` frame codec in ``broker.wire``, which the core must not reach);
- a package that other packages import past a missing face is in :data:`WITHOUT_FACE`, with its reason.

A parent's ``__init__`` runs before any module of its subpackages, so a parent's face imports only modules
that do not import its subpackages (``bookkeeper.runtime``'s face does not load ``runtime.http``), and a
parent whose subpackages must stay light keeps no face (``broker``: the wire formats). Tests are not
packages: they may import any module.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from tools.face_imports import Tree, fix, missing

ROOT = Path(__file__).resolve().parents[2]

WITHOUT_FACE: dict[str, str] = {
    "magnetar.broker": "the parent of the wire formats: its __init__ runs on every import of broker.wire, "
    "which clients import without the server (test_the_wire_formats_import_without_the_server)",
    "magnetar.admin": "its __init__ runs on every start of the command line (admin.cli), which loads only "
    "the chosen subcommand (tests/unit/admin/test_subcommands.py); range_frames and pulsar_batch are "
    "imported by name",
    "magnetar.admin.processes": "the composition roots: a face would load every process kind (ZooKeeper, "
    "RocksDB, the broker, the bookie) for whichever one a command starts",
    "magnetar.bookkeeper.runtime.auth": "its __init__ imports nothing eagerly: the HTTP server imports tls "
    "alone, and a face would load the JWT and key libraries into every process that serves HTTP",
    "magnetar.managed_ledger": "its __init__ runs on every import of entry_prefix, the stored entries' index "
    "prefix, which the Spark source's executors read without the managed ledger (spark/test_layering.py)",
    "magnetar.broker.protocols": "not yet: the broker's top level, sessions, owner proxy and adapters are "
    "being regrouped; their faces follow (the shared helpers must not load an adapter)",
    "magnetar.broker.protocols.pulsar_ws": "as magnetar.broker.protocols",
    "magnetar.broker.protocols.magnetar_v1": "as magnetar.broker.protocols",
    "magnetar.broker.protocols.pulsar_binary": "as magnetar.broker.protocols",
    "magnetar.broker.sessions": "as magnetar.broker.protocols; the front door imports the owner proxy, "
    "which imports the registry here: an eager face would close that circle at import time",
    "magnetar.broker.owner_proxy": "as magnetar.broker.sessions",
}
"""Packages other packages import past their missing face, each with why it has none (yet)."""


def face_violations(tree: Tree) -> list[str]:
    """Imports that reach past a face: a name the face gives, or any module of a package with a face."""
    wrong = []
    for found in tree.all_imports():
        if not tree.passes_face(found):
            continue
        package = tree.package_of(found.target)
        if tree.face(package):
            names = ", ".join(alias.name for alias in found.names) or "the module"
            where = f"{found.path.relative_to(tree.root)}:{found.node.lineno}"
            wrong.append(f"{where}: {found.target} ({names}) past the face of {package}")
    return wrong


def test_packages_are_imported_through_their_faces() -> None:
    tree = Tree.read(ROOT)
    assert face_violations(tree) == []
    faced = {package for package in tree.packages if tree.face(package)}
    assert {"magnetar.broker.wire", "magnetar.bookkeeper.protocol", "magnetar.broker.core"} <= faced
    past = {tree.package_of(found.target) for found in tree.all_imports() if tree.passes_face(found)}
    assert past - faced == set(WITHOUT_FACE), "a package imported past no face needs a face or a reason"
    assert all(reason for reason in WITHOUT_FACE.values())


def test_every_face_name_is_defined_where_the_face_says() -> None:
    """Each name of a face resolves to an object of the module it is imported from (no stale face)."""
    import importlib

    tree = Tree.read(ROOT)
    for package in sorted(tree.packages):
        if ".spark" in package:
            continue  # optional dependency
        for name, (module, original) in tree.face(package).items():
            assert getattr(importlib.import_module(package), name) is getattr(
                importlib.import_module(module), original
            ), f"{package}.{name}"


PLANTED = {
    "pyproject.toml": """
        [tool.setuptools.package-dir]
        "magnetar.a" = "a"
        "magnetar.b" = "b"
    """,
    "a/__init__.py": "",
    "a/user.py": """
        from magnetar.b.mod import Other, Thing


        def use() -> tuple[object, object]:
            from magnetar.b.mod import Thing as Renamed  # noqa: PLC0415

            return Other, Thing, Renamed
    """,
    "b/__init__.py": """
        from magnetar.b.mod import Thing

        __all__ = ["Thing"]
    """,
    "b/mod.py": """
        class Thing: ...


        class Other: ...
    """,
}


def test_a_face_bypass_is_seen_and_fixed(tmp_path: Path) -> None:
    """A planted bypass is reported, ``--fix`` rewrites it to the face (splitting what the face lacks),
    and a second run changes nothing (guards against a vacuous pass)."""
    for name, text in PLANTED.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text).lstrip())
    tree = Tree.read(tmp_path)
    assert tree.package_of("magnetar.a.user") == "magnetar.a"
    assert face_violations(tree) == [
        "a/user.py:1: magnetar.b.mod (Other, Thing) past the face of magnetar.b",
        "a/user.py:5: magnetar.b.mod (Thing) past the face of magnetar.b",
    ]
    assert dict(missing(tree)["magnetar.b"]) == {"magnetar.b.mod.Other": {"magnetar.a.user"}}
    assert fix(tree) == [tmp_path / "a" / "user.py"]
    text = (tmp_path / "a" / "user.py").read_text()
    assert "from magnetar.b import Thing\n" in text
    assert "from magnetar.b.mod import Other\n" in text
    assert "from magnetar.b import Thing as Renamed  # noqa: PLC0415\n" in text
    after = Tree.read(tmp_path)
    assert face_violations(after) == ["a/user.py:2: magnetar.b.mod (Other) past the face of magnetar.b"]
    assert fix(after) == []
