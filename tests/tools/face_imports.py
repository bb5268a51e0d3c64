"""Package faces: which imports name a package (its face) and which reach past it into one of its modules.

A *package* is a folder with ``__init__.py``; every module belongs to the innermost package holding it (a
package's ``__init__`` belongs to the package itself). A subpackage is a package of its own: ``broker/``'s
modules importing ``magnetar.broker.core.topic`` import another package (``magnetar.broker.core``), and so
do ``broker/core/``'s modules importing ``magnetar.broker.wire.ids``. A package's *face* is its
``__init__``: the names in its ``__all__``, each imported there from the module that defines it.

An import is *cross-package* when the module it names belongs to another package than the importing module,
and it *bypasses the face* when it names a module of that package (``from magnetar.broker.core.topic import
Topic``, ``from magnetar.broker.core import topic``, ``import magnetar.broker.core.topic``) instead of the
package itself (``from magnetar.broker.core import Topic``). Every import counts, ``TYPE_CHECKING`` and
function-level ones included; an import statement counts once per module it names.

Run from the repository root::

    .venv/bin/python tests/tools/face_imports.py --check   # list the bypasses the face already covers
    .venv/bin/python tests/tools/face_imports.py --fix     # rewrite them to import the face
    .venv/bin/python tests/tools/face_imports.py --missing # per package: names others import past its face

``--fix`` rewrites ``from magnetar.B.mod import name`` in another package to ``from magnetar.B import name``
when ``B``'s ``__all__`` holds ``name`` and its ``__init__`` imports it from ``magnetar.B.mod``; a statement
with names the face lacks is split. It then runs ``ruff check --select I --fix`` and ``ruff format`` on the
files it changed. It is idempotent (a second run changes nothing), and everything it needs is read from the
tree, so it is rerun unchanged after modules move: first update the faces (``--missing`` says what other
packages use), then ``--fix``. ``tests/unit/test_package_faces.py`` checks the result.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
import tomllib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Import:
    """One module named by one import statement."""

    importer: str
    path: Path
    node: ast.Import | ast.ImportFrom
    target: str
    """The module or package named (the longest prefix of the import that is one)."""
    names: tuple[ast.alias, ...] = ()
    """For ``from target import a, b``: the aliases that are names in ``target`` (not its submodules)."""


@dataclass
class Tree:
    """The project's modules and packages, read from ``pyproject.toml``'s ``package-dir`` and the folders."""

    root: Path
    modules: dict[str, Path] = field(default_factory=dict)
    packages: set[str] = field(default_factory=set)
    _syntax: dict[str, ast.Module] = field(default_factory=dict)

    @classmethod
    def read(cls, root: Path = ROOT) -> Tree:
        tree = cls(root)
        project = tomllib.loads((root / "pyproject.toml").read_text())
        for package, folder in project["tool"]["setuptools"]["package-dir"].items():
            for path in sorted((root / folder).rglob("*.py")):
                rel = path.relative_to(root / folder).with_suffix("")
                parts = [part for part in rel.parts if part != "__init__"]
                name = ".".join([package, *parts])
                tree.modules[name] = path
                if path.name == "__init__.py":
                    tree.packages.add(name)
        return tree

    def package_of(self, module: str) -> str:
        return module if module in self.packages else module.rpartition(".")[0]

    def known(self, dotted: str) -> str | None:
        """The longest prefix of ``dotted`` that is one of the project's modules, if any."""
        while dotted and dotted not in self.modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    def imports(self, module: str) -> list[Import]:
        path = self.modules[module]
        syntax = self.syntax(module)
        found: list[Import] = []
        for node in ast.walk(syntax):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = self.known(alias.name)
                    if target:
                        found.append(Import(module, path, node, target))
            elif isinstance(node, ast.ImportFrom):
                base = self._absolute(module, node)
                target = self.known(base)
                if target is None:
                    continue
                names = []
                for alias in node.names:
                    if f"{base}.{alias.name}" in self.modules:
                        found.append(Import(module, path, node, f"{base}.{alias.name}"))
                    else:
                        names.append(alias)
                if names:
                    found.append(Import(module, path, node, target, tuple(names)))
        return found

    def _absolute(self, module: str, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        base = module.split(".")
        if module not in self.packages:
            base = base[:-1]
        base = base[: len(base) - (node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))

    def all_imports(self) -> list[Import]:
        return [found for module in sorted(self.modules) for found in self.imports(module)]

    def is_cross(self, found: Import) -> bool:
        return self.package_of(found.importer) != self.package_of(found.target)

    def bypasses(self, found: Import) -> bool:
        """A cross-package import that names a module of the other package rather than the package."""
        return self.is_cross(found) and found.target not in self.packages

    def own_faces(self, package: str) -> set[str]:
        """The modules ``package``'s ``__init__`` names in ``_OWN_FACES``: each is imported by its own name
        and stays out of the package's face (so that importing the package does not load it)."""
        value = _assigned(self.syntax(package), "_OWN_FACES")
        return {f"{package}.{name}" for name in ast.literal_eval(value)} if value else set()

    def passes_face(self, found: Import) -> bool:
        """A bypass (:meth:`bypasses`) of a module its package does not declare a face of its own."""
        return self.bypasses(found) and found.target not in self.own_faces(self.package_of(found.target))

    def syntax(self, module: str) -> ast.Module:
        if module not in self._syntax:
            path = self.modules[module]
            self._syntax[module] = ast.parse(path.read_text(), filename=str(path))
        return self._syntax[module]

    def face(self, package: str) -> dict[str, tuple[str, str]]:
        """``package``'s face: each name of its ``__all__`` -> (the module it comes from, its name there);
        a name the ``__init__`` defines itself comes from the package."""
        syntax = self.syntax(package)
        origin: dict[str, tuple[str, str]] = {}
        for node in syntax.body:
            if isinstance(node, ast.ImportFrom):
                base = self._absolute(package, node)
                for alias in node.names:
                    origin[alias.asname or alias.name] = (base, alias.name)
        value = _assigned(syntax, "__all__")
        public = [str(name) for name in ast.literal_eval(value)] if value else []
        return {name: origin.get(name, (package, name)) for name in public}


def _assigned(syntax: ast.Module, name: str) -> ast.expr | None:
    """The value a module assigns to ``name`` at its top level, if it does."""
    for node in syntax.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return node.value
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return node.value
    return None


def bypasses(tree: Tree) -> list[Import]:
    """Every cross-package import that names a module of the other package."""
    return [found for found in tree.all_imports() if tree.bypasses(found)]


def fixable(tree: Tree, found: Import) -> list[ast.alias]:
    """The names of a bypassing ``from B.mod import ...`` that ``B``'s face gives from that same module (a
    module ``B`` keeps as a face of its own, ``_OWN_FACES``, is left as it is)."""
    if not isinstance(found.node, ast.ImportFrom) or not found.names or not tree.passes_face(found):
        return []
    package = tree.package_of(found.target)
    face = tree.face(package)
    return [alias for alias in found.names if face.get(alias.name) == (found.target, alias.name)]


def _statement(module: str, aliases: list[ast.alias]) -> str:
    names = ", ".join(f"{a.name} as {a.asname}" if a.asname else a.name for a in aliases)
    return f"from {module} import {names}"


def fix_file(tree: Tree, path: Path, found: list[Import]) -> bool:
    """Rewrite the fixable bypasses of one file; returns whether it changed. A statement with a comment
    inside, or one that names a submodule too, is left for a hand (``--check`` lists it)."""
    source = path.read_text()
    lines = source.splitlines(keepends=True)
    edits: list[tuple[ast.ImportFrom, str]] = []
    by_node: dict[int, list[Import]] = defaultdict(list)
    for each in found:
        by_node[id(each.node)].append(each)
    for group in by_node.values():
        node = group[0].node
        if not isinstance(node, ast.ImportFrom) or len(group) != 1 or node.level:
            continue
        moved = fixable(tree, group[0])
        if not moved:
            continue
        text = "".join(lines[node.lineno - 1 : node.end_lineno])
        if (
            "#"
            in text[
                node.col_offset : len(text)
                - len(lines[(node.end_lineno or node.lineno) - 1])
                + (node.end_col_offset or 0)
            ]
        ):
            continue
        package = tree.package_of(group[0].target)
        stay = [alias for alias in node.names if alias not in moved]
        indent = "\n" + " " * node.col_offset
        replacement = _statement(package, moved)
        if stay:
            replacement += indent + _statement(group[0].target, stay)
        edits.append((node, replacement))
    if not edits:
        return False
    for node, replacement in sorted(edits, key=lambda edit: edit[0].lineno, reverse=True):
        first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
        head = lines[first][: node.col_offset]
        tail = lines[last][node.end_col_offset :]
        lines[first : last + 1] = [head + replacement + tail]
    path.write_text("".join(lines))
    return True


def fix(tree: Tree) -> list[Path]:
    """Rewrite every fixable bypass in the tree; sorts and formats the changed files with ruff."""
    per_file: dict[Path, list[Import]] = defaultdict(list)
    for found in tree.all_imports():
        per_file[found.path].append(found)
    changed = [path for path, found in per_file.items() if fix_file(tree, path, found)]
    if changed:
        files = [str(path) for path in changed]
        ruff = [sys.executable, "-m", "ruff"]
        subprocess.run(
            [*ruff, "check", "--quiet", "--select", "I", "--fix", *files], check=True, cwd=tree.root
        )
        subprocess.run([*ruff, "format", "--quiet", *files], check=True, cwd=tree.root)
    return changed


def missing(tree: Tree) -> dict[str, dict[str, set[str]]]:
    """Per package: the names other packages import from its modules that its face lacks -> the modules
    they come from (what to add to its ``__init__`` and ``__all__``)."""
    out: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for found in bypasses(tree):
        package = tree.package_of(found.target)
        face = tree.face(package)
        if not tree.passes_face(found):
            continue
        if not found.names:
            out[package][f"<module {found.target}>"].add(found.importer)
        for alias in found.names:
            if face.get(alias.name) != (found.target, alias.name):
                out[package][f"{found.target}.{alias.name}"].add(found.importer)
    return out


def write_face(tree: Tree, package: str) -> list[str]:
    """Add to ``package``'s ``__init__`` (imports and ``__all__``) every name other packages import from its
    modules past its face; returns the names added. Whole modules named by others are not added, nor a name
    two of its modules define (the face cannot give both)."""
    path = tree.modules[package]
    public = [*tree.face(package)]
    origins: dict[str, set[str]] = defaultdict(set)
    for dotted in missing(tree).get(package, {}):
        if not dotted.startswith("<module"):
            origins[dotted.rpartition(".")[2]].add(dotted)
    wanted = sorted(next(iter(o)) for name, o in origins.items() if len(o) == 1 and name not in public)
    if not wanted:
        return []
    syntax = tree.syntax(package)
    lines = path.read_text().splitlines(keepends=True)
    new_imports = []
    for dotted in wanted:
        module, _, name = dotted.rpartition(".")
        new_imports.append(f"from {module} import {name}\n")
        public.append(name)
    end_of_imports = 0
    for node in syntax.body:
        if isinstance(node, ast.Import | ast.ImportFrom) or (
            node is syntax.body[0] and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        ):
            end_of_imports = node.end_lineno or node.lineno
    all_node = next(
        (
            node
            for node in syntax.body
            if isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
        ),
        None,
    )
    listing = "__all__ = [" + ", ".join(repr(name) for name in sorted(set(public))) + "]\n"
    if all_node is not None:
        lines[all_node.lineno - 1 : all_node.end_lineno] = [listing]
    else:
        lines.append("\n" + listing)
    lines[end_of_imports:end_of_imports] = ["\n", *new_imports]
    path.write_text("".join(lines))
    ruff = [sys.executable, "-m", "ruff"]
    subprocess.run(
        [*ruff, "check", "--quiet", "--select", "I,F401,RUF022", "--fix", str(path)],
        check=True,
        cwd=tree.root,
    )
    subprocess.run([*ruff, "format", "--quiet", str(path)], check=True, cwd=tree.root)
    return wanted


def _where(tree: Tree, found: Import) -> str:
    return f"{found.path.relative_to(tree.root)}:{found.node.lineno}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="list the bypasses a face covers; exit 1 if any")
    mode.add_argument("--fix", action="store_true", help="rewrite the bypasses a face covers")
    mode.add_argument("--missing", action="store_true", help="per package: what others import past its face")
    mode.add_argument("--write-face", metavar="PACKAGE", help="add what others import past it to its face")
    args = parser.parse_args(argv)
    tree = Tree.read()
    if args.fix:
        changed = fix(tree)
        print(f"rewrote imports in {len(changed)} files")
        for path in changed:
            print(f"  {path.relative_to(tree.root)}")
        return 0
    if args.write_face:
        added = write_face(tree, args.write_face)
        print(f"{args.write_face}: {len(added)} names added to the face")
        return 0
    if args.missing:
        for package, names in sorted(missing(tree).items()):
            print(f"{package}:")
            for name, importers in sorted(names.items()):
                shown = ", ".join(sorted(importers)[:3]) + (" ..." if len(importers) > 3 else "")
                print(f"  {name}  ({len(importers)}: {shown})")
        return 0
    covered = [found for found in bypasses(tree) if fixable(tree, found)]
    for found in covered:
        names = ", ".join(alias.name for alias in fixable(tree, found))
        print(f"{_where(tree, found)}: {found.target} -> {tree.package_of(found.target)} ({names})")
    print(f"{len(covered)} imports name a module for what its package's face gives")
    return 1 if covered else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
