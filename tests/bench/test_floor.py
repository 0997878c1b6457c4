"""The S3 floor that ``benchmarks/bench_incremental.py`` prints beside each night: which
bytes of a split any build must send, given S3's 5 MiB minimum part."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

MIB = 1024 ** 2


@pytest.fixture(scope="module")
def bench():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_incremental.py"
    spec = importlib.util.spec_from_file_location("bench_incremental", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rows(lengths_mib, etags=None):
    out, at = [], 0
    for i, n in enumerate(lengths_mib):
        out.append({"key": i, "source_key": f"k{i}", "source_etag": (etags or {}).get(i, "e"),
                    "offset": at, "length": int(n * MIB)})
        at += int(n * MIB)
    return out


def index(rows_):
    return {(r["key"], r["source_key"], r["source_etag"]): (i, r["offset"])
            for i, r in enumerate(rows_)}


def test_an_unchanged_split_is_copied_whole_even_when_short(bench):
    old = rows([1, 1, 1])
    assert bench._split_runs(rows([1, 1, 1]), index(old)) == (3 * MIB, 0)


def test_a_change_sends_itself_and_the_short_runs_beside_it(bench):
    old = rows([3] * 6)
    # record 2 changed: runs [0,1] (6 MiB: copied) and [3,4,5] (9 MiB, the last); the part
    # sent between them must hold 5 MiB too, so 2 MiB of the second run go with record 2
    assert bench._split_runs(rows([3] * 6, {2: "new"}), index(old)) == (18 * MIB, 5 * MIB)
    # record 1 changed: run [0] is 3 MiB, under the minimum and not last, so it is sent too
    assert bench._split_runs(rows([3] * 6, {1: "new"}), index(old)) == (18 * MIB, 6 * MIB)


def test_records_that_were_not_neighbours_start_a_new_run(bench):
    old = rows([2, 2, 2, 2, 2, 2])
    new = [r for r in rows([2, 2, 2, 2, 2, 2]) if r["key"] != 2]  # one removed
    for at, r in enumerate(new):
        r["offset"] = at * 2 * MIB
    # runs [0,1] (4 MiB, not last: sent, with 1 MiB of the next run to make a part) and
    # [3,4,5] (6 MiB: the other 5 copied)
    assert bench._split_runs(new, index(old)) == (10 * MIB, 5 * MIB)


@pytest.mark.parametrize("upload,copied", [(0, 0), (3 * MIB, 0), (0, 40 * MIB),
                                           (33 * MIB, 2 * MIB), (2 * MIB, 33 * MIB),
                                           (2 * MIB, 3 * MIB), (16 * MIB, 16 * MIB),
                                           (7 * MIB, 20 * MIB + 1)])
def test_the_write_plan_keeps_every_part_but_the_last_at_5_mib(bench, upload, copied):
    plan = bench.write_plan(upload, copied, 16 * MIB)
    assert all(n >= bench.MIN_PART for _, n in plan[:-1]), plan
    assert sum(n for _, n in plan) == upload + copied
    sent = sum(n for k, n in plan if k == "put")
    assert upload <= sent <= upload + (bench.MIN_PART if copied % (16 * MIB) else 0)


def test_the_reuse_arithmetic_sends_all_of_a_dense_shard_and_little_of_a_sparse_one():
    import random

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "reuse_plan.py"
    spec = importlib.util.spec_from_file_location("reuse_plan", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rng = random.Random(1)
    assert module.sent_share(500, 30, 0.5, rng) == 1.0  # a change every ~60 kB: all sent
    assert module.sent_share(4800, 400, 0.0, rng) < 0.01  # one change in ~2 GB: 5 MiB sent
