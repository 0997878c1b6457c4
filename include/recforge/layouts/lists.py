"""Classification by list files: images anywhere under the prefix, labelled (and split) by
``source.list_uri`` or ``source.lists``."""

from __future__ import annotations

from recforge.layouts import Flattened, Layout


def flatten(rows: list[dict], spec) -> Flattened:
    raise NotImplementedError("layout list")


LAYOUT = Layout("list", flatten, lambda spec: (".csv", ".tsv", ".txt", ".lst"),
                lambda spec: "the keys its list file(s) name")
