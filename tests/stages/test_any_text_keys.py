"""Keys and class names holding any character S3 allows — U+0085 (a mis-decoded cp1252
"…"), U+2028, U+2029, and the characters a URL gives a meaning (``#``, ``?``, ``%``) —
build like any other: every JSON-lines file round-trips them and each object is fetched by
its own key, so the night neither fails nor loses or mixes up an object."""

from __future__ import annotations

from recforge import run_state, storage
from recforge.format import names
from recforge.spec import parse_spec
from tests.common.detection import build
from tests.common.helpers import jpeg

KEYS = ("caf\x85s/one\u2028line.jpg", "caf\x85s/two\u2029para.jpg", "dogs/a\x85b.jpg",
        "dogs/plain.jpg", "dogs/broken\u2028.jpg", "dogs/photo#1.jpg", "dogs/photo#2.jpg",
        "dogs/why?.jpg", "dogs/100%25.jpg", "c#/x.jpg")


def test_line_breaking_characters_in_keys_and_class_names_build(bucket):
    src = f"s3://{bucket}/raw"
    s3 = storage.s3_client()
    for i, key in enumerate(KEYS):  # by boto3: each object under its own key
        data = jpeg(32, 40, seed=i)
        s3.put_object(Bucket=bucket, Key=f"raw/{key}",
                      Body=data[:40] if "broken" in key else data)
    spec = parse_spec({"name": "text", "source": {"uri": src},
                       "publish": {"uri": f"s3://{bucket}/datasets"},
                       "splits": {"val_ratio": 0.0}, "pack": {"resize": 0}})
    run = build(spec, "any-text")
    records = storage.read_jsonl(storage.join(run_state.out(run), names.RECORDS))
    assert sorted(r["source_key"] for r in records) == sorted(k for k in KEYS
                                                              if "broken" not in k)
    assert len({r["source_sha256"] for r in records}) == len(records)  # none read twice
    classes = storage.read_json(storage.join(run_state.out(run), names.CLASSES))["classes"]
    assert classes == ["c#", "caf\x85s", "dogs"]
    refused = storage.read_jsonl(storage.join(run_state.out(run), names.QUARANTINE))
    assert [(e["source_key"], e["reason"]) for e in refused] == [("dogs/broken\u2028.jpg",
                                                                 "truncated")]
    summary = storage.read_json(storage.join(run_state.out(run), names.SUMMARY))
    assert (summary["listed"], summary["packed"], summary["quarantined"]) == (
        len(KEYS), len(KEYS) - 1, 1)
    lst = storage.get_bytes(storage.join(run_state.out(run), names.lst("train"))).decode()
    assert lst.count("\n") == len(KEYS) - 1
