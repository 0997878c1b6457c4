"""``recforge masks``: convert segmentation masks and inspect colour maps from the shell.

The engine is ``recforge.segmentation.masks``; building the ``recforge`` parser stays cheap: numpy,
OpenCV and the conversion engine are imported only when a masks command runs.
"""

from __future__ import annotations

ON_UNKNOWN = ("error", "ignore")  # = masks.ON_UNKNOWN (not imported: it would load numpy)


def _convert_cli(args) -> int:
    import json
    from pathlib import Path

    from recforge.segmentation.masks import MaskConverter, convert_tree

    conv = MaskConverter.from_config(
        args.colormap, target=args.target, on_unknown=args.on_unknown,
        collision_rule=args.collision_rule, resolve=args.resolve or None,
        ignore_index=args.ignore_index)
    workers = args.workers or 1
    report = convert_tree(args.src, args.dst, conv, pattern=args.pattern,
                          compression=args.compression, workers=workers)
    d = report.to_dict(conv)
    print(f"converted {d['files']} masks ({d['pixels'] / 1e6:.1f} MPix) from {args.src} to "
          f"{args.dst} in {d['seconds']:.2f} s ({d['mpix_per_s']} MPix/s) as "
          f"{conv.target} of colour map {conv.colormap.name}")
    if d["unknown_pixels"]:
        print(f"  {d['unknown_pixels']} unknown pixels mapped to {conv.ignore_index} in "
              f"{report.files_with_unknown_count} file(s): "
              + ", ".join(f"{k} × {v}" for k, v in report.unknown.most_common(5)))
    for k, v in d["pixels_by_value"].items():
        print(f"  {k:<24} {v:>12} px")
    if args.report:
        Path(args.report).write_text(json.dumps(
            {**d, "classes": conv.classes_document()}, indent=2) + "\n")
    return 0


def _colormap_cli(args) -> int:
    from recforge.segmentation.colormaps import load_colormap

    cmap = load_colormap(args.colormap, collision_rule=args.collision_rule,
                         resolve=args.resolve or None)
    print(cmap.summary(args.target))
    return 0


def register(sub) -> None:
    p = sub.add_parser("masks", help="segmentation masks: convert colour/palette/id masks")
    msub = p.add_subparsers(dest="masks_command", required=True)

    def common(q):
        q.add_argument("--colormap", required=True,
                       help="built-in (cityscapes, voc) or a .yaml/.csv colour map")
        q.add_argument("--target", choices=("id", "trainId"), default="trainId",
                       help="write label ids or training ids (default trainId)")
        q.add_argument("--collision-rule", choices=("lowest_id", "error"),
                       help="how a colour shared by labels is resolved (default: the map's)")
        q.add_argument("--resolve", action="append", metavar="R,G,B=LABEL",
                       help="winner for a shared colour, e.g. '153,153,153=polegroup' "
                       "(repeatable; overrides the rule)")

    c = msub.add_parser("convert", help="masks in SRC → single-channel class PNGs in DST, "
                        "same relative names")
    common(c)
    c.add_argument("--on-unknown", choices=ON_UNKNOWN, default="error",
                   help="unknown colour/id: fail naming it (default) or map to ignore + count")
    c.add_argument("--ignore-index", type=int, help="value for ignored pixels (default: the "
                   "map's, normally 255)")
    c.add_argument("--pattern", default="*.png",
                   help="file-name glob under SRC, e.g. '*_color.png' (default *.png)")
    c.add_argument("--compression", type=int, default=1, choices=range(10), metavar="0-9",
                   help="PNG compression level (lossless at every level; default 1)")
    c.add_argument("--workers", type=int, default=1, help="processes (default 1)")
    c.add_argument("--report", help="also write a JSON report (counts, classes) here")
    c.add_argument("src", help="folder of masks (searched recursively with --pattern)")
    c.add_argument("dst", help="folder for the class-id PNGs (same relative names)")
    c.set_defaults(func=_convert_cli)

    s = msub.add_parser("colormap", help="print a colour map, its classes and collisions")
    common(s)
    s.set_defaults(func=_colormap_cli)

