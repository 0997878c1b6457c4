"""A local listing shows whole objects only, as S3 does: never a write in progress (its
``storage.objects.partial_path`` file), never an error for a file removed since the walk."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from recforge import storage
from recforge.storage import objects


def keys(uri: str) -> list[str]:
    return [o.key for o in storage.list_objects(uri)]


def test_a_listing_beside_a_rewriting_writer_shows_whole_objects_only(tmp_path):
    root = str(tmp_path)
    storage.put_bytes(storage.join(root, "kept.bin"), b"k")
    target = storage.join(root, "sub", "hot.bin")
    storage.put_bytes(target, b"0")
    done = threading.Event()

    def rewrite() -> None:
        try:
            for i in range(400):
                storage.put_bytes(target, bytes([i % 256]) * 4096)
                storage.upload(tmp_path / "kept.bin", storage.join(root, "sub", "up.bin"))
        finally:
            done.set()

    writer = threading.Thread(target=rewrite)
    writer.start()
    seen: set[tuple[str, int]] = set()
    try:
        while not done.is_set():  # raises nothing, whatever the writer is doing
            seen |= {(o.key, o.size) for o in storage.list_objects(root)}
    finally:
        writer.join(60)
    assert seen <= {("kept.bin", 1), ("sub/hot.bin", 1), ("sub/hot.bin", 4096),
                    ("sub/up.bin", 1)}, sorted(seen)
    assert keys(root) == ["kept.bin", "sub/hot.bin", "sub/up.bin"]


def test_a_write_in_progress_is_not_listed(tmp_path, monkeypatch):
    """``put_bytes`` held just before its rename: its bytes are on disk, not yet the object."""
    root = str(tmp_path)
    storage.put_bytes(storage.join(root, "old.bin"), b"o")
    reached, release = threading.Event(), threading.Event()
    replace = Path.replace

    def held(self, target):
        if Path(target).name == "new.bin":
            reached.set()
            release.wait(30)
        return replace(self, target)

    monkeypatch.setattr(Path, "replace", held)
    writer = threading.Thread(target=storage.put_bytes,
                              args=(storage.join(root, "new.bin"), b"new"))
    writer.start()
    try:
        assert reached.wait(30)
        assert len(list(tmp_path.iterdir())) == 2  # the partial file is there
        assert keys(root) == ["old.bin"]
    finally:
        release.set()
        writer.join(30)
    assert keys(root) == ["new.bin", "old.bin"]


@pytest.mark.parametrize("stats_before", [0, 1], ids=["before_any_stat", "between_stats"])
def test_a_file_removed_after_the_walk_is_skipped(tmp_path, monkeypatch, stats_before):
    """Removed once the walk has named it, before the listing's first look at it or after
    one: it is listed whole (as it was when looked at) or not at all, never an error."""
    (tmp_path / "a.bin").write_bytes(b"a")
    gone = tmp_path / "gone.bin"
    gone.write_bytes(b"g")
    stat, looks = Path.stat, []

    def racing(self, *args, **kwargs):
        if self.name == "gone.bin":
            looks.append(1)
            if len(looks) > stats_before:
                self.unlink(missing_ok=True)
        return stat(self, *args, **kwargs)

    monkeypatch.setattr(Path, "stat", racing)
    listed = keys(str(tmp_path))
    assert listed in (["a.bin"], ["a.bin", "gone.bin"])
    if stats_before == 0:
        assert listed == ["a.bin"]


def test_a_users_own_partial_named_file_is_listed(tmp_path):
    root = str(tmp_path)
    for name in ("x.partial", "x.1.partial", "x.a.1.partial", "1.2.partial"):
        storage.put_bytes(storage.join(root, name), b"mine")
    assert keys(root) == ["1.2.partial", "x.1.partial", "x.a.1.partial", "x.partial"]


def test_every_local_write_goes_through_the_one_partial_name(tmp_path, monkeypatch):
    """``put_bytes``, ``upload`` and a local ``compose`` all write to ``partial_path``: the
    name the listing knows to skip."""
    used = []
    partial = objects.partial_path
    monkeypatch.setattr(objects, "partial_path", lambda p: used.append(Path(p).name)
                        or partial(p))
    monkeypatch.setattr("recforge.storage.copies.partial_path", objects.partial_path)
    root = str(tmp_path)
    storage.put_bytes(storage.join(root, "a"), b"a")
    storage.upload(tmp_path / "a", storage.join(root, "b"))
    storage.compose([storage.join(root, "a"), storage.join(root, "b")], storage.join(root, "c"))
    assert used == ["a", "b", "c"]
    objects.partial_path(tmp_path / "d").write_bytes(b"d")
    assert keys(root) == ["a", "b", "c"]
