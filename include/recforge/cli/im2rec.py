"""``recforge im2rec``: the drop-in for MXNet's ``tools/im2rec.py`` (``recforge.im2rec``).

Listed here so it shows in ``recforge --help``; ``cli.main`` hands its arguments to
``recforge.im2rec.main`` untouched, so im2rec keeps MXNet's own parser and help.
"""

from __future__ import annotations

import argparse


def _im2rec(args) -> int:
    from recforge import im2rec

    return im2rec.main(args.rest)


def register(sub) -> None:
    p = sub.add_parser("im2rec", add_help=False,
                       help="drop-in for MXNet's tools/im2rec.py (see recforge im2rec --help)")
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=_im2rec)
