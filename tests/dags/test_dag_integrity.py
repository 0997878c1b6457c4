"""Every DAG imports cleanly, is wired as promised, and stays light at parse time."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PROBE = r"""
import json, sys, time
t0 = time.monotonic()
KINDS = ("classification", "segmentation", "detection")
from airflow.models import DagBag
bag = DagBag(sys.argv[1])  # examples are off: AIRFLOW__CORE__LOAD_EXAMPLES=False
heavy = sorted(m for m in ("mxnet", "cv2", "great_expectations", "boto3", "numpy")
               if m in sys.modules)
out = {"errors": {k: str(v) for k, v in bag.import_errors.items()}, "heavy": heavy, "dags": {},
       "recforge": sorted(m for m in sys.modules if m.split(".")[0] == "recforge")}
for dag_id, dag in bag.dags.items():
    out["dags"][dag_id] = {
        "tags": sorted(dag.tags), "catchup": dag.catchup,
        "max_active_runs": dag.max_active_runs,
        "schedule": str(getattr(dag.timetable, "summary", None) or dag.schedule),
        "doc_md": dag.doc_md or "", "params": sorted(dag.params.keys()),
        "param_specs": {k: {"schema": dag.params.get_param(k).schema,
                            "default": dag.params.get_param(k).value,
                            "description": dag.params.get_param(k).description or ""}
                       for k in dag.params},
        "kind": next((t for t in dag.tags if t in KINDS), None),
        "tasks": {t.task_id: {"retries": t.retries, "timeout": bool(t.execution_timeout),
                              "pool": t.pool, "per_run": t.max_active_tis_per_dagrun,
                              "downstream": sorted(t.downstream_task_ids),
                              "upstream": sorted(t.upstream_task_ids),
                              # the scheduler's default weight rule: its own and all
                              # downstream tasks' weights
                              "weight": t.priority_weight + sum(
                                  d.priority_weight
                                  for d in t.get_flat_relatives(upstream=False)),
                              "on_success": bool(t.on_success_callback),
                              "on_failure": bool(t.on_failure_callback),
                              "outlets": [getattr(o, "uri", "") for o in t.outlets]}
                  for t in dag.tasks},
    }
print("RESULT" + json.dumps(out))
"""


def _parse(home: Path, specs: Path) -> dict:
    env = {"AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "PATH": "/usr/bin:/bin", "RECFORGE_SPECS_DIR": str(specs)}
    proc = subprocess.run([sys.executable, "-c", PROBE, str(REPO / "dags")], env=env,
                          capture_output=True, text=True, timeout=300)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    assert line, proc.stderr[-3000:]
    return json.loads(line[0][len("RESULT"):])


@pytest.fixture(scope="module")
def dagbag(tmp_path_factory):
    return _parse(tmp_path_factory.mktemp("airflow_home"), REPO / "include" / "datasets")


SEGMENTATION_SPEC = """
name: city
task: segmentation
source: {uri: "s3://bkt/raw/city", pairs: {images: img, masks: lbl}}
segmentation: {colormap: cityscapes}
publish: {uri: "s3://bkt/datasets"}
"""


@pytest.fixture(scope="module")
def both_kinds(tmp_path_factory):
    """The demo spec and a segmentation spec, parsed together."""
    specs = tmp_path_factory.mktemp("specs")
    for p in (REPO / "include" / "datasets").glob("*.yaml"):
        (specs / p.name).write_text(p.read_text())
    (specs / "city.yaml").write_text(SEGMENTATION_SPEC)
    return _parse(tmp_path_factory.mktemp("airflow_home"), specs)


def test_no_import_errors(dagbag):
    assert dagbag["errors"] == {}


def test_no_heavy_imports_at_parse_time(dagbag):
    # boto3 is the one exception, and not ours: the Amazon provider's URI normaliser for
    # s3:// Assets imports it when the Asset is declared.
    assert set(dagbag["heavy"]) <= {"boto3"}, dagbag["heavy"]


def test_one_dag_per_spec(dagbag):
    specs = sorted(p.stem for p in (REPO / "include" / "datasets").glob("*.yaml"))
    assert sorted(dagbag["dags"]) == sorted(f"recforge__{s}" for s in specs)


def test_dag_settings(dagbag):
    for dag_id, dag in dagbag["dags"].items():
        assert "recforge" in dag["tags"], dag_id
        assert dag["catchup"] is False and dag["max_active_runs"] == 1
        assert dag["doc_md"]
        assert {"source_uri", "publish_uri", "dry_run"} <= set(dag["params"])
        for task_id, t in dag["tasks"].items():
            assert t["retries"] is not None and t["retries"] >= 2, task_id
            assert t["timeout"], task_id


def test_pipeline_order_and_asset(dagbag):
    dag = dagbag["dags"]["recforge__demo_classification"]["tasks"]
    chain = ["ingest", "flatten", "remap_labels", "split", "pack", "merge", "validate",
             "quality_gate", "publish"]
    for a, b in zip(chain, chain[1:], strict=False):
        assert b in dag[a]["downstream"], (a, b)
    # the benchmark runs beside validate and the checklist: after merge, before publish
    # (the checklist waits for its results inside its task)
    assert sorted(dag["merge"]["downstream"]) == ["benchmark", "validate"]
    assert dag["validate"]["downstream"] == ["quality_gate"]
    assert dag["quality_gate"]["upstream"] == ["validate"]
    assert sorted(dag["publish"]["upstream"]) == ["benchmark", "quality_gate"]
    # one free slot goes to the benchmark first, never to a checklist that would wait in it
    assert dag["benchmark"]["weight"] > max(dag["validate"]["weight"],
                                            dag["quality_gate"]["weight"])
    assert dag["publish"]["outlets"] == ["s3://recforge-demo/datasets/demo_classification"]


def test_alert_callbacks(dagbag):
    tasks = dagbag["dags"]["recforge__demo_classification"]["tasks"]
    assert all(t["on_failure"] for t in tasks.values())  # every failure alerts
    # the demo spec keeps alerts.on_warning's default (true): the gate reports its warnings
    assert tasks["quality_gate"]["on_success"]
    assert not tasks["publish"]["on_success"]


# what a DAG file's parse may not load: the stages and the engine behind them (the DAG doc
# reads the source layouts' own descriptions, pure Python; the heavy test above holds the
# libraries out)
ENGINE = ("stages", "pipeline", "run", "format", "imaging", "bench", "quality", "report",
          "incremental", "readers", "im2rec", "pull", "cli", "dev", "segmentation.masks")


def test_parse_time_loads_only_the_spec_the_layouts_and_the_airflow_edge(both_kinds):
    loaded = [m for m in both_kinds["recforge"]
              if any(m == f"recforge.{e}" or m.startswith(f"recforge.{e}.") for e in ENGINE)]
    assert loaded == [], loaded
    assert "recforge.spec" in both_kinds["recforge"] and "recforge.layouts" in both_kinds[
        "recforge"]
    assert "recforge.orchestration.stage" not in both_kinds["recforge"]  # imported by tasks
    assert "recforge.orchestration.lineage" not in both_kinds["recforge"]  # by run_stage
    imported = set()
    for path in ("dags/recforge_datasets.py", "include/recforge/orchestration/dags.py"):
        tree = ast.parse((REPO / path).read_text())
        imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                     and n.module and n.module.startswith("recforge")}
    assert imported <= {"recforge.spec", "recforge.errors", "recforge.kinds",
                        "recforge.orchestration",
                        "recforge.orchestration.docs", "recforge.orchestration.pools",
                        "recforge.orchestration.notifier", "recforge.orchestration.specs",
                        "recforge.orchestration.stage", "recforge.orchestration.events",
                        "recforge.spec.schedule"}, imported


def test_tasks_are_the_stage_table_in_order(both_kinds):
    from recforge.stages import stages_for, upstream

    kinds = set()
    for dag_id, dag in both_kinds["dags"].items():
        kinds.add(dag["kind"])
        chain = [s.task_id for s in stages_for(dag["kind"])]
        assert sorted(dag["tasks"]) == sorted(chain), dag_id
        for task_id, waits in upstream(dag["kind"]).items():
            assert dag["tasks"][task_id]["upstream"] == sorted(waits), (dag_id, task_id)
    assert kinds == {"classification", "segmentation", "detection"}


def test_each_dag_documents_its_dataset(both_kinds):
    demo = both_kinds["dags"]["recforge__demo_classification"]["doc_md"]
    city = both_kinds["dags"]["recforge__city"]["doc_md"]
    assert "`s3://recforge-demo/raw/demo_classification`" in demo
    assert "s3://recforge-demo/datasets/demo_classification/<version>/report.html" in demo
    assert "manual runs only" in demo and "near_duplicates warn" in demo
    assert "`s3://bkt/raw/city`" in city and "colour map `cityscapes`" in city
    # a scheduled DAG says why a run triggered right after unpausing it waits
    assert "`0 2 * * *` (UTC)" in city and "waits *queued*" in city
    assert demo != city and "### recforge dataset DAGs" in demo  # then the shared pipeline


def test_trigger_form_is_valid_untouched_and_says_what_each_value_does(both_kinds):
    import jsonschema

    for dag in both_kinds["dags"].values():
        if "invalid" in dag["tags"]:
            continue
        for name, p in dag["param_specs"].items():
            schema, default, description = p["schema"], p["default"], p["description"]
            jsonschema.validate(default, schema)  # an untouched form triggers as it is
            assert schema.get("title") and len(description) > 40, name
            if name in ("dry_run", "force_rebuild"):  # switches, off by default
                assert (schema["type"], default) == ("boolean", False)
            else:  # optional: empty means the spec's value, and the form says which
                assert "null" in schema["type"] and default is None, name
                assert "Empty: " in description, name
        specs = dag["param_specs"]
        for name, bad, said in (("resize", 20000, "maximum of 16384"),
                                ("quality", 0, "minimum of 1"),
                                ("source_uri", "bucket/raw", "does not match"),
                                ("publish_uri", "s3://Bad_Bucket/x", "does not match")):
            with pytest.raises(jsonschema.ValidationError, match=said):
                jsonschema.validate(bad, specs[name]["schema"])
        for name, good in (("source_uri", "s3://my-bucket/raw/pets"), ("publish_uri", "/data")):
            jsonschema.validate(good, specs[name]["schema"])


def test_pack_pool_and_per_run_cap_agree(both_kinds):
    from recforge.orchestration import pools

    compose = (REPO / "docker-compose.yaml").read_text()
    assert f"RECFORGE_PACK_POOL_SLOTS:-{pools.PACK.slots}}}" in compose
    for dag in both_kinds["dags"].values():
        for task_id in ("pack", "convert_masks"):
            if task_id in dag["tasks"]:
                t = dag["tasks"][task_id]
                assert (t["pool"], t["per_run"]) == (pools.PACK.name, pools.PACK.slots)


def test_one_bad_spec_does_not_take_the_other_dags_down(tmp_path):
    specs = tmp_path / "specs"
    specs.mkdir()
    for p in (REPO / "include" / "datasets").glob("*.yaml"):
        (specs / p.name).write_text(p.read_text())
    (specs / "broken.yaml").write_text("name: broken\nsource: {uri: 's3://bkt/raw'}\n"
                                       "publish: {uri: 's3://bkt/p'}\npack: {quality: 500}\n")
    bag = _parse(tmp_path / "home", specs)
    assert bag["errors"] == {}
    assert "recforge__demo_classification" in bag["dags"]
    bad = bag["dags"]["recforge__invalid__broken"]
    assert "pack.quality" in bad["doc_md"] and "broken.yaml" in bad["doc_md"]
    assert list(bad["tasks"]) == ["spec_error"] and bad["schedule"] in ("None", "Never, external "
                                                                          "triggers only")
