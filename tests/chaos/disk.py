"""A bookie's disk that a test can fill: a tmpfs of a given size mounted on its data directory (root only).

:func:`small_disk` mounts it before the bookie starts and unmounts it after the cluster stopped;
:func:`fill_to` writes a filler file until the disk is used to the given fraction (what the bookie's disk
monitor reads with ``statvfs``), :func:`free_filler` removes it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

FILLER = "disk-filler.bin"
_CHUNK = b"\0" * (1024 * 1024)


@contextlib.contextmanager
def small_disk(path: Path, size_mb: int) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI and this machine run as root)")
    mount = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mount.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def used_fraction(path: Path) -> float:
    stats = os.statvfs(path)
    return 1 - stats.f_bavail / stats.f_blocks


def fill_to(path: Path, fraction: float) -> float:
    """Grow the filler file until ``fraction`` of the disk is used (or it is full); returns the fraction."""
    with (path / FILLER).open("ab") as filler:
        while used_fraction(path) < fraction:
            try:
                filler.write(_CHUNK)
                filler.flush()
            except OSError:  # ENOSPC: as full as it gets
                break
    return used_fraction(path)


def free_filler(path: Path) -> None:
    (path / FILLER).unlink(missing_ok=True)
