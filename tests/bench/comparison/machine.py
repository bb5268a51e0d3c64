"""Facts about the machine a comparison ran on: CPU, memory, the disk under the data dirs, load average, and
the CPU time its hypervisor gave to other guests (steal)."""

from __future__ import annotations

import os
import platform
import shutil
from pathlib import Path

GIB = 1024**3


def _first_match(path: str, prefix: str) -> str:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(prefix):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def _mount_of(path: Path) -> tuple[str, str, str]:
    """(device, mount point, filesystem type) of the longest mount point containing ``path``."""
    best = ("unknown", "/", "unknown")
    resolved = str(path.resolve())
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return best
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        device, mount, fstype = fields[0], fields[1], fields[2]
        inside = resolved == mount or resolved.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best[1]):
            best = (device, mount, fstype)
    return best


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f} (1/5/15 min)"


def cpu_ticks() -> tuple[int, int]:
    """(stolen, total) CPU ticks of all cores since boot, from ``/proc/stat``; (0, 0) where unavailable.

    Steal is time a virtual CPU was ready to run but the hypervisor ran another guest: on a shared host it
    slows every process of a benchmark alike, so a phase with much steal measured a busier machine."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return 0, 0
    if fields[:1] != ["cpu"] or len(fields) < 9:
        return 0, 0
    ticks = [int(value) for value in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return ticks[7], sum(ticks)


def steal_share(before: tuple[int, int], after: tuple[int, int]) -> float:
    """The share of CPU time stolen between two :func:`cpu_ticks` readings (0.0 when none passed)."""
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total > 0 else 0.0


def machine_facts(data_dir: Path) -> dict[str, str]:
    memory_kib = _first_match("/proc/meminfo", "MemTotal").split()[0]
    memory = f"{int(memory_kib) * 1024 / GIB:.1f} GiB" if memory_kib.isdigit() else "unknown"
    usage = shutil.disk_usage(data_dir)
    device, mount, fstype = _mount_of(data_dir)
    return {
        "cpu": f"{os.cpu_count()} cores, {_first_match('/proc/cpuinfo', 'model name')}",
        "memory": memory,
        "disk": (
            f"{data_dir} on {device} ({fstype}, mounted at {mount}), "
            f"{usage.free / GIB:.0f} GiB free of {usage.total / GIB:.0f} GiB"
        ),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
    }
