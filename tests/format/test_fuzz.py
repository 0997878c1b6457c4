"""Fuzzing the readers of untrusted files with random and mutated bytes (Hypothesis).

Each raises only what it documents, whatever the bytes:

* ``recordio.iter_records`` / ``read_record_at`` / ``unpack_image_record``: ``RecordIOError``;
* ``recordio.read_idx``: ``RecordIOError`` naming the line;
* ``im2rec.parse_list`` (the ``.lst`` reader): nothing; a bad line is an ``Item`` with a
  ``reject`` reason;
* ``validate.validate_local`` (the validator, on a folder of ``.rec``/``.idx``/``.lst`` and
  ``classes.json``): nothing; every problem is a failure in the report.

Derandomized (the same examples on every run) and bounded, so it is stable in CI and quick.
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from recforge import im2rec
from recforge.format import recordio, validate
from tests.common.helpers import jpeg

FUZZ = settings(max_examples=150, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])


def _valid_split() -> dict[str, bytes]:
    """A small valid split (one record holds the magic number, so it is split in parts)."""
    rec, idx, lst = io.BytesIO(), [], []
    pos = 0
    for key in range(4):
        image = jpeg(8, 8, seed=key)
        if key == 2:
            image = image[:40] + recordio._MAGIC_BYTES + image[44:]
        framed = recordio.frame(recordio.pack_image_record(float(key % 2), key, image))
        rec.write(framed)
        idx.append(f"{key}\t{pos}\n")
        lst.append(f"{key}\t{float(key % 2):f}\timg_{key}.jpg\n")
        pos += len(framed)
    return {"rec": rec.getvalue(), "idx": "".join(idx).encode(), "lst": "".join(lst).encode()}


VALID = _valid_split()


@contextlib.contextmanager
def file_with(data: bytes, suffix: str):
    """The path of a temporary file holding ``data``."""
    with tempfile.NamedTemporaryFile(suffix=suffix) as tmp:
        tmp.write(data)
        tmp.flush()
        yield tmp.name


@st.composite
def mutated(draw, original: bytes) -> bytes:
    """``original`` with a few bytes flipped, cut, inserted or deleted, or random bytes."""
    if draw(st.booleans()) and draw(st.booleans()):
        return draw(st.binary(max_size=300))
    data = bytearray(original)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(("flip", "cut", "insert", "delete")))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[at] ^= draw(st.integers(1, 255))
        elif op == "cut":
            del data[at:]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=12))
        elif data:
            del data[at:at + draw(st.integers(1, 16))]
    return bytes(data)


TEXTY = st.lists(st.one_of(st.text(alphabet="0123456789\t-.e+nainf \r", max_size=20),
                           st.text(max_size=20)), max_size=8).map(
    lambda lines: "\n".join(lines).encode("utf-8", "surrogatepass"))


@FUZZ
@given(data=mutated(VALID["rec"]))
def test_record_reader_raises_only_recordio_errors(data):
    f = io.BytesIO(data)
    for offset in (0, 4, len(data) // 2):
        try:
            got = recordio.read_record_at(f, offset)
            if got is not None:
                recordio.unpack_image_record(got[0])
        except recordio.RecordIOError:
            pass
    with file_with(data, ".rec") as path:
        try:
            for _, payload in recordio.iter_records(path):
                recordio.unpack_image_record(payload)
        except recordio.RecordIOError:
            pass


@FUZZ
@given(data=st.one_of(mutated(VALID["idx"]), TEXTY, st.binary(max_size=200)))
def test_idx_parser_raises_only_recordio_errors(data):
    with file_with(data, ".idx") as path:
        try:
            entries = recordio.read_idx(path)
        except recordio.RecordIOError as exc:
            assert path in str(exc)
            return
    assert all(isinstance(k, int) and isinstance(o, int) for k, o in entries)


@FUZZ
@given(data=st.one_of(mutated(VALID["lst"]), TEXTY, st.binary(max_size=200)))
def test_lst_parser_never_raises_and_rejects_by_reason(data):
    with file_with(data, ".lst") as path:
        items = list(im2rec.parse_list(path))
    for item in items:
        if item.reject:
            assert item.reject[0] in ("bad_lst_line", "outside_root", "duplicate_key")
        else:
            assert item.key >= 0 and item.labels and item.path


CLASSES = st.one_of(st.none(), st.binary(max_size=40),
                    st.dictionaries(st.sampled_from(("num_classes", "ignore_index", "classes")),
                                    st.one_of(st.integers(-3, 300), st.text(max_size=4),
                                              st.none(), st.floats(), st.lists(st.integers(),
                                                                               max_size=3))),
                    st.lists(st.integers(), max_size=3).map(json.dumps).map(str.encode))


@FUZZ
@given(rec=mutated(VALID["rec"]), idx=st.one_of(st.just(VALID["idx"]), mutated(VALID["idx"])),
       lst=st.one_of(st.just(VALID["lst"]), mutated(VALID["lst"]), st.none()), classes=CLASSES)
@example(rec=VALID["rec"], idx=VALID["idx"], lst=VALID["lst"], classes={"num_classes": ""})
def test_validator_never_raises_on_damaged_files(rec, idx, lst, classes):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "train.rec").write_bytes(rec)
        (root / "train.idx").write_bytes(idx)
        if lst is not None:
            (root / "train.lst").write_bytes(lst)
        if isinstance(classes, dict):
            classes = json.dumps(classes).encode()
        if classes is not None:
            (root / "classes.json").write_bytes(classes)
        report = validate.validate_local(root)
    assert isinstance(report["ok"], bool)
    if rec != VALID["rec"] and not report["ok"]:
        assert report["failures"]


def test_the_valid_split_is_valid():
    """The fuzzers start from a split the validator accepts (else they prove little)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for ext, data in VALID.items():
            (root / f"train.{ext}").write_bytes(data)
        report = validate.validate_local(root, num_classes=2)
    assert report["ok"], report["failures"]
    assert report["splits"]["train"]["records"] == 4
