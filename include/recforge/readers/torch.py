"""A published version's split in PyTorch: a map-style ``Dataset`` and batched GPU decode.

Parts: :func:`dataset` (a ``torch.utils.data.Dataset`` over :class:`SplitReader`),
:func:`decode_batch_gpu` (``torchvision.io.decode_jpeg`` on the GPU: nvJPEG, one batched
call) and :func:`collate` (a ``collate_fn`` that keeps images of different sizes, and
encoded bytes, as lists).

torch (and torchvision, for GPU decode) are optional: they are imported inside these
functions, never by ``import recforge``. A sample is a dict: ``image`` a CHW uint8 RGB tensor
(``decode="cpu"``: OpenCV on the CPU, channels swapped to RGB as MXNet hands them; CHW as
torchvision's decoders give it) or a 1-D uint8 tensor of the encoded bytes
(``decode="none"``: decode in the training loop with :func:`decode_batch_gpu`); ``label`` a
float32 scalar (classification) or the label array, ``boxes`` ``(n, 6)`` float32 and
``size`` (detection), ``mask`` HxW uint8 (segmentation); ``key`` the record key.

Memory: the dataset holds the split's index only; each ``__getitem__`` reads one record
(with ``num_workers``, what is in memory is the DataLoader's ``prefetch_factor`` batches per
worker), never the split. Sharding: ``rank`` / ``world_size`` give each process its own
records (every record exactly once across ranks); shuffle within a rank with the
DataLoader's ``shuffle=True``.
"""

from __future__ import annotations

from recforge.readers.recordio import SplitReader

DECODES = ("cpu", "none")
_CLASS = None


def _dataset_class():
    """The ``torch.utils.data.Dataset`` subclass, made once torch is imported."""
    global _CLASS
    if _CLASS is not None:
        return _CLASS
    import torch
    from torch.utils.data import Dataset

    class RecordDataset(Dataset):
        """A split of a published version (see :func:`dataset`)."""

        def __init__(self, reader: SplitReader, decode: str, transform=None):
            self.reader, self.decode, self.transform = reader, decode, transform

        def __len__(self) -> int:
            return len(self.reader)

        def __getitem__(self, i: int) -> dict:
            sample = _tensors(torch, self.reader.samples([i])[0].as_dict())
            return self.transform(sample) if self.transform is not None else sample

        def __reduce__(self):  # spawned DataLoader workers rebuild it from the reader
            return _rebuild, (self.reader, self.decode, self.transform)

    RecordDataset.__module__ = __name__
    _CLASS = RecordDataset
    return _CLASS


def _rebuild(reader: SplitReader, decode: str, transform):
    return _dataset_class()(reader, decode, transform)


def _tensors(torch, sample: dict) -> dict:
    image = sample["image"]
    if isinstance(image, bytes):
        sample["image"] = torch.frombuffer(bytearray(image), dtype=torch.uint8)
    else:
        sample["image"] = torch.from_numpy(image).permute(2, 0, 1).contiguous()
    if "label" in sample:
        sample["label"] = torch.as_tensor(sample["label"], dtype=torch.float32)
    if "boxes" in sample:
        sample["boxes"] = torch.from_numpy(sample["boxes"])
    if "mask" in sample:
        mask = sample["mask"]
        sample["mask"] = (torch.frombuffer(bytearray(mask), dtype=torch.uint8)
                          if isinstance(mask, bytes) else torch.from_numpy(mask))
    return sample


def _import_torch():
    try:
        import torch  # noqa: F401
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            "recforge.readers.torch needs PyTorch: pip install 'recforge[torch]' (torch, and "
            "torchvision for decode_batch_gpu); the numpy reader recforge.readers.SplitReader "
            "needs neither",
            name="torch") from exc


def dataset(version_dir_or_uri: str, split: str, *, decode: str = "cpu", rank: int = 0,
            world_size: int = 1, transform=None, task: str | None = None):
    """A map-style ``torch.utils.data.Dataset`` over one split of a published version
    (``<publish.uri>/<name>/<version>``, local or ``s3://``; or the dataset prefix, for its
    latest version). ``decode``: ``"cpu"`` (OpenCV, RGB) or ``"none"`` (encoded bytes, for
    :func:`decode_batch_gpu`); ``transform(sample_dict)`` runs last, in the worker."""
    if decode not in DECODES:
        raise ValueError(f"decode={decode!r}: one of {', '.join(DECODES)} (GPU decode: "
                         "decode='none', then decode_batch_gpu on each batch's images)")
    _import_torch()
    reader = SplitReader(version_dir_or_uri, split, task=task, decode=decode == "cpu",
                         rank=rank, world_size=world_size)
    return _dataset_class()(reader, decode, transform)


def collate(samples: list[dict]) -> dict:
    """A ``collate_fn``: ``label`` stacked where every sample has a scalar one; everything
    else (images of any size, encoded bytes, boxes, masks, keys) as lists."""
    import torch

    out = {name: [s[name] for s in samples] for name in samples[0]}
    labels = out.get("label")
    if labels and all(t.dim() == 0 for t in labels):
        out["label"] = torch.stack(labels)
    return out


def decode_batch_gpu(jpeg_bytes: list, device="cuda") -> list:
    """Decode encoded images on the GPU in one batched call: ``torchvision.io.decode_jpeg``
    with ``device`` (nvJPEG). Each item: ``bytes`` or a 1-D uint8 tensor (what
    ``decode="none"`` gives). Returns CHW uint8 RGB tensors on ``device``, in order. Images
    that are not JPEG (a PNG record) are decoded on the CPU and moved to ``device``."""
    import torch
    from torchvision.io import ImageReadMode, decode_image, decode_jpeg

    data = [torch.frombuffer(bytearray(b), dtype=torch.uint8) if isinstance(b, bytes | bytearray)
            else b for b in jpeg_bytes]
    jpeg = [i for i, t in enumerate(data) if t.numel() > 2 and int(t[0]) == 0xFF
            and int(t[1]) == 0xD8]
    out: list = [None] * len(data)
    if jpeg:
        decoded = decode_jpeg([data[i] for i in jpeg], mode=ImageReadMode.RGB, device=device)
        for i, img in zip(jpeg, decoded, strict=True):
            out[i] = img
    for i, t in enumerate(data):
        if out[i] is None:
            out[i] = decode_image(t, mode=ImageReadMode.RGB).to(device)
    return out
