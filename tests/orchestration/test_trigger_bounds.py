"""A triggered run reaches only what its dataset may touch: the form's source and publish
URIs must be the spec's own or lie inside the prefixes the spec allows, a local path only
where the spec lists it, no parameter the form does not know, and no run id that names no
folder of its own — each refused before the stage reads or writes a byte."""

from __future__ import annotations

import pytest

from recforge import stages
from recforge.errors import SpecError
from recforge.orchestration import stage as orchestration_stage
from recforge.run import Run
from recforge.spec import parse_spec


def _spec(**source):
    return parse_spec({"name": "pets", "source": {"uri": "s3://raw-bucket/team-a/pets",
                                                  **source},
                       "publish": {"uri": "s3://datasets-bucket/team-a"}})


@pytest.fixture
def touched(monkeypatch):
    """The stages that ran (none must, when a trigger is refused)."""
    ran = []
    monkeypatch.setattr(stages, "entry", lambda task_id: lambda run: ran.append(run) or {})
    return ran


def _run(spec, params, run_id="manual__1", monkeypatch=None):
    monkeypatch.setattr(orchestration_stage, "spec_by_name", lambda name, directory=None: spec)
    return orchestration_stage.run_stage("pets", params, run_id, "ingest")


@pytest.mark.parametrize("params, words", [
    ({"source_uri": "s3://other-bucket/x"}, "source_uri 's3://other-bucket/x' is outside"),
    ({"source_uri": "/etc"}, "the local path '/etc' is outside"),
    ({"source_uri": "s3://raw-bucket/team-a/pets/../../team-b"}, "'..' segment"),
    ({"publish_uri": "s3://my-own-bucket/fake"}, "publish_uri 's3://my-own-bucket/fake'"),
    ({"publish_uri": "/tmp/out"}, "the local path '/tmp/out'"),
    ({"qualty": 80}, "unknown run parameter(s) ['qualty']; known: ['dry_run', "),
])
def test_a_trigger_outside_the_bounds_is_refused_before_any_io(params, words, touched,
                                                                monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    with pytest.raises(AirflowFailException) as refused:
        _run(_spec(), params, monkeypatch=monkeypatch)
    assert words in str(refused.value)
    assert touched == []


def test_prefixes_the_spec_allows_are_accepted(touched, monkeypatch):
    spec = _spec(allowed=["s3://raw-bucket/team-a", "/data/team-a"])
    _run(spec, {"source_uri": "s3://raw-bucket/team-a/pets-2026"}, monkeypatch=monkeypatch)
    _run(spec, {"source_uri": "/data/team-a/pets"}, monkeypatch=monkeypatch)
    _run(spec, {"source_uri": "s3://raw-bucket/team-a/pets", "resize": 64, "dry_run": True},
         monkeypatch=monkeypatch)
    assert [r.spec.source.uri for r in touched] == [
        "s3://raw-bucket/team-a/pets-2026", "/data/team-a/pets", "s3://raw-bucket/team-a/pets"]
    with pytest.raises(Exception, match="outside what dataset pets may touch"):
        _run(spec, {"source_uri": "s3://raw-bucket/team-ab"}, monkeypatch=monkeypatch)


@pytest.mark.parametrize("run_id", ["..", ".", "_..", "a..b", "::"])
def test_a_run_id_naming_no_folder_of_its_own_is_refused(run_id, touched, monkeypatch):
    with pytest.raises(Exception, match="names no folder of its own"):
        _run(_spec(), {}, run_id=run_id, monkeypatch=monkeypatch)
    with pytest.raises(SpecError):
        Run(_spec(), run_id)
    assert touched == []
