"""Change detection against the previous version's listing, and where it is shown."""

from __future__ import annotations

from recforge.alerts import build_alert
from recforge.incremental import changes


def test_added_changed_removed_by_key_and_etag():
    before = [{"key": "a/1.jpg", "etag": "x"}, {"key": "a/2.jpg", "etag": "y"},
              {"key": "b/3.jpg", "etag": "z"}]
    now = [{"key": "a/1.jpg", "etag": "x"}, {"key": "a/2.jpg", "etag": "Y"},
           {"key": "c/4.jpg", "etag": "w"}]
    d = changes.diff_listings(before, now)
    assert {k: (v["count"], v["examples"]) for k, v in d.items()} == {
        "added": (1, ["c/4.jpg"]), "changed": (1, ["a/2.jpg"]), "removed": (1, ["b/3.jpg"])}
    doc = {"previous_version": "v1", "objects": d,
           "classes": {"added": ["c"], "removed": ["b"]}}
    line = changes.headline(doc)
    assert line == ("since v1: 1 added, 1 changed, 1 removed; classes added ['c'], "
                    "removed ['b']")
    alert = build_alert({"ok": True, "dataset": "pets", "run": "r", "changes": line})
    assert f"Changes {line}" in alert.text() and line in alert.webhook_payload()["text"]
