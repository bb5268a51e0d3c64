"""Where a ledger's metadata node lives (BookKeeper's ``HierarchicalLedgerManager`` layout, docs/upstream.md,
BookKeeper §1.4).

* a ledger id below ``Integer.MAX_VALUE`` is written as 10 digits split 2-4-4:
  ledger 1 -> ``/ledgers/00/0000/L0001`` (``LegacyHierarchicalLedgerManager``);
* larger ids are written as 19 digits split 3-4-4-4-4:
  ``/ledgers/000/0000/0000/0000/L0001`` (``LongHierarchicalLedgerManager``).

The replication client writes these nodes; the bookie's garbage collector only reads them (it lists the
parent nodes of its local ledgers and checks single nodes), so the layout lives here, in the layer both use.
"""

from __future__ import annotations

SHORT_ID_LIMIT = 2**31 - 1
"""``Integer.MAX_VALUE``: ids at or above it use the long hierarchy."""
LEDGERS_ROOT = "/ledgers"


def ledger_path(root: str, ledger_id: int) -> str:
    if ledger_id < 0:
        raise ValueError(f"ledger id must be >= 0, got {ledger_id}")
    if ledger_id < SHORT_ID_LIMIT:
        digits = f"{ledger_id:010d}"
        return f"{root}/{digits[0:2]}/{digits[2:6]}/L{digits[6:10]}"
    digits = f"{ledger_id:019d}"
    return f"{root}/{digits[0:3]}/{digits[3:7]}/{digits[7:11]}/{digits[11:15]}/L{digits[15:19]}"


def split_ledger_path(root: str, ledger_id: int) -> tuple[str, str]:
    """``(parent path, node name)`` of the ledger's node: ``("/ledgers/00/0000", "L0001")``."""
    parent, _, name = ledger_path(root, ledger_id).rpartition("/")
    return parent, name


def ledger_id_of(path_parts: list[str]) -> int | None:
    """The ledger id of a path below the root (``["00", "0000", "L0001"]``), or None if it is not one."""
    if not path_parts or not path_parts[-1].startswith("L"):
        return None
    digits = "".join(path_parts[:-1]) + path_parts[-1][1:]
    shapes = {3: (2, 4, 4), 5: (3, 4, 4, 4, 4)}
    shape = shapes.get(len(path_parts))
    parts = [*path_parts[:-1], path_parts[-1][1:]]
    if shape is None or tuple(len(p) for p in parts) != shape or not digits.isdigit():
        return None
    return int(digits)
