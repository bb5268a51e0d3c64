"""Configurations users already have keep their meaning: the README's config examples and the settings the
Helm chart renders for its broker and bookie containers validate to the same values as before the layers'
settings were composed into the process models.

The values are compared in their *flat view*: a composed layer (``BrokerSettings.http``) flattened back into
its flat names, and a renamed setting under its old name (``RENAMED``), so the view does not depend on where
a setting is declared or what it is called now. ``settings_compatibility.json``
holds the flat views taken at the commit before the composition, and every value there must be the same now
(regenerate with ``python tests/helm/test_settings_compatibility.py`` only when a value is meant to change).
A scenario of our own (``layer-settings``) sets, flat, settings of every layer the broker composes, as a chart
user could have in ``broker.config``.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import pytest
from fixtures.helm_chart import CHART_DIR, SCENARIOS, container_environment, merged, render
from pydantic_settings import BaseSettings

from magnetar.admin.processes.bookie_settings import BookieSettings
from magnetar.admin.processes.config import load_settings
from magnetar.admin.processes.standalone_settings import StandaloneSettings
from magnetar.broker.settings import BrokerSettings

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = Path(__file__).with_name("settings_compatibility.json")

LAYER_SETTINGS: dict[str, Any] = {
    "broker": {
        "config": {
            "ws_frame_bytes_max": 1048576,
            "http_connections_per_ip_max": 64,
            "ws_idle_timeout_ms": 120000,
            "max_entries_per_ledger": 1000,
            "entry_cache_bytes_max": 8388608,
            "add_timeout_ms": 7000,
            "read_timeout_ms": 6000,
            "min_num_racks_per_write_quorum": 1,
        }
    },
    "bookie": {"config": {"disk_check_interval_ms": 2000, "storage_engine": {"disk_check_interval_ms": 300}}},
}
HELM_SCENARIOS = {**SCENARIOS, "layer-settings": LAYER_SETTINGS}
CONTAINERS = {"broker": BrokerSettings, "bookie": BookieSettings}
README_EXAMPLES = {"bookie.toml": BookieSettings, "standalone.toml": StandaloneSettings}


def flat_view(settings: BaseSettings) -> dict[str, Any]:
    """The effective settings as JSON, each composed layer (``FLATTENED``) merged into the top level, the
    same in each part of a composite process."""
    document: dict[str, Any] = json.loads(settings.model_dump_json())
    return {name: _cwd_free(value) for name, value in _flatten(type(settings), document).items()}


def _cwd_free(value: Any) -> Any:
    """A default derived from the working directory (the bookie's ``metadata_url``) with that directory as
    ``<cwd>``, so the recorded values hold wherever the suite runs."""
    if isinstance(value, dict):
        return {name: _cwd_free(item) for name, item in value.items()}
    return value.replace(str(Path.cwd()), "<cwd>") if isinstance(value, str) else value


def _flatten(model: type[Any], document: dict[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    layers = getattr(model, "FLATTENED", ())
    for old, new in getattr(model, "RENAMED", {}).items():  # a renamed setting under the name it had
        if new in document:
            document = {old if name == new else name: value for name, value in document.items()}
    for name, value in document.items():
        if name in layers and isinstance(value, dict):
            flat.update(value)
    for name, value in document.items():
        if name in layers and isinstance(value, dict):
            continue
        info = model.model_fields.get(name)
        nested = info.annotation if info is not None else None
        if isinstance(value, dict) and isinstance(nested, type) and hasattr(nested, "model_fields"):
            flat[name] = _flatten(nested, value)
        else:
            flat[name] = value
    return flat


def assert_same_values(got: dict[str, Any], before: dict[str, Any], prefix: str = "") -> None:
    """Every setting ``before`` had has the same value in ``got`` (a composed layer may make settings
    reachable that the process applied with their defaults before: ``http_request_timeout_ms``)."""
    for name, value in before.items():
        assert name in got, f"{prefix}{name} is no longer a setting"
        if isinstance(value, dict) and isinstance(got[name], dict):
            assert_same_values(got[name], value, f"{prefix}{name}.")
        else:
            assert got[name] == value, f"{prefix}{name}: {got[name]!r}, before {value!r}"


def readme_examples() -> dict[str, str]:
    """The README's TOML examples, by the file name their first comment gives."""
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```toml\n(.*?)```", text, flags=re.DOTALL)
    examples: dict[str, str] = {}
    for block in blocks:
        first = block.splitlines()[0]
        for name in README_EXAMPLES:
            if first.startswith(f"# {name}"):
                examples[name] = block
    return examples


def without_magnetar_environment() -> Iterator[None]:
    saved = {name: value for name, value in os.environ.items() if name.upper().startswith("MAGNETAR_")}
    for name in saved:
        del os.environ[name]
    try:
        yield
    finally:
        for name in [name for name in os.environ if name.upper().startswith("MAGNETAR_")]:
            del os.environ[name]
        os.environ.update(saved)


def readme_view(name: str, tmp: Path) -> dict[str, Any]:
    path = tmp / name
    path.write_text(readme_examples()[name])
    return flat_view(load_settings(README_EXAMPLES[name], {}, path).settings)


def helm_view(chart: helm_python.Chart, scenario: str, container: str) -> dict[str, Any]:
    rendered = render(chart, merged(HELM_SCENARIOS[scenario]))
    environment = container_environment(rendered, container, {"POD_IP": "10.0.0.7"})
    os.environ.update(environment)
    try:
        return flat_view(load_settings(CONTAINERS[container], {}).settings)
    finally:
        for name in environment:
            del os.environ[name]


@pytest.fixture(autouse=True)
def clean_environment() -> Iterator[None]:
    yield from without_magnetar_environment()


@pytest.fixture(scope="module")
def expected() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(EXPECTED.read_text())
    return loaded


def test_the_readme_has_the_examples() -> None:
    assert set(readme_examples()) == set(README_EXAMPLES)


@pytest.mark.parametrize("name", sorted(README_EXAMPLES))
def test_a_readme_example_validates_to_the_same_values(
    name: str, expected: dict[str, Any], tmp_path: Path
) -> None:
    assert_same_values(readme_view(name, tmp_path), expected["readme"][name])


@pytest.mark.parametrize("container", sorted(CONTAINERS))
@pytest.mark.parametrize("scenario", sorted(HELM_SCENARIOS))
def test_the_charts_settings_validate_to_the_same_values(
    chart: helm_python.Chart, scenario: str, container: str, expected: dict[str, Any]
) -> None:
    assert_same_values(helm_view(chart, scenario, container), expected["helm"][scenario][container])


def test_the_layer_settings_scenario_reaches_the_layers(chart: helm_python.Chart) -> None:
    view = helm_view(chart, "layer-settings", "broker")
    for name, value in LAYER_SETTINGS["broker"]["config"].items():
        assert view[name] == value, name


def regenerate(tmp: Path) -> None:
    document: dict[str, Any] = {"readme": {}, "helm": {}}
    with helm_python.Chart.load(CHART_DIR) as chart:
        for scenario in sorted(HELM_SCENARIOS):
            document["helm"][scenario] = {c: helm_view(chart, scenario, c) for c in sorted(CONTAINERS)}
    for name in sorted(README_EXAMPLES):
        document["readme"][name] = readme_view(name, tmp)
    EXPECTED.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    import tempfile

    for _ in without_magnetar_environment():
        with tempfile.TemporaryDirectory() as directory:
            regenerate(Path(directory))
    sys.exit(0)
