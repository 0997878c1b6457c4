"""Lineage: ``ingest`` reports the source prefix it read, ``publish`` the version it published,
through Airflow's hook lineage collector; OpenLineage turns them into the run event's datasets.
Without a lineage reader nothing is collected, and reporting never fails a task."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from recforge import stages
from recforge.orchestration import lineage
from recforge.orchestration import stage as orchestration_stage
from recforge.spec import parse_spec

REPO = Path(__file__).resolve().parents[2]


def _spec(source: str = "s3://bkt/raw/pets"):
    return parse_spec({"name": "pets", "source": {"uri": source, "allowed": ["s3://bkt/raw"]},
                       "publish": {"uri": "s3://bkt/datasets/"}})


class _Run:
    def __init__(self, spec):
        self.spec = spec


class Recording:
    def __init__(self):
        self.inputs, self.outputs = [], []

    def add_input_asset(self, context, uri):
        self.inputs.append((context, uri))

    def add_output_asset(self, context, uri):
        self.outputs.append((context, uri))


def test_what_each_stage_read_and_published():
    run = _Run(_spec())
    assert lineage.lineage_of("ingest", run, {"listed": 3}) == (["s3://bkt/raw/pets"], [])
    published = {"version": "v1", "uri": "s3://bkt/datasets/pets/v1"}
    assert lineage.lineage_of("publish", run, published) == (
        [], ["s3://bkt/datasets/pets/v1", "s3://bkt/datasets/pets"])  # the version, the Asset
    for task_id in ("flatten", "split", "pack", "merge", "benchmark", "quality_gate"):
        assert lineage.lineage_of(task_id, run, {"uri": "s3://x/y"}) == ([], [])
    local = _Run(_spec("/data/raw/pets/"))  # a path on the workers is a file:// dataset
    assert lineage.lineage_of("ingest", local, {}) == (["file:///data/raw/pets"], [])


@pytest.fixture
def recording(monkeypatch):
    rec = Recording()
    monkeypatch.setattr(lineage, "_collector", lambda: rec)
    monkeypatch.setattr(orchestration_stage, "spec_by_name",
                        lambda name, directory=None: _spec())
    return rec


def test_run_stage_reports_the_source_and_the_published_version(recording, monkeypatch):
    results = {"ingest": {"listed": 3},
               "publish": {"version": "v1", "uri": "s3://bkt/datasets/pets/v1"}}
    monkeypatch.setattr(stages, "entry", lambda task_id: lambda run: results[task_id])
    for task_id in ("ingest", "publish"):
        assert orchestration_stage.run_stage("pets", {}, "r1", task_id) == results[task_id]
    assert [uri for _, uri in recording.inputs] == ["s3://bkt/raw/pets"]
    assert [uri for _, uri in recording.outputs] == ["s3://bkt/datasets/pets/v1",
                                                     "s3://bkt/datasets/pets"]
    assert {c for c, _ in recording.inputs + recording.outputs} == {
        lineage.StageLineage("pets", "ingest"), lineage.StageLineage("pets", "publish")}


def test_a_triggered_source_is_the_one_reported(recording, monkeypatch):
    monkeypatch.setattr(stages, "entry", lambda task_id: lambda run: {"listed": 1})
    orchestration_stage.run_stage("pets", {"source_uri": "s3://bkt/raw/other"}, "r1", "ingest")
    assert [uri for _, uri in recording.inputs] == ["s3://bkt/raw/other"]


def test_a_failed_stage_reports_nothing(recording, monkeypatch):
    def failing(run):
        raise OSError("S3 is down")

    monkeypatch.setattr(stages, "entry", lambda task_id: failing)
    with pytest.raises(OSError):
        orchestration_stage.run_stage("pets", {}, "r1", "ingest")
    assert recording.inputs == []


def test_lineage_never_fails_a_task(monkeypatch, caplog):
    class Broken:
        def add_input_asset(self, **_):
            raise RuntimeError("collector broke")

    monkeypatch.setattr(lineage, "_collector", lambda: Broken())
    lineage.report("ingest", _Run(_spec()), {})  # logs, does not raise
    assert "lineage of ingest not reported: RuntimeError: collector broke" in caplog.text


# In a fresh process (Airflow's plugins, and so the lineage readers, load once per process):
# the collector and OpenLineage's own reader of it, as the listener calls it for a @task.
PROBE = r"""
import json, sys
from recforge.orchestration import lineage
from recforge.spec import parse_spec

class Run:
    spec = parse_spec({"name": "pets", "source": {"uri": "s3://bkt/raw/pets"},
                       "publish": {"uri": "s3://bkt/datasets"}})

lineage.report("ingest", Run, {"listed": 3})
lineage.report("publish", Run, {"version": "v1", "uri": "s3://bkt/datasets/pets/v1"})
from airflow.providers.common.compat.lineage.hook import get_hook_lineage_collector
collected = get_hook_lineage_collector()
out = {"collector": type(collected).__name__, "inputs": [], "outputs": []}
try:
    from airflow.providers.openlineage.extractors.manager import ExtractorManager
except ImportError:
    pass
else:
    got = ExtractorManager().get_hook_lineage()
    if got is not None:
        out["inputs"] = [[d.namespace, d.name] for d in got.inputs]
        out["outputs"] = [[d.namespace, d.name] for d in got.outputs]
print("RESULT" + json.dumps(out))
"""


def _probe(tmp_path: Path, **env) -> dict:
    env = {"AIRFLOW_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin",
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False", **env}
    proc = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    assert line, proc.stderr[-3000:]
    return json.loads(line[0][len("RESULT"):])


def test_openlineage_reads_the_source_and_the_version_from_the_collector(tmp_path):
    pytest.importorskip("airflow.providers.openlineage")
    transport = {"type": "file", "log_file_path": str(tmp_path / "events.jsonl"), "append": True}
    got = _probe(tmp_path, AIRFLOW__OPENLINEAGE__TRANSPORT=json.dumps(transport),
                 AIRFLOW__OPENLINEAGE__DISABLED="false")
    assert got["inputs"] == [["s3://bkt", "raw/pets"]]
    assert got["outputs"] == [["s3://bkt", "datasets/pets/v1"], ["s3://bkt", "datasets/pets"]]


def test_without_a_lineage_reader_nothing_is_collected(tmp_path):
    # OpenLineage with no transport configured is disabled: its reader is not registered
    got = _probe(tmp_path, AIRFLOW__OPENLINEAGE__DISABLED="true")
    assert got["collector"] == "NoOpCollector"
    assert got["inputs"] == [] and got["outputs"] == []
