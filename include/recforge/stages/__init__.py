"""The pipeline's stages: one module per DAG task, its entry point named like the task.

``recforge.stages.<task_id>.<task_id>(run[, shard_id])`` is what the Airflow task of that id
runs (through ``recforge.orchestration``) and what ``recforge.pipeline.build`` runs without
Airflow. Each stage dispatches on ``spec.task`` itself, so callers never choose a module by
task kind. :data:`STAGES` is the one list of them, in pipeline order; modules are imported
only when a stage runs (Airflow parses DAGs without loading any engine).

In pipeline order: ``ingest.py`` (list the source), ``flatten.py`` (objects → items),
``remap_labels.py`` (class names → ids), ``split.py`` (splits and pack shards),
``convert_masks.py`` (a shard's masks, segmentation only), ``pack.py`` (one shard),
``merge.py`` (shards → one split each), ``validate.py`` (the structural check),
``benchmark.py`` (the loader benchmark), ``quality_gate.py`` (the checklist and the report),
``publish.py`` (the versioned release).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from recforge.kinds import NAMES as TASK_KINDS


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: its task id, whether it runs once per shard, the spec task kinds
    it exists for, and the consecutive stages it runs ``beside`` in the DAG, the first of
    them before it in the list: it follows the first one's upstream stage, and the stage
    after the last one waits for it too."""

    task_id: str
    per_shard: bool = False
    kinds: tuple[str, ...] = TASK_KINDS
    beside: tuple[str, ...] = ()

    def runs_for(self, kind: str) -> bool:
        return kind in self.kinds


STAGES: tuple[Stage, ...] = (
    Stage("ingest"),
    Stage("flatten"),
    Stage("remap_labels"),
    Stage("split"),
    Stage("convert_masks", per_shard=True, kinds=("segmentation",)),
    Stage("pack", per_shard=True),
    Stage("merge"),
    Stage("validate"),
    Stage("benchmark", beside=("validate", "quality_gate")),
    Stage("quality_gate"),
    Stage("publish"),
)
BY_TASK_ID = {s.task_id: s for s in STAGES}


def stage(task_id: str) -> Stage:
    try:
        return BY_TASK_ID[task_id]
    except KeyError:
        raise KeyError(f"no pipeline stage {task_id!r}; stages: {list(BY_TASK_ID)}") from None


def module(task_id: str) -> ModuleType:
    """The stage's module, ``recforge.stages.<task_id>`` (imported now)."""
    stage(task_id)
    return importlib.import_module(f"{__name__}.{task_id}")


def entry(task_id: str) -> Callable:
    """The stage's entry point, ``recforge.stages.<task_id>.<task_id>`` (imported now)."""
    return getattr(module(task_id), task_id)


def stages_for(kind: str) -> list[Stage]:
    """The stages a spec of this task kind runs, in order."""
    return [s for s in STAGES if s.runs_for(kind)]


def upstream(kind: str) -> dict[str, set[str]]:
    """task id → the task ids it waits for, in the DAG of a spec of this task kind: each
    stage waits for the one before it, a stage ``beside`` others waits for the first one's
    upstream instead, and the stage after the last of them waits for it too."""
    waits: dict[str, set[str]] = {}
    before: set[str] = set()
    joining: dict[str, set[str]] = {}  # task id → the stages beside it that end with it
    for s in stages_for(kind):
        if s.beside:
            waits[s.task_id] = set(waits[s.beside[0]])
            if s.beside[-1] in waits:  # listed after the run it is beside
                before = before | {s.task_id}
            else:
                joining.setdefault(s.beside[-1], set()).add(s.task_id)
        else:
            waits[s.task_id] = before
            before = {s.task_id} | joining.pop(s.task_id, set())
    return waits
