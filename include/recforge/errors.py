"""The failures that end a run: deterministic, so retrying cannot fix them.

Every kind derives from :class:`RecforgeFailure`. The Airflow edge
(``recforge.orchestration``) catches the base class and fails the task at once, without
retries: back-off would only delay the alert. Anything else (S3, network, a crashed worker)
is treated as transient and retried. A new failure kind joins the rule by deriving from the
base class; nothing else has to list it.

A module of an optional extra that is not installed is one of them too, :class:`MissingExtra`:
code that imports one runs under :func:`needs_extra`, which names the extra to install (the
CLI runs every command under it).
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator


class RecforgeFailure(Exception):
    """A deterministic failure: the input, the spec or the output is wrong; fix, then re-run.

    ``result`` (optional) is a small dict the alert can quote (the quality gate's result).
    """

    result: dict | None = None


class SpecError(RecforgeFailure, ValueError):
    """A dataset spec is invalid; the message names the file, the field and the fix."""


class SourceEmpty(RecforgeFailure):
    """The source holds nothing to pack (no objects, or no usable image/mask pair)."""


class PlanTooLarge(RecforgeFailure):
    """The dataset cannot be planned into as many shards as the deployment can map."""


class LabelMapError(RecforgeFailure):
    """The class set changed in a way that would silently change label ids."""


class ReconciliationError(RecforgeFailure):
    """Some listed object is neither packed nor quarantined, or is counted twice."""


class ValidationFailed(RecforgeFailure):
    """The dataset is structurally broken; the message lists the first failures."""


class VersionExistsError(RecforgeFailure):
    """The target version was published by another run; versions are immutable."""


class ChecksumMismatch(RecforgeFailure):
    """A staged or published object is not the bytes its writer recorded (size, SHA-256 or
    ETag differ), or has no recorded checksum; the message names the file."""


class StoreGuaranteeMissing(RecforgeFailure):
    """The object store does not honour a guarantee publishing rests on (a conditional
    write); the message names the store, the guarantee and the choices."""


# The optional parts of the recforge distribution (pyproject.toml's extras) and the modules
# each one brings that recforge imports; a missing one is reported with the extra to install.
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "airflow": ("airflow",),  # Airflow and the providers the DAGs use (airflow.providers.*)
    "lineage": ("airflow.providers.openlineage", "openlineage"),
    "dali": ("nvidia.dali",),
    "torch": ("torch", "torchvision"),
    "mxnet": ("mxnet",),
    "dev": ("moto", "skimage"),
}
# where ``pip install 'recforge[<extra>]'`` alone is the wrong advice
EXTRA_HOW = {
    "mxnet": "MXNet needs numpy < 1.24, so it goes into an environment of its own: "
             "python3.11 -m venv mxnet-venv && mxnet-venv/bin/pip install 'recforge[mxnet]', "
             "then RECFORGE_MXNET_PYTHON=mxnet-venv/bin/python (docs/operations.md)",
}


class MissingExtra(RecforgeFailure, ModuleNotFoundError):
    """A module of an optional extra is not installed; the message names the extra and the
    install command. Still a ``ModuleNotFoundError``, so ``except ImportError`` holds."""

    def __init__(self, what: str, extra: str, module: str) -> None:
        how = EXTRA_HOW.get(extra, f"pip install 'recforge[{extra}]'")
        super().__init__(f"{what} needs the '{extra}' extra: {how} (missing module {module})",
                         name=module)
        self.what, self.extra = what, extra

    def __reduce__(self):  # crosses process pools as itself
        return type(self), (self.what, self.extra, self.name)


def extra_for(module: str | None) -> str | None:
    """The extra that installs ``module`` (a dotted name, as in ``ModuleNotFoundError.name``):
    the longest listed module it is or lies under, else a listed module it is a parent of
    (``nvidia`` missing means ``nvidia.dali`` is); None for a module no extra brings."""
    if not module:
        return None
    owners = [(len(m), extra) for extra, mods in EXTRA_MODULES.items() for m in mods
              if module == m or module.startswith(m + ".")]
    if owners:
        return max(owners)[1]
    parents = [extra for extra, mods in EXTRA_MODULES.items() for m in mods
               if m.startswith(module + ".")]
    return parents[0] if parents else None


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None  # imports the parents only
    except ModuleNotFoundError:  # a parent package is missing
        return False
    except ValueError:  # in sys.modules without a spec (__main__, test stand-ins)
        return True


@contextlib.contextmanager
def needs_extra(what: str, *extras: str) -> Iterator[None]:
    """Run a block that needs optional extras; ``what`` names it for the user ("recforge
    demo"). Up front, every module of each named extra must be importable (found, not
    imported), else :class:`MissingExtra` before any work starts. Inside, a
    ``ModuleNotFoundError`` for a module some extra brings (named or not) becomes a
    ``MissingExtra`` naming that extra; any other one passes unchanged."""
    for extra in extras:
        for module in EXTRA_MODULES[extra]:
            if not _importable(module):
                raise MissingExtra(what, extra, module)
    try:
        yield
    except MissingExtra:
        raise
    except ModuleNotFoundError as exc:
        extra = extra_for(exc.name)
        if extra is None:
            raise
        raise MissingExtra(what, extra, exc.name) from exc
