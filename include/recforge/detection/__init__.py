"""Object detection: Pascal VOC and COCO sources → detection RecordIO (docs/detection.md).

``annotation.py`` is the parsed form both formats share, ``voc.py`` and ``coco.py`` read
them, ``sources.py`` pairs the listing's images with their annotations (the flatten stage),
``boxes.py`` turns annotated pixels into normalised label rows, and ``records.py`` decides
each record's label where the image's bytes are, in ``format.detection_label``'s layout.
"""
