"""The objects of a detection dataset as the report reads them: every record's boxes in one
flat float32 array (24 bytes an object) with the record each belongs to, so the charts and
the per-class samples are numpy passes, never a Python object per box.

The label layout is ``format.detection_label``'s; a record whose label is not in it counts
as ``unreadable`` (the checklist's labels check names it) and has no objects here.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from recforge.format import detection_label

A, B = detection_label.HEADER_WIDTH, detection_label.OBJECT_WIDTH
# COCO's size classes, by box area in pixels: small below 32², large above 96²
SMALL_PX, LARGE_PX = 32, 96


def _layout_ok(label) -> bool:
    return (label is not None and not isinstance(label, (int, float)) and len(label) >= A + B
            and label[0] == A and label[1] == B and (len(label) - A) % B == 0)


def label_objects(label) -> np.ndarray:
    """A record label's objects as an (N, 6) float32 array without padding rows (empty for a
    negative, or a label not in the detection layout)."""
    if not _layout_ok(label):
        return np.zeros((0, B), np.float32)
    rows = np.asarray(label, np.float32)[A:].reshape(-1, B)
    return rows[rows[:, 0] >= 0]


@dataclass(frozen=True)
class Objects:
    rows: np.ndarray  # (M, 6) float32: class id, xmin, ymin, xmax, ymax, difficult
    record: np.ndarray  # (M,) int64: the index of each object's record in the records list
    per_record: np.ndarray  # (N,) int32: objects of each record (0: a negative)
    size: np.ndarray  # (N, 2) float32: each record's stored width and height (its label's)
    unreadable: int  # records whose label is not in the detection layout

    @classmethod
    def of(cls, records: Sequence) -> Objects:
        n = len(records)
        flat = array("f")
        counts = np.zeros(n, np.int64)
        size = np.zeros((n, 2), np.float32)
        unreadable = 0
        for i, r in enumerate(records):
            label = r.get("label")
            if not _layout_ok(label):
                unreadable += 1
                continue
            size[i] = label[2], label[3]
            flat.extend(label[A:])
            counts[i] = (len(label) - A) // B
        rows = np.frombuffer(flat, np.float32).reshape(-1, B) if flat \
            else np.zeros((0, B), np.float32)
        record = np.repeat(np.arange(n, dtype=np.int64), counts)
        real = rows[:, 0] >= 0  # padding rows of negatives are no objects
        rows, record = rows[real], record[real]
        per_record = np.bincount(record, minlength=n).astype(np.int32)
        return cls(rows, record, per_record, size, unreadable)

    @property
    def count(self) -> int:
        return len(self.rows)

    @property
    def class_ids(self) -> np.ndarray:
        return self.rows[:, 0].astype(np.int64)

    @property
    def difficult(self) -> int:
        return int((self.rows[:, 5] > 0).sum())

    @property
    def images(self) -> int:
        """Records holding at least one object."""
        return int((self.per_record > 0).sum())

    def negatives(self) -> np.ndarray:
        """Indices of the records with no object (their label readable)."""
        return np.flatnonzero((self.per_record == 0) & (self.size[:, 0] > 0))

    def relative_side(self) -> np.ndarray:
        """Each box's √(w·h) as a fraction of its image (boxes are normalised)."""
        w = self.rows[:, 3] - self.rows[:, 1]
        h = self.rows[:, 4] - self.rows[:, 2]
        return np.sqrt(np.clip(w * h, 0, None))

    def side_px(self) -> np.ndarray:
        """Each box's √(area) in pixels of its stored image."""
        wh = self.size[self.record]
        w = (self.rows[:, 3] - self.rows[:, 1]) * wh[:, 0]
        h = (self.rows[:, 4] - self.rows[:, 2]) * wh[:, 1]
        return np.sqrt(np.clip(w * h, 0, None))

    def per_class(self, num_classes: int) -> np.ndarray:
        """Objects of each class id in ``[0, num_classes)`` (ids beyond it are left out)."""
        ids = self.class_ids
        ids = ids[(ids >= 0) & (ids < num_classes)]
        return np.bincount(ids, minlength=num_classes)[:num_classes]

    def records_of_class(self, class_id: int) -> np.ndarray:
        """The sorted indices of the records holding an object of ``class_id``."""
        return np.unique(self.record[self.class_ids == class_id])

    def of_record(self, i: int) -> np.ndarray:
        """The (N, 6) objects of record ``i``."""
        lo, hi = np.searchsorted(self.record, [i, i + 1])
        return self.rows[lo:hi]


def sample(indices: np.ndarray, k: int, rng: random.Random) -> list[int]:
    """Up to ``k`` of ``indices`` drawn at random by ``rng`` (in their order)."""
    return [int(indices[i]) for i in sorted(rng.sample(range(len(indices)),
                                                       min(k, len(indices))))]
