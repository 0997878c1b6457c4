"""The one retry rule: every S3 request recforge makes is :func:`call` (or runs inside
:func:`retrying`), so a transient fault is retried the same way whatever the operation.

botocore retries a request on its own (``client.retry_settings``), but not a body that breaks
mid-read (a streamed GET), and it stops retrying when its retry quota runs dry under a burst of
5xx; this outer loop covers both. Every request it wraps is idempotent (GET, HEAD, LIST, a
PUT or COPY of the same bytes to the same key, DELETE, a part of a multipart upload); the
few whose repeat answers differently (a conditional PUT that won, then lost its answer; a
completed multipart upload) are resolved by their callers. ``inside()`` lets a test prove no
request goes around it, and :func:`counts` tells how many requests of each operation this
process sent (every attempt, so a retried request counts each time; botocore's own retries
inside one attempt are not seen).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

from recforge.storage import client
from recforge.storage.errors import UNREACHABLE_TYPES, is_transient

READ_ATTEMPTS = 5  # recforge's attempts around each request, on top of botocore's

_state = threading.local()
_counts: Counter[str] = Counter()
_counts_lock = threading.Lock()


def inside() -> bool:
    """Whether this thread is running a request under the rule (the tests' probe)."""
    return getattr(_state, "depth", 0) > 0


def counts() -> dict[str, int]:
    """Requests sent so far by this process, by operation (``get_object``): a copy."""
    with _counts_lock:
        return dict(_counts)


def retrying(request, what: str, operation: str, attempts: int | None = None):
    """``request()``, again with jittered exponential back-off (at most 5 s a pause) while
    it fails transiently, ``attempts`` (default ``READ_ATTEMPTS``) times in all; ``what`` (a
    URI) names it in the error, ``operation`` (the client method it calls, as
    ``get_object``) is what each attempt counts as."""
    backoff = client.retry_settings()[2]
    attempts = attempts or READ_ATTEMPTS
    for attempt in range(attempts):
        with _counts_lock:
            _counts[operation] += 1
        _state.depth = getattr(_state, "depth", 0) + 1
        try:
            return request()
        except Exception as exc:
            if (attempt == attempts - 1 or not is_transient(exc)
                    or type(exc).__name__ in UNREACHABLE_TYPES):
                raise
        finally:
            _state.depth -= 1
        time.sleep(min(backoff * 2 ** attempt, 5.0) * (0.5 + random.random() / 2))
    raise AssertionError(f"unreachable: {what}")


def call(operation: str, what: str, **params):
    """``s3_client().<operation>(**params)`` under the rule: the client is looked up at each
    attempt, so a thread's new client (refreshed credentials) is the one retried with."""
    return retrying(lambda: getattr(client.s3_client(), operation)(**params), what, operation)
