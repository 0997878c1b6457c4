"""The MXNet tier: tests that import MXNet in-process, run by the MXNet environment's pytest.

The core suite starts this tier once (tests/test_mxnet_tier.py) with
``$RECFORGE_MXNET_PYTHON -m pytest tests/mxnet --confcutdir tests/mxnet``, so the conftest
files above this folder (moto, browsers, Airflow) are not loaded here; the core's own
collection skips this folder (tests/conftest.py).
"""
