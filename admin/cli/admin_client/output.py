"""Printing answers: JSON (pretty, as pulsar-admin prints) or a plain table."""

from __future__ import annotations

import json
from typing import Any, TextIO


def render(result: Any, fmt: str, out: TextIO) -> None:
    if result is None:
        return
    if fmt == "table":
        _table(result, out)
    elif isinstance(result, str):
        print(result, file=out)
    else:
        print(json.dumps(result, indent=2, sort_keys=False), file=out)


def _cell(value: Any) -> str:
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return "" if value is None else str(value)


def _table(result: Any, out: TextIO) -> None:
    if isinstance(result, list) and all(isinstance(item, dict) for item in result) and result:
        columns = list(dict.fromkeys(key for item in result for key in item))
        rows = [[_cell(item.get(c)) for c in columns] for item in result]
    elif isinstance(result, list):
        columns, rows = ["value"], [[_cell(item)] for item in result]
    elif isinstance(result, dict):
        columns, rows = ["key", "value"], [[str(k), _cell(v)] for k, v in result.items()]
    else:
        print(_cell(result), file=out)
        return
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(columns)]
    print("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip(), file=out)
    for row in rows:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip(), file=out)
