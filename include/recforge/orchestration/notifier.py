"""Airflow adapter for alerts: a task callback that reports the quality gate's outcome.

Attach ``QualityNotifier(spec.alerts, dataset=spec.name)`` as ``on_failure_callback`` (and
``on_success_callback`` for success/warning notices) of the task that runs the gate. It builds
the :class:`recforge.alerts.Alert` from the callback context and sends it with
:func:`recforge.alerts.dispatch` through the providers: email with the smtp provider's
``SmtpHook.send_email_smtp`` on the spec's ``smtp_conn_id`` (retried per the connection's
``retry_limit``), the webhook with the http provider's ``HttpHook`` on ``webhook_conn_id``
(or, for a plain ``webhook_url``, a connection made of that URL), retried with back-off.
Task callbacks run on the worker in Airflow 3, after the task; the alert and provider code
is imported then, not when the DAG file is parsed.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from airflow.sdk import BaseNotifier

from recforge.orchestration import xcom
from recforge.spec.alerts import AlertSpec

if TYPE_CHECKING:
    from recforge.alerts import Alert, SmtpSettings

log = logging.getLogger(__name__)


def _pull_result(ti) -> dict | None:
    """The gate's result from XCom: key ``quality`` (``run_stage`` pushes it when the gate
    fails), else the task's return value (the gate returns its result when it passes)."""
    for key in (xcom.QUALITY_RESULT_KEY, "return_value"):
        try:
            pulled = ti.xcom_pull(task_ids=ti.task_id, key=key)
        except Exception as err:  # the alert matters more than the XCom
            log.warning("could not read XCom %r: %s", key, err)
            continue
        if isinstance(pulled, dict) and "checks" in pulled:
            return pulled
    return None


def _pull_error(ti) -> str | None:
    """The failure message a recforge task pushed before failing (``run_stage``)."""
    try:
        value = ti.xcom_pull(task_ids=ti.task_id, key=xcom.ERROR_KEY)
    except Exception as err:
        log.warning("could not read XCom %r: %s", xcom.ERROR_KEY, err)
        return None
    return value if isinstance(value, str) else None


WEBHOOK_ATTEMPTS = 4
WEBHOOK_TIMEOUT_S = 15


def send_email(alert: Alert, spec: AlertSpec) -> None:
    """The alert as an HTML email through the spec's Airflow SMTP connection."""
    from airflow.providers.smtp.hooks.smtp import SmtpHook

    with SmtpHook(smtp_conn_id=spec.smtp_conn_id) as hook:
        sender = spec.from_email or hook.from_email or f"recforge@{hook.host or 'localhost'}"
        hook.send_email_smtp(to=list(spec.emails), subject=alert.subject,
                             html_content=alert.html(), from_email=sender)
    log.info("alert email sent to %s via Airflow connection %s", list(spec.emails),
             spec.smtp_conn_id)


def _webhook_hook(spec: AlertSpec):
    from airflow.providers.http.hooks.http import HttpHook

    if spec.webhook_conn_id:
        return HttpHook(method="POST", http_conn_id=spec.webhook_conn_id)
    url = spec.resolved_webhook_url()

    class UrlHook(HttpHook):  # a plain webhook_url is a connection of its own
        def get_connection(self, conn_id):
            from airflow.sdk import Connection

            return Connection(conn_id=conn_id, conn_type="http", host=url)

    return UrlHook(method="POST", http_conn_id="recforge_webhook_url")


def post_webhook(alert: Alert, spec: AlertSpec) -> None:
    """The alert's Slack-style JSON through the http provider, retried with back-off."""
    import tenacity

    retry = {"stop": tenacity.stop_after_attempt(WEBHOOK_ATTEMPTS),
             "wait": tenacity.wait_exponential(multiplier=1, max=10), "reraise": True,
             "before_sleep": lambda state: log.warning(
                 "alert webhook attempt %d failed: %s", state.attempt_number,
                 state.outcome.exception())}
    response = _webhook_hook(spec).run_with_advanced_retry(
        _retry_args=retry, json=alert.webhook_payload(),
        extra_options={"timeout": WEBHOOK_TIMEOUT_S})
    log.info("alert webhook answered %d", response.status_code)


class QualityNotifier(BaseNotifier):
    """Task callback that alerts with the gate's result, the Data Docs link and the log link.

    Use as ``on_failure_callback`` (and ``on_success_callback`` for success/warning
    notices) of the task that runs the gate. The result comes from the exception
    (:class:`recforge.quality.QualityGateFailed` carries it), else from XCom (key
    ``quality``, pushed by ``run_stage`` on failure, or the return value); a task that
    failed without a failed check is reported as a run error.
    """

    template_fields = ("dataset",)

    def __init__(self, alerts: AlertSpec | dict, dataset: str, docs_url: str | None = None,
                 smtp: SmtpSettings | None = None):
        super().__init__()
        self.alerts = alerts if isinstance(alerts, AlertSpec) else AlertSpec.model_validate(alerts)
        self.dataset = dataset
        self.docs_url = docs_url
        self.smtp = smtp

    def alert_from_context(self, context: dict) -> Alert:
        from recforge.alerts import build_alert

        ti = context.get("ti") or context.get("task_instance")
        exc = context.get("exception")  # set by the worker; dag.test() leaves it out
        state = str(getattr(ti, "state", "") or "").rsplit(".", 1)[-1].lower()
        failed = exc is not None or state in ("failed", "up_for_retry")
        result = getattr(exc, "result", None)
        if result is None and ti is not None:
            result = _pull_result(ti)
        run = context.get("run_id") or getattr(context.get("dag_run"), "run_id", None)
        log_url = None
        if ti is not None:
            try:
                log_url = ti.log_url
            except Exception as err:
                log.warning("no log URL for the task: %s", err)
        error = None
        if failed and (result is None or result.get("ok", True)):
            # the task failed for another reason than a failed check: report the error
            task = getattr(ti, "task_id", "?")
            pushed = _pull_error(ti) if exc is None else None
            error = (f"task {task} failed: {type(exc).__name__}: {exc}" if exc is not None
                     else f"task {task} failed: {pushed}" if pushed
                     else f"task {task} failed (see the task log)")
            result = None
        return build_alert(result, dataset=self.dataset, run=run, docs_url=self.docs_url,
                           log_url=log_url, error=error)

    def notify(self, context) -> None:
        alert = self.alert_from_context(context)
        from recforge.alerts import dispatch

        if self.smtp is not None:  # a mail server given directly (no Airflow connection)
            sent = dispatch(alert, self.alerts, self.smtp, webhook=post_webhook)
        else:
            sent = dispatch(alert, self.alerts, email=send_email, webhook=post_webhook)
        if sent["errors"]:
            log.error("some alerts were not delivered: %s", sent["errors"])
