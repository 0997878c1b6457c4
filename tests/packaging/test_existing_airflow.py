"""``pip install 'recforge[airflow]'`` into an Airflow a team already runs moves none of its
packages: numpy 2 and pandas stay, the environment stays consistent, and the DAG file of
two lines parses there.

The team's environment: ``apache-airflow``, the Amazon provider, ``numpy>=2`` and
``pandas``, at the versions of ``constraints.txt``. recforge then comes in with no pin on
what is already installed; the packages it adds are held at the tested versions (the rest of
``constraints.txt``), so the run needs only uv's cache.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml

from tests.packaging.envs import REPO, clean_env, new_venv, pip_install, sh

pytestmark = pytest.mark.packaging

TEAM = ["apache-airflow==3.3.2", "apache-airflow-providers-amazon", "numpy>=2", "pandas"]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _installed(uv, python) -> dict[str, str]:
    listed = sh(uv, "pip", "list", "--format", "json", "--python", python).stdout
    return {_canonical(p["name"]): p["version"] for p in json.loads(listed)}


def test_recforge_airflow_joins_an_existing_airflow_without_moving_its_packages(
        uv, wheel, tmp_path):
    python = new_venv(uv, tmp_path / "venv")
    pip_install(uv, python, "-c", REPO / "constraints.txt", *TEAM)
    before = _installed(uv, python)
    assert int(before["numpy"].split(".")[0]) >= 2 and "pandas" in before

    # the tested versions for what recforge adds; nothing pins what the team installed
    pins = [ln for ln in (REPO / "constraints.txt").read_text().splitlines()
            if "==" in ln and _canonical(ln.split("==")[0]) not in before]
    (tmp_path / "new.txt").write_text("\n".join(pins) + "\n")
    pip_install(uv, python, "-c", tmp_path / "new.txt", f"recforge[airflow] @ {wheel.as_uri()}")
    after = _installed(uv, python)

    assert {n: (v, after.get(n)) for n, v in before.items() if after.get(n) != v} == {}
    assert after["numpy"].split(".")[0] == before["numpy"].split(".")[0]
    assert after["pandas"].split(".")[0] == before["pandas"].split(".")[0]
    assert {"recforge", "great-expectations", "apache-airflow-providers-smtp"} <= set(after)
    print(f"numpy {before['numpy']} -> {after['numpy']}, "
          f"pandas {before['pandas']} -> {after['pandas']}")
    check = sh(uv, "pip", "check", "--python", python)  # exits 1 on any conflict
    assert "All installed packages are compatible" in check.stdout + check.stderr
    bin_ = python.parent
    version = wheel.name.split("-")[1]
    assert sh(bin_ / "recforge", "--version").stdout.strip() == f"recforge {version}"

    # what Airflow loads of recforge: the cluster policy and the provider (entry points), and
    # the DAG file
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "pets.yaml").write_text(yaml.safe_dump({
        "name": "pets", "source": {"uri": "s3://team-bucket/raw/pets"},
        "publish": {"uri": "s3://team-bucket/datasets"}}))
    probe = (
        "import json, sys\n"
        "from importlib.metadata import entry_points\n"
        "(policy,) = [ep for ep in entry_points(group='airflow.policy') if ep.name == 'recforge']\n"
        "policy.load()\n"
        "from airflow.providers_manager import ProvidersManager\n"
        "provider = ProvidersManager().providers['recforge']\n"
        "from airflow.models import DagBag\n"
        "bag = DagBag(sys.argv[1])  # examples off: AIRFLOW__CORE__LOAD_EXAMPLES\n"
        "print(json.dumps({'errors': {k: str(v) for k, v in bag.import_errors.items()},\n"
        "                  'dags': sorted(bag.dags), 'provider': provider.version,\n"
        "                  'options': sorted(provider.data['config']['recforge']['options'])}))\n")
    env = clean_env(AIRFLOW_HOME=str(tmp_path / "airflow"), RECFORGE_SPECS_DIR=str(specs),
                    AIRFLOW__CORE__LOAD_EXAMPLES="False")
    out = sh(python, "-c", probe, REPO / "dags", env=env, timeout=180).stdout
    parsed = json.loads(out.strip().splitlines()[-1])
    assert parsed == {"errors": {}, "dags": ["recforge__pets"], "provider": version,
                      "options": ["aws_conn_id", "mxnet_python", "specs_dir"]}
