"""A run killed between ``manifest.json`` and ``latest.json`` always finishes: run again
with the same run id (the CLI, or any task of the cleared DAG run), it writes nothing into
the published folder and moves ``latest.json`` to its version; a run id that already
finished reports its version and exits 0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
import yaml

from recforge import releases, run_state, storage
from recforge.cli import main
from recforge.format import names
from recforge.run import Run
from recforge.spec import parse_spec
from tests.common.sources import make_source, spec_doc

pytestmark = [pytest.mark.both_stores,  # each test against moto and Ceph RGW
              pytest.mark.pipeline]  # whole builds: a slow tier

# a whole build whose latest.json write never happens: the process dies right before it
HELD = ("import importlib, json, os, signal, sys\n"
        "from recforge import pipeline\nfrom recforge.spec import parse_spec\n"
        "publish = importlib.import_module('recforge.stages.publish')\n"
        "publish.advance_latest = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)\n"
        "pipeline.build(parse_spec(json.load(open(sys.argv[1]))), run_id=sys.argv[2],"
        " workers=1)\n")


def test_killed_before_latest_json_a_rerun_finishes_and_a_third_reports_done(
        bucket, tmp_path, capsys, monkeypatch):
    make_source(bucket, classes=("dog", "eel"), per_class=4)
    doc = spec_doc(bucket, schedule=None)
    (tmp_path / "spec.json").write_text(json.dumps(doc))
    (tmp_path / "pets.yaml").write_text(yaml.safe_dump(doc))
    proc = subprocess.run([sys.executable, "-c", HELD, str(tmp_path / "spec.json"), "held"],
                          env=dict(os.environ), capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    run = Run(parse_spec(doc), "held")
    version = run_state.published_version(run)
    assert version is not None, "the killed build wrote no manifest"
    target = releases.version_uri(run.spec, version)
    before = {o.key: o.etag for o in storage.list_objects(target)}
    latest = releases.latest_uri(run.spec)
    assert not storage.exists(latest)  # a first version: the killed run wrote no latest.json

    assert main(["build", str(tmp_path / "pets.yaml"), "--run-id", "held", "--workers",
                 "1"]) == 0
    assert storage.read_json(latest)["version"] == version
    assert {o.key: o.etag for o in storage.list_objects(target)} == before
    assert main(["verify", target]) == 0
    capsys.readouterr()

    assert main(["build", str(tmp_path / "pets.yaml"), "--run-id", "held"]) == 0
    out = capsys.readouterr().out
    assert f"run held already published version {version}" in out
    assert storage.read_json(latest)["version"] == version
    assert storage.exists(storage.join(target, names.MANIFEST))

    # the same run cleared in Airflow: every task before publish writes nothing
    from recforge.orchestration import stage as orchestration_stage

    monkeypatch.setattr(orchestration_stage, "spec_by_name",
                        lambda name, directory=None: run.spec)
    for task_id in ("ingest", "split", "merge", "quality_gate"):
        got = orchestration_stage.run_stage("pets", {}, "held", task_id)
        assert got["already_published"] == version, task_id
    assert got == {"already_published": version}
    assert orchestration_stage.run_stage("pets", {}, "held", "split")["pack_tasks"] == \
        storage.read_json(run.shard_list)["pack_tasks"]
    assert orchestration_stage.run_stage("pets", {}, "held", "publish")["version"] == version
    assert {o.key: o.etag for o in storage.list_objects(target)} == before
