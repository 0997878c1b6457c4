"""The loader benchmark reuses the previous version's bench.json only when the loader would
read byte-identical files with the same options on the same host."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from recforge.bench import benchmark, environment, run_and_gate, run_benchmark
from recforge.bench.measure import reusable
from recforge.spec.bench import BenchOptions, BenchSpec
from tests.bench.test_bench import FAST, pack

pytestmark = pytest.mark.mxnet  # the benchmark runs in the MXNet environment: a slow tier

REPO = Path(__file__).resolve().parents[2]

# what a benchmark run derives from the bytes alone (not from timing): a recomputation and a
# reuse must agree on all of it
DETERMINISTIC = ("records", "rec_bytes", "mean_record_bytes", "num_classes")


def _facts(res: dict) -> dict:
    vc = res["value_check"]
    return {"dataset": {k: res["dataset"][k] for k in DETERMINISTIC},
            "sample": {k: v for k, v in res["dataset"]["sample"].items()},
            "image_sizes": res["image_sizes"], "label_range": res["label_range"],
            "value_check": {k: vc[k] for k in ("batches", "records_covered", "of_records",
                                               "value_min", "value_max", "all_finite",
                                               "label_min", "label_max", "dtypes")},
            "bare_decode_undecodable": res["bare_decode"]["undecodable"],
            "options": res["options"], "problems": res["problems"]}


def test_same_window_bytes_reuse_and_equal_a_recomputation(tmp_path):
    root = tmp_path / "v1"
    pack(root, n=48)
    opts = BenchOptions(**{**FAST, "thread_grid": ()})
    first = json.loads(json.dumps(run_benchmark(str(root), opts)))  # as bench.json holds it
    assert first["dataset"]["sample"]["sha256"]
    second = shutil.copytree(root, tmp_path / "v2")  # the next version: the same bytes
    reused = run_benchmark(str(second), opts, previous=first)
    assert reused["reused_from"]["created_at"] == first["created_at"]
    assert reused["runs"] == first["runs"] and reused["summary"] == first["summary"]
    recomputed = json.loads(json.dumps(run_benchmark(str(second), opts)))
    assert "reused_from" not in recomputed
    assert _facts(reused) == _facts(recomputed) == _facts(first)
    # reused again: it still names the version that measured
    third = run_benchmark(str(second), opts, previous=reused)
    assert third["reused_from"]["created_at"] == first["created_at"]


def why_not_reusable(previous: dict, options: dict, sample: dict) -> str | None:
    """``reusable`` where it runs, in the MXNet environment (it reads MXNet's host facts)."""
    return reusable(previous, BenchOptions.model_validate(options), sample, None)


def test_any_change_the_loader_would_see_measures_again(tmp_path):
    root = tmp_path / "v1"
    pack(root, n=48)
    opts = BenchOptions(**{**FAST, "thread_grid": ()})
    first = run_benchmark(str(root), opts)
    changed = tmp_path / "v2"
    pack(changed, n=48, seed=1)  # same layout and sizes, other pixels
    sample = run_benchmark(str(changed), opts)["dataset"]["sample"]
    assert environment.call("tests.bench.test_reuse:why_not_reusable",  # the host is MXNet's
                            {"previous": first, "options": opts.model_dump(mode="json"),
                             "sample": sample}, pythonpath=[str(REPO)]) \
        == "the sampled window's bytes changed"
    assert "reused_from" not in run_benchmark(str(changed), opts, previous=first)
    other = BenchOptions(**{**FAST, "thread_grid": (), "batch_size": 8})
    assert "reused_from" not in run_benchmark(str(root), other, previous=first)
    moved = {**first, "host": {**first["host"], "nprocs": -1}}
    assert "reused_from" not in run_benchmark(str(root), opts, previous=moved)
    troubled = {**first, "problems": ["value check batch 0: data has NaN or Inf"]}
    assert "reused_from" not in run_benchmark(str(root), opts, previous=troubled)


def test_the_gate_checks_reused_numbers_against_todays_floors(tmp_path):
    root = tmp_path / "v1"
    pack(root, n=48)
    opts = {**FAST, "thread_grid": ()}
    first = run_benchmark(str(root), BenchOptions(**opts))
    spec = BenchSpec(options=opts, floors={"cpu": {"min_images_per_sec": 1}})
    out = run_and_gate(str(root), spec, str(tmp_path / "bench.json"), previous=first,
                       dataset_version="v2")
    assert out["reused_from"] is None  # first has no dataset_version: measured by hand
    saved = json.loads((tmp_path / "bench.json").read_text())
    assert saved["reused_from"]["created_at"] == first["created_at"]
    assert saved["dataset_version"] == "v2" and saved["passed"] is True


def test_a_new_predecessor_in_classes_json_still_reuses_but_new_classes_do_not(tmp_path):
    """Every version's classes.json names the version it was based on, so its bytes differ
    every night: that provenance is not something the loader reads. The classes are."""
    root = tmp_path / "v1"
    pack(root, n=48)
    doc = json.loads((root / "classes.json").read_text())
    (root / "classes.json").write_text(json.dumps({**doc, "based_on_version": "v0"}))
    opts = BenchOptions(**{**FAST, "thread_grid": ()})
    first = json.loads(json.dumps(run_benchmark(str(root), opts)))
    nightly = shutil.copytree(root, tmp_path / "v2")
    (nightly / "classes.json").write_text(json.dumps({"based_on_version": "v1", **doc},
                                                     indent=2))
    assert run_benchmark(str(nightly), opts, previous=first)["reused_from"]
    renamed = shutil.copytree(root, tmp_path / "v3")
    (renamed / "classes.json").write_text(json.dumps({**doc, "based_on_version": "v1",
                                                      "num_classes": doc["num_classes"] + 1}))
    assert "reused_from" not in run_benchmark(str(renamed), opts, previous=first)


def _no_fetch(*_a, **_k):
    raise AssertionError("the window was fetched")


def test_an_unchanged_split_is_reused_without_fetching_its_window(tmp_path, monkeypatch):
    root = tmp_path / "v1"
    pack(root, n=48)
    opts = BenchOptions(**{**FAST, "thread_grid": ()})
    first = json.loads(json.dumps(run_benchmark(str(root), opts, identity="split-a")))
    assert first["dataset"]["sample"]["split_identity"] == "split-a"
    empty = tmp_path / "v2"  # nothing there: a fetch would fail
    empty.mkdir()
    monkeypatch.setattr(benchmark, "fetch_split", _no_fetch)
    reused = run_benchmark(str(empty), opts, previous=first, identity="split-a")
    assert reused["reused_from"]["created_at"] == first["created_at"]
    sample = reused["dataset"]["sample"]
    assert sample["fetched"] is False and sample["sha256"] == first["dataset"]["sample"]["sha256"]
    # and once more from the reused document
    again = run_benchmark(str(empty), opts, previous=json.loads(json.dumps(reused)),
                          identity="split-a")
    assert again["reused_from"]["created_at"] == first["created_at"]


def test_an_unchanged_split_is_decided_before_any_window_is_handed_over(tmp_path,
                                                                         monkeypatch):
    """A night whose split is unchanged only decides that the previous measurement stands
    (``measure.reuse``); the window is measured only when that cannot stand."""
    root = tmp_path / "v1"
    pack(root, n=48)
    opts = BenchOptions(**{**FAST, "thread_grid": ()})
    first = json.loads(json.dumps(run_benchmark(str(root), opts, identity="split-a")))
    calls = []
    real = environment.call

    def spy(target, kwargs, **options):
        calls.append(target)
        return real(target, kwargs, **options)

    monkeypatch.setattr(environment, "call", spy)
    reused = run_benchmark(str(root), opts, previous=first, identity="split-a")
    assert reused["reused_from"]["created_at"] == first["created_at"]
    assert calls == ["recforge.bench.measure:reuse"]
    moved = {**first, "host": {**first["host"], "nprocs": -1}}  # then it measures, as before
    calls.clear()
    assert "reused_from" not in run_benchmark(str(root), opts, previous=moved,
                                              identity="split-a")
    assert calls == ["recforge.bench.measure:reuse", "recforge.bench.measure:measure"]


def test_an_unchanged_split_that_cannot_be_reused_is_fetched_and_measured(tmp_path,
                                                                         monkeypatch):
    root = tmp_path / "v1"
    pack(root, n=48)
    opts = BenchOptions(**{**FAST, "thread_grid": ()})
    first = json.loads(json.dumps(run_benchmark(str(root), opts, identity="split-a")))
    moved = {**first, "host": {**first["host"], "nprocs": -1}}  # another host
    fetches = []
    real = benchmark.fetch_split
    monkeypatch.setattr(benchmark, "fetch_split",
                        lambda *a, **k: fetches.append(a) or real(*a, **k))
    res = run_benchmark(str(root), opts, previous=moved, identity="split-a")
    assert "reused_from" not in res and res["runs"] and len(fetches) == 1
    assert "fetched" not in res["dataset"]["sample"]


def test_another_split_identity_fetches_the_window(tmp_path, monkeypatch):
    root = tmp_path / "v1"
    pack(root, n=48)
    opts = BenchOptions(**{**FAST, "thread_grid": ()})
    first = json.loads(json.dumps(run_benchmark(str(root), opts, identity="split-a")))
    assert benchmark.unchanged_window(str(root), opts, first, "split-b") is None
    assert benchmark.unchanged_window(str(root), opts, first, None) is None
    smaller = BenchOptions(**{**FAST, "thread_grid": (), "max_bytes": 1 << 16})
    assert benchmark.unchanged_window(str(root), smaller, first, "split-a") is None
    assert benchmark.unchanged_window(str(root), opts, first, "split-a")["sample"]["fetched"] \
        is False


def test_the_split_identity_follows_the_bytes_the_loader_reads():
    from recforge.bench.records import split_identity

    files = {"train.rec": {"size": 30, "parts": [{"size": 10, "sha256": "a"},
                                                  {"size": 20, "sha256": "b"}]},
             "train.idx": {"size": 9, "sha256": "i"}}
    classes = json.dumps({"classes": ["cat"], "based_on_version": "v1"}).encode()
    same = split_identity(files, "train", classes)
    assert same and split_identity(json.loads(json.dumps(files)), "train", classes) == same
    # another predecessor is provenance, not content
    assert split_identity(files, "train", json.dumps(
        {"classes": ["cat"], "based_on_version": "v2"}).encode()) == same
    assert split_identity(files, "train", json.dumps({"classes": ["dog"]}).encode()) != same
    other = {**files, "train.rec": {"size": 30, "parts": [{"size": 10, "sha256": "a"},
                                                          {"size": 20, "sha256": "c"}]}}
    assert split_identity(other, "train", classes) != same
    assert split_identity({**files, "train.idx": {"size": 9, "sha256": "j"}}, "train",
                          classes) != same
    with_masks = {**files, "train_mask.rec": files["train.rec"], "train_mask.idx": files[
        "train.idx"]}
    assert split_identity(with_masks, "train", classes) != same
    assert split_identity({"train.rec": {"size": 30}, "train.idx": files["train.idx"]},
                          "train", classes) is None  # no parts recorded: unknown
    assert split_identity(files, "val", classes) is None
