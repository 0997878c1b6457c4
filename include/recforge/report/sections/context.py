"""What every section is given: :class:`Context` (the version's inputs, the record reader,
where the dataset lives, the version to diff against, the Data Docs link, the sampling seed)
and :class:`Where`."""

from __future__ import annotations

from dataclasses import dataclass

from recforge import storage
from recforge.format import names
from recforge.kinds import Kind
from recforge.report.inputs import ReportInputs
from recforge.report.records import Records


@dataclass(frozen=True)
class Where:
    """Where the dataset the report describes lives: ``uri`` is the published version (the
    one the run publishes to, for a report built before publish) unless ``published`` is
    false; then it is the staging prefix, and ``blocked`` names the failed checks (if any)
    that kept it there."""

    uri: str
    published: bool
    blocked: tuple[str, ...] = ()

    @property
    def latest(self) -> str | None:
        """``latest.json`` of the dataset (it sits next to its versions)."""
        if not self.published:
            return None
        root = self.uri.rstrip("/").rsplit("/", 1)[0]
        return storage.join(root, names.LATEST)


def where_of(inp: ReportInputs, about: dict | None, from_version: bool) -> Where:
    about = about or {}
    if about.get("blocked"):
        return Where(inp.prefix, False, tuple(about["blocked"]))
    if from_version:
        return Where(inp.prefix, True)
    if about.get("uri"):
        return Where(about["uri"], True)
    return Where(inp.prefix, False)


@dataclass(frozen=True)
class Context:
    """One page's sections' shared inputs. ``kind``: the dataset's task kind, looked up once
    (``ReportInputs.kind``); ``previous``: the prefix of the version to diff against, if any;
    ``docs_href``: the link to the Data Docs (default: ``quality/`` next to the report)."""

    inp: ReportInputs
    reader: Records
    where: Where
    kind: Kind
    previous: str | None = None
    docs_href: str | None = None
    seed: int = 0
