"""Alerts reach real receivers on loopback: an aiosmtpd SMTP server and an http.server webhook."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from recforge.alerts import SmtpSettings, build_alert, dispatch
from recforge.orchestration.notifier import QualityNotifier
from recforge.quality import QualityGateFailed
from recforge.spec.alerts import AlertSpec
from tests.common.receivers import free_port

DOCS = "https://data.example.com/datasets/demo/v1/quality/index.html"
LOG = "http://airflow.example.com/dags/recforge__demo/runs/r1/tasks/validate?try_number=1"


def gate_result(ok: bool = False) -> dict:
    """The shape run_quality_gate returns (hand-made: these tests do not need GX)."""
    labels = {"item": "3", "title": "labels are integers in [0, N)", "severity": "fail",
              "status": "passed" if ok else "failed", "success": ok,
              "observed": "2 labels outside the integers [0, 14)",
              "evidence": ["label in [0, 14): 2 of 120 unexpected, e.g. train/7 cat/a.jpg "
                           "[label=14]"],
              "docs_page": "validations/checklist-records/r1/20260101T000000Z/x.html"}
    balance = {"item": "11", "title": "smallest/largest class within tolerance",
               "severity": "warn", "status": "warning", "success": False,
               "observed": "smallest/largest = 0.050 (owl 2 / cat 40 records)", "evidence": []}
    return {"ok": ok, "dataset": "demo", "run": "scheduled__2026-01-01T02:00:00+00:00",
            "failed": [] if ok else ["labels"], "warned": ["class_balance"],
            "checks": {"labels": labels, "class_balance": balance},
            "data_docs": DOCS}


def _body(msg) -> tuple[str, str]:
    return (msg.get_body(("plain",)).get_content(), msg.get_body(("html",)).get_content())


def test_failed_gate_is_emailed_and_posted(smtp_server, webhook_server):
    port, inbox = smtp_server
    url, posted = webhook_server
    spec = AlertSpec(emails=("data-eng@example.com", "oncall@example.com"), webhook_url=url)
    alert = build_alert(gate_result(), log_url=LOG)
    sent = dispatch(alert, spec, SmtpSettings("127.0.0.1", port, from_email="rf@example.com"))
    assert sent == {"email": True, "webhook": True, "errors": []}

    (sender, rcpts, msg), = inbox
    assert sender == "rf@example.com"
    assert rcpts == ["data-eng@example.com", "oncall@example.com"]
    assert msg["Subject"] == ("[recforge] demo scheduled__2026-01-01T02:00:00+00:00: "
                              "quality gate FAILED (labels)")
    text, html = _body(msg)
    for part in (text, html):
        assert "2 labels outside the integers [0, 14)" in part
        assert "owl 2 / cat 40" in part  # the warning rides along
        assert DOCS in part and LOG in part
    assert "train/7 cat/a.jpg" in text
    evidence_page = DOCS.removesuffix("index.html") + gate_result()["checks"]["labels"][
        "docs_page"]
    assert evidence_page in text and evidence_page in html
    assert "latest.json still points at the previous version" in text

    (hook,) = posted
    assert hook["content_type"] == "application/json"
    payload = hook["json"]
    assert "*demo*" in payload["text"] and "quality gate FAILED (labels)" in payload["text"]
    assert "2 labels outside the integers [0, 14)" in payload["text"]
    assert f"<{DOCS}|Data Docs>" in payload["text"] and f"<{LOG}|Task log>" in payload["text"]
    assert payload["blocks"][0]["text"]["type"] == "mrkdwn"


def test_success_is_quiet_unless_asked(smtp_server, webhook_server):
    port, inbox = smtp_server
    url, posted = webhook_server
    smtp = SmtpSettings("127.0.0.1", port)
    passed = gate_result(ok=True)
    passed["warned"] = []
    passed["checks"].pop("class_balance")
    alert = build_alert(passed)
    assert alert.status == "passed"
    assert dispatch(alert, AlertSpec(emails=("a@example.com",), webhook_url=url), smtp) == \
        {"email": False, "webhook": False, "errors": []}
    assert inbox == [] and posted == []
    dispatch(alert, AlertSpec(emails=("a@example.com",), webhook_url=url, on_success=True), smtp)
    assert inbox[0][2]["Subject"].endswith("quality gate passed")
    assert "quality gate passed" in posted[0]["json"]["text"]


def test_warnings_notify_by_default(webhook_server):
    url, posted = webhook_server
    alert = build_alert(gate_result(ok=True))
    assert alert.status == "warning"
    assert dispatch(alert, AlertSpec(webhook_url=url))["webhook"] is True
    assert "passed with warnings (class_balance)" in posted[0]["json"]["text"]
    assert dispatch(alert, AlertSpec(webhook_url=url, on_warning=False))["webhook"] is False


def test_webhook_url_from_environment(webhook_server, monkeypatch):
    url, posted = webhook_server
    spec = AlertSpec(webhook_url="${RECFORGE_TEST_WEBHOOK}")
    monkeypatch.delenv("RECFORGE_TEST_WEBHOOK", raising=False)
    sent = dispatch(build_alert(gate_result()), spec)
    assert sent["webhook"] is False and "RECFORGE_TEST_WEBHOOK" in sent["errors"][0]
    monkeypatch.setenv("RECFORGE_TEST_WEBHOOK", url)
    assert dispatch(build_alert(gate_result()), spec)["webhook"] is True
    assert len(posted) == 1


def test_one_channel_failing_does_not_stop_the_other(webhook_server):
    url, posted = webhook_server
    dead = SmtpSettings("127.0.0.1", free_port(), timeout=2)
    sent = dispatch(build_alert(gate_result()),
                    AlertSpec(emails=("a@example.com",), webhook_url=url), dead)
    assert sent["email"] is False and sent["webhook"] is True
    assert sent["errors"][0].startswith("email:")
    assert len(posted) == 1


@pytest.fixture
def airflow_smtp(smtp_server, monkeypatch):
    port, inbox = smtp_server
    monkeypatch.setenv("AIRFLOW_CONN_RECFORGE_SMTP", json.dumps({
        "conn_type": "smtp", "host": "127.0.0.1", "port": port,
        "extra": {"disable_ssl": True, "disable_tls": True, "from_email": "airflow@example.com",
                  "retry_limit": 0}}))
    return inbox


def _context(exception=None, xcom=None, state="success", with_exception_key=True):
    """What Airflow hands a task callback (the parts the notifier reads)."""
    ti = SimpleNamespace(task_id="validate", log_url=LOG, state=state,
                         xcom_pull=lambda task_ids=None, key="return_value": xcom.get(key)
                         if xcom else None)
    context = {"ti": ti, "run_id": "scheduled__2026-01-01T02:00:00+00:00"}
    if with_exception_key:
        context["exception"] = exception
    return context


def test_notifier_sends_gate_failure_through_airflow_connection(airflow_smtp, webhook_server):
    url, posted = webhook_server
    notifier = QualityNotifier({"emails": ["data-eng@example.com"], "webhook_url": url,
                                "smtp_conn_id": "recforge_smtp"}, dataset="demo")
    notifier(_context(exception=QualityGateFailed(gate_result()), state="failed"))
    (sender, rcpts, msg), = airflow_smtp
    assert sender == "airflow@example.com" and rcpts == ["data-eng@example.com"]
    assert "quality gate FAILED (labels)" in msg["Subject"]
    html = msg.get_body(("html",)).get_content()  # the smtp provider sends HTML
    assert "2 labels outside the integers [0, 14)" in html
    assert f"<a href='{LOG}'>Task log</a>" in html and f"<a href='{DOCS}'>Data Docs</a>" in html
    assert "labels" in posted[0]["json"]["text"]


def test_notifier_reports_any_task_error(airflow_smtp):
    notifier = QualityNotifier(AlertSpec(emails=("a@example.com",), smtp_conn_id="recforge_smtp"),
                               dataset="demo")
    notifier(_context(exception=RuntimeError("merge: counts do not reconcile: 1 lost"),
                      state="failed"))
    (_, _, msg), = airflow_smtp
    assert msg["Subject"] == "[recforge] demo scheduled__2026-01-01T02:00:00+00:00: run FAILED"
    assert "task validate failed: RuntimeError: merge: counts do not reconcile" in \
        msg.get_body(("html",)).get_content()


def test_notifier_on_success_reads_the_result_from_xcom(airflow_smtp):
    notifier = QualityNotifier({"emails": ["a@example.com"], "smtp_conn_id": "recforge_smtp",
                                "on_success": True}, dataset="demo")
    notifier(_context(xcom={"return_value": gate_result(ok=True)}))
    (_, _, msg), = airflow_smtp
    assert "passed with warnings (class_balance)" in msg["Subject"]


def test_notifier_without_exception_in_context_reads_xcom(airflow_smtp):
    """dag.test() runs callbacks without context['exception']: the XCom 'quality' that
    run_stage pushed for the failed gate still names the failed check; without it, a plain
    error."""
    notifier = QualityNotifier({"emails": ["a@example.com"], "smtp_conn_id": "recforge_smtp"},
                               dataset="demo")
    notifier(_context(xcom={"quality": gate_result()}, state="TaskInstanceState.FAILED",
                      with_exception_key=False))
    notifier(_context(state="failed", with_exception_key=False))
    (_, _, first), (_, _, second) = airflow_smtp
    assert "quality gate FAILED (labels)" in first["Subject"]
    assert second["Subject"].endswith("run FAILED")
    assert "task validate failed (see the task log)" in second.get_body(("html",)).get_content()


def test_webhook_through_an_airflow_http_connection_is_retried(flaky_webhook_server,
                                                               monkeypatch):
    url, posted, refused = flaky_webhook_server  # answers 503 twice, then 200
    monkeypatch.setenv("AIRFLOW_CONN_RECFORGE_HOOK", json.dumps({"conn_type": "http",
                                                                "host": url}))
    monkeypatch.setattr("recforge.orchestration.notifier.WEBHOOK_ATTEMPTS", 3)
    notifier = QualityNotifier({"webhook_conn_id": "recforge_hook"}, dataset="demo")
    notifier(_context(exception=QualityGateFailed(gate_result()), state="failed"))
    assert len(refused) == 2 and len(posted) == 1
    assert posted[0]["content_type"] == "application/json"
    assert "quality gate FAILED (labels)" in posted[0]["json"]["text"]
    assert posted[0]["json"]["blocks"][0]["type"] == "section"


def test_alert_spec_validation():
    with pytest.raises(ValueError, match="not email addresses"):
        AlertSpec(emails=("nobody",))
    with pytest.raises(ValueError, match="http"):
        AlertSpec(webhook_url="hooks.slack.com/x")
    with pytest.raises(ValueError, match="extra"):
        AlertSpec(email=("a@example.com",))
    with pytest.raises(ValueError, match="not both"):
        AlertSpec(webhook_url="https://x.example.com/h", webhook_conn_id="slack")
    assert AlertSpec().emails == ()
