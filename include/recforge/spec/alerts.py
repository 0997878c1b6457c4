"""The spec's ``alerts`` section: who hears about a build, and when (models only).

Sending is ``recforge.alerts``; in Airflow, ``recforge.orchestration.notifier``.
"""

from __future__ import annotations

import os
import re

from pydantic import Field, field_validator, model_validator

from recforge.spec.base import StrictModel

EMAIL_RE = re.compile(r"^[^@\s]+@[^@\s]+$")
ENV_REF = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")


class AlertSpec(StrictModel):
    """The spec's ``alerts`` field: who hears about a build, and when."""

    emails: tuple[str, ...] = Field((), description="recipients of alert emails")
    webhook_url: str | None = Field(
        None, description="Slack-style incoming webhook; write '${ENV_VAR}' to keep the secret "
        "out of the spec")
    webhook_conn_id: str | None = Field(
        None, description="Airflow HTTP connection of the webhook (its host: the full webhook "
        "URL; headers in its extra); posted by the http provider, with retries")
    on_success: bool = Field(False, description="also notify when the gate passes")
    on_warning: bool = Field(True, description="notify when the gate passes with warnings")
    smtp_conn_id: str = Field("smtp_default", description="Airflow SMTP connection for email")
    from_email: str | None = Field(
        None, description="sender; default: the connection's from_email, else recforge@<host>")

    @field_validator("emails")
    @classmethod
    def _emails_ok(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [e for e in v if not EMAIL_RE.match(e)]
        if bad:
            raise ValueError(f"not email addresses: {bad}; write e.g. ['data-eng@example.com']")
        return v

    @field_validator("webhook_url")
    @classmethod
    def _url_ok(cls, v: str | None) -> str | None:
        if v is not None and not (ENV_REF.match(v) or v.startswith(("http://", "https://"))):
            raise ValueError(f"webhook_url {v!r} must be an http(s) URL or '${{ENV_VAR}}'")
        return v

    @model_validator(mode="after")
    def _one_webhook(self) -> AlertSpec:
        if self.webhook_url and self.webhook_conn_id:
            raise ValueError("set alerts.webhook_conn_id (an Airflow HTTP connection) or "
                             "alerts.webhook_url, not both")
        return self

    def resolved_webhook_url(self) -> str | None:
        """The URL with a ``${ENV_VAR}`` reference replaced by the variable's value."""
        if self.webhook_url is None:
            return None
        m = ENV_REF.match(self.webhook_url)
        if not m:
            return self.webhook_url
        value = os.environ.get(m.group(1))
        if not value:
            raise RuntimeError(f"alerts.webhook_url refers to ${{{m.group(1)}}}, which is not set "
                               "on this worker; set it or remove webhook_url from the spec")
        return value
