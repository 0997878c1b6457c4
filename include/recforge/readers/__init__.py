"""Reading published versions back for training: the numpy core and a thin PyTorch layer.

Parts: ``recordio.py`` (numpy only: :class:`RecordFile`, one ``.rec`` + ``.idx`` local or on S3
with batched ranged reads; :func:`shard_indices`; :class:`Sample`; :class:`SplitReader`, one
split of a version for its task) and ``torch.py`` (imports torch inside its functions:
``dataset`` — a map-style ``torch.utils.data.Dataset`` — and ``decode_batch_gpu``, nvJPEG).
Images come back RGB, as MXNet's readers hand them; ``docs/readers.md`` shows how.
"""

from recforge.readers.recordio import (
    RecordFile,
    Sample,
    SplitReader,
    decode_image,
    decode_mask,
    shard_indices,
)

__all__ = ["RecordFile", "Sample", "SplitReader", "decode_image", "decode_mask",
           "shard_indices"]
