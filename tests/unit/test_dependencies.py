"""Every third-party module the package imports is a runtime dependency in pyproject.toml.

A plain ``pip install .`` (the container image's install) gets the runtime dependencies only: a module that
imports a package found only in an extra (httpx was only in ``dev``) breaks that install. Imports inside
functions count too - they run as soon as the command that needs them does. The exception is a folder or
module that exists for an extra (``admin/spark`` is the ``spark`` extra's PySpark source;
``admin/perf/pulsar_perf.py`` needs the ``pulsar`` extra's official client, and says so when it is missing).
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
FOLDERS = PYPROJECT["tool"]["setuptools"]["package-dir"].values()
EXTRA_FOLDERS = {"admin/spark": "spark", "admin/perf/pulsar_perf.py": "pulsar"}
"""Folders (or modules) that exist for an extra: their imports may come from that extra."""


def distribution_name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match is not None, requirement
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def imported_modules(path: Path) -> set[str]:
    """The top-level names of the absolute imports of one file, including those inside functions."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def third_party_imports() -> dict[Path, set[str]]:
    found: dict[Path, set[str]] = {}
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            names = {
                name
                for name in imported_modules(path)
                if name not in sys.stdlib_module_names and name != "magnetar"
            }
            if names:
                found[path.relative_to(ROOT)] = names
    return found


def test_every_import_is_a_declared_dependency() -> None:
    runtime = {distribution_name(r) for r in PYPROJECT["project"]["dependencies"]}
    extras = {
        extra: {distribution_name(r) for r in requirements}
        for extra, requirements in PYPROJECT["project"]["optional-dependencies"].items()
    }
    distributions = importlib.metadata.packages_distributions()
    missing = []
    for path, names in third_party_imports().items():
        allowed = set(runtime)
        for folder, extra in EXTRA_FOLDERS.items():
            if path.is_relative_to(folder):
                allowed |= extras[extra]
        for name in sorted(names):
            provided_by = {distribution_name(d) for d in distributions.get(name, [])}
            assert provided_by, f"{path} imports {name}, which no installed distribution provides"
            if not provided_by & allowed:
                missing.append(f"{path}: {name} (from {', '.join(sorted(provided_by))})")
    assert not missing, "imports that are not runtime dependencies:\n" + "\n".join(missing)


def test_the_scan_sees_lazy_imports_and_the_extras_folder() -> None:
    """The scan finds imports inside functions (the CLI's lazy ones) and the spark extra's imports."""
    imports = third_party_imports()
    assert "httpx" in imports[Path("admin/cli/admin_client/client.py")]
    assert "rocksdict" in set().union(*imports.values())
    assert any("pyspark" in names for path, names in imports.items() if path.is_relative_to("admin/spark"))
