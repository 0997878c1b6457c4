"""recforge is an Airflow provider: its metadata passes Airflow's own schema, names what it
ships, and the installed package registers it, so ``airflow providers list`` and ``airflow
config list --section recforge`` show it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import distribution, entry_points
from pathlib import Path

import pytest

import recforge
from recforge import settings
from recforge.orchestration import provider

AIRFLOW = Path(sys.executable).with_name("airflow")


def test_the_provider_info_passes_airflows_schema():
    """The schema Airflow's ``ProvidersManager`` validates every provider with."""
    jsonschema = pytest.importorskip("jsonschema")
    import airflow

    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json")
                        .read_text(encoding="utf-8"))
    info = provider.get_provider_info()
    jsonschema.validate(info, schema)
    with pytest.raises(jsonschema.ValidationError):  # the schema does bite
        jsonschema.validate({**info, "config": {"recforge": {"options": {}}}}, schema)


def test_the_provider_info_names_this_package_and_what_it_ships():
    info = provider.get_provider_info()
    # Airflow refuses a provider whose package-name is not its distribution's name
    assert info["package-name"] == distribution("recforge").metadata["Name"] == "recforge"
    assert info["versions"] == [recforge.__version__] == [distribution("recforge").version]
    assert info["config"] == settings.config_section()
    assert set(info["config"]["recforge"]["options"]) == set(settings.OPTIONS)
    from airflow.sdk import BaseNotifier
    from airflow.sdk.module_loading import import_string

    for path in info["notifications"]:
        assert issubclass(import_string(path), BaseNotifier)
    assert "recforge.orchestration.notifier.QualityNotifier" in info["notifications"]


def test_the_installed_package_registers_the_provider():
    (point,) = [ep for ep in entry_points(group="apache_airflow_provider")
                if ep.dist is not None and ep.dist.name == "recforge"]
    assert point.load() is provider.get_provider_info


def _airflow(tmp_path, *args: str, **extra: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(AIRFLOW_HOME=str(tmp_path / "airflow"), AIRFLOW__CORE__LOAD_EXAMPLES="False",
               **extra)
    done = subprocess.run([str(AIRFLOW), *args], env=env, capture_output=True, text=True,
                          timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.packaging
def test_airflow_lists_the_provider_and_its_settings(tmp_path):
    """What an operator sees: the provider with its version, and the ``[recforge]`` section
    with every option, its variable and its value (default, or as set)."""
    listed = _airflow(tmp_path, "providers", "list", "--output", "json")
    providers = json.loads(listed[listed.index("["):])
    assert {"package_name": "recforge", "version": recforge.__version__} in [
        {k: p[k] for k in ("package_name", "version")} for p in providers]

    section = _airflow(tmp_path, "config", "list", "--section", "recforge", "--show-values",
                       "--include-env-vars", "--include-descriptions",
                       AIRFLOW__RECFORGE__SPECS_DIR="/opt/airflow/specs")
    assert section.lstrip().startswith("[recforge]")
    for option in settings.OPTIONS.values():
        assert f"# Variable: {option.env_var}" in section
        assert f"{option.name} = " in section
    assert "\naws_conn_id = aws_default\n" in section  # the default, from the provider
    assert "\nspecs_dir = /opt/airflow/specs\n" in section  # as the variable sets it
