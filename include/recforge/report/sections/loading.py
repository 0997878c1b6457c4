"""The summary's "load it" snippet: how to read the version, per task kind (:data:`SNIPPETS`):
``mx.io.ImageRecordIter``, ``SegmentationRecordDataset`` (image and mask pairs) or
``mx.io.ImageDetRecordIter`` (box labels padded to the most objects in one image)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from html import escape

from recforge import storage
from recforge.format import names
from recforge.kinds import Kind
from recforge.report.inputs import ReportInputs


@dataclass(frozen=True)
class Split:
    """The split a snippet reads: its name, the paths of its ``.rec``/``.idx`` as the snippet
    names them (local copies of S3 files, after the ``fetch`` lines that copy them), the
    benchmark's options and recommendation, and the batch size to use."""

    name: str
    fetch: str
    rec: str
    idx: str
    options: dict
    recommended: dict
    batch: int


def _split(inp: ReportInputs, uri: str) -> Split:
    split = "train" if "train" in inp.splits or not inp.splits else inp.splits[0]
    rec, idx = names.rec(split), names.idx(split)
    opts = (inp.bench or {}).get("options") or {}
    rec_ = (inp.bench or {}).get("recommendation") or {}
    batch = rec_.get("batch_size") or opts.get("batch_size") or 32
    if storage.is_s3(uri):
        fetch = (f"# MXNet reads local files: copy the split first\n"
                 f"aws s3 cp {storage.join(uri, rec)} .\n"
                 f"aws s3 cp {storage.join(uri, idx)} .\n\n")
        return Split(split, fetch, rec, idx, opts, rec_, batch)
    return Split(split, "", storage.join(uri, rec), storage.join(uri, idx), opts, rec_, batch)


def _image_record_iter(inp: ReportInputs, s: Split) -> str:
    shape = tuple(s.options.get("data_shape") or (3, 224, 224))
    threads = s.recommended.get("preprocess_threads")
    return (f"{s.fetch}import mxnet as mx\n"
            f"{s.name} = mx.io.ImageRecordIter(\n"
            f'    path_imgrec="{s.rec}", path_imgidx="{s.idx}",\n'
            f"    data_shape={shape}, batch_size={s.batch}, shuffle=True"
            + (f", preprocess_threads={threads}" if threads else "") + ")")


def _mask_pairs(inp: ReportInputs, s: Split) -> str:
    return (f"{s.fetch}# and {names.rec(s.name, mask=True)} / {names.idx(s.name, mask=True)} "
            "next to them\n"
            "from recforge.segmentation.dataset import SegmentationRecordDataset\n"
            f'ds = SegmentationRecordDataset("{s.rec}")  # (image, mask) pairs')


def _det_record_iter(inp: ReportInputs, s: Split) -> str:
    objs = inp.objects
    # a negative's label holds one padding row, so a label has at least one object row
    most = max(int(objs.per_record.max()) if len(objs.per_record) else 1, 1)
    pad = 4 + 6 * most  # format.detection_label: header 4, 6 values an object
    shape = tuple(s.options.get("data_shape") or (3, 300, 300))
    return (f"{s.fetch}import mxnet as mx\n"
            "# label: [4, 6, W, H, (class, xmin, ymin, xmax, ymax, difficult) ...]\n"
            f"# label_pad_width {pad} = 4 + 6 x {most}, the most objects in one image\n"
            f"{s.name} = mx.io.ImageDetRecordIter(\n"
            f'    path_imgrec="{s.rec}", path_imgidx="{s.idx}",\n'
            f"    data_shape={shape}, batch_size={s.batch}, shuffle=True,\n"
            f"    label_pad_width={pad})")


# task kind → the snippet of its loader
SNIPPETS: dict[str, Callable[[ReportInputs, Split], str]] = {
    "classification": _image_record_iter,
    "segmentation": _mask_pairs,
    "detection": _det_record_iter,
}


def load_snippet(inp: ReportInputs, kind: Kind, uri: str) -> str:
    """How to read the version at ``uri`` with MXNet: the split's .rec/.idx and the
    benchmark's recommended settings."""
    return f"<pre><code>{escape(SNIPPETS[kind.name](inp, _split(inp, uri)))}</code></pre>"
