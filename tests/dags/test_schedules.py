"""What each ``schedule`` shape makes of a dataset's DAG, read from the DAG objects that
``dataset_dags`` builds from a specs folder and from their serialized form (what the
DAG processor stores and the scheduler and triggerer read): a cron timetable, none, an
Asset condition, or both."""

from __future__ import annotations

import pytest
import yaml
from airflow.sdk import Asset, AssetAny
from airflow.sdk.definitions.asset import AssetNameRef, AssetUriRef
from airflow.sdk.definitions.timetables.assets import AssetOrTimeSchedule, AssetTriggeredTimetable
from airflow.serialization.serialized_objects import DagSerialization

from recforge.orchestration import dataset_dags
from recforge.orchestration.dags import dag_schedule
from tests.common.sources import make_spec, spec_doc

QUEUE = "https://sqs.eu-west-1.amazonaws.com/123456789012/recforge-b-events"


def _dag(tmp_path, schedule):
    """The DAG of dataset ``b`` with this schedule, built as a deployment's DAG file does."""
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "b.yaml").write_text(yaml.safe_dump(spec_doc("bkt", name="b", schedule=schedule)))
    dags = dataset_dags(specs)
    assert sorted(dags) == ["recforge__b"]  # no recforge__invalid__b
    return dags["recforge__b"]


def _stored(dag) -> dict:
    return DagSerialization.to_dict(dag)["dag"]["timetable"]


@pytest.mark.parametrize("cron, expression", [("0 2 * * *", "0 2 * * *"),
                                              ("@daily", "0 0 * * *")])
def test_a_cron_schedule_is_the_cron_timetable_as_before(tmp_path, cron, expression):
    dag = _dag(tmp_path, cron)
    assert dag.timetable.expression == expression
    assert _stored(dag)["__type"] == "airflow.timetables.trigger.CronTriggerTimetable"


def test_null_is_manual_runs_only(tmp_path):
    dag = _dag(tmp_path, None)
    assert _stored(dag)["__type"] == "airflow.timetables.simple.NullTimetable"


def test_an_upstream_dataset_schedules_on_its_asset_by_name(tmp_path):
    dag = _dag(tmp_path, {"asset": "recforge/a"})
    assert isinstance(dag.timetable, AssetTriggeredTimetable)
    assert dag.timetable.asset_condition == AssetNameRef(name="recforge/a")
    assert _stored(dag)["__var"]["asset_condition"] == {"__type": "asset_ref",
                                                         "name": "recforge/a"}


def test_an_upstream_dataset_of_the_same_folder_is_named_in_full(tmp_path):
    """The Asset its publish task updates, name and URI: so Airflow links A's events to B's
    runs (a bare reference starts them, but they list no triggering events)."""
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "a.yaml").write_text(yaml.safe_dump(spec_doc("bkt", name="a")))
    (specs / "b.yaml").write_text(yaml.safe_dump(spec_doc(
        "bkt", name="b", schedule={"asset": ["recforge/a", "s3://bkt/datasets/a"]})))
    dags = dataset_dags(specs)
    (outlet,) = dags["recforge__a"].get_task("publish").outlets
    assert outlet == Asset(name="recforge/a", uri="s3://bkt/datasets/a")
    assert dags["recforge__b"].timetable.asset_condition == AssetAny(outlet, outlet)
    stored = _stored(dags["recforge__b"])["__var"]["asset_condition"]["objects"][0]
    assert (stored["__type"], stored["name"], stored["uri"]) == (
        "asset", "recforge/a", "s3://bkt/datasets/a")


def test_several_assets_are_any_of_them_and_a_uri_is_a_uri(tmp_path):
    dag = _dag(tmp_path, {"asset": ["recforge/a", "s3://other/datasets/c"]})
    assert dag.timetable.asset_condition == AssetAny(
        AssetNameRef(name="recforge/a"), AssetUriRef(uri="s3://other/datasets/c"))


def test_s3_events_schedule_on_an_asset_watched_by_the_queue_trigger(tmp_path):
    dag = _dag(tmp_path, {"s3_events": {"queue": QUEUE, "conn_id": "aws_events"}})
    condition = dag.timetable.asset_condition
    assert isinstance(condition, Asset) and condition.name == "recforge/b/s3_events"
    (watcher,) = _stored(dag)["__var"]["asset_condition"]["watchers"]
    assert watcher["name"] == "recforge__b__s3_events"
    assert watcher["trigger"]["classpath"] == "recforge.orchestration.events.S3EventsTrigger"
    assert watcher["trigger"]["kwargs"]["queue_url"] == QUEUE
    assert watcher["trigger"]["kwargs"]["aws_conn_id"] == "aws_events"


def test_events_beside_a_clock_are_asset_or_time(tmp_path):
    dag = _dag(tmp_path, {"asset": "recforge/a", "s3_events": {"queue": QUEUE},
                          "cron": "30 4 * * *"})
    assert isinstance(dag.timetable, AssetOrTimeSchedule)
    assert dag.timetable.timetable.expression == "30 4 * * *"
    names = [getattr(a, "name", None) for a in dag.timetable.asset_condition.objects]
    assert names == ["recforge/a", "recforge/b/s3_events"]
    stored = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    assert type(stored.timetable).__name__ == "AssetOrTimeSchedule"


def test_the_schedule_function_passes_cron_and_null_through():
    assert dag_schedule(make_spec("bkt", schedule="5 1 * * *")) == "5 1 * * *"
    assert dag_schedule(make_spec("bkt", schedule=None)) is None


def test_the_dag_doc_says_what_starts_a_run(tmp_path):
    dag = _dag(tmp_path, {"asset": "recforge/a", "s3_events": {"queue": QUEUE}})
    assert (f"when Asset `recforge/a` is updated or objects land under the source (S3 event "
            f"notifications on `{QUEUE}`)") in dag.doc_md
