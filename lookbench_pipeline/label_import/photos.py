"""Imported labels of a drop's photos: which photos an annotation file's entries describe (:func:`photo_names`),
one label row per photo (:func:`photo_label`), a drop's imports with their counts (:func:`import_drop`) and the
check ``lookbench build`` runs before a run (:func:`check_drop`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from ..config import ConfigError, template_fields
from ..taxonomy import Taxonomy
from .mapper import LabelMapper
from .readers import Garment, read_annotation_file

if TYPE_CHECKING:
    from ..config import DropConfig


def photo_names(g: Garment, templates: Sequence[str]) -> list[str]:
    """The drop-relative file names ``g``'s templates give (a template needing a field the entry lacks gives
    none)."""
    values = {"file_name": g.file_name, "stem": Path(g.file_name).stem if g.file_name else None,
              "image_id": g.image_id}
    out = []
    for t in templates:
        if any(values[f] in (None, "") for f in template_fields(t)):
            continue
        try:
            out.append(Path(t.format(**values)).as_posix())
        except (ValueError, TypeError):  # a format spec that does not fit this entry's value ({image_id:08d})
            continue
    return list(dict.fromkeys(out))


@dataclass
class DropImport:
    """A drop's imported labels: per photo (its path in the resolved drop folder, as ``drop_items.path``) its
    candidate label rows, one per annotation source that describes it; ``counts`` per source."""

    photos: dict[str, list[dict]]
    counts: dict[str, dict[str, Any]]


def import_drop(drop: "DropConfig", mapper: LabelMapper) -> DropImport:
    """Read every annotation file of ``drop`` and match its entries to the drop's files.

    Counts per source (``<kind>:<file name>[#view]``): ``entries = mapped + unmapped + no_photo`` (an entry whose
    image names no file of the drop is ``no_photo``; ``unmapped.<reason>``), ``photos`` (files described).

    Raises:
        ConfigError: a file is unreadable or malformed (the message names it and the entry).
    """
    from ..drops import files

    photos = {rel: str(p) for _, rel, p in files(drop)}
    out: dict[str, list[dict]] = {}
    counts: dict[str, dict[str, Any]] = {}
    for src in drop.annotations:
        af = read_annotation_file(src, mapper)
        by_photo: dict[str, list[Garment]] = {}
        c: Counter = Counter(entries=len(af.garments))
        for g in af.garments:
            rels = [r for r in photo_names(g, src.image_name) if r in photos] if g.reason != "unknown_image" else []
            if g.reason == "unknown_image":
                c["unmapped"] += 1
                c["unmapped.unknown_image"] += 1
                continue
            if not rels:
                c["no_photo"] += 1
                continue
            if g.reason is None:
                c["mapped"] += 1
            else:
                c["unmapped"] += 1
                c[f"unmapped.{g.reason}"] += 1
            for r in rels:
                by_photo.setdefault(r, []).append(g)
        labelled = 0
        for rel, gs in sorted(by_photo.items()):
            row = photo_label(gs, af.annotator, mapper.tax.version)
            labelled += row["status"] == "labelled"
            out.setdefault(photos[rel], []).append(row)
        name = f"{src.kind}:{Path(src.path).name}" + (f"#{src.view}" if src.kind == "vitonhd" else "")
        counts[name] = {"mapped": 0, "unmapped": 0, "no_photo": 0, **dict(sorted(c.items())),
                        "photos": len(by_photo), "photos_labelled": labelled}
        cc = counts[name]
        assert cc["entries"] == cc["mapped"] + cc["unmapped"] + cc["no_photo"], cc
    return DropImport(out, counts)


def photo_label(garments: Sequence[Garment], annotator: str, taxonomy_version: str) -> dict[str, Any]:
    """One photo's label row from the entries that describe it: its largest mapped garment (box area; the first
    on a tie) gives category, attributes and box; every mapped garment is in ``garments``; every unmapped value
    and entry in ``unmapped``. No mapped garment: ``rejected`` with ``<annotator>:<reason of the first entry>``."""
    whole = [g for g in garments if not g.part and g.reason is None]
    unmapped = [u for g in garments for u in g.unmapped]
    unmapped += [{"name": "part", "value": g.source_category, "reason": g.reason} for g in garments
                 if g.part and g.reason is not None]
    row: dict[str, Any] = {"status": "rejected", "reason": None, "category": None, "attributes": [],
                           "annotator": annotator, "taxonomy_version": taxonomy_version,
                           "garments": [g.struct() for g in whole], "unmapped": unmapped}
    if not whole:
        first = next((g.reason for g in garments if g.reason), "no_garment")
        row["reason"] = f"{annotator}:{first}"
        return row
    main = max(enumerate(whole), key=lambda ig: (ig[1].area, -ig[0]))[1]
    row.update(status="labelled", category=main.category, box=main.box,
               attributes=[{"name": k, "value": v} for k, v in sorted(main.attributes.items())])
    return row


def check_drop(drop: "DropConfig", taxonomy: Taxonomy) -> dict[str, dict[str, Any]]:
    """Read every annotation file of ``drop`` (``lookbench build`` calls it before any run, as it does the item
    sheet): the per-source counts. Raises ConfigError naming the file and the entry."""
    if not drop.annotations:
        return {}
    try:
        return import_drop(drop, LabelMapper(taxonomy)).counts
    except ConfigError as exc:
        raise ConfigError(f"drop {drop.name!r}: {exc}") from exc
