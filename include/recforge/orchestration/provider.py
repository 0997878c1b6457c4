"""recforge as an Airflow provider: what ``airflow providers list`` and ``airflow config list``
know of it.

Registered through the ``apache_airflow_provider`` entry point of the recforge package
(pyproject.toml), which Airflow's ``ProvidersManager`` reads in every component where
recforge is installed. ``package-name`` must be the distribution's own name ("recforge"):
Airflow refuses a provider whose name differs from its package's. A package not named
``apache-airflow-providers-*`` is a third-party provider, whose classes Airflow imports
without the community providers' module-prefix check.

What it declares: the version, :class:`recforge.orchestration.notifier.QualityNotifier` as a
notifier, and the ``[recforge]`` config section from :data:`recforge.settings.OPTIONS`, so
``airflow config list --section recforge`` lists every option recforge reads with its
default. Airflow imports this module on every ``ProvidersManager`` start, so it stays light:
no Airflow, no engine, the notifier named by its path only.
"""

from __future__ import annotations

from recforge import __version__, settings

NAME = "recforge"
DESCRIPTION = ("Forge, check, benchmark and publish MXNet RecordIO datasets from images in S3: "
               "one DAG per dataset spec.")
NOTIFIERS = ["recforge.orchestration.notifier.QualityNotifier"]


def get_provider_info() -> dict:
    """The provider's metadata, as Airflow's provider_info.schema.json describes it."""
    return {
        "package-name": NAME,
        "name": NAME,
        "description": DESCRIPTION,
        "versions": [__version__],
        "notifications": list(NOTIFIERS),
        "config": settings.config_section(),
    }
