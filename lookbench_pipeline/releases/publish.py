"""Publishing a LookBench release: every file it holds encoded first, then written through a staging prefix
(:mod:`.publishing`), ``manifest.json`` last.

Layout in the object store (as LookBench publishes it)::

    releases/v{YYYYMMDD}/{subset}/query.parquet
    releases/v{YYYYMMDD}/{subset}/gallery.parquet
    releases/v{YYYYMMDD}/README.md          <- dataset card (Hugging Face front matter: a config per subset)
    releases/v{YYYYMMDD}/croissant.json     <- Croissant metadata
    releases/v{YYYYMMDD}/CHANGES.md, changes.parquet   <- what changed since the previous version
    releases/v{YYYYMMDD}/manifest.json      <- written last: a version exists once its manifest does
    releases/latest                          <- the newest version's name, written after its manifest
    releases/.staging/v{YYYYMMDD}-{nonce}/   <- files being published (lookbench_pipeline.releases.publishing)
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..config import DEFAULT_TAXONOMY
from ..schemas import RELEASE_REQUIRED
from ..store import ObjectStore
from . import changes as ch
from . import publishing
from .candidate import ReleaseTables, parquet_bytes
from .card import COLUMN_DOCS, CardInfo, croissant, croissant_bytes, dataset_card
from .docs import release_documents
from .reader import ReleaseExistsError, ReleaseIntegrityError, list_releases, release_prefix


class EmptyReleaseError(RuntimeError):
    """A release would have no query: nothing is published (a version is permanent, an empty one is useless)."""


DOC_TYPES = {"md": "text/markdown; charset=utf-8", "json": "application/json", "yaml": "application/yaml"}
"""Content types of the release's documents by file extension."""


def publish(rel: ReleaseTables, store: ObjectStore, provenance: dict[str, Any],
            now: datetime | None = None, card: dict[str, Any] | None = None,
            taxonomy: Path | None = None) -> dict[str, Any]:
    """Write a release to the store and return its manifest.

    Besides the data files (``<subset>/{query,gallery}.parquet``) a release holds ``README.md`` (dataset card with
    Hugging Face front matter), ``croissant.json`` (Croissant metadata), ``CHANGES.md`` and ``changes.parquet``
    (the diff against the previous published version, :mod:`lookbench_pipeline.releases.changes`) and the documents that
    make the release readable on its own (``docs/``: taxonomy, metric definitions, table schemas, sources;
    :mod:`lookbench_pipeline.releases.docs`); the manifest lists the data files under ``files`` and these under
    ``metadata_files``, each with sha256 and size, and names the taxonomy (version, path, sha256) under
    ``taxonomy``. Every file except
    the manifest is the same bytes for the same inputs (``built_at`` is the only clock in a release).

    Files go through a staging prefix, are verified after upload and after the move, then ``manifest.json`` is
    created (the version exists from that moment), then ``releases/latest``
    (:mod:`lookbench_pipeline.releases.publishing`).

    Args:
        card: licence / citation fields of :class:`lookbench_pipeline.releases.card.CardInfo` (defaults when None).
        taxonomy: the taxonomy file the labels were made with (default: the package's ``taxonomy_v2.yaml``); it is
            published byte for byte as ``docs/taxonomy.yaml``.
    Raises:
        ReleaseExistsError: the version already has a manifest with different files (versions are immutable).
        EmptyReleaseError: no subset has a query row.
        ReleaseIntegrityError: a file read back does not match, or a table has a null in a column of
            ``schemas.RELEASE_REQUIRED`` (``sample_id``, ``item_ID``): nothing is published then.
        StoreError: the store failed; nothing of this version is visible then, and a rerun completes it.
    """
    if not any(role == "query" and t.num_rows for (_, role), t in rel.files.items()):
        raise EmptyReleaseError(
            f"release {rel.version} would have no query rows (rejections: {rel.counts.get('rejected_by_reason')}); "
            "nothing was published")
    for (subset, role), t in sorted(rel.files.items()):  # the columns docs/schema.json states not nullable
        nulls = {c: t[c].null_count for c in RELEASE_REQUIRED if c in t.column_names and t[c].null_count}
        if nulls:
            raise ReleaseIntegrityError(
                f"release {rel.version}: {subset}/{role}.parquet has nulls in a column no row may leave null ("
                f"{', '.join(f'{c}: {n} rows' for c, n in nulls.items())}); nothing was published")
    prefix = release_prefix(rel.version)
    encoded = {f"{s}/{r}.parquet": parquet_bytes(t) for (s, r), t in sorted(rel.files.items())}
    files = {k: {"sha256": hashlib.sha256(v).hexdigest(), "bytes": len(v),
                 "rows": rel.files[tuple(k.removesuffix(".parquet").split("/"))].num_rows}
             for k, v in encoded.items()}
    window = {"start": rel.window.start.isoformat(), "end": rel.window.end.isoformat()}
    # what changed since the previous published version
    published = set(list_releases(store))
    prev = ch.previous_version(store, rel.version)
    before = ch.read_previous(store, prev) if prev else {}
    diff = ch.diff(rel.version, prev, {k: t.select(ch.COLUMNS) for k, t in rel.files.items()}, before)
    summary = ch.summary(diff)
    summary["previous_version"] = prev
    info = CardInfo.from_dict(card)
    readable, tax = release_documents(rel.version, Path(taxonomy or DEFAULT_TAXONOMY),
                                      provenance,
                                      info.license_text, COLUMN_DOCS)
    docs: dict[str, tuple[bytes, str]] = {
        "changes.parquet": (parquet_bytes(diff), "application/vnd.apache.parquet"),
        "CHANGES.md": (ch.markdown(diff, rel.version, prev, ch.item_counts(rel.files, before)).encode(),
                       "text/markdown; charset=utf-8"),
        **{k: (v, DOC_TYPES[k.rsplit(".", 1)[1]]) for k, v in readable.items()},
    }
    docs["README.md"] = (dataset_card(rel.version, window, files, rel.counts, summary, info,
                                      documents=sorted(readable), taxonomy=tax).encode(),
                         "text/markdown; charset=utf-8")
    metadata_files = {k: {"sha256": hashlib.sha256(d).hexdigest(), "bytes": len(d)} for k, (d, _) in docs.items()}
    metadata_files["changes.parquet"]["rows"] = diff.num_rows
    cro = croissant_bytes(croissant(rel.version, window, files, metadata_files, info))
    docs["croissant.json"] = (cro, "application/ld+json")
    metadata_files["croissant.json"] = {"sha256": hashlib.sha256(cro).hexdigest(), "bytes": len(cro)}
    metadata_files = dict(sorted(metadata_files.items()))

    manifest_key = f"{prefix}/manifest.json"
    if store.exists(manifest_key):
        existing = json.loads(store.get_bytes(manifest_key))
        # A manifest without metadata_files was written before releases carried them: same data, same release.
        same_docs = "metadata_files" not in existing or existing["metadata_files"] == metadata_files
        if existing.get("files") == files and same_docs:
            publishing.complete(store, rel.version, published)
            return {**existing, "already_published": True}
        raise ReleaseExistsError(
            f"release {rel.version} is already published at {store.url}/{prefix} with different content; "
            f"published versions are immutable. Build a new version (another date) instead.")
    now = now or datetime.now(timezone.utc)
    manifest = {
        "name": "LookBench",
        "layout": "lookbench-release/2",
        "version": rel.version,
        "window": window,
        "built_at": now.isoformat(timespec="seconds"),
        "files": files,
        "metadata_files": metadata_files,
        "schemas": {"<subset>/<role>.parquet": "release", "changes.parquet": "release_changes"},
        "taxonomy": tax,
        "changes": summary,
        "counts": rel.counts,
        **provenance,
    }
    body = json.dumps(manifest, indent=2, sort_keys=True).encode()
    parquet_type = "application/vnd.apache.parquet"
    publishing.publish_files(store, rel.version, {**{k: (v, parquet_type) for k, v in encoded.items()}, **docs},
                             body, published)
    return manifest

