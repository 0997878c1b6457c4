"""A missing optional extra is named, with the command that installs it."""

from __future__ import annotations

import pickle

import pytest

from recforge import errors
from recforge.cli import main
from recforge.errors import MissingExtra, RecforgeFailure, extra_for, needs_extra


@pytest.mark.parametrize(("module", "extra"), [
    ("airflow", "airflow"),
    ("airflow.providers.amazon.aws.hooks.s3", "airflow"),  # Airflow without the provider
    ("airflow.providers.openlineage", "lineage"),
    ("openlineage.client", "lineage"),
    ("nvidia", "dali"),  # `import nvidia.dali` with no nvidia package at all
    ("nvidia.dali.fn", "dali"),
    ("moto.server", "dev"),
    ("skimage", "dev"),
    ("mxnet", "mxnet"),
    ("torch", "torch"),
    ("torchvision.io", "torch"),
    ("numpy", None),
    ("airflowish", None),
    (None, None),
])
def test_each_module_belongs_to_its_extra(module, extra):
    assert extra_for(module) == extra


def test_the_message_names_the_extra_and_the_install_command():
    exc = MissingExtra("recforge demo", "dev", "moto")
    assert str(exc) == ("recforge demo needs the 'dev' extra: pip install 'recforge[dev]' "
                        "(missing module moto)")
    assert isinstance(exc, RecforgeFailure) and isinstance(exc, ModuleNotFoundError)
    assert (exc.extra, exc.name) == ("dev", "moto")
    again = pickle.loads(pickle.dumps(exc))  # crosses process pools unchanged
    assert (type(again), str(again), again.name) == (MissingExtra, str(exc), "moto")


def test_mxnet_is_sent_to_an_environment_of_its_own():
    message = str(MissingExtra("the Gluon dataset", "mxnet", "mxnet"))
    assert "environment of its own" in message and "RECFORGE_MXNET_PYTHON" in message


def test_an_import_inside_becomes_the_extra_it_needs():
    with pytest.raises(MissingExtra, match=r"^the DALI loader needs the 'dali' extra: pip "
                       r"install 'recforge\[dali\]' \(missing module nvidia\)$") as info:
        with needs_extra("the DALI loader"):
            raise ModuleNotFoundError("No module named 'nvidia'", name="nvidia")
    assert isinstance(info.value.__cause__, ModuleNotFoundError)


def test_a_module_no_extra_brings_passes_unchanged():
    with pytest.raises(ModuleNotFoundError) as info:
        with needs_extra("recforge build", "dev"):  # moto and skimage are installed here
            import recforge_no_such_module  # noqa: F401
    assert type(info.value) is ModuleNotFoundError


def test_a_named_extra_is_checked_before_the_block_runs(monkeypatch):
    monkeypatch.setitem(errors.EXTRA_MODULES, "dev", ("moto", "recforge_no_such_module"))
    ran = []
    with pytest.raises(MissingExtra, match=r"missing module recforge_no_such_module\)$"):
        with needs_extra("recforge sample-data", "dev"):
            ran.append(True)
    assert ran == []
    monkeypatch.setitem(errors.EXTRA_MODULES, "dev", ("moto", "recforge_no_such.child"))
    with pytest.raises(MissingExtra, match="missing module recforge_no_such.child"):
        with needs_extra("recforge sample-data", "dev"):  # a missing parent package too
            pass


@pytest.mark.parametrize(("argv", "what"), [
    (["sample-data", "{tmp}/out"], "recforge sample-data"),
    (["dev-s3", "start", "--state-dir", "{tmp}/out"], "recforge dev-s3 start"),
    (["demo", "--repo", "{tmp}/out"], "recforge demo"),
])
def test_dev_commands_refuse_up_front(monkeypatch, tmp_path, capsys, argv, what):
    monkeypatch.setitem(errors.EXTRA_MODULES, "dev", ("recforge_no_such_module",))
    assert main([a.format(tmp=tmp_path) for a in argv]) == 2
    assert capsys.readouterr().err == (f"{what} needs the 'dev' extra: pip install "
                                       "'recforge[dev]' (missing module recforge_no_such_module)\n")
    assert not (tmp_path / "out").exists()  # refused before anything was written or started


def test_the_demo_also_needs_airflow(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(errors.EXTRA_MODULES, "airflow", ("recforge_no_such_airflow",))
    assert main(["demo", "--repo", str(tmp_path)]) == 2
    assert "recforge demo needs the 'airflow' extra: pip install 'recforge[airflow]'" in \
        capsys.readouterr().err


def test_any_command_names_the_extra_of_a_module_missing_deep_inside(monkeypatch, capsys,
                                                                     tmp_path):
    from recforge.format import validate

    def needs_dali(*args, **kwargs):
        raise ModuleNotFoundError("No module named 'nvidia.dali'", name="nvidia.dali")

    monkeypatch.setattr(validate, "validate_prefix", needs_dali)
    assert main(["validate", str(tmp_path)]) == 2  # a folder that exists: validate runs
    assert capsys.readouterr().err == ("recforge validate needs the 'dali' extra: pip install "
                                       "'recforge[dali]' (missing module nvidia.dali)\n")


# ---- extras that cannot share an environment ---------------------------------------------

def _project() -> dict:
    import tomllib
    from pathlib import Path

    return tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())


def _numpy_in(extra: str):
    from packaging.requirements import Requirement

    found = [Requirement(r) for r in _project()["project"]["optional-dependencies"][extra]
             if Requirement(r).name == "numpy"]
    assert len(found) == 1, (extra, found)
    return found[0].specifier


def test_airflow_and_mxnet_extras_cannot_resolve_together():
    """mxnet pins numpy<1.24; the airflow extra's floor excludes every such numpy, so a
    resolver refuses ``recforge[airflow,mxnet]`` instead of moving numpy back to 1.23. uv is
    told so too, and the Airflow environment's pinned numpy is inside its floor."""
    from pathlib import Path

    from packaging.version import Version

    airflow, mxnet = _numpy_in("airflow"), _numpy_in("mxnet")
    releases = [Version(f"{major}.{minor}.{patch}") for major, minors in ((1, 40), (2, 10))
                for minor in range(minors) for patch in range(6)]
    assert [v for v in releases if v in airflow and v in mxnet] == []
    assert any(v in mxnet for v in releases) and any(v in airflow for v in releases)
    pinned = next(line.split("==")[1] for line in (
        Path(__file__).parents[1] / "constraints.txt").read_text().splitlines()
        if line.startswith("numpy=="))
    assert Version(pinned) in airflow
    assert [{"extra": "airflow"}, {"extra": "mxnet"}] in _project()["tool"]["uv"]["conflicts"]


@pytest.mark.packaging
def test_uv_refuses_both_extras_and_resolves_each(tmp_path):
    """The real resolver, offline from uv's cache: each extra resolves with its own
    constraints; both together fail on numpy."""
    import subprocess
    import sys
    from pathlib import Path

    uv = Path(sys.executable).with_name("uv")
    if not uv.exists():
        pytest.skip("uv is not installed (make venv installs it into .venv)")
    repo = Path(__file__).parents[1]

    def compile_(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(uv), "pip", "compile", str(repo / "pyproject.toml"), "--offline", "-q",
             "--python-version", "3.11", "--no-header", *args],
            capture_output=True, text=True, timeout=300, cwd=tmp_path)

    both = compile_("--extra", "airflow", "--extra", "mxnet")
    assert both.returncode != 0 and "numpy>=1.26" in both.stderr and \
        "numpy<1.24" in both.stderr, both.stderr
    for extra, constraints, numpy in (("airflow", "constraints.txt", "numpy==2."),
                                      ("mxnet", "constraints-mxnet.txt", "numpy==1.2")):
        alone = compile_("--extra", extra, "-c", str(repo / constraints))
        assert alone.returncode == 0, alone.stderr[-2000:]
        assert any(line.startswith(numpy) for line in alone.stdout.splitlines()), extra
