"""The container image's install, run here: a fresh venv, a plain non-editable ``pip install .``, no extras.

The image cannot be built on this machine, so this test does what ``helm/magnetar/Dockerfile``'s build
stage does, read from the Dockerfile itself so the two stay in step: the files its ``COPY`` lines copy go
into a scratch build directory (a package folder the Dockerfile forgets to copy is missing here too), its
``python -m venv`` line makes the environment and its ``pip install`` line installs the package. Any other
``RUN`` in the build stage fails the test until the test learns it. Two differences, both for speed: pip
may use its cache (the Dockerfile sets ``PIP_NO_CACHE_DIR``), and the package indexes are this machine's
pip configuration.

With that environment, and nothing from the source tree on the path:

* the environment holds none of the test, Spark, Helm or benchmark packages (``pytest``, ``hypothesis``,
  ``pyspark``, ``pyarrow``, ``helm-python-sdk``, ``kubernetes-validate``, ...);
* ``magnetar --help`` and ``--help`` of every command and of every subcommand below it (the benchmarks of
  ``perf``, the groups of ``admin``, the actions of ``tokens`` and ``config``) exit 0 with their usage;
* ``magnetar config show`` of each process kind prints its settings;
* ``magnetar standalone`` (free ports, data in a temp directory) answers ``GET /admin/v2/brokers/health``
  with 200 ``ok`` and stops cleanly on SIGTERM.

The install takes about 30 s with a warm pip cache (the time is printed with ``-s``).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import pytest
from fixtures.processes import MagnetarProcess

from magnetar.admin.cli import main as cli
from magnetar.admin.cli.cmd_config import KINDS
from magnetar.admin.cli.subcommands import load_every_subcommand

pytestmark = [pytest.mark.processes, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "helm" / "magnetar" / "Dockerfile"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PIP_TIMEOUT_S = 600
BROUGHT_BY_RUNTIME = {"anyio"}
"""Packages an extra lists that a runtime dependency needs too (httpx runs on anyio)."""


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match is not None, requirement
    return normalized(match.group(0))


FORBIDDEN = (
    {
        requirement_name(requirement)
        for requirements in PYPROJECT["project"]["optional-dependencies"].values()
        for requirement in requirements
    }
    - {requirement_name(requirement) for requirement in PYPROJECT["project"]["dependencies"]}
    - BROUGHT_BY_RUNTIME
)
"""Every package an extra asks for and running does not need: none may be in a plain install."""


@dataclass
class BuildStage:
    """What the Dockerfile's build stage does, as this test replays it."""

    copies: list[tuple[list[str], PurePosixPath, bool]] = field(default_factory=list)
    """(sources in the build context, destination in the image, whether it names a directory), in order."""
    venv: str = ""
    """Where ``python -m venv`` puts the environment in the image."""
    pip_args: list[str] = field(default_factory=list)
    """The arguments of the environment's ``pip`` (``install .``)."""
    workdir: PurePosixPath = field(default_factory=lambda: PurePosixPath("/"))
    """The directory ``pip`` runs in."""


def instructions(text: str) -> list[tuple[str, str]]:
    """The Dockerfile's (INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    joined = re.sub(
        r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    )
    pairs = []
    for line in joined.splitlines():
        if line.strip():
            keyword, _, rest = line.strip().partition(" ")
            pairs.append((keyword.upper(), rest.strip()))
    return pairs


def build_stage(text: str) -> BuildStage:
    stage = BuildStage()
    workdir = PurePosixPath("/")
    froms = 0
    for keyword, rest in instructions(text):
        if keyword == "FROM":
            froms += 1
            continue
        if froms != 1 or keyword in {"ARG", "ENV", "LABEL"}:
            continue  # the final stage only copies the environment
        if keyword == "WORKDIR":
            workdir = workdir / rest
        elif keyword == "COPY":
            *sources, destination = shlex.split(rest)
            assert not any(source.startswith("--") for source in sources), f"COPY option in {rest!r}"
            stage.copies.append((sources, workdir / destination, destination.endswith("/")))
        elif keyword == "RUN" and (venv := re.fullmatch(r"python3? -m venv (\S+)", rest)):
            stage.venv = venv.group(1)
        elif keyword == "RUN" and (pip := re.fullmatch(r"(\S+)/bin/pip (.+)", rest)):
            assert pip.group(1) == stage.venv, f"pip of another environment: {rest!r}"
            stage.pip_args = shlex.split(pip.group(2))
            stage.workdir = workdir
        else:
            pytest.fail(f"the Dockerfile's build stage does {keyword} {rest!r}: teach this test to replay it")
    assert stage.venv, "the Dockerfile's build stage makes no venv"
    assert stage.pip_args[:1] == ["install"], f"the Dockerfile's build stage runs no pip install: {stage}"
    return stage


def test_the_dockerfile_replay_reads_the_install_line() -> None:
    """The replay sees what the image does: the venv, the package folders and ``pip install .``."""
    stage = build_stage(DOCKERFILE.read_text())
    assert (stage.venv, stage.pip_args, stage.workdir) == (
        "/opt/magnetar",
        ["install", "."],
        PurePosixPath("/src"),
    )
    copied = {source for sources, _, _ in stage.copies for source in sources}
    assert set(PYPROJECT["tool"]["setuptools"]["package-dir"].values()) <= copied
    assert {"pyproject.toml", "README.md"} <= copied


@dataclass(frozen=True)
class PlainInstall:
    venv: Path
    seconds: float

    @property
    def magnetar(self) -> str:
        return str(self.venv / "bin" / "magnetar")

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")


def replay(stage: BuildStage, root: Path) -> Path:
    """Copy the build context into ``root`` as the stage's ``COPY`` lines do (a directory's contents go to
    the destination; files go into it when it ends with ``/`` or there are several); the venv's path."""
    for sources, destination, into in stage.copies:
        target = root / destination.relative_to("/")
        for source in sources:
            origin = ROOT / source
            assert origin.exists(), f"the Dockerfile copies {source}, which does not exist"
            if origin.is_dir():
                ignored = shutil.ignore_patterns("__pycache__", "*.pyc")
                shutil.copytree(origin, target, ignore=ignored, dirs_exist_ok=True)
            elif into or len(sources) > 1:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, target / origin.name)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, target)
    return root / stage.venv.lstrip("/")


@pytest.fixture(scope="module")
def plain_install(tmp_path_factory: pytest.TempPathFactory) -> PlainInstall:
    root = tmp_path_factory.mktemp("image")
    stage = build_stage(DOCKERFILE.read_text())
    venv = replay(stage, root)
    started = time.monotonic()
    made = subprocess.run(
        [sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True, check=False
    )
    assert made.returncode == 0, made.stderr
    pip = [str(venv / "bin" / "pip"), *stage.pip_args, "--disable-pip-version-check", "--no-input"]
    installed = subprocess.run(
        pip,
        cwd=root / stage.workdir.relative_to("/"),
        capture_output=True,
        text=True,
        timeout=PIP_TIMEOUT_S,
        check=False,
    )
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    seconds = time.monotonic() - started
    print(f"\nplain install: venv + `pip {' '.join(stage.pip_args)}` in {seconds:.1f} s")
    return PlainInstall(venv, seconds)


def run(install: PlainInstall, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [install.magnetar, *args], capture_output=True, text=True, timeout=120, check=False, cwd=cwd
    )


def test_the_package_is_installed_not_linked(plain_install: PlainInstall, tmp_path: Path) -> None:
    where = subprocess.run(
        [plain_install.python, "-c", "import magnetar.admin.cli as m; print(m.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert Path(where.stdout.strip()).is_relative_to(plain_install.venv), where.stdout


def test_a_plain_install_holds_no_test_or_optional_package(plain_install: PlainInstall) -> None:
    names = "import importlib.metadata as m, json; print(json.dumps([d.name for d in m.distributions()]))"
    listed = subprocess.run(
        [plain_install.python, "-c", names],
        capture_output=True,
        text=True,
        check=True,
    )
    installed = {normalized(name) for name in json.loads(listed.stdout)}
    assert {
        "pytest",
        "hypothesis",
        "pyspark",
        "pyarrow",
        "helm-python-sdk",
        "kubernetes-validate",
    } <= FORBIDDEN
    assert "httpx" in installed
    assert not installed & FORBIDDEN, f"a plain install pulled in {sorted(installed & FORBIDDEN)}"


def command_paths() -> list[tuple[str, ...]]:
    """``()``, every command, and every subcommand of a command (perf's benchmarks, admin's groups, ...)."""
    parser = cli.build_parser()
    load_every_subcommand(parser)
    paths: list[tuple[str, ...]] = [()]
    for name, command in subparsers(parser).items():
        paths.append((name,))
        paths.extend((name, child) for child in subparsers(command))
    return paths


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def test_every_command_and_group_shows_its_help(plain_install: PlainInstall, tmp_path: Path) -> None:
    paths = command_paths()
    assert ("perf", "produce") in paths
    assert ("admin", "topics") in paths
    failed = []
    for path in paths:
        done = run(plain_install, *path, "--help", cwd=tmp_path)
        usage = f"usage: magnetar {' '.join(path)}".rstrip()
        if done.returncode != 0 or not done.stdout.startswith(usage):
            failed.append(f"magnetar {' '.join(path)} --help: exit {done.returncode}\n{done.stderr[-1500:]}")
    assert not failed, "\n".join(failed)


@pytest.mark.parametrize("kind", KINDS)
def test_config_show_of_every_process_kind(plain_install: PlainInstall, tmp_path: Path, kind: str) -> None:
    done = run(plain_install, "config", "show", kind, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("# effective"), done.stdout[:500]
    assert "http_port" in done.stdout or kind == "bookie"


def test_a_standalone_of_the_plain_install_serves(plain_install: PlainInstall, tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        bookie_port = probe.getsockname()[1]
    process = MagnetarProcess(
        "standalone",
        [
            "standalone",
            "--data-dir",
            str(tmp_path / "data"),
            "--http-port",
            "0",
            "--bookie-port",
            str(bookie_port),
        ],
        tmp_path,
        program=[plain_install.magnetar],
        cwd=tmp_path,
    )
    try:
        ready = process.start(timeout_s=60)
        assert ready["event"] == "standalone-ready"
        with urllib.request.urlopen(f"{ready['httpUrl']}/admin/v2/brokers/health", timeout=10) as response:
            assert (response.status, response.read()) == (200, b"ok")
    finally:
        code = process.stop()
    assert code == 0, process.log_tail()
    assert "standalone stopped cleanly" in process.log_tail()
