"""Alerts: tell people when a build fails its quality gate (or fails at all), with evidence.

One :class:`Alert` names the dataset, the run, each failed (and warned) check with its
observed value, and links to the Data Docs and the task log. It goes out as an email over
SMTP and as a Slack-style incoming-webhook POST (``{"text": ..., "blocks": [...]}``, which
Slack, Mattermost and Rocket.Chat accept). The plain senders (``smtplib``, ``urllib``) work
without Airflow; in Airflow, ``recforge.orchestration.notifier.QualityNotifier`` is the task
callback, and it delivers through the smtp and http providers' hooks and connections
(:func:`dispatch` takes the senders). This module composes the messages and imports no
Airflow.

Configured per dataset by the spec's ``alerts`` field (``recforge.spec.alerts.AlertSpec``).
The webhook URL is a secret: write it as ``${ENV_VAR}`` in the spec and set the variable on
the workers.
"""

from __future__ import annotations

import html
import json
import logging
import smtplib
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from email.message import EmailMessage
from typing import Any

from recforge.quality.verdict import FAILED, VERDICT_WORDS, WARNING, gate_status, verdict
from recforge.spec.alerts import AlertSpec

log = logging.getLogger(__name__)
MAX_CHECKS_IN_ALERT = 15


@dataclass(frozen=True)
class SmtpSettings:
    """A mail server for use without Airflow (in Airflow, use an SMTP connection)."""

    host: str
    port: int = 25
    from_email: str = "recforge@localhost"
    starttls: bool = False
    ssl: bool = False
    username: str | None = None
    password: str | None = None
    timeout: float = 30.0


@dataclass
class Alert:
    """What happened to one run, rendered as text, HTML and a webhook payload."""

    dataset: str
    run: str
    status: str  # failed | warning | passed | error
    checks: list[dict] = field(default_factory=list)  # failed first, then warned
    docs_url: str | None = None
    log_url: str | None = None
    report_url: str | None = None  # the dataset report (report.html)
    error: str | None = None
    changes: str | None = None  # what changed since the latest version (incremental builds)

    @property
    def headline(self) -> str:
        if self.status == "error":
            return "run FAILED"
        if self.status not in VERDICT_WORDS:
            return self.status
        listed = FAILED if self.status == FAILED else WARNING
        return verdict(self.status, [c["name"] for c in self.checks if c["status"] == listed],
                       parenthesised=True)

    @property
    def subject(self) -> str:
        return f"[recforge] {self.dataset} {self.run}: {self.headline}"

    def page_url(self, check: dict) -> str | None:
        """The Data Docs page of a check's suite, next to the site's index.html."""
        page = check.get("docs_page")
        if not (page and self.docs_url and self.docs_url.endswith("index.html")):
            return None
        return self.docs_url[: -len("index.html")] + page

    def _consequence(self) -> str | None:
        if self.status == "failed":
            return ("Nothing was published: latest.json still points at the previous version; "
                    "the run's staging is kept for inspection.")
        if self.status == "error":
            return "The run stopped before publishing."
        return None

    def text(self) -> str:
        lines = [f"Dataset: {self.dataset}", f"Run: {self.run}", f"Status: {self.headline}"]
        if self.changes:
            lines.append(f"Changes {self.changes}")
        if self._consequence():
            lines.append(self._consequence())
        if self.error and self.status == "error":
            lines += ["", f"Error: {self.error}"]
        for title, status in (("Failed checks", "failed"), ("Warnings", "warning")):
            chosen = [c for c in self.checks if c["status"] == status]
            if chosen:
                lines += ["", f"{title}:"]
                for c in chosen:
                    lines.append(f"  - {c['item']} {c['name']} [{c['severity']}]: "
                                 f"{c['observed']}")
                    lines += [f"      {e}" for e in c.get("evidence", [])]
                    if self.page_url(c):
                        lines.append(f"      evidence: {self.page_url(c)}")
        lines += ["", f"Report: {self.report_url or '(not available)'}",
                  f"Data Docs: {self.docs_url or '(not available)'}",
                  f"Task log: {self.log_url or '(not available)'}"]
        return "\n".join(lines) + "\n"

    def html(self) -> str:
        e = html.escape
        parts = [f"<h3>{e(self.dataset)}: {e(self.headline)}</h3>",
                 f"<p>Run <code>{e(self.run)}</code></p>"]
        if self._consequence():
            parts.append(f"<p>{e(self._consequence())}</p>")
        if self.error and self.status == "error":
            parts.append(f"<pre>{e(self.error)}</pre>")
        if self.checks:
            parts.append("<table border='1' cellpadding='4'><tr><th>item</th><th>check</th>"
                         "<th>severity</th><th>status</th><th>observed</th></tr>")
            for c in self.checks:
                url = self.page_url(c)
                name = f"<a href='{e(url)}'>{e(c['name'])}</a>" if url else e(c["name"])
                evidence = "".join(f"<br><small>{e(x)}</small>" for x in c.get("evidence", []))
                parts.append(f"<tr><td>{e(c['item'])}</td><td>{name}</td>"
                             f"<td>{e(c['severity'])}</td><td>{e(c['status'])}</td>"
                             f"<td>{e(c['observed'])}{evidence}</td></tr>")
            parts.append("</table>")
        links = []
        if self.report_url:
            links.append(f"<a href='{e(self.report_url)}'>Report</a>")
        if self.docs_url:
            links.append(f"<a href='{e(self.docs_url)}'>Data Docs</a>")
        if self.log_url:
            links.append(f"<a href='{e(self.log_url)}'>Task log</a>")
        if links:
            parts.append("<p>" + " · ".join(links) + "</p>")
        return "\n".join(parts)

    def webhook_payload(self) -> dict:
        """Slack incoming-webhook JSON: ``text`` (the fallback every client shows) + blocks."""
        lines = [f"*{self.dataset}* `{self.run}`: {self.headline}"]
        if self.changes:
            lines.append(f"Changes {self.changes}")
        if self._consequence():
            lines.append(self._consequence())
        if self.error and self.status == "error":
            lines.append(f"```{self.error[:1500]}```")
        for c in self.checks:
            lines.append(f"• {c['item']} *{c['name']}* [{c['severity']}, {c['status']}]: "
                         f"{c['observed']}")
        links = []
        if self.report_url:
            links.append(f"<{self.report_url}|Report>")
        if self.docs_url:
            links.append(f"<{self.docs_url}|Data Docs>")
        if self.log_url:
            links.append(f"<{self.log_url}|Task log>")
        if links:
            lines.append(" · ".join(links))
        text = "\n".join(lines)
        return {"text": text,
                "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text[:2900]}}]}


def build_alert(result: dict | None, *, dataset: str | None = None, run: str | None = None,
                docs_url: str | None = None, log_url: str | None = None,
                error: BaseException | str | None = None) -> Alert:
    """An :class:`Alert` from a quality-gate result dict, or from an error if there is none."""
    result = result or {}
    checks = []
    for status in ("failed", "warning"):
        for name, c in (result.get("checks") or {}).items():
            if c.get("status") == status:
                checks.append({"name": name, **c})
    if result:
        status = gate_status(result)
    else:
        status = "error" if error is not None else "passed"
    return Alert(
        dataset=dataset or result.get("dataset") or "(unknown dataset)",
        run=run or result.get("run") or "(unknown run)",
        status=status, checks=checks[:MAX_CHECKS_IN_ALERT],
        docs_url=docs_url or result.get("data_docs"), report_url=_link(result.get("report")),
        log_url=log_url, error=None if error is None else str(error)[:4000],
        changes=result.get("changes"),
    )


def _link(uri: str | None) -> str | None:
    """A link the recipient can open (presigned for S3), made only when the alert is."""
    if not uri:
        return None
    from recforge import storage

    try:
        return storage.browser_url(uri)
    except Exception as exc:  # an alert must go out even if presigning fails
        log.warning("no browser link for %s: %s", uri, exc)
        return uri


def email_message(alert: Alert, to: Iterable[str], from_email: str) -> EmailMessage:
    msg = EmailMessage()
    msg["Subject"] = alert.subject
    msg["From"] = from_email
    msg["To"] = ", ".join(to)
    msg.set_content(alert.text())
    msg.add_alternative(alert.html(), subtype="html")
    return msg


def send_email(alert: Alert, to: Iterable[str], smtp: SmtpSettings) -> None:
    """Send the alert (text + HTML) through a mail server, without Airflow."""
    to = list(to)
    if not to:
        raise ValueError("send_email: no recipients; set alerts.emails in the spec")
    cls = smtplib.SMTP_SSL if smtp.ssl else smtplib.SMTP
    with cls(smtp.host, smtp.port, timeout=smtp.timeout) as client:
        if smtp.starttls:
            client.starttls()
        if smtp.username:
            client.login(smtp.username, smtp.password or "")
        client.send_message(email_message(alert, to, smtp.from_email))
    log.info("alert email sent to %s via %s:%d", to, smtp.host, smtp.port)


def post_webhook(alert: Alert, url: str, timeout: float = 15.0) -> int:
    """POST the alert as Slack-style JSON; returns the HTTP status, raises on non-2xx."""
    body = json.dumps(alert.webhook_payload()).encode("utf-8")
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (URL from the spec)
        status = resp.status
    log.info("alert webhook answered %d", status)
    return status


def should_send(alert: Alert, spec: AlertSpec) -> bool:
    if alert.status in ("failed", "error"):
        return True
    if alert.status == "warning":
        return spec.on_warning or spec.on_success
    return spec.on_success


def _plain_email(smtp: SmtpSettings | None):
    def send(alert: Alert, spec: AlertSpec) -> None:
        if smtp is None:
            raise RuntimeError("no mail server: pass SmtpSettings, or send through an Airflow "
                               "SMTP connection (recforge.orchestration.notifier)")
        send_email(alert, spec.emails, smtp)

    return send


def _plain_webhook(alert: Alert, spec: AlertSpec) -> None:
    if not spec.webhook_url:
        raise RuntimeError(f"alerts.webhook_conn_id {spec.webhook_conn_id!r} is an Airflow "
                           "connection: only the Airflow notifier can post to it")
    post_webhook(alert, spec.resolved_webhook_url())


Sender = Callable[[Alert, AlertSpec], None]


def dispatch(alert: Alert, spec: AlertSpec | dict, smtp: SmtpSettings | None = None, *,
             email: Sender | None = None, webhook: Sender | None = None) -> dict:
    """Send the alert on every configured channel; one channel failing does not stop the other.

    ``email(alert, spec)`` and ``webhook(alert, spec)`` deliver on one channel; in Airflow the
    notifier passes the smtp and http providers' hooks. Without them, email goes through
    ``smtp`` and the webhook is POSTed to ``webhook_url``. Returns what was sent and what
    failed (the errors, as text).
    """
    spec = spec if isinstance(spec, AlertSpec) else AlertSpec.model_validate(spec)
    sent: dict[str, Any] = {"email": False, "webhook": False, "errors": []}
    if not should_send(alert, spec):
        return sent
    channels = (("email", bool(spec.emails), email or _plain_email(smtp)),
                ("webhook", bool(spec.webhook_url or spec.webhook_conn_id),
                 webhook or _plain_webhook))
    for channel, configured, send in channels:
        if not configured:
            continue
        try:
            send(alert, spec)
            sent[channel] = True
        except Exception as exc:  # report, then try the next channel anyway
            log.error("alert %s failed: %s", channel, exc)
            sent["errors"].append(f"{channel}: {exc}")
    return sent
