"""Label definitions for segmentation masks: which colour / id is which class, and what to train.

A ``ColorMap`` is a list of labels (name, id, trainId, optional colour and category) plus
map-wide options. Built-ins ship in ``recforge/segmentation/data/`` (``cityscapes``,
``voc``); custom maps are YAML or CSV files in the same format (docs/segmentation.md).

Colours need not be unique (Cityscapes: ids 0-4 are all black, pole/polegroup share grey,
car/license plate share dark blue). Every shared colour is found when the map is loaded and
resolved by an explicit rule, never by dictionary order:

1. ``resolve`` (colour → label name) names the winner outright (the user's override);
2. otherwise ``collision_rule: lowest_id``: the label with the smallest non-negative id wins
   (a negative id, like Cityscapes' license plate -1, means "never drawn in ground truth");
3. or ``collision_rule: error``: a shared colour whose labels map to different target values
   is an error that lists them, so the user must write ``resolve`` entries.
"""

from __future__ import annotations

import csv
import io
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path

from recforge.errors import RecforgeFailure

log = logging.getLogger(__name__)

TARGETS = ("id", "trainId")
COLLISION_RULES = ("lowest_id", "error")
BUILTIN = {"cityscapes": "cityscapes.yaml", "voc": "voc.yaml"}
DEFAULT_IGNORE = 255

Color = tuple[int, int, int]

_LABEL_KEYS = {"name", "id", "trainId", "train_id", "color", "colour", "category",
               "categoryId", "hasInstances", "ignoreInEval"}
_MAP_KEYS = {"name", "ignore_index", "indexed", "collision_rule", "resolve", "labels"}


class ColorMapError(RecforgeFailure, ValueError):
    """A colour map is invalid or ambiguous; the message names the file, the label and the fix."""


@dataclass(frozen=True)
class LabelDef:
    """One label. ``id`` is the value in id/palette masks (-1: never drawn in ground truth);
    ``train_id`` is the training class (255 or -1: ignore)."""

    name: str
    id: int
    train_id: int
    color: Color | None = None
    category: str = ""
    category_id: int | None = None
    has_instances: bool | None = None
    ignore_in_eval: bool | None = None


@dataclass(frozen=True)
class Collision:
    """A colour shared by several labels and the label chosen for it."""

    color: Color
    labels: tuple[LabelDef, ...]
    winner: LabelDef
    how: str  # "resolve" (user override) or the collision rule's name

    def values(self, target: str, ignore_index: int) -> tuple[int, ...]:
        return tuple(target_value(lab, target, ignore_index) for lab in self.labels)

    def conflicts(self, target: str, ignore_index: int) -> bool:
        """True when the colliding labels would produce different mask values for ``target``."""
        return len(set(self.values(target, ignore_index))) > 1

    def describe(self, target: str | None = None, ignore_index: int = DEFAULT_IGNORE) -> str:
        names = ", ".join(f"{lab.name!r} (id {lab.id}, trainId {lab.train_id})"
                          for lab in self.labels)
        text = f"colour {self.color} is shared by {names}; {self.how} picks {self.winner.name!r}"
        if target is not None:
            text += f" → {target} {target_value(self.winner, target, ignore_index)}"
        return text


def target_value(label: LabelDef, target: str, ignore_index: int) -> int:
    """The mask value a label becomes: its id or trainId; -1/255 (and ignore_index) → ignore."""
    v = label.id if target == "id" else label.train_id
    return ignore_index if v in (-1, 255, ignore_index) else v


def parse_color(value, where: str = "colour") -> Color:
    """``[r, g, b]``, ``"r,g,b"`` or ``"#rrggbb"`` → ``(r, g, b)``; errors say which form."""
    if isinstance(value, str):
        s = value.strip()
        if re.fullmatch(r"#[0-9a-fA-F]{6}", s):
            return (int(s[1:3], 16), int(s[3:5], 16), int(s[5:7], 16))
        value = [p for p in re.split(r"[\s,;()\[\]]+", s) if p]
    try:
        rgb = tuple(int(v) for v in value)
    except (TypeError, ValueError):
        rgb = ()
    if len(rgb) != 3 or not all(0 <= c <= 255 for c in rgb):
        raise ColorMapError(
            f"{where}: {value!r} is not a colour; write [r, g, b], 'r,g,b' or '#rrggbb' with "
            "components 0-255")
    return rgb  # type: ignore[return-value]


@dataclass(frozen=True)
class ColorMap:
    """Labels plus options. Collisions are computed once, at construction (i.e. at load)."""

    name: str
    labels: tuple[LabelDef, ...]
    ignore_index: int = DEFAULT_IGNORE
    indexed: bool = False
    collision_rule: str = "lowest_id"
    resolve: tuple[tuple[Color, str], ...] = ()
    origin: str = "<memory>"
    collisions: tuple[Collision, ...] = field(default=(), init=False, compare=False)

    def __post_init__(self):
        _validate(self)
        object.__setattr__(self, "collisions", tuple(_find_collisions(self)))

    # ---- lookups -------------------------------------------------------------------------
    @property
    def has_colors(self) -> bool:
        return any(lab.color is not None for lab in self.labels)

    @property
    def reads_palette_as_ids(self) -> bool:
        """Palette (mode P) masks: indices are ids (VOC) unless the map is defined by colour."""
        return self.indexed or not self.has_colors

    def label(self, name: str) -> LabelDef:
        for lab in self.labels:
            if lab.name == name:
                return lab
        raise KeyError(f"colour map {self.name!r} has no label {name!r}")

    def value(self, label: LabelDef, target: str) -> int:
        return target_value(label, _check_target(target), self.ignore_index)

    def color_table(self, target: str) -> dict[Color, int]:
        """Colour → mask value for ``target``, collisions resolved; raises under rule 'error'."""
        _check_target(target)
        table: dict[Color, int] = {}
        shared = {c.color: c for c in self.collisions}
        bad = [c for c in self.collisions
               if c.how == "error" and c.conflicts(target, self.ignore_index)]
        if bad:
            raise ColorMapError(
                f"colour map {self.name!r} ({self.origin}) uses collision_rule 'error' and "
                f"{len(bad)} shared colour(s) map to different {target} values:\n  "
                + "\n  ".join(c.describe() for c in bad)
                + "\nFix: add `resolve: {\"R,G,B\": label name}` entries (or --resolve "
                "'R,G,B=name'), or use collision_rule: lowest_id")
        for lab in self.labels:
            if lab.color is None or lab.color in table:
                continue
            winner = shared[lab.color].winner if lab.color in shared else lab
            table[lab.color] = self.value(winner, target)
        return table

    def id_table(self, target: str) -> dict[int, int]:
        """Id (0-255) → mask value for ``target``; labels with id -1 have no id."""
        return {lab.id: self.value(lab, target) for lab in self.labels if 0 <= lab.id <= 255}

    def classes(self, target: str) -> list[str]:
        """Class names indexed by mask value (0..N-1), ignore excluded. Several labels on one
        value (Cityscapes trainIds) → the first label in the file, as cityscapesScripts does."""
        names: dict[int, str] = {}
        for lab in self.labels:
            v = self.value(lab, target)
            if v != self.ignore_index and v not in names:
                names[v] = lab.name
        if not names:
            return []
        return [names.get(v, f"unused_{v}") for v in range(max(names) + 1)]

    # ---- derived maps --------------------------------------------------------------------
    def with_options(self, *, collision_rule: str | None = None,
                     resolve: Mapping | Iterable | None = None,
                     ignore_index: int | None = None) -> ColorMap:
        """A copy with user overrides; ``resolve`` entries are added to (and win over) the
        map's own."""
        merged = dict(self.resolve)
        if resolve:
            merged.update(_parse_resolve(resolve, self.origin))
        return replace(self, collision_rule=collision_rule or self.collision_rule,
                       resolve=tuple(merged.items()),
                       ignore_index=self.ignore_index if ignore_index is None else ignore_index)

    def with_train_ids(self, id_map: Mapping[int, int]) -> ColorMap:
        """Replace trainIds from an id → trainId map; ids it does not list become ignore."""
        id_map = {int(k): int(v) for k, v in id_map.items()}
        known = {lab.id for lab in self.labels}
        stray = sorted(set(id_map) - known)
        if stray:
            raise ColorMapError(f"id_map lists ids {stray} that colour map {self.name!r} does "
                                "not define; remove them or add the labels")
        labels = tuple(replace(lab, train_id=id_map.get(lab.id, 255)) for lab in self.labels)
        return replace(self, labels=labels)

    def summary(self, target: str) -> str:
        """A human-readable table of the map and its collisions (``recforge masks colormap``)."""
        lines = [f"colour map {self.name} ({self.origin}): {len(self.labels)} labels, "
                 f"ignore_index {self.ignore_index}, palette masks read as "
                 f"{'indices' if self.reads_palette_as_ids else 'colours'}",
                 f"{'name':<22} {'id':>4} {'trainId':>7} {'→' + target:>9}  colour"]
        for lab in self.labels:
            col = "" if lab.color is None else str(lab.color)
            lines.append(f"{lab.name:<22} {lab.id:>4} {lab.train_id:>7} "
                         f"{self.value(lab, target):>9}  {col}")
        for c in self.collisions:
            flag = "conflict" if c.conflicts(target, self.ignore_index) else "same value"
            lines.append(f"collision ({flag}): {c.describe(target, self.ignore_index)}")
        classes = self.classes(target)
        lines.append(f"{len(classes)} {target} classes: {', '.join(classes)}")
        return "\n".join(lines)


def _check_target(target: str) -> str:
    if target not in TARGETS:
        raise ColorMapError(f"target {target!r} is not one of {TARGETS}")
    return target


def _validate(cmap: ColorMap) -> None:
    where = f"colour map {cmap.name!r} ({cmap.origin})"
    if not cmap.labels:
        raise ColorMapError(f"{where}: no labels")
    if not 0 <= cmap.ignore_index <= 255:
        raise ColorMapError(f"{where}: ignore_index {cmap.ignore_index} must be 0-255 (masks "
                            "are single-channel uint8)")
    if cmap.collision_rule not in COLLISION_RULES:
        raise ColorMapError(f"{where}: collision_rule {cmap.collision_rule!r} is not one of "
                            f"{COLLISION_RULES}")
    names: set[str] = set()
    ids: dict[int, str] = {}
    for lab in cmap.labels:
        if not lab.name:
            raise ColorMapError(f"{where}: a label has an empty name")
        if lab.name in names:
            raise ColorMapError(f"{where}: label name {lab.name!r} appears twice; names must "
                                "be unique (resolve entries refer to them)")
        names.add(lab.name)
        for attr, v in (("id", lab.id), ("trainId", lab.train_id)):
            if not -1 <= v <= 255:
                raise ColorMapError(f"{where}: label {lab.name!r}: {attr} {v} must be -1..255 "
                                    "(masks are uint8; -1 or 255 means ignore)")
        if lab.id >= 0:
            if lab.id in ids:
                raise ColorMapError(f"{where}: id {lab.id} is used by both {ids[lab.id]!r} and "
                                    f"{lab.name!r}; an id must name one label")
            ids[lab.id] = lab.name


def _find_collisions(cmap: ColorMap) -> list[Collision]:
    by_color: dict[Color, list[LabelDef]] = {}
    for lab in cmap.labels:
        if lab.color is not None:
            by_color.setdefault(lab.color, []).append(lab)
    overrides = dict(cmap.resolve)
    where = f"colour map {cmap.name!r} ({cmap.origin})"
    for color, name in overrides.items():
        group = by_color.get(color, [])
        if len(group) < 2:
            raise ColorMapError(
                f"{where}: resolve lists colour {color} → {name!r}, but that colour is used by "
                f"{len(group)} label(s); resolve is only for shared colours (check the colour)")
        if name not in [lab.name for lab in group]:
            raise ColorMapError(
                f"{where}: resolve picks {name!r} for colour {color}, which is shared by "
                f"{[lab.name for lab in group]}; pick one of those")
    out = []
    for color, group in by_color.items():
        if len(group) < 2:
            continue
        if color in overrides:
            winner, how = next(lab for lab in group if lab.name == overrides[color]), "resolve"
        elif cmap.collision_rule == "lowest_id":
            drawn = [lab for lab in group if lab.id >= 0] or group
            winner, how = min(drawn, key=lambda lab: lab.id), "lowest_id"
        else:  # "error": reported by color_table() for the target that actually conflicts
            winner, how = group[0], "error"
        out.append(Collision(color, tuple(group), winner, how))
    for c in out:
        log.debug("%s: %s", where, c.describe())
    return out


def _parse_resolve(resolve, origin: str) -> dict[Color, str]:
    """``{"153,153,153": "pole"}``, ``[["#999999", "pole"]]`` or ``["153,153,153=pole"]``."""
    items = resolve.items() if isinstance(resolve, Mapping) else resolve
    out: dict[Color, str] = {}
    for item in items:
        if isinstance(item, str):
            if "=" not in item:
                raise ColorMapError(f"{origin}: resolve entry {item!r} must be 'R,G,B=label'")
            col, name = item.rsplit("=", 1)
        else:
            col, name = item
        out[parse_color(col, f"{origin}: resolve")] = str(name).strip()
    return out


# ---- loading -----------------------------------------------------------------------------
def _label_from_dict(d: Mapping, where: str) -> LabelDef:
    unknown = set(d) - _LABEL_KEYS
    if unknown:
        raise ColorMapError(f"{where}: unknown field(s) {sorted(unknown)}; allowed: "
                            f"{sorted(_LABEL_KEYS)}")
    if "name" not in d or "id" not in d:
        raise ColorMapError(f"{where}: every label needs a name and an id")

    def _int(key, default=None):
        v = d.get(key, default)
        if v is None or v == "":
            return default
        try:
            return int(v)
        except (TypeError, ValueError):
            raise ColorMapError(f"{where}: {key} {v!r} is not an integer") from None

    def _bool(key):
        v = d.get(key)
        if v is None or v == "":
            return None
        if isinstance(v, str):
            return v.strip().lower() in ("1", "true", "yes")
        return bool(v)

    lid = _int("id")
    train = _int("trainId", _int("train_id", lid))
    raw_color = d.get("color", d.get("colour"))
    color = None if raw_color in (None, "") else parse_color(raw_color, f"{where}: color")
    return LabelDef(str(d["name"]).strip(), lid, train, color, str(d.get("category") or ""),
                    _int("categoryId"), _bool("hasInstances"), _bool("ignoreInEval"))


def colormap_from_dict(data: Mapping, origin: str = "<dict>") -> ColorMap:
    """Build from the YAML document structure (see docs/segmentation.md)."""
    if not isinstance(data, Mapping) or not isinstance(data.get("labels"), list):
        raise ColorMapError(f"colour map {origin}: expected a mapping with a 'labels' list")
    unknown = set(data) - _MAP_KEYS
    if unknown:
        raise ColorMapError(f"colour map {origin}: unknown field(s) {sorted(unknown)}; "
                            f"allowed: {sorted(_MAP_KEYS)}")
    labels = tuple(_label_from_dict(d, f"colour map {origin}: label {i}")
                   if isinstance(d, Mapping) else _bad_label(origin, i, d)
                   for i, d in enumerate(data["labels"]))
    return ColorMap(
        name=str(data.get("name") or Path(origin).stem), labels=labels,
        ignore_index=int(data.get("ignore_index", DEFAULT_IGNORE)),
        indexed=bool(data.get("indexed", False)),
        collision_rule=str(data.get("collision_rule", "lowest_id")),
        resolve=tuple(_parse_resolve(data.get("resolve") or {}, origin).items()),
        origin=origin)


def _bad_label(origin: str, i: int, d) -> LabelDef:
    raise ColorMapError(f"colour map {origin}: label {i} is {d!r}, expected a mapping "
                        "like {name: road, id: 7, trainId: 0, color: [128, 64, 128]}")


def colormap_from_csv(text: str, origin: str = "<csv>", **options) -> ColorMap:
    """CSV with a header: ``name,id[,trainId][,r,g,b | ,color][,category]``; '#' lines skipped.
    Map-wide options (ignore_index, indexed, collision_rule, resolve) come as keywords."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    rows = list(csv.DictReader(io.StringIO("\n".join(lines)), skipinitialspace=True))
    if not rows:
        raise ColorMapError(f"colour map {origin}: no rows under the header")
    labels = []
    for n, row in enumerate(rows, 2):
        row = {k.strip(): (v.strip() if isinstance(v, str) else v) for k, v in row.items()
               if k is not None}
        rgb = [row.pop(c, "") for c in ("r", "g", "b")]
        if any(rgb):
            row["color"] = rgb
        row = {k: v for k, v in row.items() if v not in (None, "")}
        labels.append(_label_from_dict(row, f"colour map {origin}: line {n}"))
    unknown = set(options) - (_MAP_KEYS - {"labels", "name"})
    if unknown:
        raise ColorMapError(f"colour map {origin}: unknown option(s) {sorted(unknown)}")
    return ColorMap(
        name=Path(origin).stem, labels=tuple(labels),
        ignore_index=int(options.get("ignore_index", DEFAULT_IGNORE)),
        indexed=bool(options.get("indexed", False)),
        collision_rule=str(options.get("collision_rule", "lowest_id")),
        resolve=tuple(_parse_resolve(options.get("resolve") or {}, origin).items()),
        origin=origin)


def colormap_from_id_map(id_map: Mapping[int, int], name: str = "id_map",
                         ignore_index: int = DEFAULT_IGNORE) -> ColorMap:
    """An id → trainId map with no colours (single-channel id masks only)."""
    labels = tuple(LabelDef(f"id_{int(k)}", int(k), int(v)) for k, v in sorted(
        id_map.items(), key=lambda kv: int(kv[0])))
    return ColorMap(name=name, labels=labels, ignore_index=ignore_index, origin="id_map")


def load_colormap(ref: str | Path, *, collision_rule: str | None = None,
                  resolve: Mapping | Iterable | None = None,
                  ignore_index: int | None = None, indexed: bool | None = None) -> ColorMap:
    """``cityscapes``, ``voc`` or a path to a ``.yaml``/``.yml``/``.csv`` map; keyword options
    override what the file says. Collisions are detected here and logged."""
    import yaml

    ref_s = str(ref)
    if ref_s in BUILTIN:
        text = (resources.files("recforge.segmentation") / "data" / BUILTIN[ref_s]).read_text(
            "utf-8")
        origin = f"builtin:{ref_s}"
        suffix = ".yaml"
    else:
        path = Path(ref_s)
        if not path.is_file():
            raise ColorMapError(f"colour map {ref_s!r} is neither a built-in {sorted(BUILTIN)} "
                                "nor an existing .yaml/.csv file")
        text, origin, suffix = path.read_text("utf-8"), str(path), path.suffix.lower()
    if suffix == ".csv":
        cmap = colormap_from_csv(text, origin)
    elif suffix in (".yaml", ".yml"):
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ColorMapError(f"colour map {origin}: not valid YAML: {exc}") from None
        cmap = colormap_from_dict(data, origin)
    else:
        raise ColorMapError(f"colour map {origin}: unknown extension {suffix!r}; use .yaml, "
                            ".yml or .csv")
    if indexed is not None:
        cmap = replace(cmap, indexed=indexed)
    cmap = cmap.with_options(collision_rule=collision_rule, resolve=resolve,
                             ignore_index=ignore_index)
    for c in cmap.collisions:
        log.debug("colour map %s: %s", cmap.name, c.describe())
    return cmap


def classes_document(cmap: ColorMap, target: str) -> dict:
    """The ``classes.json`` of a segmentation dataset (same keys as labels.classes_document,
    plus the label definition that produced the masks)."""
    classes = cmap.classes(target)
    colors = {}
    for lab in cmap.labels:
        v = cmap.value(lab, target)
        if v != cmap.ignore_index and lab.color is not None and v not in colors:
            colors[v] = list(lab.color)
    return {"num_classes": len(classes), "classes": classes,
            "ids": {name: i for i, name in enumerate(classes)},
            "ignore_index": cmap.ignore_index, "target": target, "colormap": cmap.name,
            "colors": [colors.get(i) for i in range(len(classes))],
            "based_on_version": None}
