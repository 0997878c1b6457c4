"""The on-disk format: MXNet RecordIO, the names of a packed dataset, and its structural check.

``recordio.py`` is RecordIO in plain Python, byte-compatible with dmlc-core (no
``import mxnet``); ``names.py`` names every file of a packed split, a shard and a version;
``paired.py`` pairs image and mask RecordIO; ``detection_label.py`` is a detection record's
label array. The structure is checked by ``scan.py`` (header-only scans with numpy),
``ranged.py`` (a ``.rec`` on S3 read by range), ``validate.py`` (a packed dataset,
``recforge validate``) and ``composed.py`` (a merged dataset, reading no image bytes).
"""
