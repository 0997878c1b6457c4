"""Secrets never leak: a whole ``recforge build`` run with distinctive credentials and a
webhook secret in the spec's alert config writes none of them to any log line, nor to any
staged or published object (the report, Data Docs, manifests included)."""

from __future__ import annotations

import logging
from urllib.parse import quote

import pytest
import yaml

from recforge import storage
from tests.common.sources import make_source, make_spec

KEY_ID = "AKIARECFORGETESTKEY01"
SECRET_KEY = "recforgeTESTsecret/Key+0123456789abcdefghij"
WEBHOOK_SECRET = "RECFORGEWEBHOOKSECRET42"
WEBHOOK = f"https://hooks.example.invalid/services/T000/B000/{WEBHOOK_SECRET}"
SECRETS = (KEY_ID, SECRET_KEY, WEBHOOK_SECRET)


def spellings(secret: str) -> set[bytes]:
    """The ways a secret can be written down: as is, URL-encoded, JSON-escaped."""
    forms = {secret, quote(secret, safe=""), quote(secret), secret.replace("/", "\\/")}
    return {f.encode() for f in forms}


def leaks(text: bytes) -> list[str]:
    return [s for s in SECRETS if any(f in text for f in spellings(s))]


@pytest.mark.pipeline  # a whole build: a slow tier
def test_a_build_leaks_no_secret_to_logs_or_objects(bucket, tmp_path, monkeypatch, caplog,
                                                    capsys):
    from recforge.cli import main

    make_source(bucket, classes=("dog", "eel"), per_class=5)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)  # moto accepts any credentials
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    spec = make_spec(bucket, alerts={"webhook_url": WEBHOOK, "emails": ["ops@example.com"]})
    spec_file = tmp_path / "pets.yaml"
    spec_file.write_text(yaml.safe_dump(spec.model_dump(mode="json")))
    caplog.set_level(logging.DEBUG, logger="recforge")
    assert main(["build", str(spec_file), "--run-id", "secrets"]) == 0
    out = capsys.readouterr()

    logged = [r for r in caplog.records if leaks(r.getMessage().encode())]
    assert not logged, [f"{r.name}: {r.getMessage()[:300]}" for r in logged]
    objects = list(storage.list_objects(f"s3://{bucket}"))
    assert any(o.key.endswith("/report.html") for o in objects)  # staged and published
    leaked = {o.key: leaks(storage.get_bytes(f"s3://{bucket}/{o.key}")) for o in objects}
    assert not {k: v for k, v in leaked.items() if v}
    # the terminal gets the version's s3:// URIs and `recforge report … --open`, never a
    # presigned link (it would carry the key id)
    assert not leaks(out.err.encode()) and not leaks(out.out.encode())
    assert "X-Amz-Signature" not in out.out and "Signature=" not in out.out
    assert "--open" in out.out


def test_the_alert_makes_the_report_link_itself(tmp_path):
    """The gate's result carries the report's URI, never a presigned link (Airflow logs a
    task's return value); the alert presigns it when it is sent."""
    from recforge.alerts import build_alert

    report = tmp_path / "report.html"
    assert build_alert({"ok": True, "report": str(report)}).report_url == report.as_uri()
    assert build_alert({"ok": True}).report_url is None
