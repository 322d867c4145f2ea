"""The documents that travel with a release: the dataset card (``README.md`` with Hugging Face YAML front matter) and
Croissant metadata (``croissant.json``, JSON-LD per the MLCommons Croissant 1.0 specification,
http://mlcommons.org/croissant/1.0).

Both are made from the release's files and counts only (no clock, no store location), so two builds of the same
release give byte-identical documents. ``tests/test_publish_consumers.py`` checks that Hugging Face ``datasets``
loads the release folder through the card's ``configs`` and that ``mlcroissant`` validates the Croissant file and
iterates its records.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import yaml

from .. import schemas
from ..windows import utc_bound
from .reader import NOISE, default_config  # the default config is chosen where a pull limits a card too

CROISSANT_CONTEXT: dict[str, Any] = {
    "@language": "en", "@vocab": "https://schema.org/", "citeAs": "cr:citeAs", "column": "cr:column",
    "conformsTo": "dct:conformsTo", "cr": "http://mlcommons.org/croissant/", "rai": "http://mlcommons.org/croissant/RAI/",
    "data": {"@id": "cr:data", "@type": "@json"}, "dataType": {"@id": "cr:dataType", "@type": "@vocab"},
    "dct": "http://purl.org/dc/terms/", "equivalentProperty": "cr:equivalentProperty",
    "examples": {"@id": "cr:examples", "@type": "@json"}, "extract": "cr:extract", "field": "cr:field",
    "fileProperty": "cr:fileProperty", "fileObject": "cr:fileObject", "fileSet": "cr:fileSet", "format": "cr:format",
    "includes": "cr:includes", "isLiveDataset": "cr:isLiveDataset", "jsonPath": "cr:jsonPath", "key": "cr:key",
    "md5": "cr:md5", "parentField": "cr:parentField", "path": "cr:path", "recordSet": "cr:recordSet",
    "references": "cr:references", "regex": "cr:regex", "repeated": "cr:repeated", "replace": "cr:replace",
    "samplingRate": "cr:samplingRate", "sc": "https://schema.org/", "separator": "cr:separator", "source": "cr:source",
    "subField": "cr:subField", "transform": "cr:transform",
}
"""The JSON-LD ``@context`` of the Croissant 1.0 specification."""

COLUMN_DOCS = {
    "image": "the picture, JPEG bytes without EXIF (Hugging Face `Image`: `{bytes, path}`, path = `<sha256>.jpg`)",
    "item_ID": "the product (item) the picture shows; a query's positives are the gallery rows with its item_ID",
    "category": "garment category (the taxonomy is `docs/taxonomy.yaml`; its version and sha256 are in the manifest)",
    "main_attribute": "the category's main attribute, `name: value`",
    "other_attributes": "the other attributes, `name: value; name: value`",
    "task": "`single-item` or `multi-item` (a street look with several items); `distractor` in the noise gallery",
    "difficulty": "`easy`, `medium` or `hard` (by subset); `n/a` in the noise gallery",
    "sample_id": "stable id of the row (16 hex digits)",
    "subset": "the subset (config) of the row",
    "role": "`query` or `gallery`",
    "attributes": "every attribute label as a list of `{name, value}`",
    "annotator": "name and version of what produced the labels, of the category when several did (an image model: "
                 "`vlm:<model>@<prompt>+judge:…`; a data set's own annotation file: `import:<data set>`; the shop's "
                 "attribute facets: `facets:schema.org` / `facets:items-sheet`; the catalogue text: `catalog-text/1`)",
    "image_sha256": "sha256 of the original image bytes (hex); for a detected street-look item, of its crop",
    "width": "width of the original image in pixels, after EXIF orientation (of the crop for a detected item)",
    "height": "height of the original image in pixels, after EXIF orientation (of the crop for a detected item)",
    "look_id": "the \"shop the look\" block (or street photo) a street-look query comes from (null otherwise)",
    "box": "`[x1, y1, x2, y2]` in pixels of the item on the look image, when known (else null)",
    "item_index": "a detected street-look item's number in its look (by detector score; null otherwise)",
    "site": "the shop (or `drop:<name>` for an image drop, `legacy:<source>` for a noise-gallery distractor)",
    "source_url": "where the image was found (a path within the legacy source for a distractor)",
    "crawled_at": "UTC time of the crawl that fetched the row's content (microseconds)",
    "first_seen_at": "UTC time the item was first seen (microseconds); the release window filters on it",
    "generation": "AI-generated queries: `{request_id, generator_model, generator_version, prompt, seed, "
                  "reference_image_sha256, similarity}` (null for real images; docs/AIGEN.md)",
}

SIZE_CATEGORIES = [(1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
                   (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M")]


@dataclass(frozen=True)
class CardInfo:
    """What the card and the Croissant file say about terms and provenance.

    ``license`` is a Hugging Face licence id (``apache-2.0``, ``cc-by-nc-4.0``…) or ``other``; with ``other``,
    ``license_name`` names the terms and ``license_link`` (a URL, optional) points to them.
    """

    license: str = "other"
    license_name: str = "source-site-terms"
    license_link: str | None = None
    license_text: str = ("The pictures and catalogue texts belong to the shops they were collected from and are "
                         "redistributed here only for non-commercial research evaluation of image retrieval, under "
                         "those sites' terms. Do not train on them. The labels and the file layout may be used "
                         "freely for research.")
    homepage: str | None = None
    citation: str = ("LookBench: A Live and Holistic Open Benchmark for Fashion Image Retrieval. "
                     "arXiv:2601.14706, 2026.")
    publisher: str = "LookBench Pipeline"

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "CardInfo":
        return cls(**{k: v for k, v in (d or {}).items() if v is not None})


def size_category(n: int) -> str:
    """Hugging Face ``size_categories`` bucket of ``n`` rows."""
    for limit, name in SIZE_CATEGORIES:
        if n < limit:
            return name
    return "n>100M"


def _subsets(files: dict[str, dict]) -> list[str]:
    return sorted({k.split("/")[0] for k in files if "/" in k})


DOCUMENTS = {
    "docs/taxonomy.yaml": "the taxonomy the labels use: categories, attributes, their values and synonyms, each value "
                          "mapped to Fashionpedia attribute ids; `\"not visible\"` means the attribute cannot be seen "
                          "in the picture",
    "docs/METRICS.md": "how Coarse / Fine / exact-item Recall@K, graded nDCG@K, distractor@1 and the cutoff are "
                       "defined, with sources",
    "docs/schema.json": "every column of every table (name, Arrow type, nullable, meaning), machine-readable",
    "docs/SOURCES.md": "where the pictures and labels come from, their licences, the label sources and their "
                       "measured precision, the models that shaped the release",
}
"""What each document a release carries (:mod:`lookbench_pipeline.releases.docs`) is for, by its path."""

OTHER_FILES = {"README.md": "the dataset card (Hugging Face front matter: a config per subset)",
               "CHANGES.md": "what changed since the previous release (items and rows per file, largest shifts)"}
ENCODING_FORMATS = {"md": "text/markdown", "json": "application/json", "yaml": "application/yaml"}


def dataset_card(version: str, window: dict[str, str], files: dict[str, dict], counts: dict[str, Any],
                 changes: dict[str, Any], info: CardInfo, documents: list[str] | None = None,
                 taxonomy: dict[str, Any] | None = None) -> str:
    """``README.md`` of a release: YAML front matter (``configs`` per subset with ``query`` and ``gallery``
    splits, one marked ``default: true`` (:func:`default_config`), ``license``, ``size_categories`` — by the
    rows of all files together, each subset's gallery counted —, ``task_categories``…) and a card body.

    Args:
        files: ``{"<subset>/<role>.parquet": {"sha256", "bytes", "rows"}}`` of the data files.
        counts: the release's counts (``query_rows``, ``gallery_rows_distinct``, ``rejected_by_reason``…).
        changes: :func:`lookbench_pipeline.releases.changes.summary` of the release.
        documents: paths (inside the release) of the documents it carries (``docs/…``); the card lists them.
        taxonomy: the manifest's ``taxonomy`` entry (``version``, ``path``, ``sha256``).
    """
    subsets = _subsets(files)
    total = sum(f["rows"] for f in files.values())
    front: dict[str, Any] = {
        "pretty_name": f"LookBench {version}",
        "license": info.license,
    }
    if info.license == "other":
        front["license_name"] = info.license_name
        if info.license_link:
            front["license_link"] = info.license_link
    front.update({
        "language": ["en"],
        "size_categories": [size_category(total)],
        "task_categories": ["image-feature-extraction"],
        "tags": ["fashion", "image-retrieval", "benchmark", "live-benchmark", "croissant"],
        "configs": [{"config_name": s, "data_files": [
            {"split": role, "path": f"{s}/{role}.parquet"} for role in ("query", "gallery")
            if f"{s}/{role}.parquet" in files], **({"default": True} if s == default_config(subsets) else {})}
            for s in subsets],
    })
    yml = yaml.safe_dump(front, sort_keys=False, allow_unicode=True, width=1000)
    w0, w1 = utc_bound(window["start"]), utc_bound(window["end"])
    lines = [f"---\n{yml}---", "", f"# LookBench {version}", "",
             "A live, contamination-aware fashion image retrieval benchmark built from public shop websites: each "
             "subset has a `query` split (pictures to search with) and a `gallery` split (the whole catalogue of "
             "the window; a query's positives are the gallery rows with its `item_ID`, every other row is a "
             "distractor)." + (f" The `{NOISE}` config has only a `gallery` split: pictures from Fashion200K that look "
                               "like a query item but are not it (soft negatives); add them to every subset's gallery "
                               "when evaluating." if NOISE in subsets else ""), "",
             f"* **Version** `{version}`; items first seen in **[{w0}, {w1})** (UTC).",
             f"* **Previous release** {('`' + changes['previous_version'] + '`') if changes.get('previous_version') else 'none'}"
             " — what changed: `CHANGES.md` and `changes.parquet`.",
             "* **Integrity**: `manifest.json` lists the sha256 and size of every file; `croissant.json` is the "
             "Croissant (MLCommons) description."]
    if taxonomy:
        lines.append(f"* **Labels**: taxonomy version `{taxonomy['version']}` (`{taxonomy['path']}`, sha256 "
                     f"`{taxonomy['sha256'][:16]}…`); the `annotator` column names what labelled each row.")
    if documents:
        lines += ["", "## Documents in this folder", "",
                  "Everything needed to read this release is inside it:", "", "| file | what |", "|---|---|"]
        lines += [f"| `{d}` | {DOCUMENTS.get(d, '')} |" for d in documents]
    lines += ["",
             "| subset (config) | query rows | gallery rows |", "|---|---:|---:|"]
    for s in subsets:
        q = files.get(f"{s}/query.parquet", {}).get("rows", 0)
        g = files.get(f"{s}/gallery.parquet", {}).get("rows", 0)
        lines.append(f"| {s} | {q} | {g} |")
    rej = counts.get("rejected_by_reason") or {}
    lines += ["", f"Candidates: {counts.get('candidates', 'n/a')}; kept as queries: {counts.get('query_rows', 'n/a')}; "
              f"distinct gallery pictures: {counts.get('gallery_rows_distinct', 'n/a')}; rejected: "
              f"{counts.get('rejected', 'n/a')}" + (" (" + ", ".join(f"{k}: {v}" for k, v in rej.items()) + ")"
                                                    if rej else "") + ".", "",
              "## Loading", "", "```python",
              "from datasets import load_dataset",
              f"ds = load_dataset(\"path/to/{version}\", \"{subsets[0] if subsets else 'real_studio_flat'}\")"
              "   # a pulled release folder; splits query / gallery",
              f"q = load_dataset(\"parquet\", data_files={{\"query\": \"{version}/<subset>/query.parquet\"}})",
              "```", "",
              "With the `look-bench` package, whose loader reads the Hugging Face id `srpone/look-bench`: put (or "
              "link) this folder at `./srpone/look-bench` and call `look_bench.utils.load_lookbench_dataset(\"<subset>\")` "
              "from the folder above it (`datasets` takes a local folder before the Hub). With DuckDB: "
              f"`SELECT category, count(*) FROM read_parquet('{version}/*/query.parquet') GROUP BY ALL`.", "",
              "## Columns", "", "| column | type | meaning |", "|---|---|---|"]
    for f in schemas.RELEASE:
        t = "Image" if f.name == "image" else str(f.type)
        lines.append(f"| `{f.name}` | `{t}` | {COLUMN_DOCS.get(f.name, '')} |")
    lines += ["", "## Licence", "", info.license_text, ""]
    if info.license_link:
        lines += [f"Terms: {info.license_link}", ""]
    lines += ["## Citation", "", info.citation, ""]
    return "\n".join(lines)


def _data_type(t: pa.DataType) -> str:
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "sc:Text"
    if pa.types.is_integer(t):
        return "sc:Integer"
    if pa.types.is_floating(t):
        return "sc:Float"
    if pa.types.is_timestamp(t):
        return "sc:DateTime"
    if pa.types.is_boolean(t):
        return "sc:Boolean"
    raise ValueError(f"no Croissant data type for Arrow type {t}")


def _fields(record_set: str, file_id: str, schema: pa.Schema) -> list[dict[str, Any]]:
    def source(column: str, json_path: str | None = None) -> dict[str, Any]:
        s: dict[str, Any] = {"fileObject": {"@id": file_id}, "extract": {"column": column}}
        if json_path:
            s["transform"] = {"jsonPath": json_path}
        return s

    out = []
    for f in schema:
        fid = f"{record_set}/{f.name}"
        base = {"@type": "cr:Field", "@id": fid, "name": f.name}
        if f.name in COLUMN_DOCS:
            base["description"] = COLUMN_DOCS[f.name]
        if f.name == "image":
            out.append({**base, "dataType": "sc:ImageObject", "source": source("image", "bytes")})
        elif pa.types.is_list(f.type) and pa.types.is_struct(f.type.value_type):
            st = f.type.value_type
            out.append({**base, "repeated": True, "subField": [
                {"@type": "cr:Field", "@id": f"{fid}/{st.field(i).name}", "name": st.field(i).name,
                 "dataType": _data_type(st.field(i).type), "source": source(f.name, st.field(i).name)}
                for i in range(st.num_fields)]})
        elif pa.types.is_struct(f.type):  # one record per row (the AI-generated images' provenance)
            out.append({**base, "subField": [
                {"@type": "cr:Field", "@id": f"{fid}/{f.type.field(i).name}", "name": f.type.field(i).name,
                 "dataType": _data_type(f.type.field(i).type), "source": source(f.name, f.type.field(i).name)}
                for i in range(f.type.num_fields)]})
        elif pa.types.is_list(f.type) or pa.types.is_fixed_size_list(f.type):
            out.append({**base, "dataType": _data_type(f.type.value_type), "repeated": True,
                        "source": source(f.name)})
        else:
            out.append({**base, "dataType": _data_type(f.type), "source": source(f.name)})
    return out


def croissant(version: str, window: dict[str, str], files: dict[str, dict], metadata_files: dict[str, dict],
              info: CardInfo) -> dict[str, Any]:
    """Croissant 1.0 JSON-LD of a release: one ``FileObject`` per Parquet file (with its sha256, relative
    ``contentUrl``) and one ``RecordSet`` per file (``<subset>/<role>``, and ``changes``) whose fields are the
    file's columns (the image through ``jsonPath: bytes``, attributes as a repeated field of ``{name, value}``).

    Args:
        files: the data files, ``{"<subset>/<role>.parquet": {"sha256", "bytes", "rows"}}``.
        metadata_files: the release's other files (``changes.parquet`` gets a record set; the documents —
            ``README.md``, ``CHANGES.md``, ``docs/…`` — a ``FileObject`` each, with sha256 and relative path).
    """
    dated = re.fullmatch(r"v(\d{4})(\d{2})(\d{2})", version)
    distribution, record_sets = [], []
    tables = [(k, schemas.RELEASE, k.removesuffix(".parquet"), f"{k.split('/')[1].removesuffix('.parquet')} "
               f"split of subset {k.split('/')[0]}") for k in sorted(files)]
    if "changes.parquet" in metadata_files:
        tables.append(("changes.parquet", schemas.RELEASE_CHANGES, "changes",
                       "changes since the previous release (items added and retired, share shifts)"))
    every = {**files, **metadata_files}
    for key, schema, rs_id, desc in tables:
        distribution.append({"@type": "cr:FileObject", "@id": key, "name": key, "contentUrl": key,
                             "contentSize": f"{every[key]['bytes']} B", "encodingFormat": "application/x-parquet",
                             "sha256": every[key]["sha256"]})
        record_sets.append({"@type": "cr:RecordSet", "@id": rs_id, "name": rs_id, "description": desc,
                            "field": _fields(rs_id, key, schema)})
    # the documents that make the release readable on its own (card, changes, taxonomy, metrics, schemas, sources)
    for key in sorted(k for k in metadata_files if not k.endswith(".parquet") and k != "croissant.json"):
        distribution.append({"@type": "cr:FileObject", "@id": key, "name": key, "contentUrl": key,
                             "description": DOCUMENTS.get(key) or OTHER_FILES.get(key, ""),
                             "contentSize": f"{metadata_files[key]['bytes']} B",
                             "encodingFormat": ENCODING_FORMATS[key.rsplit(".", 1)[1]],
                             "sha256": metadata_files[key]["sha256"]})
    if info.license != "other":
        license_ = f"https://spdx.org/licenses/{info.license}.html" if info.license else None
    else:
        license_ = info.license_link or f"{info.license_name}: {info.license_text}"
    doc: dict[str, Any] = {
        "@context": CROISSANT_CONTEXT,
        "@type": "sc:Dataset",
        "name": f"LookBench-{version}",
        "description": (f"LookBench {version}: a live, contamination-aware fashion image retrieval benchmark "
                        f"(query and gallery splits per subset) of items first seen in [{utc_bound(window['start'])}, "
                        f"{utc_bound(window['end'])}) UTC."),
        "conformsTo": "http://mlcommons.org/croissant/1.0",
        "citeAs": info.citation,
        # the version as MAJOR.MINOR.PATCH (Croissant asks for semantic versions): v20260701 -> 2026.7.1
        "version": ".".join(str(int(g)) for g in dated.groups()) if dated else version,
        "license": license_,
        "keywords": ["fashion", "image retrieval", "benchmark", "live benchmark"],
        "creator": {"@type": "sc:Organization", "name": info.publisher},
        "distribution": distribution,
        "recordSet": record_sets,
    }
    if dated:
        doc["datePublished"] = "-".join(dated.groups())
    if info.homepage:
        doc["url"] = info.homepage
    return doc


def croissant_bytes(doc: dict[str, Any]) -> bytes:
    """Deterministic encoding of a Croissant document."""
    return (json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()
