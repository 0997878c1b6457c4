"""Checklist item 4, ``image_size``: image sizes match the pack options (``pack.resize`` and
``upscale``, ``pack.color``'s channels) or the spec's fixed ``quality.image_shape``, and a
re-read record's decoded shape is the manifest's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from recforge.quality.checks.base import CheckDef, Plan

if TYPE_CHECKING:
    from recforge.quality.checks.base import Frames
    from recforge.spec.quality import QualitySpec


def _pack_value(pack, name: str, default):
    if pack is None:
        return default
    if isinstance(pack, dict):
        return pack.get(name, default)
    return getattr(pack, name, default)


def plan(p: Plan) -> None:
    import great_expectations.expectations as gxe

    resize = int(_pack_value(p.pack, "resize", 0) or 0)
    upscale = bool(_pack_value(p.pack, "upscale", False))
    color = _pack_value(p.pack, "color", None)
    p.add("records", "height and width present", gxe.ExpectColumnValuesToNotBeNull,
          column="short_side")
    if p.quality.image_shape:
        h, w = p.quality.image_shape
        p.add("records", f"height == {h}", gxe.ExpectColumnValuesToBeInSet,
              column="height", value_set=[h])
        p.add("records", f"width == {w}", gxe.ExpectColumnValuesToBeInSet,
              column="width", value_set=[w])
    elif resize > 0 and upscale:
        p.add("records", f"short side == resize {resize}",
              gxe.ExpectColumnValuesToBeInSet, column="short_side", value_set=[resize])
    elif resize > 0:
        p.add("records", f"short side <= resize {resize} (no upscale)",
              gxe.ExpectColumnValuesToBeBetween, column="short_side", min_value=1,
              max_value=resize)
    else:
        p.add("records", "short side >= 1", gxe.ExpectColumnValuesToBeBetween,
              column="short_side", min_value=1)
    if color is not None:
        channels = {1: [3], 0: [1]}.get(int(color), [1, 3, 4])
        p.add("records", f"channels in {channels} (pack.color {color})",
              gxe.ExpectColumnValuesToBeInSet, column="channels", value_set=channels)
    if p.frames["records"]["rec_shape_ok"].notna().any():
        p.add("records", "decoded shape equals the manifest's",
              gxe.ExpectColumnValuesToBeInSet, column="rec_shape_ok", value_set=[True])


def observed(frames: Frames, quality: QualitySpec, num_classes: int | None) -> str:
    rec = frames["records"]
    if rec.empty:
        return "no records"
    ch = sorted(int(c) for c in rec["channels"].dropna().unique())
    return (f"short side {rec['short_side'].min():g}..{rec['short_side'].max():g}, "
            f"height {rec['height'].min():g}..{rec['height'].max():g}, width "
            f"{rec['width'].min():g}..{rec['width'].max():g}, channels {ch}")


CHECK = CheckDef(
    "image_size", plan, observed,
    advice=("some images do not have the size the pack options promise",
            "check pack.resize and quality.image_shape against the evidence"))
