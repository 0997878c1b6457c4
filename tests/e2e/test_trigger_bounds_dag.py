"""The trigger form through the real DAG: a source outside what the dataset may read (the
worker's own /etc), a publish target in a bucket of the trigger's choosing, or a misspelt
parameter fails the run at its first task, before a byte is listed or written."""

from __future__ import annotations

from pathlib import Path

import pytest

from recforge import storage
from recforge.dev import demo
from tests.common.sources import dag_specs, make_source

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("conf, words", [
    ({"source_uri": "/etc"}, "source_uri the local path '/etc' is outside what dataset pets"),
    ({"publish_uri": "s3://someone-elses/bucket"}, "publish_uri 's3://someone-elses/bucket'"),
    ({"qualty": 80}, "unknown run parameter(s) ['qualty']"),
])
def test_a_trigger_beyond_the_dataset_fails_before_any_io(bucket, tmp_path, conf, words):
    make_source(bucket, per_class=2)
    specs = dag_specs(tmp_path, bucket)
    env = demo.airflow_env(REPO, {"AIRFLOW_HOME": str(tmp_path / "airflow"),
                                  "RECFORGE_SPECS_DIR": str(specs)})
    ok, out = demo.run_dag_test("recforge__pets", env, conf=conf)
    assert not ok
    assert words in out, out[-4000:]
    assert list(storage.list_objects(f"s3://{bucket}/datasets")) == []
