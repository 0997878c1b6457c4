"""``recforge.readers.torch``: the PyTorch Dataset over a published split, through a
DataLoader's worker processes; the batched decode (torchvision) where it is installed."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from recforge.readers import SplitReader

torch = pytest.importorskip("torch")


def test_dataset_hands_the_readers_samples_as_tensors_through_workers(classification):
    from recforge.readers.torch import collate, dataset

    split = max(classification.splits, key=classification.splits.get)
    ds = dataset(classification.uri, split, rank=1, world_size=2)
    want = list(SplitReader(classification.uri, split, rank=1, world_size=2))
    assert isinstance(ds, torch.utils.data.Dataset) and len(ds) == len(want)
    again = pickle.loads(pickle.dumps(ds))  # what a spawned worker receives
    assert type(again) is type(ds) and len(again) == len(ds)
    loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2, collate_fn=collate)
    got = [s for b in loader for s in
           ({k: b[k][i] for k in b} for i in range(len(b["key"])))]
    assert [s["key"] for s in got] == [w["key"] for w in want]
    for s, w in zip(got, want, strict=True):
        assert s["image"].shape == (3, *w["image"].shape[:2]) and s["image"].dtype == torch.uint8
        np.testing.assert_array_equal(s["image"].permute(1, 2, 0).numpy(), w["image"])
        assert float(s["label"]) == w["label"]


def test_undecoded_images_are_the_stored_bytes(classification):
    from recforge.readers.torch import dataset

    split = next(iter(classification.splits))
    ds = dataset(str(classification.local), split, decode="none")
    raw = SplitReader(str(classification.local), split, decode=False)
    assert bytes(ds[0]["image"].numpy()) == raw[0]["image"]
    with pytest.raises(ValueError, match="decode='none', then decode_batch_gpu"):
        dataset(str(classification.local), split, decode="gpu")


def test_batched_decode_gives_rgb_chw(classification):
    pytest.importorskip("torchvision")
    from recforge.readers.torch import decode_batch_gpu

    split = next(iter(classification.splits))
    raw = SplitReader(str(classification.local), split, decode=False)
    pixels = SplitReader(str(classification.local), split)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    images = decode_batch_gpu([raw[i]["image"] for i in range(len(raw))], device=device)
    for i, img in enumerate(images):
        want = pixels[i]["image"]
        assert img.shape == (3, *want.shape[:2]) and img.device.type == device
        diff = np.abs(img.permute(1, 2, 0).cpu().numpy().astype(int) - want.astype(int))
        assert diff.mean() < 2, i  # nvJPEG / libjpeg IDCTs differ by a grey level at most
