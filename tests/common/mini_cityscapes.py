"""Miniature segmentation downloads in exactly their shipped shapes, made in code, and a
stage-by-stage segmentation build over them (ingest → validate, masks converted per shard).

* Cityscapes (``leftImg8bit_trainvaltest.zip`` + ``gtFine_trainvaltest.zip`` unpacked side by
  side): ``leftImg8bit/<split>/<city>/<city>_<seq>_<frame>_leftImg8bit.png`` with
  ``gtFine/<split>/<city>/<city>_<seq>_<frame>_gtFine_{color,instanceIds,labelIds}.png`` and
  ``_gtFine_polygons.json``; the test split's gtFine holds dummy masks (all unlabeled);
  ``README`` and ``license.txt`` at the root.
* ADE20K's scene-parsing release (``ADEChallengeData2016``): ``images/{training,validation}/
  ADE_{train,val}_<8 digits>.jpg`` with ``annotations/…/….png`` (single-channel ids:
  0 = other, 1..150 the classes of ``objectInfo150.txt``), ``objectInfo150.txt`` and
  ``sceneCategories.txt`` at the root; a few of its photos are greyscale JPEGs.
"""

from __future__ import annotations

import io
import json

import numpy as np
from PIL import Image

from recforge import storage
from recforge.run import Run
from recforge.stages import entry
from tests.common.segdata import CITYSCAPES_TRAIN, block_ids, cityscapes_color, png

W, H = 64, 32  # Cityscapes' 2048x1024 at 1/32

# split folder → [(city, seq, frame)]: two cities per labelled split, as the real cities go
CITYSCAPES_FRAMES = {
    "train": [("aachen", 0, 19), ("aachen", 1, 19), ("bochum", 0, 313)],
    "val": [("frankfurt", 0, 294), ("lindau", 0, 19)],
    "test": [("berlin", 0, 19), ("bielefeld", 0, 3)],
}
# the thing classes of cityscapesScripts' labels.py (instanceIds hold id * 1000 + instance)
THING_IDS = (24, 25, 26, 27, 28, 29, 30, 31, 32, 33)


def _jpeg(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "JPEG", quality=95)
    return buf.getvalue()


def _png16(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr.astype(np.uint16)).save(buf, "PNG")  # mode I;16, like instanceIds
    return buf.getvalue()


def cityscapes_stem(split: str, city: str, seq: int, frame: int) -> str:
    return f"{split}/{city}/{city}_{seq:06d}_{frame:06d}"


def cityscapes_train_ids(ids: np.ndarray) -> np.ndarray:
    """labelIds → trainIds by cityscapesScripts' table (every other id is ignore, 255)."""
    table = np.full(256, 255, np.uint8)
    for i, t in CITYSCAPES_TRAIN.items():
        table[i] = t
    return table[ids]


def _polygons(ids: np.ndarray) -> dict:
    return {"imgHeight": int(ids.shape[0]), "imgWidth": int(ids.shape[1]), "objects": [
        {"label": "road", "polygon": [[0, 0], [W - 1, 0], [W - 1, H - 1], [0, H - 1]]}]}


def cityscapes(seed: int = 0) -> tuple[dict[str, bytes], dict[str, np.ndarray]]:
    """The objects of a Cityscapes miniature (key → bytes) and, per labelled image key, its
    labelIds mask."""
    objects: dict[str, bytes] = {}
    truth: dict[str, np.ndarray] = {}
    n = 0
    for split, frames in CITYSCAPES_FRAMES.items():
        for city, seq, frame in frames:
            n += 1
            stem = cityscapes_stem(split, city, seq, frame)
            rng = np.random.default_rng(seed + n)
            image = rng.integers(0, 256, (H, W, 3), np.uint8)
            if split == "test":  # shipped without labels: dummy masks, all unlabeled (0)
                ids = np.zeros((H, W), np.uint8)
            else:
                ids = block_ids(W, H, range(34), block=4, seed=seed + n)
                truth[f"leftImg8bit/{stem}_leftImg8bit.png"] = ids
            instances = np.where(np.isin(ids, THING_IDS), ids.astype(np.int64) * 1000 + 1, ids)
            objects[f"leftImg8bit/{stem}_leftImg8bit.png"] = png(image)
            objects[f"gtFine/{stem}_gtFine_color.png"] = png(cityscapes_color(ids))
            objects[f"gtFine/{stem}_gtFine_instanceIds.png"] = _png16(instances)
            objects[f"gtFine/{stem}_gtFine_labelIds.png"] = png(ids)
            objects[f"gtFine/{stem}_gtFine_polygons.json"] = json.dumps(_polygons(ids)).encode()
    objects["README"] = b"The Cityscapes Dataset\n"
    objects["license.txt"] = b"The Cityscapes Dataset license terms\n"
    return objects, truth


# split folder → [(file stem, (width, height), greyscale?)]: ADE20K's images vary in size
ADE20K_IMAGES = {
    "training": [("ADE_train_00000001", (64, 32), False), ("ADE_train_00000002", (48, 40), True),
                 ("ADE_train_00000003", (64, 48), False)],
    "validation": [("ADE_val_00000001", (64, 32), False), ("ADE_val_00000002", (40, 56), False)],
}
ADE20K_IDS = (0, 1, 2, 3, 150)  # other (ignore), three classes, and the last class


def ade20k(seed: int = 0) -> tuple[dict[str, bytes], dict[str, np.ndarray]]:
    """The objects of an ADEChallengeData2016 miniature and, per image key, its id mask."""
    objects: dict[str, bytes] = {}
    truth: dict[str, np.ndarray] = {}
    n = 0
    for split, images in ADE20K_IMAGES.items():
        for name, (w, h), grey in images:
            n += 1
            rng = np.random.default_rng(seed + n)
            pixels = rng.integers(0, 256, (h, w) if grey else (h, w, 3), np.uint8)
            ids = block_ids(w, h, ADE20K_IDS, block=4, seed=seed + n)
            key = f"images/{split}/{name}.jpg"
            objects[key] = _jpeg(pixels)
            objects[f"annotations/{split}/{name}.png"] = png(ids)
            truth[key] = ids
    objects["objectInfo150.txt"] = (
        b"Idx\tRatio\tTrain\tVal\tName\n1\t0.1576\t11664\t1172\twall\n"
        b"2\t0.1072\t6046\t612\tbuilding, edifice\n3\t0.0878\t8265\t796\tsky\n")
    objects["sceneCategories.txt"] = b"ADE_train_00000001 airport_terminal\n"
    return objects, truth


def ade20k_train_ids(ids: np.ndarray) -> np.ndarray:
    """ADE20K ids → packed values: 0 (other) is ignore 255, class k is k - 1."""
    return np.where(ids == 0, 255, ids.astype(np.int64) - 1).astype(np.uint8)


def upload(uri: str, objects: dict[str, bytes]) -> None:
    storage.ensure_bucket(uri)
    for key, data in objects.items():
        storage.put_bytes(storage.join(uri, key), data)


def build(spec, run_id: str = "t") -> Run:
    """ingest → validate through the real stages, masks converted shard by shard; returns
    the run (its ``out`` is merged and validated)."""
    run = Run(spec, run_id)
    for task in ("ingest", "flatten", "remap_labels", "split"):
        entry(task)(run)
    for shard in storage.read_json(run.shard_list)["shards"]:
        entry("convert_masks")(run, shard)
        entry("pack")(run, shard)
    entry("merge")(run)
    entry("validate")(run)
    return run


def packed_masks(out: str, split: str) -> dict[str, np.ndarray]:
    """source key → the packed mask of every record of ``split`` in ``out``."""
    import tempfile
    from pathlib import Path

    from recforge.format import names, recordio

    rows = {r["key"]: r for r in storage.iter_jsonl(storage.join(out, names.RECORDS))
            if r["split"] == split}
    found = {}
    with tempfile.TemporaryDirectory() as tmp:
        rec = Path(tmp) / names.rec(split, mask=True)
        storage.download(storage.join(out, names.rec(split, mask=True)), rec)
        for _offset, payload in recordio.iter_records(rec):
            header, data = recordio.unpack_image_record(payload)
            found[rows[header.id]["source_key"]] = np.asarray(Image.open(io.BytesIO(data)))
    return found
