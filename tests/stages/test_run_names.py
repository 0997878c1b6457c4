"""A ``Run`` only names: making one and reading every name it has sends no request (what the
run chose and recorded is ``recforge.run_state``'s), and ``run_state`` reads where the
dataset lives once per ``Run``."""

from __future__ import annotations

import inspect

import pytest

from recforge import run_state, storage
from recforge.run import Run
from tests.common.sources import make_spec


@pytest.fixture
def no_store():
    """Every S3 client made from now on refuses to exist: any request fails the test."""
    def refuse():
        raise AssertionError("a Run name made an S3 request")

    storage.configure_s3(refuse)
    try:
        yield
    finally:
        storage.configure_s3(None)


def test_a_run_and_every_name_it_has_do_no_io(no_store):
    run = Run(make_spec("no-such-bucket", staging_uri="s3://no-such-bucket/staging"), "r1",
              max_shards=4, slots=2)
    read = []
    for name, member in inspect.getmembers(Run):
        if name.startswith("_"):
            continue
        if isinstance(member, property):
            read.append((name, getattr(run, name)))
        elif inspect.isfunction(member):
            params = list(inspect.signature(member).parameters)[1:]
            read.append((name, getattr(run, name)(*["x"] * len(params))))
    names = dict(read)
    assert {"staging", "home", "version_choice", "checksums", "cache", "shard_plan"} <= set(names)
    assert all(isinstance(v, str | bool) for v in names.values()), names
    assert names["home"] == run.uri("merge", "home.json")
    assert not {"out", "output", "version", "set_out", "recording_outputs"} & set(dir(run))


def test_where_the_dataset_lives_is_read_once_per_run(bucket, monkeypatch):
    spec = make_spec(bucket, staging_uri=f"s3://{bucket}/staging")
    run = Run(spec, "r1")
    assert run_state.out(run) == run.uri("out")  # before merge: staging out/
    storage.write_json(run.home, {"version": "v1"})
    fresh = Run(spec, "r1")
    reads = []
    real = storage.read_json
    monkeypatch.setattr(storage, "read_json", lambda uri: reads.append(uri) or real(uri))
    assert run_state.output(fresh, "a") == storage.join(spec.publish.uri, spec.name, "v1", "a")
    assert run_state.out(fresh) == run_state.quality_docs(fresh).rsplit("/", 1)[0]
    assert reads == [run.home]  # once for this Run
    run_state.set_out(fresh, None)  # merge's own record needs no read back
    assert run_state.out(fresh) == run.uri("out") and reads == [run.home]
