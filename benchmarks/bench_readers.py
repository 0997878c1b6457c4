"""The PyTorch reader's memory on a large split: bounded by its batch, not the split.

Writes a ~2 GB split (``--records`` records of ``--kb`` KiB each, image records framed as
MXNet writes them, random payloads) to a temporary folder with recforge's own writer, then
reads every record through ``recforge.readers.RecordFile.read_many`` in batches of
``--batch``, as a DataLoader worker does, and prints the records/s, MB/s and the process's
peak resident memory before and after the read (``ru_maxrss``): the read adds what one batch
holds, whatever the split's size.

    PYTHONPATH=include .venv/bin/python benchmarks/bench_readers.py            # ~2 GB
    PYTHONPATH=include .venv/bin/python benchmarks/bench_readers.py --records 2000
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

from recforge.format import recordio
from recforge.readers import RecordFile


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def write_split(root: Path, records: int, kib: int) -> int:
    payload = os.urandom(kib * 1024)
    with recordio.RecordWriter(root / "train.rec", root / "train.idx") as w:
        for key in range(records):
            w.write(key, recordio.pack_image_record(float(key % 1000), key, payload))
    return (root / "train.rec").stat().st_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--kb", type=int, default=100, help="KiB per record")
    ap.add_argument("--batch", type=int, default=256)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="recforge-readers-") as tmp:
        root = Path(tmp)
        size = write_split(root, args.records, args.kb)
        reader = RecordFile(str(root / "train.rec"))
        before = _rss_mib()
        started = time.perf_counter()
        n = 0
        for lo in range(0, len(reader), args.batch):
            batch = reader.read_many(range(lo, min(lo + args.batch, len(reader))))
            n += len(batch)
            del batch
        seconds = time.perf_counter() - started
        after = _rss_mib()
        print(f"split {size / 1e9:.2f} GB, {n:,} records of {args.kb} KiB, batches of "
              f"{args.batch} ({args.batch * args.kb / 1024:.0f} MiB a batch)")
        print(f"read {n / seconds:,.0f} records/s, {size / 1e6 / seconds:,.0f} MB/s")
        print(f"peak RSS {before:.0f} MiB before the read, {after:.0f} MiB after "
              f"(+{after - before:.0f} MiB)")


if __name__ == "__main__":
    main()
