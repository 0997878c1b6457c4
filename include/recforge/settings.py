"""The deployment's settings: Airflow's ``[recforge]`` config section, in one table.

:data:`OPTIONS` owns every option's name, type, default, example and meaning. The provider
(``recforge.orchestration.provider.get_provider_info``) registers that table with Airflow, so
``airflow config list --section recforge`` shows it, and the options table in
docs/operations.md is checked against it: the code, Airflow and the docs cannot disagree.

Each option is read the way Airflow reads its own: ``AIRFLOW__RECFORGE__<NAME>``, else
``airflow.cfg`` (``$AIRFLOW_CONFIG``, default ``$AIRFLOW_HOME/airflow.cfg``), else the
default here. :func:`get` reads through the Task SDK's ``conf`` (``airflow.sdk.conf``; Airflow
3.1 and later), which also honours ``_CMD``/``_SECRET`` variants and secrets backends.
:func:`get_without_airflow` reads the variable and the file by hand, for code that also runs
where Airflow is not installed (the MXNet environment) or must not be imported (the command
line: importing Airflow costs seconds and reconfigures logging mid-run).

Which of these settings wins over recforge's own variables (``RECFORGE_*``) is each reader's
business and is written where it reads (``orchestration.specs``, ``bench.environment``).
This module imports no Airflow and nothing of recforge.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

SECTION = "recforge"
SECTION_DESCRIPTION = ("recforge: where the dataset specs are, which Airflow connection reaches "
                       "S3, and the MXNet environment the loader benchmark runs in.")


@dataclass(frozen=True)
class Option:
    """One ``[recforge]`` option, as Airflow's config schema describes an option."""

    name: str
    description: str
    default: str | None  # None: unset, the reader's own fallback applies (its description)
    example: str
    type: str = "string"  # Airflow's option types: string, boolean, integer, float
    version_added: str = "0.2.0"  # the recforge release that first read it

    @property
    def env_var(self) -> str:
        """The environment variable that sets the option (Airflow's own naming)."""
        return f"AIRFLOW__{SECTION.upper()}__{self.name.upper()}"


OPTIONS: dict[str, Option] = {o.name: o for o in (
    Option("specs_dir",
           "The folder of dataset specs (YAML files), one DAG each. Unset: RECFORGE_SPECS_DIR, "
           "else include/datasets next to the package (an install from a checkout). An "
           "absolute path: a relative one is taken from each Airflow process's working folder.",
           None, "/opt/airflow/specs"),
    Option("aws_conn_id",
           "The Airflow connection the tasks reach S3 through, for a spec without its own "
           "aws_conn_id. Without such a connection, boto3's own configuration applies.",
           "aws_default", "team_s3"),
    Option("mxnet_python",
           "The python of the environment with MXNet that the loader benchmark runs in; "
           "RECFORGE_MXNET_PYTHON wins over it. Unset: this interpreter if it imports mxnet, "
           "else .venv-mxnet/bin/python in the checkout recforge is installed from (what make "
           "venv builds).",
           None, "/opt/recforge/mxnet-venv/bin/python"),
)}

SPECS_DIR, AWS_CONN_ID, MXNET_PYTHON = (OPTIONS[name] for name in
                                        ("specs_dir", "aws_conn_id", "mxnet_python"))


def airflow_conf():
    """Airflow's config object: the Task SDK's ``conf``, else (an Airflow without it) core's."""
    try:
        from airflow.sdk import conf
    except ImportError:
        from airflow.configuration import conf
    return conf


def get(option: Option) -> str | None:
    """The option's value through Airflow's config (imports Airflow); an empty value counts
    as unset. Falls back to the table's default, so a deployment where the provider's
    section is not registered (an install without entry points) reads the same."""
    value = airflow_conf().get(SECTION, option.name, fallback=option.default)
    return value or option.default


def get_without_airflow(option: Option) -> str | None:
    """The option without importing Airflow: through Airflow's config when this process has
    imported Airflow already (a task), else ``AIRFLOW__RECFORGE__<NAME>``, else the option in
    ``$AIRFLOW_CONFIG`` (default ``$AIRFLOW_HOME/airflow.cfg``, ``AIRFLOW_HOME`` defaulting
    to ``~/airflow``), the file Airflow itself reads; else the default."""
    if "airflow" in sys.modules:
        try:
            return get(option)
        except Exception as exc:  # an unconfigured Airflow must not break the caller
            log.debug("[%s] %s unreadable: %s", SECTION, option.name, exc)
            return option.default
    if value := os.environ.get(option.env_var):
        return value
    import configparser

    home = os.environ.get("AIRFLOW_HOME") or "~/airflow"
    path = Path(os.environ.get("AIRFLOW_CONFIG") or Path(home) / "airflow.cfg").expanduser()
    cfg = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        cfg.read(path, encoding="utf-8")
    except (OSError, UnicodeDecodeError, configparser.Error) as exc:
        log.debug("[%s] %s unreadable from %s: %s", SECTION, option.name, path, exc)
        return option.default
    return cfg.get(SECTION, option.name, fallback=None) or option.default


def config_section() -> dict:
    """The section as a provider's ``config`` entry declares it (provider_info.schema.json:
    every option has description, version_added, type, example and default)."""
    return {SECTION: {"description": SECTION_DESCRIPTION, "options": {
        o.name: {"description": o.description, "version_added": o.version_added,
                 "type": o.type, "example": o.example, "default": o.default}
        for o in OPTIONS.values()}}}


def markdown_table() -> str:
    """The options as the Markdown table in docs/operations.md (a test keeps them equal)."""
    rows = ["| option | default | environment variable | meaning |", "|---|---|---|---|"]
    for o in OPTIONS.values():
        default = f"`{o.default}`" if o.default is not None else "unset"
        rows.append(f"| `{o.name}` | {default} | `{o.env_var}` | {o.description} |")
    return "\n".join(rows)
