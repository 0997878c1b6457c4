"""Incremental nightly rebuilds.

A record depends only on itself (``plan.record_key``: a 63-bit hash of its source key), the
splits are cut into chunks and shards by content (``plan.chunk_split``, ``plan.fit_shards``),
packed chunks and shards live in a content-addressed cache in S3 (``cache.py``), each run knows
what changed against the latest published version (``changes.py``) and names its content
(``fingerprint.py``): a run whose content equals the latest version's publishes nothing.
``plan.py`` owns the record keys and the content-defined chunks and shards.
"""
