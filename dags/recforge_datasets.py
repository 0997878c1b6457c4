"""Airflow DAGs of recforge: one DAG ``recforge__<name>`` per dataset spec in the specs folder."""
from recforge.orchestration import dataset_dags

globals().update(dataset_dags())
