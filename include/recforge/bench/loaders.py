"""The loaders the benchmark measures: one row each in :data:`LOADERS`, the table callers
dispatch through.

A row names the loader's module, the interpreter it runs in and the task kinds it serves.
Every loader module has one entry of one signature::

    measure(prefix, root, opts, fetched, sizes, started, quiet=at_once) -> dict

``root``: the local folder the split's window was fetched into; ``fetched``:
``records.fetch_split``'s answer without ``root``; ``sizes``: the size check over the
whole split from its manifest, or None; ``started``: when the benchmark began; ``quiet``:
blocks until the caller no longer competes for the CPU (called once, before the timed
work). It returns the ``bench.json`` document (``results.bench_document``).

``interpreter``: ``core`` (this process, numpy 2) or ``mxnet`` (the MXNet environment's
child, ``recforge.bench.environment``; its rows are reached through
``recforge.bench.measure:measure``, which looks them up here again). ``name``: the
``bench.loader`` value that measures it (MXNet's loader has a row per module: which one runs
follows ``bench.options.loader``). ``reads``: the ``bench.options.loader`` values it reads,
the ``loader`` of each kind in ``kinds`` (``recforge.kinds``, which imports nothing: the
offline GPU check runs without pydantic).

Adding a loader: its module with ``measure``, its row here, and its name in the spec's
``bench.loader`` choices (``recforge.spec.bench``) with its floors field.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from recforge.kinds import KINDS, kind

CORE = "core"  # this interpreter
MXNET = "mxnet"  # the MXNet environment's (recforge.bench.environment)


def at_once() -> None:
    """``quiet`` for a caller that never competes for the CPU: no wait."""


@dataclass(frozen=True)
class Loader:
    """One loader: see the module docstring for the fields."""

    name: str
    module: str
    interpreter: str
    kinds: tuple[str, ...]
    label: str  # how a violation of its own floors is prefixed, measured beside MXNet's
    floors: str  # the ``BenchSpec`` field of its floors
    requires: str  # the package its interpreter must import
    refusal: str = ""  # why it does not read an ``options.loader`` (``{loader!r}``)

    @property
    def reads(self) -> tuple[str, ...]:
        """The ``bench.options.loader`` values it reads: its kinds' loaders."""
        return tuple(kind(k).loader for k in self.kinds)

    def serves(self, options_loader: str) -> bool:
        """Whether it reads splits of ``bench.options.loader: options_loader``."""
        return options_loader in self.reads

    def refuse(self, options_loader: str) -> None:
        """``LoaderBenchError`` with the fix when it does not read ``options_loader``."""
        if not self.serves(options_loader):
            from recforge.bench.records import LoaderBenchError

            raise LoaderBenchError(self.refusal.format(loader=options_loader))

    @property
    def target(self) -> str:
        """``"module:measure"``, as ``environment.call`` names a function."""
        return f"{self.module}:measure"

    def entry(self) -> Callable[..., dict]:
        """Its ``measure`` (the module imported now)."""
        return importlib.import_module(self.module).measure


LOADERS: tuple[Loader, ...] = (
    Loader("mxnet", "recforge.bench.image_record_iter", MXNET, ("classification", "detection"),
           "MXNet", "floors", "mxnet"),
    Loader("mxnet", "recforge.bench.segmentation", MXNET, ("segmentation",),
           "MXNet", "floors", "mxnet"),
    Loader("dali", "recforge.bench.dali", CORE, ("classification", "detection"),
           "DALI", "dali_floors", "nvidia.dali",
           "bench.loader dali/both measures classification and detection splits; "
           "options.loader is {loader!r} (a segmentation split's masks are a second .rec "
           "DALI's reader does not keep aligned): set bench.loader: mxnet for this dataset"),
    Loader("torch", "recforge.bench.torch_loader", CORE, ("classification",),
           "PyTorch", "torch_floors", "torch",
           "bench.loader torch measures classification splits; options.loader is "
           "{loader!r}: set bench.loader: mxnet (or auto) for this dataset"),
)

NAMES: tuple[str, ...] = tuple(dict.fromkeys(r.name for r in LOADERS))
# the ``bench.loader`` values that are no single loader: what each measures beside MXNet's
# (``all``: those installed) and ``auto``, picked per host (``recforge.bench.gpu_support``)
BESIDE: dict[str, tuple[str, ...]] = {"both": ("dali",), "all": ("dali", "torch")}
CHOICES: tuple[str, ...] = ("auto", "mxnet", "dali", "both", "torch", "all")


def rows(name: str) -> tuple[Loader, ...]:
    """The rows ``bench.loader: name`` measures with (MXNet's has one per module)."""
    found = tuple(r for r in LOADERS if r.name == name)
    if not found:
        raise ValueError(f"no loader {name!r}; loaders: {list(NAMES)}")
    return found


def row(name: str, options_loader: str) -> Loader:
    """The row of ``name`` that reads ``options_loader``'s splits; where none does, the one
    row of ``name``, whose ``measure`` refuses in its own words (``Loader.refuse``) once it
    has said whether it is installed."""
    candidates = rows(name)
    return next((r for r in candidates if r.serves(options_loader)), candidates[0])


def one(name: str) -> Loader:
    """The first row of ``name`` (its label, floors and package are the same in each)."""
    return rows(name)[0]


def kind_of(options_loader: str):
    """The task kind (``recforge.kinds.Kind``) whose splits ``options_loader`` reads."""
    return next(k for k in KINDS.values() if k.loader == options_loader)
