"""Facts about the machine a comparison ran on: CPU, memory, the disk under the data dirs, load average."""

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
