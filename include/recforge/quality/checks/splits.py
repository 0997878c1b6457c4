"""Checklist items 12a-c, split independence: ``split_keys`` (no source key in two splits),
``split_content`` (no identical content, by SHA-256, in two splits) and ``near_duplicates``
(no near-duplicate, by dHash, across splits).

One module for the three: they are one item of the checklist (12), read the cross-split
columns ``quality.frames`` computes, name pairs rather than rows as evidence, and have their
own advice when the spec keeps the source's own splits (``splits.from: source``), where a
leak across the splits is the publisher's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from recforge.quality.checks.base import MAX_EVIDENCE, CheckDef, Plan

if TYPE_CHECKING:
    from recforge.quality.checks.base import Frames
    from recforge.spec.quality import QualitySpec


def plan_keys(p: Plan) -> None:
    import great_expectations.expectations as gxe

    p.add("records", "source key in one split only", gxe.ExpectColumnValuesToBeInSet,
          column="source_key_splits", value_set=[1])


def observed_keys(frames: Frames, quality: QualitySpec, num_classes: int | None) -> str:
    rec = frames["records"]
    n = int(rec.loc[rec["source_key_splits"] > 1, "source_key"].nunique())
    return f"{n} source keys in more than one split"


def evidence_keys(frames: Frames) -> list[str]:
    rec = frames["records"]
    return [f"{key}: in " + ", ".join(g["record"]) for key, g in
            list(rec[rec["source_key_splits"] > 1].groupby("source_key"))[:MAX_EVIDENCE]]


def plan_content(p: Plan) -> None:
    import great_expectations.expectations as gxe

    p.add("records", "SHA-256 of the source in one split only",
          gxe.ExpectColumnValuesToBeInSet, column="content_splits", value_set=[1])


def observed_content(frames: Frames, quality: QualitySpec, num_classes: int | None) -> str:
    rec = frames["records"]
    n = len(rec.loc[rec["content_splits"] > 1, ["sha_hi", "sha_lo"]].drop_duplicates())
    return f"{n} identical images (SHA-256) in more than one split"


def evidence_content(frames: Frames) -> list[str]:
    rec = frames["records"]
    dup = rec[rec["content_splits"] > 1].groupby(["sha_hi", "sha_lo"])
    return [f"sha256 {int(hi):016x}"[:19] + "…: " + ", ".join(
        f"{r.record} ({r.source_key})" for r in g.itertuples())
        for (hi, _), g in list(dup)[:MAX_EVIDENCE]]


def plan_near(p: Plan) -> None:
    import great_expectations.expectations as gxe

    if "near_dup_bits" in p.frames["records"].columns:
        t = p.quality.near_duplicate_hamming
        p.add("records", f"no record of another split within {t} bits",
              gxe.ExpectColumnValuesToBeNull, column="near_dup_bits")
    else:
        p.skip("records.jsonl has no phash column")


def observed_near(frames: Frames, quality: QualitySpec, num_classes: int | None) -> str:
    hits = frames["records"]["near_dup_bits"].dropna()
    closest = f", closest {hits.min():g} bits" if len(hits) else ""
    return (f"{len(hits)} records with a near-duplicate in another split "
            f"(<= {quality.near_duplicate_hamming} bits){closest}")


def evidence_near(frames: Frames) -> list[str]:
    """Each pair once, closest first."""
    rec = frames["records"]
    out: list[str] = []
    if "near_dup_bits" not in rec:
        return out
    seen = set()
    for r in rec[rec["near_dup_bits"].notna()].sort_values("near_dup_bits").itertuples():
        pair = tuple(sorted([r.record, r.near_dup_of.split(" ")[0]]))
        if pair in seen:
            continue
        seen.add(pair)
        out.append(f"{r.record} ({r.source_key}) ~ {r.near_dup_of}: {r.near_dup_bits:g} bits")
        if len(out) == MAX_EVIDENCE:
            break
    return out


KEYS = CheckDef(
    "split_keys", plan_keys, observed_keys, evidence=evidence_keys,
    advice=("one source key is in two splits: validation scores count images the model "
            "trained on", "rebuild; keys are assigned to one split by their hash"),
    source_split_advice=(
        "the source puts one object in two splits (a list file names it under both), so "
        "validation scores count an image the model trained on",
        "fix the source's split (the list files or split folders) so each object is in one "
        "split"))
CONTENT = CheckDef(
    "split_content", plan_content, observed_content, evidence=evidence_content,
    advice=("byte-identical images sit in two splits (copies under different keys): "
            "validation scores count images the model trained on",
            "delete the duplicate source objects named in the evidence"),
    source_split_advice=(
        "byte-identical images sit in two of the source's own splits (copies under different "
        "keys; public datasets ship some): validation scores count images the model trained "
        "on",
        "keep the official split to compare with published results, or delete one copy of "
        "each pair named in the evidence from the source"))
NEAR_DUPLICATES = CheckDef(
    "near_duplicates", plan_near, observed_near, evidence=evidence_near,
    advice=("images in different splits look almost the same (a perceptual hash within a few "
            "bits: crops, resizes or re-encodes of one photo), so validation scores on them "
            "are optimistic",
            "look at the pairs under Near-duplicates and delete (or rename, so it hashes to "
            "the other split) one image of each pair that is a copy"),
    source_split_advice=(
        "images in two of the source's own splits look almost the same (a perceptual hash "
        "within a few bits: crops, resizes or re-encodes of one photo; public datasets ship "
        "some), so validation scores on them are optimistic",
        "keep the official split to compare with published results, or look at the pairs "
        "under Near-duplicates and delete one image of each pair that is a copy from the "
        "source"))
CHECKS = (KEYS, CONTENT, NEAR_DUPLICATES)
