"""The dataset report: one self-contained ``report.html`` per version that people look at.

Summary, the checklist (warn shown as warn), charts, a contact sheet per class, mask
overlays (segmentation), boxes drawn per class and refused objects (detection),
near-duplicate pairs side by side, the quarantine with thumbnails and the diff against the
previous version — inline CSS, SVG and JPEG thumbnails, no network.
Floors: ``objects.py`` (a detection version's boxes in one array) → ``inputs.py`` (what a
version holds) → ``images.py`` (thumbnails from ranged reads, overlays, boxes),
``charts.py`` (SVG) and ``advice.py`` (what a check that did not pass means), ``origin.py``
(where the splits came from, what was set aside) → ``diff.py`` → ``page.py`` (the HTML).
``build_report`` is the one entry point.
"""

from recforge.report.page import build_report, render_record

__all__ = ["build_report", "render_record"]
