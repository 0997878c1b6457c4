"""A long range of one object read in parts side by side (``storage.iter_range``): the bytes
in order, and a part that fails stops the read there."""

from __future__ import annotations

import pytest

from recforge import storage

pytestmark = pytest.mark.both_stores  # the ranged reads against moto and Ceph RGW


def test_a_long_range_is_read_in_parts_in_order_and_a_failed_part_stops_it(bucket,
                                                                         monkeypatch):
    from recforge.storage import objects

    data = bytes(range(256)) * 400  # 102,400 bytes
    storage.put_bytes(f"s3://{bucket}/long.bin", data)
    uri = f"s3://{bucket}/long.bin"
    assert b"".join(storage.iter_range(uri, 100, len(data), threads=4, part=1000)) == data[100:]
    asked, real = [], objects.get_range

    def get_range(u, start, length):
        asked.append(start)
        if start >= 30_000:
            raise PermissionError(f"AccessDenied at {start}")
        return real(u, start, length)

    monkeypatch.setattr(objects, "get_range", get_range)
    got = []
    with pytest.raises(PermissionError, match="AccessDenied at 30000"):
        for part in storage.iter_range(uri, 0, len(data), threads=4, part=1000):
            got.append(part)
    assert b"".join(got) == data[:30_000]  # every part before the failed one, in order
    assert max(asked) < 30_000 + 8 * 1000  # nothing read far past it
