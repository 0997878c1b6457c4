"""A decoder that crashes, aborts or stalls on one image costs that image: in a child
process the image is quarantined as ``decoder_crashed`` and every other image comes back
exactly as the in-process call returns it."""

from __future__ import annotations

import pytest

from recforge import crash_isolation
from recforge.crash_isolation import IsolatedProcessor
from recforge.imaging import ImageRejected, PackOptions, process
from tests.common import crashers
from tests.common.image_corpus import jpeg, photo


def _images():
    return [jpeg(photo(60 + 8 * i, 80 + 16 * i, seed=i)) for i in range(4)]


def test_each_crash_costs_one_image_and_the_rest_match_in_process():
    opts = PackOptions(resize=48, quality=90)
    good = _images()
    stream = [good[0], crashers.SEGFAULT + good[1], good[1], crashers.ABORT, good[2],
              b"not an image at all", good[3]]
    with IsolatedProcessor(opts, target=crashers.process_or_crash) as isolated:
        out = []
        for data in stream:
            try:
                out.append(isolated(data))
            except ImageRejected as exc:
                out.append(exc)
        assert isolated.crashes == 2
    assert [o.reason for o in out if isinstance(o, ImageRejected)] == [
        "decoder_crashed", "decoder_crashed", "undecodable"]
    assert "SIGSEGV" in out[1].detail and "SIGABRT" in out[3].detail
    with pytest.raises(ImageRejected) as in_process:
        process(b"not an image at all", opts)
    assert out[5].detail == in_process.value.detail  # a refusal is the decoder's own words
    for got, data in zip([out[0], out[2], out[4], out[6]], good, strict=True):
        assert got == process(data, opts)  # byte for byte, shape and channels


def test_a_stalled_decode_is_stopped_and_the_next_image_decodes():
    opts = PackOptions(resize=48)
    good = _images()[0]
    with IsolatedProcessor(opts, target=crashers.process_or_crash, timeout_s=3) as isolated:
        with pytest.raises(ImageRejected, match="no answer in 3 s") as stalled:
            isolated(crashers.STALL)
        assert stalled.value.reason == crash_isolation.REASON
        assert isolated(good) == process(good, opts)
