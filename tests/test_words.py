"""The project's words speak of the product, never of the process that made it: no
references to numbered tickets or numbered work periods in the docs, the code, the tests
or the benchmarks."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOTS = ("README.md", "docs", "include", "tests", "benchmarks", "dags", "plugins")
SUFFIXES = {".md", ".py", ".txt", ".yaml", ".yml", ".toml", ".cfg", ".json", ".html", ".sh"}
SKIP_PARTS = {"__pycache__", ".pytest_cache", "artifacts"}

# Built from pieces so that this file does not match itself.
_ISSUE, _SESSION, _THIS = "iss" + "ue", "sess" + "ion", "th" + "is"
PATTERN = re.compile(rf"\b{_ISSUE} [0-9]+|\b{_SESSION} [0-9]+|\b{_THIS} {_SESSION}\b",
                     re.IGNORECASE)


def _files() -> list[Path]:
    found = []
    for root in ROOTS:
        path = REPO / root
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            found += [p for p in path.rglob("*") if p.is_file() and p.suffix in SUFFIXES
                      and not SKIP_PARTS & set(p.relative_to(REPO).parts)
                      and not any(part.endswith(".egg-info") for part in p.parts)]
    return sorted(found)


def hits(files: list[Path], base: Path = REPO) -> list[str]:
    """``file:line: text`` for every line that speaks of the process."""
    out = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if PATTERN.search(line):
                out.append(f"{path.relative_to(base)}:{n}: {line.strip()}")
    return out


def test_the_words_speak_of_the_product_only():
    found = hits(_files())
    assert not found, "process words in the project's text:\n" + "\n".join(found)


def test_the_check_catches_a_process_line(tmp_path):
    bad = tmp_path / "README.md"
    bad.write_text("fine line\n" + "Fixed in " + _SESSION.upper() + " 7.\n"
                   + "see " + _ISSUE + " 12\n" + "what " + _THIS + " " + _SESSION + " did\n"
                   + "a boto3 " + _SESSION + " is fine\n", encoding="utf-8")
    found = hits([bad], tmp_path)
    assert [h.split(":")[1] for h in found] == ["2", "3", "4"], found
