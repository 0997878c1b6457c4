"""``recforge check`` on a published version uses that version's own bench.json."""

from __future__ import annotations

import json

import pytest

from recforge import pipeline
from recforge.cli import main
from tests.common.sources import make_source, make_spec

pytestmark = pytest.mark.pipeline  # a whole build: a slow tier


def test_check_reads_the_versions_bench_json(bucket, capsys):
    make_source(bucket)
    spec = make_spec(bucket, quality={"severity": {"near_duplicates": "warn"}})
    version = pipeline.build(spec, run_id="c1", workers=1)["publish"]["uri"]
    capsys.readouterr()
    main(["check", version, "--json"])
    checks = json.loads(capsys.readouterr().out)["checks"]
    for name in ("loader_dtype", "loader_range", "loader_shape", "loader_throughput"):
        assert checks[name]["status"] == "passed", (name, checks[name])
