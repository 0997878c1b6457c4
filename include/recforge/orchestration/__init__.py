"""The Airflow edge: everything that knows about task contexts, XCom, pools and callbacks.

The DAG names stages by task id and calls :func:`recforge.orchestration.stage.run_stage`;
that turns the task's params into a :class:`recforge.run.Run`, runs the stage, and maps a
:class:`recforge.errors.RecforgeFailure` to a task failure without retries. Importable at DAG
parse time: nothing here loads an engine until a task runs.
"""
