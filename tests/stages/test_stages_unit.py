"""Unit tests of the pure parts of each stage: key safety, flattening, labels, split, lst."""

from __future__ import annotations

import pytest

from recforge.errors import LabelMapError, PlanTooLarge, ReconciliationError
from recforge.format.names import lst_line
from recforge.layouts import class_folders
from recforge.stages import remap_labels, split
from recforge.stages.ingest import classify_object, unsafe_key_reason
from recforge.stages.merge import reconcile

EXTS = (".jpg", ".png")


@pytest.mark.parametrize("key, reason", [
    ("cat/../../etc/passwd.jpg", "unsafe_key"),
    ("/abs/cat.jpg", "unsafe_key"),
    ("cat//x.jpg", "unsafe_key"),
    ("cat\\..\\x.jpg", "unsafe_key"),
    ("cat/./x.jpg", "unsafe_key"),
    ("cat/tab\there.jpg", "unsafe_key"),
    ("cat/line\nbreak.jpg", "unsafe_key"),
    ("cat/carriage\rreturn.jpg", "unsafe_key"),
    ("cat/nul\x00.jpg", "unsafe_key"),
    ("cat/del\x7f.jpg", "unsafe_key"),
    ("cat/" + "x" * 252 + ".jpg", "unsafe_key"),
    ("/".join(["d" * 200] * 6) + ".jpg", "unsafe_key"),
    ("cat/.hidden.jpg", "hidden_file"),
    (".git/x.jpg", "hidden_file"),
    ("cat/notes.txt", "unsupported_extension"),
    ("cat/noext", "unsupported_extension"),
])
def test_refused_objects(key, reason):
    entry = classify_object(key, 10, EXTS)
    assert entry is not None and entry.reason == reason and entry.fix


def test_zero_bytes_and_accepted():
    assert classify_object("cat/a.jpg", 0, EXTS).reason == "zero_bytes"
    assert classify_object("cat/a.JPG", 10, EXTS) is None
    assert classify_object("cat/sub dir/ünïcode.png", 10, EXTS) is None
    assert unsafe_key_reason("a/b.jpg") is None


def test_flatten_any_depth_first_folder_is_class():
    rows = [{"key": k, "etag": "e", "size": 1} for k in
            ["dog/a.jpg", "dog/puppies/b.jpg", "dog/puppies/2024/c.jpg", "cat/x.jpg", "top.jpg"]]
    items, refused = class_folders.flatten_keys(rows)
    assert {i["source_key"]: i["class_name"] for i in items} == {
        "dog/a.jpg": "dog", "dog/puppies/b.jpg": "dog", "dog/puppies/2024/c.jpg": "dog",
        "cat/x.jpg": "cat"}
    assert {i["name"] for i in items} == {"dog/a.jpg", "dog/puppies__b.jpg",
                                          "dog/puppies__2024__c.jpg", "cat/x.jpg"}
    assert [(e.source_key, e.reason) for e in refused] == [("top.jpg", "not_in_class_folder")]


def test_flat_names_unique_on_collision():
    rows = [{"key": k, "etag": "e", "size": 1} for k in ["a/b/c.jpg", "a/b__c.jpg"]]
    items, _ = class_folders.flatten_keys(rows)
    names = [i["name"] for i in items]
    assert len(set(names)) == 2
    again, _ = class_folders.flatten_keys(list(reversed(rows)))
    assert sorted(names) == sorted(i["name"] for i in again)  # stable whatever the order


def test_labels_fresh_append_and_vanish():
    assert remap_labels.remap({"dog", "cat"}, None, False) == ["cat", "dog"]
    assert remap_labels.remap({"dog", "cat", "ant"}, ["dog", "cat"], False) == ["dog", "cat", "ant"]
    with pytest.raises(LabelMapError, match=r"\['cat'\].*allow_renumbering"):
        remap_labels.remap({"dog"}, ["dog", "cat"], False)
    assert remap_labels.remap({"dog", "eel"}, ["dog", "cat"], True) == ["dog", "eel"]


def test_split_is_deterministic_and_stable_under_growth():
    keys = [f"c{i % 5}/img_{i}.jpg" for i in range(2000)]
    first = {k: split.assign_split(k, 0.2, 0.1, seed=3) for k in keys}
    assert first == {k: split.assign_split(k, 0.2, 0.1, seed=3) for k in keys}
    counts = {s: list(first.values()).count(s) for s in ("train", "val", "test")}
    assert 300 < counts["val"] < 500 and 130 < counts["test"] < 270
    other_seed = {k: split.assign_split(k, 0.2, 0.1, seed=4) for k in keys}
    assert other_seed != first


def test_plan_keys_are_source_key_hashes_in_key_ordered_shards():
    items = [{"source_key": f"c{i % 3}/{i}.jpg", "class_name": f"c{i % 3}", "etag": "e",
              "size": 1, "name": f"c{i % 3}/{i}.jpg"} for i in range(25)]
    shards = split.plan(items, {"c0": 0, "c1": 1, "c2": 2}, 0.0, 0.0, 0, shard_size=10)
    assert list(shards) == [f"train-{n:05d}" for n in range(len(shards))]
    assert sum(len(r) for r in shards.values()) == 25
    keys = [r["record_key"] for rows in shards.values() for r in rows]
    assert keys == sorted(keys) and len(set(keys)) == 25  # shards hold contiguous key ranges
    assert all(0 <= k < 2**63 for k in keys)
    again = split.plan(items[:20], {"c0": 0, "c1": 1, "c2": 2}, 0.0, 0.0, 0, shard_size=10)
    key_of = {r["source_key"]: r["record_key"] for rows in again.values() for r in rows}
    assert all(key_of[r["source_key"]] == r["record_key"]  # no key shifts when items go
               for rows in shards.values() for r in rows if r["source_key"] in key_of)
    assert all(r["label"] == int(r["class_name"][1]) for rows in shards.values() for r in rows)


def test_lst_line_matches_im2rec_format():
    assert lst_line(7, 3, "cat/a.jpg") == "7\t3.000000\tcat/a.jpg\n"
    assert lst_line(1, [1, 2.5], "x.jpg") == "1\t1.000000\t2.500000\tx.jpg\n"


def test_reconcile_exact():
    assert reconcile(["a", "b", "c"], ["a", "b"], ["c"]) == {
        "listed": 3, "packed": 2, "quarantined": 1}
    with pytest.raises(ReconciliationError, match=r"1 listed object\(s\) neither.*\['c'\]"):
        reconcile(["a", "b", "c"], ["a"], ["b"])
    with pytest.raises(ReconciliationError, match=r"1 counted twice \['a'\]"):
        reconcile(["a", "b"], ["a", "b"], ["a"])


@pytest.mark.parametrize("total", [1_280_000, 10_000_000])
def test_imagenet_scale_plans_fit_airflows_map_limit(total):
    counts = {"train": int(total * 0.9), "val": total - int(total * 0.9), "test": 0}
    size = split.shard_size_within(counts, 500, 1024)
    shards = sum(-(-n // size) for n in counts.values() if n)
    assert shards <= 1024 and size >= 500
    assert sum(-(-n // (size - 1)) for n in counts.values() if n) > 1024  # the smallest such


def test_plan_grows_shards_but_keeps_record_keys():
    items = [{"source_key": f"c{i % 3}/{i}.jpg", "class_name": f"c{i % 3}"} for i in range(90)]
    ids = {"c0": 0, "c1": 1, "c2": 2}
    free = split.plan([dict(i) for i in items], ids, 0.2, 0.0, 0, shard_size=10)
    capped = split.plan([dict(i) for i in items], ids, 0.2, 0.0, 0, shard_size=10, max_shards=3)
    assert len(free) > 3 and len(capped) == 3
    keys = lambda plan: sorted((r["split"], r["record_key"], r["source_key"])  # noqa: E731
                               for rows in plan.values() for r in rows)
    assert keys(free) == keys(capped)


def test_a_plan_that_cannot_fit_fails_naming_the_limit():
    with pytest.raises(PlanTooLarge, match="at most 1 .*max_map_length.*MAX_MAP_LENGTH"):
        split.shard_size_within({"train": 10, "val": 5, "test": 0}, 500, 1)


def test_a_shard_error_that_cannot_be_pickled_still_reaches_the_caller(tmp_path, monkeypatch):
    from recforge import pipeline, stages
    from recforge.spec import parse_spec

    class Unpicklable(Exception):  # like botocore's errors that hold the response stream
        def __reduce__(self):
            raise TypeError("cannot pickle '_io.BufferedReader' object")

    def down(run, shard):
        raise Unpicklable("Could not connect to the endpoint URL: http://127.0.0.1:9/")

    monkeypatch.setattr(stages, "entry", lambda task_id: down)
    spec = parse_spec({"name": "d", "source": {"uri": str(tmp_path / "src")},
                       "publish": {"uri": str(tmp_path / "pub")}})
    with pytest.raises(RuntimeError, match="shard train-00000: Unpicklable: Could not connect"):
        pipeline._shard_stages((spec, "r", ("pack",), "train-00000"))


def test_auto_shards_hold_at_least_the_minimum_work():
    # small data: one floor-sized shard per split, never tiny tasks
    assert split.auto_shard_size({"train": 900, "val": 100, "test": 0}, 16) \
        == split.AUTO_MIN_SHARD
    assert split.AUTO_MIN_SHARD == split.PACK_IMAGES_PER_SECOND * split.MIN_TASK_SECONDS


@pytest.mark.parametrize("total, slots", [(20_000, 16), (100_000, 16), (1_280_000, 16),
                                          (10_000_000, 64), (5_000, 2)])
def test_auto_shards_fill_the_slots_within_a_few_waves(total, slots):
    counts = {"train": int(total * 0.9), "val": total - int(total * 0.9), "test": 0}
    size = split.auto_shard_size(counts, slots)
    shards = sum(-(-n // size) for n in counts.values() if n)
    assert size >= split.AUTO_MIN_SHARD
    assert size // split.AUTO_MIN_SHARD & (size // split.AUTO_MIN_SHARD - 1) == 0  # a step
    if total >= slots * split.AUTO_MIN_SHARD:  # the data allows every slot a task
        assert shards >= slots
    assert shards <= slots * split.AUTO_WAVES + len(counts)


def test_auto_shard_size_is_stable_as_the_data_grows():
    sizes = {split.auto_shard_size({"train": n, "val": 0, "test": 0}, 16)
             for n in range(1_300_000, 2_400_000, 10_000)}
    assert len(sizes) == 1  # +80 % of images: the same size, the same shard boundaries
    assert split.auto_shard_size({"train": 1_300_000, "val": 0, "test": 0}, 16) < \
        split.auto_shard_size({"train": 2_600_000, "val": 0, "test": 0}, 16)


def test_plan_with_auto_shards_keeps_record_keys():
    items = [{"source_key": f"c{i % 3}/{i}.jpg", "class_name": f"c{i % 3}"}
             for i in range(6_000)]
    ids = {"c0": 0, "c1": 1, "c2": 2}
    fixed = split.plan([dict(i) for i in items], ids, 0.2, 0.0, 0, shard_size=500)
    auto = split.plan([dict(i) for i in items], ids, 0.2, 0.0, 0, shard_size="auto", slots=2)
    assert 2 <= len(auto) < len(fixed)
    keys = lambda plan: sorted((r["split"], r["record_key"])  # noqa: E731
                               for rows in plan.values() for r in rows)
    assert keys(auto) == keys(fixed)


def test_a_fixed_shard_size_is_one_shard_a_pack_task_largest_first():
    sizes = {"test-00000": 120, "train-00000": 480, "train-00001": 610, "val-00000": 480}
    assert split.pack_tasks(sizes, slots=2, max_tasks=1024) == [
        ["train-00001"], ["train-00000"], ["val-00000"], ["test-00000"]]


def test_auto_packs_a_small_night_in_one_round_of_balanced_tasks():
    # content-defined shards of one 5,000-image night: 71 to 2,078 images each
    sizes = {"test-00000": 512, "train-00000": 1470, "train-00001": 347, "train-00002": 1133,
             "train-00003": 71, "train-00004": 552, "train-00005": 440, "val-00000": 475}
    tasks = split.pack_tasks(sizes, slots=2, max_tasks=1024, auto=True)
    assert len(tasks) == 2  # one round on 2 slots, not 8 tasks in 4 rounds
    assert sorted(s for t in tasks for s in t) == sorted(sizes)  # every shard, once
    loads = [sum(sizes[s] for s in t) for t in tasks]
    assert loads == sorted(loads, reverse=True)  # the longest task starts first
    assert max(loads) - min(loads) <= min(sizes.values()) * 2  # balanced to within a shard
    assert all(sizes[t[0]] == max(sizes[s] for s in t) for t in tasks)  # largest shard first
    assert split.pack_tasks(dict(reversed(sizes.items())), 2, 1024, auto=True) == tasks


@pytest.mark.parametrize("total, slots, max_tasks", [(1_280_000, 16, 1024), (10_000_000, 64, 1024),
                                                     (10_000_000, 64, 200), (3_000, 16, 1024)])
def test_auto_pack_tasks_hold_bounded_work_within_the_map_limit(total, slots, max_tasks):
    n = 1_000
    sizes = {f"train-{k:05d}": total // n for k in range(n)}
    tasks = split.pack_tasks(sizes, slots, max_tasks, auto=True)
    assert sorted(s for t in tasks for s in t) == sorted(sizes)
    assert len(tasks) <= max_tasks
    if len(tasks) < max_tasks:  # where the map limit allows, no task holds more than its cap
        assert max(sum(sizes[s] for s in t) for t in tasks) <= \
            split.AUTO_TASK_MAX_IMAGES + total // n
    if total <= slots * split.AUTO_TASK_MAX_IMAGES:  # one round: every slot one task
        assert len(tasks) == min(slots, n)
    assert split.pack_tasks({}, slots, max_tasks, auto=True) == []


def test_whole_number_class_names_are_numbered_by_number():
    names = {str(i) for i in range(12)}
    assert remap_labels.remap(names, None, False) == [str(i) for i in range(12)]
    assert remap_labels.remap(names | {"12"}, [str(i) for i in range(12)], False)[-1] == "12"
    assert remap_labels.remap({"10", "2", "cat"}, None, False) == ["10", "2", "cat"]
