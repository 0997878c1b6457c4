"""The Charts section's loader throughput: each benchmarked loader's sweep (MXNet's, and
DALI's or PyTorch's beside it) as a table against the floor and the bare-decode bound, and
img/s by threads as a line."""

from __future__ import annotations

from html import escape

from recforge.report.charts import line
from recforge.report.inputs import ReportInputs
from recforge.report.sections.markup import table


def _loader_runs(bench: dict, threads_label: str) -> tuple[str, list[tuple[int, dict]]]:
    """``(x axis label, [(threads or workers, run)])`` of one loader's sweep, by x."""
    runs = [r for r in bench.get("runs") or [] if r.get("images_per_sec") is not None]
    if any(r.get("num_workers") is not None for r in runs) or \
            "DataLoader" in str(bench.get("loader", "")):
        label = "DataLoader workers"
        xs = [r.get("num_workers", r.get("effective_threads")) for r in runs]
    else:
        label = threads_label
        xs = [r.get("effective_threads") or r.get("preprocess_threads") or 1 for r in runs]
    return label, sorted(zip((int(x or 0) for x in xs), runs, strict=True),
                         key=lambda p: p[0])


def _loader_block(title: str, bench: dict, threads_label: str, floor: float | None) -> str:
    """One loader's sweep: a table of every measured setting against the floor and the
    bare-decode rate, and (with two settings or more) img/s against threads as a line."""
    x_label, runs = _loader_runs(bench, threads_label)
    if not runs:
        return f'<p class="muted">{escape(title)}: no measured runs.</p>'
    summary = bench.get("summary") or {}
    bare = summary.get("bare_decode_images_per_sec") or \
        (bench.get("bare_decode") or {}).get("images_per_sec")
    picked = (bench.get("recommendation") or {}).get("preprocess_threads")
    rows = []
    for x, r in runs:
        ips = r["images_per_sec"]
        lat = r.get("latency_ms") or {}
        verdict = "" if not floor else (
            f'<span class="pass">above</span> ({ips / floor:.1f}× the floor)' if ips >= floor
            else '<span class="fail">below the floor</span>')
        rows.append([f"{x}" + (" (recommended)" if x == picked else ""), f"{ips:,.0f}",
                     f"{r['read_mb_per_sec']:,.1f}" if r.get("read_mb_per_sec") is not None
                     else "—",
                     f"{lat['p50']:,.0f} / {lat['p99']:,.0f}" if "p50" in lat and "p99" in lat
                     else "—",
                     f"{bare * max(x, 1):,.0f}" if bare else "—",
                     f"{ips / (bare * max(x, 1)):.0%}" if bare else "—", verdict])
    device = (bench.get("device") or {}).get("statement") or summary.get("device") or ""
    facts = []
    if floor:
        facts.append(f"floor: <b>{floor:,.0f} img/s</b> (the checklist's loader_throughput "
                     "fails below it)")
    if bare:
        facts.append(f"bare decode: <b>{bare:,.0f} img/s</b> per thread (records read and "
                     "decoded with no augmentation or batching: the most a thread can give)")
    head = [x_label, "img/s", "MB/s read", "latency p50 / p99 (ms)",
            "bare-decode bound (img/s)", "of the bound", "vs the floor"]
    if not floor:
        head, rows = head[:-1], [row[:-1] for row in rows]
    out = [f'<h3 class="sub">{escape(title)}</h3>',
           f'<p>{escape(str(bench.get("loader") or ""))}'
           + (f' <span class="muted">— {escape(device)}</span>' if device else "") + "</p>",
           "<p>" + "; ".join(facts) + ".</p>" if facts else "",
           table(head, rows, {1, 2, 3, 4, 5})]
    if len({x for x, _ in runs}) > 1:
        refs = [("floor", floor)] if floor else []
        if bare:
            refs.append(("bare decode, 1 thread", bare))
        out.append(line(f"{title}: img/s by {x_label}",
                        [(x, r["images_per_sec"]) for x, r in runs], x_label, "images / s",
                        refs=refs))
    return "".join(out)


def loader(inp: ReportInputs) -> str:
    bench = inp.bench or {}
    if not bench.get("runs"):
        return ('<div id="loader"><h3 class="sub">loader throughput</h3><p class="muted">No '
                "loader benchmark results (bench.json).</p></div>")
    spec_floor = ((((inp.manifest or {}).get("spec") or {}).get("quality") or {})
                  .get("loader") or {}).get("min_images_per_sec")

    def floor_of(b: dict) -> float | None:  # the benchmark's floor, or the checklist's
        own = ((b.get("floors") or {}).get("values") or {}).get("min_images_per_sec")
        return max(own or 0, spec_floor or 0) or None

    parts = [_loader_block("loader throughput", bench, "preprocess threads (effective)",
                           floor_of(bench))]
    for name, title, threads in (("dali", "DALI loader throughput", "DALI num_threads"),
                                 ("torch", "PyTorch loader throughput", "DataLoader workers")):
        other = bench.get(name) or {}
        if other.get("runs"):  # bench.loader: both / all — beside MXNet's
            parts.append(_loader_block(title, other, threads,
                                       floor_of(other) or floor_of(bench)))
    return f'<div id="loader">{"".join(parts)}</div>'
