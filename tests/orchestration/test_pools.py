"""The pools ship as ``pools.json`` (``airflow pools import``), and a missing one is harmless:
the recforge cluster policy, registered by entry point, moves its tasks to default_pool."""

from __future__ import annotations

import json
import subprocess
import sys

from recforge.orchestration import pools


def test_pools_json_is_what_airflow_pools_import_reads():
    raw = json.loads(pools.POOLS_FILE.read_text())
    assert set(raw) == pools.NAMES == {"recforge_pack", "recforge_gpu_bench"}
    for v in raw.values():
        assert set(v) == {"slots", "description", "include_deferred"}
        assert isinstance(v["slots"], int) and v["slots"] > 0
    assert pools.import_document({}) == raw


def test_slots_are_resized_from_the_environment():
    doc = pools.import_document({"RECFORGE_GPU_BENCH_POOL_SLOTS": "4"})
    assert doc["recforge_gpu_bench"]["slots"] == 4
    assert doc["recforge_pack"]["slots"] == pools.PACK.slots


def test_airflow_loads_the_policy_from_the_entry_point():
    code = ("from airflow import settings as s; "
            "pm = getattr(s, 'get_policy_plugin_manager', lambda: s.POLICY_PLUGIN_MANAGER)(); "
            "h = pm.hook.task_instance_mutation_hook; "
            "print([i.plugin_name for i in h.get_hookimpls()], "
            "s.task_instance_mutation_hook.is_noop)")
    last = subprocess.check_output([sys.executable, "-c", code], text=True).splitlines()[-1]
    assert "recforge" in last and last.endswith("False")  # and not skipped as a no-op
