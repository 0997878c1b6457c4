"""The HTML the sections share: a captioned thumbnail, a table, class counts per split."""

from __future__ import annotations

from html import escape

MAX_CLASSES_SHOWN = 40


def figure(uri: str | None, r, *, big: bool = False, split: bool = False,
           note: str = "", cls: str = "") -> str:
    """A thumbnail captioned with its source file (``class/…/name.jpg``); the record's
    split and key show on hover (with ``note``). ``split``: also name the split in the
    caption. ``cls``: the figure's class (``box``: a detection sample)."""
    name = r.get("source_key") or f"record {r.get('key')}"
    tip = f"{name}\nrecord {r.get('split')}/{r.get('key')}" + (f"\n{note}" if note else "")
    img = f'<img src="{uri}" alt="{escape(name)}">' if uri else '<span class="muted">—</span>'
    badge = f'<span class="badge">{escape(str(r.get("split")))}</span>' if split else ""
    shown = escape(name).replace("/", "/<wbr>")  # wrap at the folders first
    klass = " ".join(c for c in ("big" if big else "", cls) if c)
    attr = f' class="{klass}"' if klass else ""
    return (f'<figure{attr} title="{escape(tip)}"><div class="img">'
            f'<span class="at">{img}{badge}</span></div><figcaption>{shown}</figcaption>'
            "</figure>")


def table(head: list[str], rows: list[list[str]], num: set[int] = frozenset()) -> str:
    th = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f'<td class="num">{c}</td>' if i in num else f"<td>{c}</td>"
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def class_counts_table(unit: str, cats: list[str], per: dict[str, list[int]]) -> str:
    """Class counts per split as a table (the first ``MAX_CLASSES_SHOWN * 5`` classes), with
    each split's smallest / largest class ratio under it — the balance the checklist's
    ``class_balance`` checks per split with ``quality.class_balance_split: each``."""
    if not cats or not per:
        return ""
    splits = list(per)
    shown = cats[:MAX_CLASSES_SHOWN * 5]
    rows = [[escape(str(c)), *(f"{per[s][i]:,}" for s in splits)] for i, c in enumerate(shown)]

    def ratio(counts: list[int]) -> str:
        return f"{min(counts) / max(counts):.3f}" if counts and max(counts) else "—"

    rows.append(["<b>smallest / largest</b>", *(ratio(per[s]) for s in splits)])
    more = (f'<p class="muted">{len(cats) - len(shown):,} more classes not shown; the ratio '
            "counts every class.</p>" if len(shown) < len(cats) else "")
    return (f'<h3 class="sub">{escape(unit)} per class and split</h3>'
            + table(["class", *splits], rows, set(range(1, len(splits) + 1))) + more)
