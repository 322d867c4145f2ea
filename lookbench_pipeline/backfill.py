"""The crawl archive: every crawl's WARC file in the object store, listed and fetched for a rebuild.

A crawl is archived by :func:`lookbench_pipeline.pipeline.stage_crawl` as ``warc/<site>/<run id>.warc.gz`` (every
response the spider received, pages and images, led by a ``warcinfo`` record) and described by
``warc/<site>/<run id>.json`` (site, run id, ``base-url`` the crawl served ``{{BASE}}`` from, ``started-at``
UTC with microseconds, ``week``: the weekly crawl partition, ``sha256`` of the WARC file). Replaying a site's
archived crawls in start order into an empty state rebuilds its weekly crawl tables, ``first_seen_at`` included, without the network
(``crawl.replay_site``); with the rebuild records of :mod:`lookbench_pipeline.records` (first-seen times of
image-drop files, AI-generation results), kept in the same store, a release window rebuilt into an empty
``data_dir`` has byte-identical files.

An archive is written once (keyed by the crawl's id) and checked on read: :func:`fetch` refuses a WARC file whose
sha256 is not its description's (:class:`ArchiveError`).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from .store import ObjectStore, StoreError, sha256_hex
from .warc import read_warcinfo


class ArchiveError(StoreError):
    """An archived crawl is corrupt or its description is not one (the message names the key)."""


@dataclass(frozen=True)
class ArchivedCrawl:
    key: str  # the WARC file's key in the store
    site: str
    run_id: str
    started_at: datetime  # UTC
    week: str | None  # the weekly crawl partition it was materialised for (None: not recorded)
    base_url: str
    sha256: str | None = None  # of the WARC file, from its description (None: archived before descriptions had it)


def _parse_time(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def archived_crawls(store: ObjectStore, site: str) -> list[ArchivedCrawl]:
    """The archived crawls of ``site``, oldest first. A WARC file without its ``.json`` description is read for
    its warcinfo record (crawls archived before descriptions existed)."""
    out = []
    keys = sorted(store.list(f"warc/{site}/"))
    for key in keys:
        if not key.endswith(".warc.gz"):
            continue
        desc = key.removesuffix(".warc.gz") + ".json"
        if desc in keys:
            try:
                info = json.loads(store.get_bytes(desc))
            except ValueError as exc:
                raise ArchiveError(f"{desc}: not a crawl description ({exc})") from None
            if not isinstance(info, dict) or not all(isinstance(v, str) for v in info.values()):
                raise ArchiveError(f"{desc}: not a crawl description (a JSON object of strings)")
        else:
            with tempfile.TemporaryDirectory() as tmp:
                p = Path(tmp) / "crawl.warc.gz"
                p.write_bytes(store.get_bytes(key))
                info = read_warcinfo(p)
        if not info.get("started-at"):
            continue  # an empty or unreadable file: nothing to replay
        out.append(ArchivedCrawl(key=key, site=site, run_id=info.get("run-id") or Path(key).name.split(".")[0],
                                 started_at=_parse_time(info["started-at"]), week=info.get("week"),
                                 base_url=info.get("base-url", ""), sha256=info.get("sha256")))
    return sorted(out, key=lambda a: (a.started_at, a.key))


def fetch(store: ObjectStore, crawl: ArchivedCrawl, dest_dir: Path) -> Path:
    """Copy an archived WARC file from the store to ``dest_dir`` (created); returns its path.

    Raises:
        ArchiveError: its sha256 is not the one its description records (corrupt or replaced).
        StoreError: it cannot be read.
    """
    data = store.get_bytes(crawl.key)
    if crawl.sha256 is not None and sha256_hex(data) != crawl.sha256:
        raise ArchiveError(f"{crawl.key}: its bytes have sha256 {sha256_hex(data)}, not the {crawl.sha256} its "
                           "description records: the archive is corrupt or was replaced")
    dest_dir.mkdir(parents=True, exist_ok=True)
    path = dest_dir / Path(crawl.key).name
    path.write_bytes(data)
    return path
