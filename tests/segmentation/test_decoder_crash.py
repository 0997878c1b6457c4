"""Segmentation's two decodes of user bytes — the colour masks in ``convert_masks`` and the
images in ``pack`` — cost one pair when the decoder crashes: in a child process the pair is
quarantined as ``decoder_crashed``, everything else comes out as the in-process decode
gives it, and errors keep their type (an unknown colour still fails the run)."""

from __future__ import annotations

import numpy as np
import pytest

from recforge import pipeline, storage
from recforge.crash_isolation import IsolatedProcessor
from recforge.format import names
from recforge.run import Run
from recforge.segmentation.masks import (
    MaskRejected,
    UnknownMaskValues,
    convert_keyed,
    convert_rows,
    converter_for,
)
from recforge.segmentation.pack import SegPackOptions, pack_pair_rows
from recforge.spec import parse_spec, specs_dir
from recforge.stages import convert_masks, merge, pack
from tests.common import crashers
from tests.common.segdata import city_spec_doc, png, write_city_pairs
from tests.common.sources import SMALL_BENCH


def _source(src, n=5):
    return write_city_pairs(src, n, seed=70)


def _spec(tmp_path):
    return parse_spec(city_spec_doc(tmp_path / "src", tmp_path / "pub", bench=SMALL_BENCH))


def test_a_mask_that_crashes_the_decoder_costs_its_pair(tmp_path):
    src = tmp_path / "src"
    rows = _source(src)
    crasher = src / rows[2]["mask_key"]
    crasher.write_bytes(crashers.SEGFAULT + crasher.read_bytes())
    converter = converter_for(_spec(tmp_path).segmentation, specs_dir())
    plain = convert_rows([r for i, r in enumerate(rows) if i != 2], str(src),
                         str(tmp_path / "plain"), converter)
    with IsolatedProcessor(converter, target=crashers.convert_or_crash,
                           rejected=MaskRejected) as convert:
        isolated = convert_rows(rows, str(src), str(tmp_path / "iso"), converter,
                                convert=convert)
    assert {e.source_key: e.reason for e in isolated.refused} == {
        rows[2]["source_key"]: "decoder_crashed", rows[2]["mask_key"]: "decoder_crashed"}
    assert len(isolated.converted) == len(plain.converted) == 4
    for a, b in zip(plain.converted, isolated.converted, strict=True):
        assert storage.get_bytes(a["mask_uri"]) == storage.get_bytes(b["mask_uri"])


def test_an_unknown_colour_still_fails_the_run_through_the_child(tmp_path):
    src = tmp_path / "src"
    rows = _source(src, n=1)
    colour = np.full((24, 32, 3), (1, 2, 3), np.uint8)  # no Cityscapes class has it
    (src / rows[0]["mask_key"]).write_bytes(png(colour))
    converter = converter_for(_spec(tmp_path).segmentation, specs_dir())
    with pytest.raises(UnknownMaskValues) as in_process:
        convert_rows(rows, str(src), str(tmp_path / "plain"), converter)
    with IsolatedProcessor(converter, target=convert_keyed, rejected=MaskRejected) as convert, \
            pytest.raises(UnknownMaskValues) as isolated:
        convert_rows(rows, str(src), str(tmp_path / "iso"), converter, convert=convert)
    assert str(isolated.value) == str(in_process.value)
    assert isolated.value.total == in_process.value.total


def test_an_image_that_crashes_the_decoder_costs_its_pair(tmp_path):
    src = tmp_path / "src"
    rows = _source(src)
    converter = converter_for(_spec(tmp_path).segmentation, specs_dir())
    converted = convert_rows(rows, str(src), str(tmp_path / "masks"), converter).converted
    crasher = src / rows[1]["source_key"]
    crasher.write_bytes(crashers.SEGFAULT + crasher.read_bytes())
    opts = SegPackOptions()
    plain = pack_pair_rows([r for i, r in enumerate(converted) if i != 1], str(src),
                           tmp_path / "plain", opts)
    with IsolatedProcessor(opts.image, target=crashers.decode_or_crash) as decode_image:
        isolated = pack_pair_rows(converted, str(src), tmp_path / "iso", opts,
                                  decode_image=decode_image)
    assert (plain["packed"], isolated["packed"], isolated["quarantined"]) == (4, 4, 2)
    assert "decoder_crashed" in (tmp_path / "iso" / names.QUARANTINE).read_text()
    for name in (names.rec("part"), names.rec("part", mask=True), names.idx("part")):
        assert (tmp_path / "plain" / name).read_bytes() == (tmp_path / "iso" / name).read_bytes()


@pytest.mark.pipeline  # a whole build: a slow tier
def test_segmentation_shards_after_a_dead_attempt_decode_in_isolation_byte_for_byte(
        tmp_path, caplog):
    _source(tmp_path / "src", n=6)
    spec = _spec(tmp_path)
    pipeline.build(spec, run_id="seg", workers=1, dry_run=True)
    run = Run(spec, "seg")
    shards = storage.read_json(run.shard_list)["shards"]
    before = {s: merge.Shard.read(run.shard_output(s, "")).files for s in shards}
    for s in shards:  # as a killed attempt of each stage leaves them
        storage.write_json(run.masks(s, names.MASKS_ATTEMPT), {})
        storage.write_json(run.shard_output(s, names.PACK_ATTEMPT), {})
        convert_masks.convert_masks(run, s)
        pack.pack(run, s)
        assert merge.Shard.read(run.shard_output(s, "")).files == before[s]
        assert not storage.exists(run.masks(s, names.MASKS_ATTEMPT))
        assert not storage.exists(run.shard_output(s, names.PACK_ATTEMPT))
    assert sum("died without an error" in r.message for r in caplog.records) == 2 * len(shards)
