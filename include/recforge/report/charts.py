"""Charts as inline SVG, written directly: no plotting library, no fonts to ship, crisp at
any zoom, and they render headless exactly as in a browser."""

from __future__ import annotations

from html import escape

import numpy as np

PALETTE = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2")


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 10 or v == int(v) else f"{v:.2f}"


def grouped_bars(title: str, categories: list[str], series: dict[str, list[float]],
                 width: int = 860, bar_px: int = 14) -> str:
    """Horizontal grouped bars: one row per category, one bar per series (e.g. split)."""
    n = max(1, len(series))
    row_h = bar_px * n + 8
    left, right, top = 170, 70, 34
    height = top + row_h * len(categories) + 28
    peak = max([max(v, default=0) for v in series.values()] + [1])
    scale = (width - left - right) / peak
    out = [f'<svg class="chart" role="img" viewBox="0 0 {width} {height}" width="{width}" '
           f'height="{height}" xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>',
           f'<text x="0" y="18" class="t">{escape(title)}</text>']
    for s, (name, _) in enumerate(series.items()):
        x = left + s * 110
        out.append(f'<rect x="{x}" y="24" width="10" height="10" fill="{PALETTE[s % 6]}"/>'
                   f'<text x="{x + 14}" y="33" class="l">{escape(name)}</text>')
    for i, cat in enumerate(categories):
        y = top + 10 + i * row_h
        out.append(f'<text x="{left - 6}" y="{y + row_h / 2}" class="l" text-anchor="end">'
                   f'{escape(cat[:24])}</text>')
        for s, (name, values) in enumerate(series.items()):
            v = values[i]
            w = max(v * scale, 0.5 if v else 0)
            by = y + s * bar_px
            out.append(f'<rect x="{left}" y="{by}" width="{w:.1f}" height="{bar_px - 2}" '
                       f'fill="{PALETTE[s % 6]}"><title>{escape(cat)} / {escape(name)}: '
                       f'{_fmt(v)}</title></rect>'
                       f'<text x="{left + w + 4:.1f}" y="{by + bar_px - 4}" class="v">'
                       f'{_fmt(v)}</text>')
    out.append("</svg>")
    return "".join(out)


def _y_axis_label(text: str, x: float, top: float, plot_h: float) -> str:
    """A y-axis label written upwards along the axis, clear of the title above the plot."""
    y = top + plot_h / 2
    return (f'<text x="{x:.1f}" y="{y:.1f}" class="l" text-anchor="middle" '
            f'transform="rotate(-90 {x:.1f} {y:.1f})">{escape(text)}</text>')


def histogram(title: str, values, bins: int = 20, unit: str = "",
              width: int = 420, height: int = 230, y_label: str = "images",
              x_label: str = "") -> str:
    """A vertical histogram of ``values`` (a list or a numpy array) over equal-width bins,
    its axes labelled."""
    left, bottom, top, right = 58, 44, 30, 10
    arr = np.asarray(values, np.float64).ravel()
    if not arr.size:
        return f'<p class="muted">{escape(title)}: no data</p>'
    lo, hi = float(arr.min()), float(arr.max())
    if hi == lo:
        hi = lo + 1
    # one numpy pass (a million box sizes take milliseconds); the maximum is in the last bin
    counts = np.bincount(np.minimum(((arr - lo) / (hi - lo) * bins).astype(np.int64),
                                    bins - 1), minlength=bins).tolist()
    peak = max(counts)
    bw = (width - left - right) / bins
    plot_h = height - top - bottom
    out = [f'<svg class="chart" role="img" viewBox="0 0 {width} {height}" width="{width}" '
           f'height="{height}" xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>',
           f'<text x="0" y="16" class="t">{escape(title)}</text>',
           f'<line x1="{left - 2}" y1="{top}" x2="{left - 2}" y2="{top + plot_h}" class="ax"/>'
           f'<line x1="{left - 2}" y1="{top + plot_h}" x2="{width - right}" '
           f'y2="{top + plot_h}" class="ax"/>',
           f'<text x="{left - 6}" y="{top + 4}" class="v" text-anchor="end">{peak}</text>'
           f'<text x="{left - 6}" y="{top + plot_h}" class="v" text-anchor="end">0</text>',
           _y_axis_label(y_label, 14, top, plot_h)]
    for i, c in enumerate(counts):
        h = c / peak * plot_h
        x0 = lo + (hi - lo) * i / bins
        x1 = lo + (hi - lo) * (i + 1) / bins
        out.append(f'<rect x="{left + i * bw:.1f}" y="{top + plot_h - h:.1f}" '
                   f'width="{max(bw - 1, 1):.1f}" height="{h:.1f}" fill="{PALETTE[0]}">'
                   f'<title>{_fmt(x0)}–{_fmt(x1)}{unit}: {c} {escape(y_label)}</title></rect>')
    out.append(f'<text x="{left}" y="{top + plot_h + 14}" class="v">{_fmt(lo)}{unit}</text>'
               f'<text x="{width - right}" y="{top + plot_h + 14}" class="v" '
               f'text-anchor="end">{_fmt(hi)}{unit}</text>'
               f'<text x="{left + (width - left - right) / 2:.1f}" y="{height - 6}" class="l" '
               f'text-anchor="middle">{escape(x_label or title)}</text></svg>')
    return "".join(out)


def line(title: str, points: list[tuple[float, float]], x_label: str, y_label: str,
         width: int = 580, height: int = 240,
         refs: list[tuple[str, float]] = ()) -> str:
    """A line with its points marked (e.g. loader img/s against threads), both axes
    labelled; ``refs``: dashed horizontal reference lines (name, y), e.g. a floor."""
    if not points:
        return f'<p class="muted">{escape(title)}: no data</p>'
    left, bottom, top, right = 64, 44, 30, 16 + (140 if refs else 0)  # refs: named outside
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y1 = max(ys + [y for _, y in refs]) * 1.08 or 1
    pw, ph = width - left - right, height - top - bottom

    def px(x, y):
        return left + (x - x0) / (x1 - x0) * pw, top + ph - y / y1 * ph

    coords = [px(x, y) for x, y in points]
    out = [f'<svg class="chart" role="img" viewBox="0 0 {width} {height}" width="{width}" '
           f'height="{height}" xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>',
           f'<text x="0" y="16" class="t">{escape(title)}</text>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" class="ax"/>'
           f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" class="ax"/>'
           f'<text x="{left - 4}" y="{top + ph}" class="v" text-anchor="end">0</text>',
           _y_axis_label(y_label, 14, top, ph)]
    for i, (name, y) in enumerate(refs):
        ry = top + ph - y / y1 * ph
        out.append(f'<line x1="{left}" y1="{ry:.1f}" x2="{left + pw}" y2="{ry:.1f}" '
                   f'stroke="{PALETTE[3 + i % 3]}" stroke-dasharray="5 4"/>'
                   f'<text x="{left + pw + 6}" y="{ry + 3:.1f}" class="v">'
                   f'{escape(name)} {_fmt(y)}</text>')
    out.append(f'<polyline fill="none" stroke="{PALETTE[0]}" stroke-width="2" points="'
               + " ".join(f"{x:.1f},{y:.1f}" for x, y in coords) + '"/>')
    for (x, y), (cx, cy) in zip(points, coords, strict=True):
        out.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="4" fill="{PALETTE[1]}">'
                   f'<title>{_fmt(x)} → {_fmt(y)}</title></circle>'
                   f'<text x="{cx:.1f}" y="{cy - 8:.1f}" class="v" text-anchor="middle">'
                   f'{_fmt(y)}</text>'
                   f'<text x="{cx:.1f}" y="{top + ph + 14}" class="v" text-anchor="middle">'
                   f'{_fmt(x)}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 6}" class="l" text-anchor="middle">'
               f'{escape(x_label)}</text></svg>')
    return "".join(out)
