"""One complete wheel: every file of the package ships, and the installed wheel alone (no
source tree, no extras) builds a segmentation dataset with a built-in colour map, its loader
benchmark running in an MXNet environment made from the same wheel (the images' layout)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.common.segdata import block_ids, png
from tests.common.sources import SMALL_BENCH
from tests.packaging.envs import REPO, clean_env, new_venv, pip_install, sh

PACKAGE = REPO / "include" / "recforge"


def _package_files() -> set[str]:
    """Every non-Python file of the package, as wheel paths (``recforge/...``)."""
    return {f"recforge/{p.relative_to(PACKAGE).as_posix()}" for p in PACKAGE.rglob("*")
            if p.is_file() and p.suffix not in (".py", ".pyc")
            and "__pycache__" not in p.relative_to(PACKAGE).parts}


@pytest.mark.packaging  # builds the wheel (uv build)
def test_the_wheel_holds_every_file_of_the_package(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    data = _package_files()
    assert {"recforge/py.typed", "recforge/segmentation/data/voc.yaml",
            "recforge/segmentation/data/cityscapes.yaml",
            "recforge/orchestration/pools.json"} <= data  # the list below is not empty
    assert sorted(data - names) == []
    modules = {f"recforge/{p.relative_to(PACKAGE).as_posix()}" for p in PACKAGE.rglob("*.py")}
    assert sorted(modules - names) == []
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "License-Expression: Apache-2.0" in metadata
    for extra in ("airflow", "lineage", "dali", "mxnet", "dev"):
        assert f"Provides-Extra: {extra}" in metadata


@pytest.fixture(scope="module")
def core(uv, wheel, tmp_path_factory) -> Path:
    """A new environment with the wheel and its core dependencies only (constraints.txt's
    versions); returns its ``bin`` folder."""
    python = new_venv(uv, tmp_path_factory.mktemp("core") / "venv")
    pip_install(uv, python, "-c", REPO / "constraints.txt", wheel)
    return python.parent


@pytest.fixture(scope="module")
def mxnet_env(uv, wheel, tmp_path_factory) -> Path:
    """The MXNet environment as the Dockerfile makes it: requirements-mxnet.txt within
    constraints-mxnet.txt, then the wheel; returns its ``python``."""
    python = new_venv(uv, tmp_path_factory.mktemp("mxnet") / "venv")
    pip_install(uv, python, "-r", REPO / "requirements-mxnet.txt",
                "-c", REPO / "constraints-mxnet.txt")
    pip_install(uv, python, "-c", REPO / "constraints-mxnet.txt", wheel)
    sh(uv, "pip", "check", "--python", python)
    return python


def _voc_source(root: Path, n: int = 8) -> None:
    """``n`` VOC-layout pairs: ``JPEGImages/<id>.png`` photos and ``SegmentationClass/<id>.png``
    palette masks of VOC's own palette (indices 0-20 and 255)."""
    from recforge.segmentation.colormaps import load_colormap

    palette = np.zeros((256, 3), np.uint8)
    for lab in load_colormap("voc").labels:
        palette[lab.id] = lab.color
    for i in range(n):
        stem = f"2007_{i:06d}"
        img, mask = root / "JPEGImages" / f"{stem}.png", root / "SegmentationClass" / f"{stem}.png"
        img.parent.mkdir(parents=True, exist_ok=True)
        mask.parent.mkdir(parents=True, exist_ok=True)
        pixels = np.random.default_rng(100 + i).integers(0, 256, (32, 48, 3), np.uint8)
        img.write_bytes(png(pixels))
        mask.write_bytes(png(block_ids(48, 32, [*range(21), 255], block=4, seed=i), palette))


@pytest.mark.packaging
def test_the_installed_wheel_builds_a_voc_dataset(core, mxnet_env, tmp_path):
    probe = ("import importlib.util, numpy, recforge; print(recforge.__file__, numpy.__version__, "
             "importlib.util.find_spec('airflow') is None)")
    where, numpy, no_airflow = sh(core / "python", "-c", probe).stdout.split()
    assert Path(where).is_relative_to(core.parent), where  # the installed copy, not include/
    assert numpy.startswith("2.") and no_airflow == "True"  # numpy 2 and no Airflow in the core
    where, numpy, _ = sh(mxnet_env, "-c", probe).stdout.split()
    assert Path(where).is_relative_to(mxnet_env.parents[1]) and numpy.startswith("1.23.")

    _voc_source(tmp_path / "src")
    spec = {"name": "voc_tiny", "task": "segmentation",
            "source": {"uri": "s3://unused/src",
                       "pairs": {"images": "JPEGImages", "masks": "SegmentationClass"}},
            "segmentation": {"colormap": "voc"},  # the built-in map, read from the wheel
            "splits": {"val_ratio": 0.3, "seed": 2},
            "pack": {"resize": 0, "encoding": ".png", "shard_size": 4},
            "bench": SMALL_BENCH, "publish": {"uri": "s3://unused/pub"}}
    (tmp_path / "voc_tiny.yaml").write_text(yaml.safe_dump(spec))
    env = clean_env(RECFORGE_MXNET_PYTHON=str(mxnet_env))
    build = sh(core / "recforge", "build", "voc_tiny.yaml", "--source", tmp_path / "src",
               "--publish", tmp_path / "pub", "--workers", "1", "--progress", "lines",
               cwd=tmp_path, env=env, timeout=240)
    assert "listed 16 = packed 16 + quarantined 0" in build.stdout, build.stdout
    assert "loader benchmark (" in build.stdout and "published:" in build.stdout
    assert f"MXNet environment: {mxnet_env} -m recforge.bench.worker" in build.stderr

    latest = json.loads((tmp_path / "pub" / "voc_tiny" / "latest.json").read_text())
    classes = json.loads((Path(latest["uri"]) / "classes.json").read_text())
    assert classes["colormap"] == "voc" and len(classes["classes"]) == 21
    assert classes["classes"][15] == "person"
    sh(core / "recforge", "validate", latest["uri"], cwd=tmp_path, env=env)


@pytest.mark.packaging
def test_the_installed_wheel_knows_its_version_and_its_pools(core, wheel):
    version = wheel.name.split("-")[1]
    assert sh(core / "recforge", "--version").stdout.strip() == f"recforge {version}"
    pools = json.loads(sh(core / "python", "-m", "recforge.orchestration.pools").stdout)
    assert {"recforge_pack", "recforge_gpu_bench"} <= set(pools)  # pools.json from the wheel


@pytest.mark.packaging
@pytest.mark.parametrize(("command", "extra", "module"), [
    (["demo"], "dev", "moto"),
    (["dev-s3", "start", "--state-dir", "{tmp}/s3"], "dev", "moto"),
    (["sample-data", "{tmp}/sample"], "dev", "moto"),
])
def test_a_command_without_its_extra_names_the_extra(core, tmp_path, command, extra, module):
    proc = sh(core / "recforge", *[c.format(tmp=tmp_path) for c in command], check=False,
              cwd=tmp_path)
    what = " ".join(["recforge", *command[:2 if command[0] == "dev-s3" else 1]])
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip() == (f"{what} needs the '{extra}' extra: pip install "
                                   f"'recforge[{extra}]' (missing module {module})")
    assert not (tmp_path / "s3").exists() and not (tmp_path / "sample").exists()
