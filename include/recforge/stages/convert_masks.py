"""The ``convert_masks`` task (segmentation only), mapped like pack: a shard's masks —
RGB colour, palette or id PNGs — become single-channel class-id PNGs in staging
(``run.masks(shard)``), with the rows that point at them, the quarantine of refused pairs
and a conversion report (pixels per class, unknown colours).
"""

from __future__ import annotations

import contextlib
import logging

from recforge import crash_isolation, quarantine, storage
from recforge.format import names
from recforge.imaging import packing_process
from recforge.run import Run
from recforge.segmentation.masks import MaskRejected, convert_keyed, convert_rows, converter_for
from recforge.spec import specs_dir

log = logging.getLogger(__name__)


def convert_masks(run: Run, shard_id: str) -> dict:
    """Convert one shard's masks. Like ``pack``, an attempt that follows one that died
    without an error (``crash_isolation.attempt_marker``) decodes each mask in a child
    process and quarantines the pair whose mask kills the decoder. It runs as a packing
    process, as pack does (``imaging.packing_process``)."""
    with crash_isolation.attempt_marker(run.masks(shard_id, names.MASKS_ATTEMPT),
                                        f"masks {shard_id}") as isolated, packing_process():
        return _convert_masks(run, shard_id, isolated)


def _convert_masks(run: Run, shard_id: str, isolated: bool) -> dict:
    seg = run.spec.segmentation
    rows = storage.read_jsonl(run.shard_plan(shard_id))
    converter = converter_for(seg, specs_dir())
    with contextlib.ExitStack() as stack:
        convert = (stack.enter_context(crash_isolation.IsolatedProcessor(
            converter, target=convert_keyed, rejected=MaskRejected)) if isolated else None)
        result = convert_rows(rows, run.spec.source.uri, run.masks(shard_id), converter,
                              compression=seg.mask_compression, convert=convert)
    storage.write_jsonl(run.converted_masks(shard_id), result.converted)
    storage.put_bytes(run.mask_quarantine(shard_id), quarantine.dumps(result.refused))
    storage.write_json(run.mask_report(shard_id), result.report)
    summary = result.report
    log.info("masks %s: converted %d, quarantined %d, %d unknown pixels", shard_id,
             summary["converted"], summary["quarantined"], summary["unknown_pixels"])
    return {"shard": shard_id, **{k: summary[k] for k in ("converted", "quarantined",
                                                          "unknown_pixels", "mpix_per_s")}}
