"""Development conveniences: a local S3 server, sample data and the demo; no part of a run.

``s3server.py`` is a local S3-compatible server (moto's S3 application, on loopback),
``sampledata.py`` the embedded sample dataset, ``detection_sample.py`` the embedded
detection sample whose boxes are known exactly, ``scale.py`` synthetic inputs at ImageNet
size and beyond, and ``demo.py`` runs the embedded default end to end through the real
Airflow DAG (``recforge demo``).
"""
