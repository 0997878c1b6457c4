"""The Airflow edge: a deterministic failure (every ``RecforgeFailure``) fails the task at
once, without retries; anything else is raised as it is, so Airflow retries it."""

from __future__ import annotations

import importlib
import pkgutil

import pytest
from airflow.sdk.exceptions import AirflowFailException

import recforge
from recforge import errors, stages
from recforge.bench import BenchFloorsFailed, LoaderBenchError
from recforge.bench.environment import MXNetEnvironmentMissing
from recforge.claims import ClaimLost
from recforge.errors import RecforgeFailure
from recforge.orchestration import stage as orchestration_stage
from recforge.orchestration import xcom
from recforge.pull import NoSuchVersion
from recforge.quality import QualityGateFailed
from recforge.quality.gate import GateError
from recforge.segmentation.colormaps import ColorMapError
from recforge.segmentation.masks import UnknownMaskValues, UnknownValue
from recforge.spec import parse_spec

GATE_RESULT = {"ok": False, "dataset": "d", "run": "r", "failed": ["labels"], "warned": [],
               "checks": {"labels": {"observed": "2 labels outside [0, 3)"}},
               "data_docs": "s3://b/docs/index.html"}

# one instance of every kind of deterministic failure recforge raises
FAILURES = [
    errors.SpecError("invalid dataset spec x.yaml: - pack.quality: too high"),
    errors.SourceEmpty("ingest: no objects under s3://b/raw"),
    errors.LabelMapError("classes ['cat'] vanished"),
    errors.PlanTooLarge("2 non-empty splits need at least 2 pack tasks"),
    errors.ReconciliationError("counts do not reconcile"),
    errors.ValidationFailed("structural validation failed"),
    errors.VersionExistsError("v1 was already published"),
    ClaimLost("v1 is no longer claimed by run 'r'"),
    errors.ChecksumMismatch("train.rec: SHA-256 ab…, expected cd…"),
    errors.StoreGuaranteeMissing("the store at http://gw:80 accepted a second write"),
    LoaderBenchError("max_crop_size 300 is larger than the smallest image"),
    MXNetEnvironmentMissing("set RECFORGE_MXNET_PYTHON"),
    errors.MissingExtra("recforge demo", "dev", "moto"),
    BenchFloorsFailed(["images_per_sec 10 < 100"]),
    QualityGateFailed(GATE_RESULT),
    GateError("records.jsonl line 3: not JSON"),
    ColorMapError("colour (1, 2, 3) is shared by 'a' and 'b'"),
    UnknownMaskValues("gt/a.png", "cityscapes", [UnknownValue("colour (1, 2, 3)", 4, 0, 0)], 4),
    NoSuchVersion("s3://b/datasets/pets has no version v1; it has v2"),
]


def _all_failure_kinds() -> set[type]:
    for mod in pkgutil.walk_packages(recforge.__path__, "recforge."):
        # the Gluon dataset is the one module that imports MXNet (the MXNet environment's)
        if not mod.name.endswith("__main__") and mod.name != "recforge.segmentation.dataset":
            importlib.import_module(mod.name)

    def below(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from below(sub)

    return set(below(RecforgeFailure))


def test_every_failure_kind_is_covered_here():
    assert {type(f) for f in FAILURES} == _all_failure_kinds()


class FakeTI:
    def __init__(self):
        self.pushed = {}

    def xcom_push(self, key, value):
        self.pushed[key] = value


@pytest.fixture
def one_spec(tmp_path, monkeypatch):
    spec = parse_spec({"name": "d", "source": {"uri": str(tmp_path / "src")},
                       "publish": {"uri": str(tmp_path / "pub")}})
    monkeypatch.setattr(orchestration_stage, "spec_by_name", lambda name, directory=None: spec)
    return spec


@pytest.mark.parametrize("failure", FAILURES, ids=lambda f: type(f).__name__)
def test_recforge_failures_fail_without_retry(failure, one_spec, monkeypatch):
    def raising(run, *args):
        raise failure

    monkeypatch.setattr(stages, "entry", lambda task_id: raising)
    ti = FakeTI()
    with pytest.raises(AirflowFailException, match=type(failure).__name__) as got:
        orchestration_stage.run_stage("d", {}, "r1", "pack", "train-00000", ti=ti)
    assert got.value.__cause__ is failure
    assert ti.pushed[xcom.ERROR_KEY].startswith(type(failure).__name__)
    if isinstance(failure, QualityGateFailed):
        assert got.value.result == ti.pushed[xcom.QUALITY_RESULT_KEY] == GATE_RESULT
    else:
        assert xcom.QUALITY_RESULT_KEY not in ti.pushed


@pytest.mark.parametrize("transient", [ConnectionResetError(104, "Connection reset by peer"),
                                       TimeoutError("read timed out"), OSError(5, "EIO")])
def test_other_errors_are_raised_as_they_are_so_airflow_retries(transient, one_spec,
                                                                 monkeypatch):
    def raising(run, *args):
        raise transient

    monkeypatch.setattr(stages, "entry", lambda task_id: raising)
    ti = FakeTI()
    with pytest.raises(type(transient)) as got:
        orchestration_stage.run_stage("d", {}, "r1", "ingest", ti=ti)
    assert got.value is transient and not isinstance(got.value, AirflowFailException)
    assert type(transient).__name__ in ti.pushed[xcom.ERROR_KEY]


def test_unknown_stage_is_named():
    with pytest.raises(KeyError, match="no pipeline stage 'packing'"):
        stages.entry("packing")


# ---- the same rule on the real stages: segmentation's deterministic failures -------------

@pytest.fixture
def seg_dataset(tmp_path, monkeypatch):
    """A one-pair segmentation source whose mask holds a colour the map does not know, a
    spec folder with a colour map, and run_stage reading specs from there."""
    import numpy as np
    import yaml

    from tests.common.segdata import coord_image, png

    src = tmp_path / "src"
    for key, data in (("img/a.png", png(coord_image(16, 8))),
                      ("lbl/a.png", png(np.full((8, 16, 3), (9, 9, 9), np.uint8)))):
        (src / key).parent.mkdir(parents=True, exist_ok=True)
        (src / key).write_bytes(data)
    specs = tmp_path / "specs"
    specs.mkdir()

    def write(colormap: dict, **segmentation) -> None:
        (specs / "maps").mkdir(exist_ok=True)  # relative to the specs folder
        (specs / "maps" / "two.yaml").write_text(yaml.safe_dump({"labels": colormap}))
        (specs / "seg.yaml").write_text(yaml.safe_dump({
            "name": "seg", "task": "segmentation", "schedule": None,
            "source": {"uri": str(src), "pairs": {"images": "img", "masks": "lbl"}},
            "segmentation": {"colormap": "maps/two.yaml", **segmentation},
            "publish": {"uri": str(tmp_path / "pub")}}))
        orchestration_stage._specs.cache_clear()

    monkeypatch.setenv("RECFORGE_SPECS_DIR", str(specs))
    yield write
    orchestration_stage._specs.cache_clear()


TWO_CLASSES = [{"name": "sky", "id": 0, "trainId": 0, "color": [0, 0, 255]},
               {"name": "road", "id": 1, "trainId": 1, "color": [128, 64, 128]}]


def _run(task_id, *args):
    return orchestration_stage.run_stage("seg", {}, "r1", task_id, *args, ti=FakeTI())


def test_unknown_mask_colour_fails_convert_masks_without_retry(seg_dataset):
    seg_dataset(TWO_CLASSES)
    for task_id in ("ingest", "flatten", "remap_labels"):
        _run(task_id)
    shards = _run("split")["shards"]
    with pytest.raises(AirflowFailException, match=r"UnknownMaskValues.*\(9, 9, 9\)"):
        _run("convert_masks", shards[0])


def test_bad_colour_map_fails_remap_labels_without_retry(seg_dataset):
    shared = [TWO_CLASSES[0], {**TWO_CLASSES[1], "color": [0, 0, 255]}]
    seg_dataset(shared, collision_rule="error")
    _run("ingest")
    _run("flatten")
    with pytest.raises(AirflowFailException, match="ColorMapError"):
        _run("remap_labels")


def test_a_dag_built_from_a_folder_runs_its_stages_against_that_folder(seg_dataset, tmp_path,
                                                                       monkeypatch):
    """dataset_dags(folder) passes the folder to every task: the spec and its relative colour
    map come from there, whatever RECFORGE_SPECS_DIR says."""
    seg_dataset(TWO_CLASSES)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.setenv("RECFORGE_SPECS_DIR", str(elsewhere))
    with pytest.raises(AirflowFailException, match=r"no dataset spec named 'seg' under .*"
                                                   r"elsewhere"):
        _run("ingest")
    for task_id in ("ingest", "flatten", "remap_labels"):
        orchestration_stage.run_stage("seg", {}, "r1", task_id, ti=FakeTI(),
                                      specs_dir=tmp_path / "specs")
    from recforge.spec import specs_dir

    assert specs_dir() == elsewhere  # the folder was the stage's, not the process's
