"""``dataset_dags``: a team's two-line DAG file, and where it finds the specs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from recforge.errors import SpecError
from recforge.orchestration import specs
from tests.dags.test_dag_integrity import PROBE

REPO = Path(__file__).resolve().parents[2]

TEAM_DAG_FILE = '''"""Our datasets, as Airflow DAGs."""
from recforge.orchestration import dataset_dags

globals().update(dataset_dags({folder!r}))
'''


def _spec(name: str) -> str:
    return (f"name: {name}\nsource: {{uri: 's3://bkt/raw/{name}'}}\n"
            f"publish: {{uri: 's3://bkt/datasets'}}\n")


def test_a_team_dag_file_builds_the_dags_of_its_own_folder(tmp_path):
    """The folder given in code wins over RECFORGE_SPECS_DIR, which names another folder."""
    ours, other = tmp_path / "ours", tmp_path / "other"
    for folder, name in ((ours, "pets"), (other, "elsewhere")):
        folder.mkdir()
        (folder / f"{name}.yaml").write_text(_spec(name))
    (ours / "broken.yaml").write_text("name: broken\n")
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "team.py").write_text(TEAM_DAG_FILE.format(folder=str(ours)))
    env = {"AIRFLOW_HOME": str(tmp_path / "home"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "PATH": "/usr/bin:/bin", "RECFORGE_SPECS_DIR": str(other)}
    proc = subprocess.run([sys.executable, "-c", PROBE, str(dags)], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    assert line, proc.stderr[-3000:]
    bag = json.loads(line[0][len("RESULT"):])
    assert bag["errors"] == {}
    assert sorted(bag["dags"]) == ["recforge__invalid__broken", "recforge__pets"]
    assert f"`{ours}`" in bag["dags"]["recforge__pets"]["doc_md"]  # the folder it came from
    assert str(ours / "broken.yaml") in bag["dags"]["recforge__invalid__broken"]["doc_md"]
    assert set(bag["heavy"]) <= {"boto3"}  # parse time stays light


def test_where_the_specs_are_first_found_wins(tmp_path, monkeypatch):
    monkeypatch.delenv("AIRFLOW__RECFORGE__SPECS_DIR", raising=False)
    monkeypatch.delenv("RECFORGE_SPECS_DIR", raising=False)
    assert specs.specs_dir() == REPO / "include" / "datasets"  # the repo layout
    monkeypatch.setenv("RECFORGE_SPECS_DIR", str(tmp_path / "env"))
    assert specs.specs_dir() == tmp_path / "env"
    monkeypatch.setenv("AIRFLOW__RECFORGE__SPECS_DIR", str(tmp_path / "config"))
    assert specs.specs_dir() == tmp_path / "config"
    assert specs.specs_dir(tmp_path / "argument") == tmp_path / "argument"


def test_one_dag_per_spec_keyed_by_dag_id(tmp_path):
    from recforge.orchestration import dataset_dags

    for name in ("a", "b"):
        (tmp_path / f"{name}.yaml").write_text(_spec(name))
    dags = dataset_dags(tmp_path)
    assert sorted(dags) == ["recforge__a", "recforge__b"]
    assert all(d.dag_id == k for k, d in dags.items())


def test_a_folder_that_does_not_exist_is_an_import_error_naming_it(tmp_path):
    from recforge.orchestration import dataset_dags

    with pytest.raises(SpecError, match=r"specs folder .*/nowhere does not exist.*specs_dir"):
        dataset_dags(tmp_path / "nowhere")
