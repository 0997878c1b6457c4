"""Synthetic inputs at ImageNet size and beyond, for tests and ``benchmarks/bench_scale.py``.

Real photo hashes are not uniform: bursts of near-identical shots share a hash up to a few
bits, flat and dark images collapse to a handful of values, and each bit of a dHash is set
with its own probability. :func:`clustered_hashes` imitates that, so the near-duplicate
search is measured on the buckets it meets in practice, not on the easy uniform case.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

SPREAD = 0x9E3779B97F4A7C15F39CC0605CEDC835  # odd: i -> i * SPREAD mod 2^128 is one-to-one


def clustered_hashes(n: int, seed: int = 0, burst: int = 20, flat: float = 0.005
                     ) -> tuple[np.ndarray, np.ndarray]:
    """``n`` dHashes as uint64 and their cluster id: clusters of 1..``2*burst`` near-identical
    hashes (0-3 bits flipped from the cluster's centre), centres with a bias per bit (each bit
    set with a probability in [0.15, 0.85]), and a share ``flat`` of flat images on 8 values."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 2 * burst, size=2 * (n // burst) + 1)  # enough for n
    cluster = np.repeat(np.arange(len(sizes)), sizes)[:n]
    sizes = sizes[:cluster[-1] + 1]
    p = rng.uniform(0.15, 0.85, size=64)
    bits = rng.random((len(sizes), 64)) < p
    centres = np.packbits(bits, axis=1).view(">u8").ravel().astype(np.uint64)
    hashes = centres[cluster]
    for _ in range(3):  # up to 3 flipped bits per member
        flip = rng.random(n) < 0.5
        hashes[flip] ^= np.uint64(1) << rng.integers(0, 64, size=int(flip.sum())).astype(np.uint64)
    flat_rows = rng.random(n) < flat
    hashes[flat_rows] = rng.integers(0, 8, size=int(flat_rows.sum())).astype(np.uint64)
    order = rng.permutation(n)  # clusters spread over the dataset, as listing order does
    return hashes[order], cluster[order]


def write_records(root: Path, n: int, classes: int = 1000, seed: int = 0,
                  val: float = 0.04, test: float = 0.0, idx: bool = False) -> None:
    """A pack-shaped ``records.jsonl`` (and ``classes.json``; with ``idx`` one ``.idx`` per
    split) of ``n`` records with clustered dHashes; no ``.rec`` files. Splits by record:
    ``val`` and ``test`` shares. Written as text directly (json.dumps per row is the slow
    part at 10 M)."""
    rng = np.random.default_rng(seed)
    hashes, _ = clustered_hashes(n, seed)
    names = [f"n{i:08d}" for i in range(classes)]
    label = rng.integers(0, classes, size=n)
    width = rng.integers(256, 600, size=n)
    u = rng.random(n)
    split = np.where(u < val, "val", np.where(u < val + test, "test", "train"))
    keys = {"train": 0, "val": 0, "test": 0}
    idx_files = {s: open(root / f"{s}.idx", "w") for s in keys} if idx else {}
    try:
        with open(root / "records.jsonl", "w") as f:
            for i in range(n):
                s, c, h = str(split[i]), int(label[i]), int(hashes[i])
                k = keys[s]
                keys[s] += 1
                src = f"{names[c]}/x_{i}.JPEG"
                f.write(
                    f'{{"channels": 3, "class_name": "{names[c]}", "decode_status": "ok", '
                    f'"height": 256, "key": {k}, "label": {c}, "length": 40000, '
                    f'"name": "{src}", "offset": {k * 40008}, "phash": "{h:016x}", '
                    f'"source_etag": "{i:032x}", "source_key": "{src}", '
                    f'"source_sha256": "{(i * SPREAD + 1) % 2**128:032x}{i:032x}", "split": "{s}", '
                    f'"width": {int(width[i])}}}\n')
                if idx:
                    idx_files[s].write(f"{k}\t{k * 40008}\n")
    finally:
        for fh in idx_files.values():
            fh.close()
    for s, count in keys.items():
        if idx and not count:
            (root / f"{s}.idx").unlink()
    (root / "classes.json").write_text(json.dumps({"classes": names, "num_classes": classes}))


def write_items(root: Path, n: int, classes: int = 1000) -> None:
    """A flatten-shaped ``items.jsonl`` of ``n`` items (what ``split`` plans)."""
    with open(root / "items.jsonl", "w") as f:
        for i in range(n):
            c = f"n{i % classes:08d}"
            f.write(f'{{"class_name": "{c}", "etag": "{i:032x}", "name": "{c}/x_{i}.JPEG", '
                    f'"size": {40000 + i % 9000}, "source_key": "{c}/x_{i}.JPEG"}}\n')


def bench_spec(publish: str):
    """The smallest spec whose ``Run`` stages under ``<publish>``'s staging."""
    from recforge.spec import parse_spec

    return parse_spec({"name": "bench", "source": {"uri": f"{publish}-raw"},
                       "publish": {"uri": publish}})


def write_shard(work: Path, first: int, n: int, payload: int, rng) -> list[str]:
    """One pack task's shard files in ``work``: ``n`` train records (keys ``first``…) of
    ``payload`` random bytes, ``.idx``, ``.lst``, ``records.jsonl`` and an empty quarantine;
    returns its source keys."""
    from recforge.format import names, recordio

    work.mkdir(parents=True, exist_ok=True)
    part = names.SHARD_PART
    block = rng.bytes(payload + 4096)
    keys, lst, rows = [], [], []
    with recordio.RecordWriter(work / names.rec(part), work / names.idx(part)) as w:
        for key in range(first, first + n):
            start = (key * 4) % 4096
            offset = w.write(key, recordio.pack_image_record(key % 1000, key,
                                                             block[start:start + payload]))
            c = f"n{key % 1000:08d}"
            src = f"{c}/x_{key}.JPEG"
            keys.append(src)
            lst.append(names.lst_line(key, key % 1000, src))
            rows.append(  # json.dumps(sort_keys=True)'s text, written directly (10 M rows)
                f'{{"channels": 3, "class_name": "{c}", "height": 256, "key": {key}, '
                f'"label": {key % 1000}, "length": {payload + 24}, "offset": {offset}, '
                f'"phash": "{"0" * 16}", "source_key": "{src}", "source_sha256": '
                f'"{"0" * 64}", "split": "train", "width": 320}}\n')
    (work / names.lst(part)).write_text("".join(lst))
    (work / names.RECORDS).write_text("".join(rows))
    (work / names.QUARANTINE).write_bytes(b"")
    return keys


def stage_shards(run, tmp: Path, shards: int, per_shard: int | list[int], payload: int
                 ) -> list[Path]:
    """A run's staging as if ``shards`` pack tasks (``per_shard`` records each, or the
    ``per_shard[i]`` records of shard ``i``) had finished:
    classes, empty ingest/flatten quarantines, each shard's files and ``shard.json``, the
    shard list and the listing. Shards are written in ``tmp`` and uploaded; on a local
    staging they are written in place. Returns the shard folders."""
    from recforge import storage
    from recforge.format import names

    storage.write_json(run.classes, {"num_classes": 1000})
    for s in ("ingest", "flatten"):
        storage.put_bytes(run.stage_quarantine(s), b"")
    rng = np.random.default_rng(0)
    counts = per_shard if isinstance(per_shard, list) else [per_shard] * shards
    ids, dirs, first = [], [], 0
    with open(tmp / "listing.jsonl", "w") as listing:
        for i in range(shards):
            sid = f"train-{i:05d}"
            local = not storage.is_s3(run.staging)
            work = Path(run.shard_output(sid, "")) if local else tmp / sid
            keys = write_shard(work, first, counts[i], payload, rng)
            first += counts[i]
            listing.writelines(f'{{"key": "{k}"}}\n' for k in keys)
            files = names.shard_files()
            if not local:
                for name in files:
                    storage.upload(work / name, run.shard_output(sid, name))
            storage.write_json(run.shard_output(sid, names.SHARD_META), {
                "shard": sid, "records": counts[i], "masks": False,
                "files": {n: storage.file_digest(work / n) for n in files}})
            ids.append(sid)
            dirs.append(work)
    storage.write_json(run.shard_list, {"shards": ids})
    storage.upload(tmp / "listing.jsonl", run.source_manifest)
    return dirs


def stage_local(root: Path, records: int, shards: int = 1024):
    """A local staging under ``root/pub`` of exactly ``records`` tiny (8-byte) train records
    in ``shards`` shards (sizes differing by at most one), ready for ``stages.merge.merge``;
    returns its ``Run``."""
    shards = max(1, min(shards, records))
    run = local_run(root)
    (root / "work").mkdir(parents=True, exist_ok=True)
    counts = [records // shards + (i < records % shards) for i in range(shards)]
    stage_shards(run, root / "work", shards, counts, 8)
    return run


def local_run(root: Path):
    """The ``Run`` that :func:`stage_local` staged under ``root``."""
    from recforge.run import Run

    return Run(bench_spec(str(root / "pub")), "bench")
