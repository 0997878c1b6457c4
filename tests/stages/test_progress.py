"""Task logs show progress (done/total, rate, ETA) and no library INFO noise."""

from __future__ import annotations

import logging

import pytest

from recforge import progress, stages
from recforge.imaging import PackOptions
from recforge.orchestration import stage as orchestration_stage
from recforge.spec import parse_spec
from recforge.stages.pack import pack_items
from tests.common.helpers import jpeg


def test_pack_logs_progress_with_rate_and_eta(tmp_path, monkeypatch, caplog):
    src = tmp_path / "src"
    src.mkdir()
    rows = []
    for i in range(5):
        (src / f"{i}.jpg").write_bytes(jpeg(40, 60, seed=i))
        rows.append({"source_key": f"{i}.jpg", "record_key": i, "label": 0, "split": "train",
                     "name": f"{i}.jpg", "class_name": "c", "etag": "x"})
    work = tmp_path / "train-00000"
    work.mkdir()
    monkeypatch.setattr(progress, "EVERY_S", 0.0)
    with caplog.at_level(logging.INFO, logger="recforge.stages.pack"):
        pack_items(rows, str(src), PackOptions(resize=0), work)
    lines = [r.getMessage() for r in caplog.records if "ETA" in r.getMessage()]
    assert lines and lines[0].startswith("pack train-00000: 1/5 images (20%)")
    assert all("images/s" in ln for ln in lines)


def test_progress_lines_are_rate_limited(caplog):
    log = logging.getLogger("test.progress")
    p = progress.Progress("x", 1000, log, every_s=3600)
    with caplog.at_level(logging.INFO, logger="test.progress"):
        for _ in range(999):
            p.update()
    assert caplog.records == []
    assert p.line().startswith("x: 999/1000 images (100%)")


def test_run_stage_quiets_library_info_noise(tmp_path, monkeypatch):
    spec = parse_spec({"name": "d", "source": {"uri": str(tmp_path / "src")},
                       "publish": {"uri": str(tmp_path / "pub")}})
    monkeypatch.setattr(orchestration_stage, "spec_by_name", lambda name, directory=None: spec)
    seen = {}

    def body(run):
        seen.update({n: logging.getLogger(n).getEffectiveLevel()
                     for n in ("botocore.endpoint", "great_expectations.expectations.registry")})
        return {}

    monkeypatch.setattr(stages, "entry", lambda task_id: lambda run: body(run))
    for name in orchestration_stage.NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET)
    orchestration_stage.run_stage("d", {}, "r", "ingest")
    assert seen and all(level >= logging.WARNING for level in seen.values())


@pytest.fixture(autouse=True)
def _restore_loggers():
    levels = {n: logging.getLogger(n).level for n in orchestration_stage.NOISY_LOGGERS}
    yield
    for n, level in levels.items():
        logging.getLogger(n).setLevel(level)


def test_bars_on_a_terminal_lines_in_a_log(capsys, caplog):
    log = logging.getLogger("test.bars")
    progress.use_bars()
    try:
        with caplog.at_level(logging.INFO, logger="test.bars"):
            p = progress.Progress("pack", 4, log, every_s=0.0, unit="shards")
            for _ in range(4):
                p.update()
    finally:
        progress.use_bars(False)
    err = capsys.readouterr().err
    assert "pack: 100%" in err and "4/4" in err
    assert caplog.records == []  # the bar replaces the lines


@pytest.mark.pipeline  # a whole build: a slow tier
def test_recforge_build_on_a_terminal_draws_bars(tmp_path):
    """``recforge build`` under a pseudo-terminal: a bar per stage, not a line per shard."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import sys
    import termios

    import yaml

    from tests.common.sources import SMALL_BENCH

    src = tmp_path / "raw"
    for c, cls in enumerate(("cat", "dog")):
        (src / cls).mkdir(parents=True)
        for i in range(8):
            (src / cls / f"{i}.jpg").write_bytes(jpeg(60 + 3 * i, 80, seed=10 * c + i))
    spec = tmp_path / "bars.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "bars", "source": {"uri": str(src)}, "publish": {"uri": str(tmp_path / "pub")},
        "splits": {"val_ratio": 0.25, "seed": 1}, "pack": {"resize": 32, "shard_size": 3},
        "bench": SMALL_BENCH, "quality": {"severity": {"near_duplicates": "warn"}}}))
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))  # 120 cols
    proc = subprocess.Popen([sys.executable, "-m", "recforge.cli", "build", str(spec),
                             "--workers", "2", "--dry-run"], stdin=follower, stdout=follower,
                            stderr=follower, close_fds=True)
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    assert proc.wait(300) == 0, out.decode(errors="replace")[-3000:]
    text = out.decode(errors="replace")
    assert "pack: 100%" in text and " shards" in text  # the shard bar, finished
    assert "ETA" not in text  # no progress lines
    assert "dataset bars: listed 16" in text
