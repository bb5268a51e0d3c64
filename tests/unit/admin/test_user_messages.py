"""Messages that tell a user what to do name the ``magnetar admin`` verb, not a REST path.

A user of the command line sees the REST API's ``reason`` texts as they are (``error: 409 ...``), so advice
such as "delete it with DELETE .../partitions" sends them to an API they are not using. This scans every
string the REST API, the admin command line and the broker can answer or print (docstrings aside) for an
HTTP method followed by a path.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCANNED = ("admin/rest", "admin/cli/admin_client", "broker", "managed_ledger", "gc")
REST_ADVICE = re.compile(r"\b(GET|PUT|POST|DELETE) +(/|\.\.\.)")


def docstrings(tree: ast.AST) -> set[int]:
    """The string statements (docstrings of modules, classes, functions and attributes): never shown."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }


def user_strings(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    skip = docstrings(tree)
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
    ]


def test_no_message_sends_a_user_to_a_rest_path() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {text!r}"
        for folder in SCANNED
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line, text in user_strings(path)
        if REST_ADVICE.search(text)
    ]
    assert not offenders, "advice that names a REST path instead of a verb:\n" + "\n".join(offenders)


def test_the_scan_finds_rest_advice_and_skips_docstrings(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""Serves ``DELETE /admin/v2/...``."""\n'
        "def f():\n"
        '    """Answers GET /x."""\n'
        '    raise ValueError("delete it with DELETE .../partitions")\n'
    )
    found = [text for _, text in user_strings(sample) if REST_ADVICE.search(text)]
    assert found == ["delete it with DELETE .../partitions"]
