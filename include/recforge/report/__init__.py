"""The dataset report: one self-contained ``report.html`` per version that people look at.

Summary, the checklist (warn shown as warn), charts, a contact sheet per class, mask
overlays (segmentation), boxes drawn per class and refused objects (detection),
near-duplicate pairs side by side, the quarantine with thumbnails and the diff against the
previous version — inline CSS, SVG and JPEG thumbnails, no network.
Floors: ``objects.py`` (a detection version's boxes in one array) → ``inputs.py`` (what a
version holds, and its task kind) → ``images.py`` (thumbnails from ranged reads, overlays,
boxes) → ``records.py`` (the record reader: a sampled record's image and mask) →
``render.py`` (one record as a PNG), ``charts.py`` (SVG), ``advice.py`` (what a check that
did not pass means), ``origin.py`` (where the splits came from, what was set aside) and
``diff.py`` → ``sections/`` (one module per section, and the table of which task kinds show
each) → ``page.py`` (the page: the kind's sections in one HTML file, styled by ``page.css``).
``build_report`` is the one entry point; ``render_record`` draws one record.
"""

from recforge.report.page import build_report
from recforge.report.render import render_record

__all__ = ["build_report", "render_record"]
