"""JSON lines round-trip any text: every ``.jsonl`` recforge writes goes through one writer
and one reader, which split on ``\\n`` alone, and no row holds a character another line
reader (``str.splitlines``) would break it at."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from recforge import quarantine, storage
from recforge.quarantine import QuarantineEntry

BREAKERS = "\x85\u2028\u2029\x1c\x1d\x1e\x0b\x0c\r\n"
text = st.text(st.characters(codec="utf-8") | st.sampled_from(BREAKERS), max_size=40)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.dictionaries(text, text | st.integers() | st.lists(text), max_size=4),
                max_size=5))
def test_rows_round_trip_and_stay_one_line_each(rows):
    data = storage.jsonl_bytes(rows)
    assert storage.parse_jsonl(data) == rows
    assert len(data.decode("utf-8").splitlines()) == len(rows)


@settings(max_examples=200, deadline=None)
@given(text.filter(bool), text, text)
def test_quarantine_entries_round_trip(key, detail, part):
    entries = [QuarantineEntry(key, "flatten", "unknown_class", detail, part or None),
               QuarantineEntry(key + "\u2028x", "ingest", "zero_bytes", detail)]
    assert quarantine.loads(quarantine.dumps(entries)) == entries


def test_the_written_bytes_escape_the_line_breaks_json_leaves_raw():
    line = storage.jsonl_line({"key": "a\x85b\u2028c\u2029d"})
    assert line == '{"key": "a\\u0085b\\u2028c\\u2029d"}'
