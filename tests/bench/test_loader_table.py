"""The loaders' table (``recforge.bench.loaders``): every row's module imports in the
interpreter it names and has the one entry, every loader the spec accepts has a row, and
each row's task kinds are real kinds whose ``bench.options.loader`` it reads."""

from __future__ import annotations

import inspect
import subprocess
import typing

import pytest

from recforge import kinds
from recforge.bench import benchmark, environment, loaders
from recforge.bench.records import LoaderBenchError
from recforge.spec.bench import BenchOptions, BenchSpec

CORE_ROWS = [r for r in loaders.LOADERS if r.interpreter == loaders.CORE]
MXNET_ROWS = [r for r in loaders.LOADERS if r.interpreter == loaders.MXNET]
SIGNATURE = ["prefix", "root", "opts", "fetched", "sizes", "started", "quiet"]


def _spec_choices(model, field: str) -> set[str]:
    return set(typing.get_args(model.model_fields[field].annotation))


def test_every_row_names_an_interpreter_and_is_one_of_them():
    assert {r.interpreter for r in loaders.LOADERS} == {loaders.CORE, loaders.MXNET}
    assert len({r.module for r in loaders.LOADERS}) == len(loaders.LOADERS)


@pytest.mark.parametrize("row", CORE_ROWS, ids=lambda r: r.module)
def test_a_core_row_imports_here_with_the_one_signature(row):
    assert list(inspect.signature(row.entry()).parameters) == SIGNATURE


def _mxnet_python() -> str:
    try:
        return environment.mxnet_python()
    except environment.MXNetEnvironmentMissing as exc:
        pytest.skip(f"no MXNet environment to import the MXNet rows in: {exc}")


@pytest.mark.parametrize("row", MXNET_ROWS, ids=lambda r: r.module)
def test_an_mxnet_row_imports_in_the_mxnet_environment_with_the_one_signature(row):
    code = ("import inspect, importlib; "
            f"m = importlib.import_module({row.module!r}); "
            "print(','.join(inspect.signature(m.measure).parameters))")
    proc = subprocess.run([_mxnet_python(), "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().split(",") == SIGNATURE


def test_every_loader_the_spec_accepts_has_rows():
    names = _spec_choices(BenchSpec, "loader")
    assert set(loaders.CHOICES) == names and benchmark.LOADERS == loaders.CHOICES
    assert set(loaders.NAMES) == names - {"auto"} - set(loaders.BESIDE)
    assert {n for beside in loaders.BESIDE.values() for n in beside} <= set(loaders.NAMES)
    for name in loaders.NAMES:  # each field of its floors is a BenchSpec field
        assert loaders.one(name).floors in BenchSpec.model_fields


def test_mxnets_rows_read_every_options_loader_the_spec_accepts():
    for options_loader in _spec_choices(BenchOptions, "loader"):
        row = loaders.row("mxnet", options_loader)
        assert row.serves(options_loader), options_loader
        assert row.interpreter == loaders.MXNET


@pytest.mark.parametrize("row", loaders.LOADERS, ids=lambda r: r.module)
def test_a_rows_kinds_are_task_kinds_and_what_it_reads(row):
    assert row.kinds and set(row.kinds) <= set(kinds.NAMES)
    for k in row.kinds:
        assert loaders.kind_of(kinds.kind(k).loader) is kinds.kind(k)


def test_a_row_reads_the_options_loader_of_each_of_its_kinds():
    assert loaders.one("dali").reads == ("image_record_iter", "detection")
    assert loaders.row("mxnet", "segmentation").reads == ("segmentation",)
    assert loaders.one("torch").reads == ("image_record_iter",)


def test_a_loader_asked_for_a_kind_it_does_not_read_refuses_with_the_fix():
    torch = loaders.row("torch", "segmentation")
    assert torch.module == "recforge.bench.torch_loader"
    with pytest.raises(LoaderBenchError, match="bench.loader torch measures classification "
                       "splits; options.loader is 'segmentation': set bench.loader: mxnet"):
        torch.refuse("segmentation")
    loaders.one("dali").refuse("detection")  # reads it: no error
    with pytest.raises(ValueError, match="no loader 'nope'"):
        loaders.rows("nope")
