"""What a checklist item that did not pass means, and what to do about it — the words the
report's checklist shows under a warning or a failure."""

from __future__ import annotations

from recforge.spec.dataset import SOURCE_SPLIT_WARNINGS
from recforge.spec.quality import CHECK_BY_NAME

# a check's severity as the report says it (spec.quality.Severity)
SEVERITY_WORDS = {"fail": "blocks publish", "warn": "warns", "off": "off"}

# per check: (what it means when it does not pass, what to do)
ADVICE: dict[str, tuple[str, str]] = {
    "decode": ("some records do not decode, so training would crash or skip them",
               "re-export the images named in the evidence and rebuild"),
    "index": ("the .idx, records.jsonl and summary.json disagree, so a reader would seek to "
              "the wrong records",
              "rebuild the version (re-run merge); recforge verify names the bad file"),
    "labels": ("a label is outside [0, N) or disagrees with classes.json (detection: a label "
               "array out of layout, or a box outside [0, 1] or inverted), so the loss would "
               "index past the classifier or train on boxes that cover nothing",
               "fix the class folders, the annotations or classes.json and rebuild"),
    "image_size": ("some images do not have the size the pack options promise",
                   "check pack.resize and quality.image_shape against the evidence"),
    "sources": ("a listed source object is neither packed nor quarantined, or is counted "
                "twice: images were silently lost or duplicated",
                "re-run the build; if it repeats, report it with the evidence"),
    "loader_dtype": ("the loader does not yield float32 NDArrays",
                     "check bench.options.iter_kwargs (dtype) against what training expects"),
    "loader_range": ("batch values fall outside quality.loader.value_range",
                     "check the mean/std options, or set value_range to what the loader "
                     "should yield"),
    "loader_shape": ("batches change shape between steps",
                     "check data_shape and the pack options (pack.resize)"),
    "gpu_memory": ("the loader's GPU memory peak is above quality.loader.gpu_memory_limit_mb",
                   "lower the batch size or prefetch_buffer, or raise the limit"),
    "loader_throughput": ("the loader reads fewer images per second than the floor, so "
                          "training would wait for data",
                          "see the loader table under Charts: use the recommended "
                          "preprocess_threads, pack smaller images (pack.resize), or set the "
                          "floor for this kind of machine"),
    "class_balance": ("the smallest class has far fewer records than the largest, so a model "
                      "sees it rarely and may learn to ignore it",
                      "add images to the small classes or weight/oversample them in training; "
                      "if the imbalance is real, lower quality.class_balance_min_ratio"),
    "split_keys": ("one source key is in two splits: validation scores count images the model "
                   "trained on", "rebuild; keys are assigned to one split by their hash"),
    "split_content": ("byte-identical images sit in two splits (copies under different keys): "
                      "validation scores count images the model trained on",
                      "delete the duplicate source objects named in the evidence"),
    "near_duplicates": ("images in different splits look almost the same (a perceptual hash "
                        "within a few bits: crops, resizes or re-encodes of one photo), so "
                        "validation scores on them are optimistic",
                        "look at the pairs under Near-duplicates and delete (or rename, so it "
                        "hashes to the other split) one image of each pair that is a copy"),
    "objects_per_image": ("images hold more objects than quality.max_objects_per_image, or "
                          "too many hold none, so batches pad or train on empty images",
                          "check the annotations named in the evidence; raise the limits if "
                          "the dataset really is like that"),
    "box_size": ("many boxes are a few pixels wide or extremely thin, which anchors and "
                 "losses handle badly",
                 "raise pack.resize or detection.min_box_pixels, relabel the boxes named in "
                 "the evidence, or relax quality.min_box_side_px"),
    "masks": ("an image has no mask, or its mask has another size",
              "add the missing masks (same key under the masks prefix) at the image's size"),
    "class_name_case": ("two class names differ only by case (Dog, dog), so one kind of thing "
                        "is two classes with two ids and the model is asked to tell them apart",
                        "set labels.case: lower in the spec to number them as one class, or "
                        "rename the folders (or list labels) so each class is written one way"),
}

# splits.from: source — the splits are the publisher's: what a leak across them means and
# what to do differ from a split recforge drew by hash
SOURCE_SPLIT_ADVICE: dict[str, tuple[str, str]] = {
    "split_keys": ("the source puts one object in two splits (a list file names it under "
                   "both), so validation scores count an image the model trained on",
                   "fix the source's split (the list files or split folders) so each object "
                   "is in one split"),
    "split_content": ("byte-identical images sit in two of the source's own splits (copies "
                      "under different keys; public datasets ship some): validation scores "
                      "count images the model trained on",
                      "keep the official split to compare with published results, or delete "
                      "one copy of each pair named in the evidence from the source"),
    "near_duplicates": ("images in two of the source's own splits look almost the same (a "
                        "perceptual hash within a few bits: crops, resizes or re-encodes of "
                        "one photo; public datasets ship some), so validation scores on them "
                        "are optimistic",
                        "keep the official split to compare with published results, or look "
                        "at the pairs under Near-duplicates and delete one image of each pair "
                        "that is a copy from the source"),
}


def severity_words(severity: str) -> str:
    return SEVERITY_WORDS.get(severity, severity)


def explain(name: str, status: str, severity: str, *, splits_from_source: bool = False
            ) -> str:
    """The sentence under a check that warned or failed: what it means, what to do, and
    (for a warning) why it did not block publish. ``splits_from_source``: the spec keeps the
    source's own splits (``splits.from: source``), where cross-split duplicates warn by
    default."""
    means, todo = ADVICE.get(name, ("the check did not pass", "see the Data Docs evidence"))
    if splits_from_source and name in SOURCE_SPLIT_ADVICE:
        means, todo = SOURCE_SPLIT_ADVICE[name]
    text = f"Means: {means}. To do: {todo}."
    if status == "warning":
        check = CHECK_BY_NAME.get(name)
        if splits_from_source and name in SOURCE_SPLIT_WARNINGS:
            why = ("with splits.from: source it warns by default, since the splits are the "
                   "publisher's and public datasets ship known duplicates across them; set "
                   f"quality.severity.{name}: fail to make it block publish")
        elif check is not None and check.default == "warn":
            why = "it warns by default"
        else:
            why = f"this spec sets quality.severity.{name}: warn"
        text += f" Does not block publish: {why}."
    elif status == "failed":
        text += " It blocks publish: this version is not published until it passes."
    return text
