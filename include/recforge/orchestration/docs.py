"""The per-dataset ``doc_md`` a DAG shows in the Airflow UI: what this DAG builds, from where,
to where, when, and against which checklist — from the spec alone (parse time: no I/O)."""

from __future__ import annotations

from recforge import layouts
from recforge.kinds import kind
from recforge.spec import DatasetSpec
from recforge.spec.quality import CHECKS


def schedule_doc(spec: DatasetSpec) -> str:
    """When the DAG runs, in words: the clock, the events, or manual runs only."""
    schedule = spec.schedule
    if schedule is None:
        return "manual runs only (trigger the DAG)"
    if isinstance(schedule, str):
        return (f"`{schedule}` (UTC). Unpausing the DAG starts the latest scheduled run at "
                "once; a run triggered meanwhile waits *queued* until that one ends (one "
                "active run per DAG)")
    events = [f"Asset `{a}` is updated" for a in schedule.asset or ()]
    if schedule.s3_events:
        events.append(f"objects land under the source (S3 event notifications on "
                      f"`{schedule.s3_events.queue}`)")
    clock = f", or on `{schedule.cron}` (UTC)" if schedule.cron else ""
    return (f"when {' or '.join(events)}{clock}; events that arrive during a run start one "
            "more run after it, and a run that finds nothing changed publishes nothing")


def pipeline_doc(specs_dir: str = "the specs folder") -> str:
    """The pipeline description every dataset DAG shares, below its own facts."""
    return f"""
### recforge dataset DAGs

One DAG per dataset spec in `{specs_dir}` (dag_id `recforge__<name>`):

ingest → flatten (the source layout's objects → the items to pack: the Input row above) →
remap labels → split & plan shards → pack (mapped: a shard a task,
balanced groups of shards with `auto`) → merge → validate → quality gate (Great
Expectations, Data Docs), and beside them the loader benchmark (queue `gpu`), whose
results the quality gate waits for before its loader items → publish (versioned,
`latest.json` last) → Asset event. Segmentation specs add an RGB→ID mask
conversion stage mapped like pack, before it. Any failure alerts (email / webhook) as the
spec's `alerts` section says.

Every task body is one call into the `recforge` package; tasks exchange only URIs and
counts through XCom, data moves through the S3 staging prefix of the run. Trigger with
parameters from the UI form to override the source, the publish target or pack options,
to build without publishing (dry run), or to publish even when nothing changed (force
rebuild): a night whose content equals the latest version's packs and publishes nothing.
With OpenLineage configured, the run events name the source prefix (ingest) and the
published version (publish).
"""


# splits.from: source — where each source layout defines its splits
SOURCE_SPLITS = {
    "class_folders": "split folders (`<prefix>/<split>/<class>/…`, names per `splits.folders`)",
    "list": "list files (`source.lists`: one per split, or the split column of `source.list_uri`)",
    "coco": "COCO's `annotations/instances_<split><year>.json` files",
    "voc": "VOC's `ImageSets/Main/<set>.txt` lists (`source.voc.image_sets`)",
}


def _splits(spec: DatasetSpec) -> str:
    """How the splits are made: by a hash of the source key, or kept from the source."""
    sp = spec.splits
    if sp.from_source:
        where = SOURCE_SPLITS.get(spec.source.layout, f"the {spec.source.layout} layout")
        return f"kept from the source (`splits.from: source`): {where}"
    return (f"val {sp.val_ratio}, test {sp.test_ratio}, seed {sp.seed} (by a hash of the "
            "source key)")


def _plain(text: str) -> str:
    """Text shown as written in Markdown: ``<prefix>`` escaped, or the UI drops it as a tag."""
    return text.replace("<", "\\<")


def dag_doc(spec: DatasetSpec, pipeline_doc: str = "") -> str:
    """Markdown: the dataset's facts, then the pipeline description shared by every DAG."""
    root = f"{spec.publish.uri.rstrip('/')}/{spec.name}"
    # what the layout itself says it reads, so the doc follows the layouts (no copy to drift)
    layout = layouts.for_spec(spec)
    labels = f"{spec.task}; {layout.labels(spec)}" + (
        "" if kind(spec.task).masks else  # a mask kind's classes are its label definition's
        "; published ids never change, new classes are appended")
    q = spec.quality
    severities = ", ".join(f"{c.name} {q.severity_of(c.name)}" for c in CHECKS
                           if q.severity_of(c.name) != c.default) or "defaults"
    rows = [
        ("Source", f"`{spec.source.uri}`"),
        ("Input", f"layout `{layout.name}`"
                  + (f" (`{spec.source.pairs.layout}`)" if spec.source.pairs else "")
                  + f": {_plain(layout.expected(spec))}"),
        ("Publishes to", f"`{root}/<version>/`, `latest.json` last; Asset `recforge/{spec.name}`"),
        ("Report", f"`{root}/<version>/report.html` (and in the run's staging `out/`)"),
        ("Schedule", schedule_doc(spec)),
        ("Labels", labels),
        ("Splits", _splits(spec)),
        ("Packing", f"short side {spec.pack.resize or 'kept'} px, {spec.pack.encoding} quality "
                    f"{spec.pack.quality}, " + (
                        "shards sized from the data and the pack slots, several a pack task (auto)"
                        if spec.pack.shard_size == "auto" else
                        f"{spec.pack.shard_size} images per pack task")),
        ("Checklist", f"class balance ≥ {q.class_balance_min_ratio}, near-duplicates within "
                      f"{q.near_duplicate_hamming} bits, decode sample {q.decode_sample}; "
                      f"severities: {severities}"),
        ("Alerts", f"{len(spec.alerts.emails)} email recipient(s)"
                   + (", a webhook" if spec.alerts.webhook_url else "")),
    ]
    table = "\n".join(f"| {k} | {v} |" for k, v in rows)
    head = f"## {spec.name}\n\n{spec.description}\n\n" if spec.description else \
        f"## {spec.name}\n\n"
    return f"{head}| | |\n|---|---|\n{table}\n\n{pipeline_doc.strip()}\n"
