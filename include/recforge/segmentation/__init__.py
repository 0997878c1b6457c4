"""Segmentation: image/mask pairs → aligned image and mask RecordIO (docs/segmentation.md).

``pairs.py`` pairs each image with its mask (from a listing or a list file),
``colormaps.py`` says which colour or id is which class, ``masks.py`` turns masks into
single-channel class masks by lookup table, ``pack.py`` packs the pairs into aligned
``<name>.rec`` + ``<name>_mask.rec``, and ``dataset.py`` gives Gluon access to them with
joint image/mask transforms.
"""
