"""Airflow's ``[recforge]`` section is one table: every option recforge reads is in it, each
is read the way Airflow reads its own (the variable, then ``airflow.cfg``, then the default),
and the options table in docs/operations.md is that table."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from recforge import settings

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "include" / "recforge"
DOCS = REPO / "docs" / "operations.md"


def test_every_option_read_anywhere_is_in_the_table():
    """Code, docs and README name only options the table has, and the code reads each one
    through the table (``settings.<OPTION>``), not by a name of its own."""
    named = set()
    for path in [*PACKAGE.rglob("*.py"), *REPO.glob("docs/*.md"), REPO / "README.md"]:
        text = path.read_text(encoding="utf-8")
        named |= {m.lower() for m in re.findall(r"AIRFLOW__RECFORGE__([A-Z0-9_]+)", text)}
        named |= set(re.findall(r"\[recforge\] ([a-z][a-z0-9_]*)", text))
        if path.suffix == ".py" and path.name != "settings.py":
            assert not re.search(r"""conf\.get\w*\(\s*["']recforge["']""", text), path
    assert sorted(named - set(settings.OPTIONS)) == []
    used = set()
    for path in PACKAGE.rglob("*.py"):
        used |= set(re.findall(r"settings\.([A-Z][A-Z0-9_]+)\b", path.read_text("utf-8")))
    assert {o.name.upper() for o in settings.OPTIONS.values()} <= used  # none is dead


def test_the_docs_table_is_the_settings_table():
    text = DOCS.read_text(encoding="utf-8")
    assert settings.markdown_table() in text, (
        "docs/operations.md's [recforge] table differs from recforge.settings.OPTIONS; "
        "paste the output of: python -c 'from recforge import settings; "
        "print(settings.markdown_table())'")


def test_each_option_as_airflows_schema_describes_it():
    section = settings.config_section()["recforge"]
    assert set(section["options"]) == {"specs_dir", "aws_conn_id", "mxnet_python"}
    for name, option in section["options"].items():
        assert set(option) >= {"description", "version_added", "type", "example", "default"}
        assert option["type"] in ("string", "boolean", "integer", "float")
        assert option["default"] is None or isinstance(option["default"], str), name
        assert settings.OPTIONS[name].env_var == f"AIRFLOW__RECFORGE__{name.upper()}"


def test_read_through_airflows_config(monkeypatch):
    """The variable wins; an empty one counts as unset; unset gives the table's default."""
    for option in settings.OPTIONS.values():
        monkeypatch.delenv(option.env_var, raising=False)
    assert settings.get(settings.AWS_CONN_ID) == "aws_default"
    assert settings.get(settings.SPECS_DIR) is None
    monkeypatch.setenv("AIRFLOW__RECFORGE__AWS_CONN_ID", "team_s3")
    assert settings.get(settings.AWS_CONN_ID) == "team_s3"
    monkeypatch.setenv("AIRFLOW__RECFORGE__AWS_CONN_ID", "")
    assert settings.get(settings.AWS_CONN_ID) == "aws_default"
    monkeypatch.setenv("AIRFLOW__RECFORGE__MXNET_PYTHON", "/opt/mx/bin/python")
    assert settings.get(settings.MXNET_PYTHON) == "/opt/mx/bin/python"


def test_the_task_sdks_conf_is_the_one_read():
    from airflow.sdk import conf

    assert settings.airflow_conf() is conf


def test_core_options_come_through_the_same_conf(monkeypatch):
    from recforge.orchestration import stage

    monkeypatch.setenv("AIRFLOW__CORE__MAX_MAP_LENGTH", "7")
    monkeypatch.setenv("AIRFLOW__CORE__PARALLELISM", "1")
    assert stage.max_map_length() == 7
    assert stage.pack_slots() == 1


@pytest.mark.parametrize("where", ["env_var", "airflow_cfg", "nowhere"])
def test_read_without_importing_airflow(where, tmp_path):
    """Outside an Airflow process: ``AIRFLOW__RECFORGE__*``, else ``$AIRFLOW_HOME/
    airflow.cfg`` (with the %-formats Airflow's own file has), else the default; and Airflow
    stays unimported (it costs seconds and reconfigures logging mid-command)."""
    home = tmp_path / "airflow"
    home.mkdir()
    cfg = "[logging]\nlog_format = %%(asctime)s %%(message)s\n"
    if where == "airflow_cfg":
        cfg += "\n[recforge]\naws_conn_id = from_the_file\n"
    (home / "airflow.cfg").write_text(cfg)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env["AIRFLOW_HOME"] = str(home)
    if where == "env_var":
        env["AIRFLOW__RECFORGE__AWS_CONN_ID"] = "from_the_variable"
    probe = ("import sys\n"
             "from recforge import settings\n"
             "print(settings.get_without_airflow(settings.AWS_CONN_ID))\n"
             "assert 'airflow' not in sys.modules, 'airflow was imported'\n")
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == {"env_var": "from_the_variable",
                                   "airflow_cfg": "from_the_file",
                                   "nowhere": "aws_default"}[where]
