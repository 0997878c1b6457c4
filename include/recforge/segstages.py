"""The segmentation path's stage bodies, each one call from a DAG task or ``pipeline.build``.

Same staging layout as classification (``run.py``), plus ``masks/<shard>/`` where the mask
conversion stage leaves its single-channel PNGs, ``converted.jsonl``, ``quarantine.jsonl``
and ``report.json`` for inspection. Order::

    ingest → flatten_pairs → write_classes → split (plan) → convert_masks_shard (mapped)
    → pack_seg_shard (mapped) → merge (+ merge_mask_split) → validate → publish
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from recforge import quarantine, storage
from recforge.masks import MaskConverter
from recforge.quarantine import QuarantineEntry
from recforge.run import Run
from recforge.segpairs import PairRule, pair_by_list, pair_by_rule

log = logging.getLogger(__name__)


def masks_uri(run: Run, shard_id: str, *parts: str) -> str:
    return run.uri("masks", shard_id, *parts)


def flatten_pairs(run: Run, rule: PairRule | None = None,
                  pair_list_uri: str | None = None) -> dict:
    """Stage 2 for segmentation: accepted objects → pair items (``run.items``) + quarantine."""
    rows = storage.read_jsonl(run.ingested)
    if (rule is None) == (pair_list_uri is None):
        raise ValueError("give exactly one of a pair rule or a pair list")
    if rule is not None:
        items, refused = pair_by_rule(rows, rule)
    else:
        items, refused = pair_by_list(rows, storage.get_bytes(pair_list_uri).decode("utf-8"))
    if not items:
        raise RuntimeError(f"no image/mask pairs under {run.spec.source.uri}; check the pair "
                           f"rule ({rule}) against the quarantine report")
    storage.write_jsonl(run.items, items)
    storage.put_bytes(run.stage_quarantine("flatten"), quarantine.dumps(refused))
    log.info("pairs: %d pairs, %d objects quarantined", len(items), len(refused))
    return {"items": len(items), "quarantined": len(refused)}


def write_classes(run: Run, converter: MaskConverter) -> dict:
    """Stage 3 for segmentation: ``classes.json`` comes from the label definition."""
    doc = converter.classes_document()
    storage.write_json(run.classes, doc)
    return {"num_classes": doc["num_classes"], "ignore_index": doc["ignore_index"]}


def convert_masks_shard(run: Run, shard_id: str, converter: MaskConverter,
                        compression: int = 1) -> dict:
    """The RGB→ID stage, mapped over shards: masks of ``shard_id``'s plan → staging PNGs."""
    from recforge.masks import convert_rows

    rows = storage.read_jsonl(run.shard_plan(shard_id))
    summary = convert_rows(rows, run.spec.source.uri, masks_uri(run, shard_id), converter,
                           compression=compression)
    log.info("masks %s: converted %d, quarantined %d, %d unknown pixels", shard_id,
             summary["converted"], summary["quarantined"], summary["unknown_pixels"])
    return {"shard": shard_id, **{k: summary[k] for k in ("converted", "quarantined",
                                                          "unknown_pixels", "mpix_per_s")}}


def pack_seg_shard(run: Run, shard_id: str, opts) -> dict:
    """Pack a shard's converted pairs (``segpack.SegPackOptions``) and upload its files."""
    from recforge.segpack import SEG_SHARD_FILES, pack_pair_rows

    rows = storage.read_jsonl(masks_uri(run, shard_id, "converted.jsonl"))
    with tempfile.TemporaryDirectory(prefix=f"recforge-{shard_id}-") as tmp:
        counts = pack_pair_rows(rows, run.spec.source.uri, Path(tmp), opts)
        for name in SEG_SHARD_FILES:
            storage.upload(Path(tmp) / name, run.shard_output(shard_id, name))
    log.info("shard %s: packed %d pairs, quarantined %d objects", shard_id, counts["packed"],
             counts["quarantined"])
    return {"shard": shard_id, **counts}


def mask_stage_quarantine(run: Run, shard_ids: list[str]) -> list[QuarantineEntry]:
    """Entries the mask stage refused (both keys per pair), for merge's reconciliation."""
    out: list[QuarantineEntry] = []
    for sid in shard_ids:
        out += quarantine.loads(storage.get_bytes(masks_uri(run, sid, "quarantine.jsonl")))
    return out


def packed_keys(records: list[dict]) -> list[str]:
    """Source keys a segmentation record accounts for: its image and its mask."""
    return [k for r in records for k in (r["source_key"], r["mask_key"])]


def merge_mask_split(run: Run, split: str, shard_ids: list[str], workdir: Path) -> int:
    """Download the shards' ``part_mask.*``, write and upload ``<split>_mask.rec/.idx``."""
    from recforge.segpack import merge_mask_parts

    dirs = []
    for sid in shard_ids:
        d = workdir / f"mask-{sid}"
        for name in ("part_mask.rec", "part_mask.idx"):
            storage.download(run.shard_output(sid, name), d / name)
        dirs.append(d)
    out = workdir / "mask-out"
    out.mkdir(parents=True, exist_ok=True)
    n = merge_mask_parts(dirs, out, split)
    for ext in ("rec", "idx"):
        storage.upload(out / f"{split}_mask.{ext}", run.output(f"{split}_mask.{ext}"))
    return n



# --------------------------------------------------------------------------------------
# Spec-driven entry points: ``stage(run[, shard_id])``, what the DAG and pipeline.build call.


def converter_for(spec) -> MaskConverter:
    """The spec's label definition as a converter; relative colour-map paths are resolved
    against the specs folder. Cheap to rebuild in every task."""
    from recforge.spec import specs_dir

    seg = spec.segmentation
    colormap = seg.colormap
    if colormap and colormap not in ("cityscapes", "voc") and not Path(colormap).is_absolute():
        colormap = str(specs_dir() / colormap)
    return MaskConverter.from_config(
        colormap, target=seg.target, id_map=seg.id_map, ignore_index=seg.ignore_index,
        on_unknown=seg.on_unknown, collision_rule=seg.collision_rule,
        resolve=seg.resolve or None)


def flatten_stage(run: Run) -> dict:
    p = run.spec.source.pairs
    if p.layout == "pair_list":
        return flatten_pairs(run, pair_list_uri=p.list_uri)
    return flatten_pairs(run, rule=PairRule(p.images, p.masks, p.image_suffix, p.mask_suffix))


def classes_stage(run: Run) -> dict:
    """``classes.json`` from the label definition, checked against the published version:
    a changed class list would silently change what every mask value means, so it fails
    the run unless ``labels.allow_renumbering`` is set."""
    from recforge import publish
    from recforge.labels import LabelMapError

    result = write_classes(run, converter_for(run.spec))
    latest = publish.read_latest(run.spec)
    if latest:
        before = storage.read_json(publish.version_uri(run.spec, latest["version"],
                                                       "classes.json"))
        now = storage.read_json(run.classes)
        if before.get("classes") != now["classes"] and not run.spec.labels.allow_renumbering:
            raise LabelMapError(
                f"the label definition now gives classes {now['classes']}, but published "
                f"version {latest['version']} has {before.get('classes')}; mask values would "
                "change meaning. Restore the label definition, or set "
                "labels.allow_renumbering: true to publish the new class list.")
        now["based_on_version"] = latest["version"]
        storage.write_json(run.classes, now)
    return result


def convert_stage(run: Run, shard_id: str) -> dict:
    return convert_masks_shard(run, shard_id, converter_for(run.spec),
                               run.spec.segmentation.mask_compression)


def pack_stage(run: Run, shard_id: str) -> dict:
    from recforge.segpack import SegPackOptions

    opts = SegPackOptions.from_spec(run.spec.pack, run.spec.segmentation.mask_compression)
    return pack_seg_shard(run, shard_id, opts)
