"""RecordIO written by recforge is read by MXNet's own readers, byte for byte."""

from __future__ import annotations

import struct

import mxnet as mx
import numpy as np
import pytest

from recforge.format import recordio
from tests.common.helpers import jpeg, write_split

MAGIC = struct.pack("<I", recordio.MAGIC)

PAYLOADS = [b"", b"a", b"abcd", MAGIC, b"abcd" + MAGIC + b"xy", MAGIC + MAGIC + b"12",
            b"x" + MAGIC + b"yyy" + MAGIC, bytes(range(256)) * 3 + MAGIC * 3 + b"q"]


def test_bytes_identical_to_mxnet_writer_including_magic_escaping(tmp_path):
    w = mx.recordio.MXIndexedRecordIO(str(tmp_path / "m.idx"), str(tmp_path / "m.rec"), "w")
    for i, p in enumerate(PAYLOADS):
        w.write_idx(i, p)
    w.close()
    with recordio.RecordWriter(tmp_path / "r.rec", tmp_path / "r.idx") as ours:
        for i, p in enumerate(PAYLOADS):
            ours.write(i, p)
    assert (tmp_path / "r.rec").read_bytes() == (tmp_path / "m.rec").read_bytes()
    assert (tmp_path / "r.idx").read_text() == (tmp_path / "m.idx").read_text()


def test_reader_reassembles_mxnet_multipart_records(tmp_path):
    w = mx.recordio.MXRecordIO(str(tmp_path / "m.rec"), "w")
    for p in PAYLOADS:
        w.write(p)
    w.close()
    assert [p for _, p in recordio.iter_records(tmp_path / "m.rec")] == PAYLOADS


@pytest.mark.parametrize("label", [3.0, [1.0, 2.5, 7.0]])
def test_header_matches_mx_pack(label):
    ours = recordio.pack_image_record(label, 42, b"img")
    theirs = mx.recordio.pack(mx.recordio.IRHeader(0, label, 42, 0), b"img")
    assert ours == theirs
    header, body = mx.recordio.unpack(ours)
    assert body == b"img" and header.id == 42
    h2, b2 = recordio.unpack_image_record(theirs)
    assert b2 == b"img" and h2.id == 42
    assert np.allclose(h2.label, label)


def test_indexed_record_io_and_image_record_iter_read_our_files(tmp_path):
    labels = [0, 1, 2, 1, 0, 2, 2, 1]
    write_split(tmp_path, "train", labels, size=40)
    reader = mx.recordio.MXIndexedRecordIO(str(tmp_path / "train.idx"),
                                           str(tmp_path / "train.rec"), "r")
    for key in reader.keys:
        header, img = mx.recordio.unpack_img(reader.read_idx(key))
        assert header.id == key and header.label == labels[key] and img.shape == (40, 40, 3)
    it = mx.io.ImageRecordIter(path_imgrec=str(tmp_path / "train.rec"),
                               path_imgidx=str(tmp_path / "train.idx"),
                               data_shape=(3, 32, 32), batch_size=4, shuffle=False)
    got = []
    for batch in it:
        assert batch.data[0].shape == (4, 3, 32, 32)
        got += batch.label[0].asnumpy().tolist()
    assert got == labels
    ds = mx.gluon.data.vision.ImageRecordDataset(str(tmp_path / "train.rec"))
    assert len(ds) == len(labels)
    img, lab = ds[3]
    assert img.shape == (40, 40, 3) and lab == labels[3]


def test_multi_label_reads_with_label_width(tmp_path):
    with recordio.RecordWriter(tmp_path / "m.rec", tmp_path / "m.idx") as w:
        for i in range(4):
            w.write(i, recordio.pack_image_record([i, 10 + i, 20 + i], i, jpeg(36, 36, i)))
    it = mx.io.ImageRecordIter(path_imgrec=str(tmp_path / "m.rec"), data_shape=(3, 32, 32),
                               batch_size=2, label_width=3)
    labels = np.concatenate([b.label[0].asnumpy() for b in it])
    assert labels.tolist() == [[i, 10 + i, 20 + i] for i in range(4)]
