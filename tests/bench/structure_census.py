"""Census of the code's structure: long modules, imports that bypass a package's face, circles of folders.

Run from the repository root (on any checkout: it reads the files, imports nothing of the project)::

    .venv/bin/python tests/bench/structure_census.py [--list] [--root CHECKOUT]

(``--root`` counts another checkout, e.g. a ``git worktree add --detach`` of an older commit.)

It prints

- the package modules over 600 lines (tests not counted);
- the cross-package imports and how many of them bypass the face of the package they import: a package is a
  folder with ``__init__.py``, a subpackage is a package of its own, and an import bypasses a face when it
  names a module of another package instead of the package (the definitions, and how an import statement is
  counted, are in ``tests/tools/face_imports.py``'s docstring);
- the folder-level circles: the strongly connected components (more than one package) of the graph whose
  nodes are packages and whose edges are their cross-package imports.

With ``--list`` it also names the bypasses per imported package and the members of each circle.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: tools.face_imports

from tools.face_imports import ROOT, Tree

LONG = 600


def long_modules(tree: Tree) -> list[tuple[int, str]]:
    sizes = [(len(path.read_text().splitlines()), module) for module, path in tree.modules.items()]
    return sorted((size, module) for size, module in sizes if size > LONG)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.get(target, ())))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="bypasses per package, members of circles")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to count (default: this one)")
    args = parser.parse_args(argv)
    tree = Tree.read(args.root.resolve())
    print(f"modules over {LONG} lines:")
    for size, module in long_modules(tree):
        print(f"  {size:5d}  {module}")
    imports = [found for found in tree.all_imports() if tree.is_cross(found)]
    bypassing = [found for found in imports if tree.bypasses(found)]
    share = 100 * len(bypassing) / len(imports) if imports else 0.0
    own = sum(1 for found in bypassing if not tree.passes_face(found))
    print(
        f"cross-package imports: {len(imports)}, bypassing a face: {len(bypassing)} ({share:.0f} %), "
        f"of which {own} name a module its package declares a face of its own (_OWN_FACES)"
    )
    graph: dict[str, set[str]] = defaultdict(set)
    for found in imports:
        graph[tree.package_of(found.importer)].add(tree.package_of(found.target))
    found_circles = circles(graph)
    print(f"folder-level circles: {len(found_circles)}")
    for circle in found_circles:
        print(f"  {len(circle)} packages: {', '.join(circle)}")
    if args.list:
        per_package = Counter(tree.package_of(found.target) for found in bypassing)
        print("bypasses per imported package:")
        for package, count in per_package.most_common():
            print(f"  {count:4d}  {package}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
