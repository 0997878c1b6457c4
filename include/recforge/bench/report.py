"""What people read: the results of one benchmark as a plain-text table (``recforge bench``)."""

from __future__ import annotations

from recforge.bench import loaders


def format_table(results: dict) -> str:
    s = results["summary"]
    d = results["dataset"]
    lines = [
        f"loader benchmark: {results['prefix']} split {results['split']}: {d['records']} "
        f"records, {d['rec_bytes'] / 1e6:.1f} MB",
        f"loader: {results.get('loader', 'mx.io.ImageRecordIter')} ({_versions(results)})",
        f"device: {results['device']['statement']}",
        f"bare decode (1 thread, {results['bare_decode']['records']} records): "
        f"{results['bare_decode']['images_per_sec']:.0f} img/s",
        f"preprocess_threads cap on {results['threads']['nprocs']} CPUs: "
        f"{results['threads']['cap']} ({results['threads']['cap_formula']})",
        "",
        f"{'requested':>12} {'used':>5} {'img/s':>8} {'vs decode':>9} {'p50 ms':>8} "
        f"{'p95 ms':>8} {'p99 ms':>8} {'1st batch s':>11} {'MB/s':>8}",
    ]
    for r in results["runs"]:
        req = ",".join(str(t) for t in r["requested_threads"])
        used = r["observed_threads"] if r["observed_threads"] is not None else \
            r["effective_threads"]
        lat = r["latency_ms"]
        lines.append(
            f"{req:>12} {used:>5} {r['images_per_sec']:>8.1f} "
            f"{r['images_per_sec'] / results['bare_decode']['images_per_sec']:>9.2f} "
            f"{lat['p50']:>8.2f} {lat['p95']:>8.2f} {lat['p99']:>8.2f} "
            f"{r['time_to_first_batch_s']:>11.3f} {r['read_mb_per_sec']:>8.2f}")
    chk = results["value_check"]
    lines += [
        "",
        f"value check ({chk['batches']} batches, {chk['records_covered']} of "
        f"{chk['of_records']} records): shapes {chk['shapes']}, dtypes {chk['dtypes']}, "
        f"values [{chk['value_min']:g}, {chk['value_max']:g}], finite {chk['all_finite']}, "
        f"labels [{_g(results['label_range'][0])}, {_g(results['label_range'][1])}]",
        f"GPU memory peak: {s['gpu_memory_peak_bytes'] if s['gpu_memory_peak_bytes'] is not None else 'null (CPU run)'}",  # noqa: E501
        f"recommendation: preprocess_threads={results['recommendation']['preprocess_threads']}"
        f" ({results['recommendation']['images_per_sec']:.0f} img/s)",
    ]
    det = chk.get("detection")
    if det:
        lines.insert(-2, (
            f"objects: {det['objects']} (class ids in the labels range above), "
            f"{det['images_without_objects']} image(s) without objects, at most "
            f"{det['max_objects_per_image']} per image, boxes [{_g(det['box_min'])}, "
            f"{_g(det['box_max'])}]" + "".join(
                f", label_pad_width {w}" for w in sorted(
                    {r.get("label_pad_width") for r in results["runs"]} - {None}))))
    lines += [f"warning: {w}" for w in results["warnings"]]
    lines += [f"PROBLEM: {p}" for p in results["problems"]]
    for v in results.get("violations", []):  # DALI's and PyTorch's too, prefixed
        lines.append(f"FLOOR: {v}")
    for name in loaders.BESIDE["all"]:
        if results.get(name):
            lines += ["", f"--- {loaders.one(name).label}, side by side ---",
                      format_table({**results[name], "violations": []})]
    return "\n".join(lines)


def _g(x) -> str:
    return "none" if x is None else f"{x:g}"


def _versions(results: dict) -> str:
    host = results.get("host") or {}
    return ", ".join(f"{k} {host[k]}" for k in ("mxnet", "dali", "opencv", "python")
                     if host.get(k)) or "versions unknown"
