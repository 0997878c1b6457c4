"""Object detection: Pascal VOC and COCO sources → detection RecordIO (docs/detection.md).

``annotation`` is the parsed form both formats share, ``voc`` and ``coco`` read them,
``sources`` pairs the listing's images with their annotations (the flatten stage),
``boxes`` turns annotated pixels into normalised label rows, and ``pack`` writes the
records in ``format.detection_label``'s layout.
"""
