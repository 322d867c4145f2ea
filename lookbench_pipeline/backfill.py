"""The crawl archive: every crawl's WARC file in the object store, listed and fetched for a rebuild.

A crawl is archived by :func:`lookbench_pipeline.pipeline.stage_crawl` as ``warc/<site>/<run id>.warc.gz`` (every
response the spider received, pages and images, led by a ``warcinfo`` record) and described by
``warc/<site>/<run id>.json`` (site, run id, ``base-url`` the crawl served ``{{BASE}}`` from and ``base-urls``
every origin its attempts served it from, oldest first, a crawl resumed after a kill getting a new port each time,
``started-at`` UTC with microseconds, ``week``: the weekly crawl partition, ``sha256`` of the WARC file).
Replaying a site's archived crawls in start order into an empty state rebuilds its weekly crawl tables,
``first_seen_at`` included, without the network (``crawl.replay_site``); with the rebuild records of
:mod:`lookbench_pipeline.records` (first-seen times of image-drop files, AI-generation results), kept in the same
store, a release window rebuilt into an empty ``data_dir`` has byte-identical files.

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
from .warc import read_warcinfo, warcinfo_record
from .windows import week_key


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


def archive_crawl(store: ObjectStore, warc: Path, info: dict[str, str]) -> str:
    """Archive one crawl's WARC file as ``warc/<site>/<run-id>.warc.gz``, led by a ``warcinfo`` record of ``info``
    (``site``, ``run-id``, ``base-url``, ``started-at`` UTC, the crawl partition's ``week``...), and describe it
    in ``warc/<site>/<run-id>.json`` (the same fields, the key and the archive's ``sha256``): what
    :func:`archived_crawls` lists and :func:`fetch` checks. An archive already in the store (a resumed run of a
    crawl archived before a kill) is kept as it is: archives are written once. Returns the archive's key."""
    key = f"warc/{info['site']}/{info['run-id']}.warc.gz"
    if store.exists(key):
        return key
    data = warcinfo_record(info) + warc.read_bytes()
    store.put_bytes(key, data, "application/warc")
    store.put_bytes(key.removesuffix(".warc.gz") + ".json",
                    json.dumps({**info, "key": key, "sha256": sha256_hex(data)}, indent=1, sort_keys=True).encode(),
                    "application/json")
    return key


def archive_week(crawl: ArchivedCrawl, tz: str = "UTC") -> str:
    """The weekly crawl partition (week key) an archived crawl belongs to: the week it recorded, else (archived
    before weeks were recorded) the week of its start in ``tz``."""
    return crawl.week or week_key(crawl.started_at, tz)


def archived_in_week(store: ObjectStore, site: str, week: str, tz: str = "UTC") -> list[ArchivedCrawl]:
    """The archived crawls of ``site`` that belong to ``week`` (:func:`archive_week`), oldest first: a week
    crawled twice is replayed twice, in order, and its partition is the last crawl."""
    return [a for a in archived_crawls(store, site) if archive_week(a, tz) == week]


def replay_plan(store: ObjectStore, site: str, before: datetime, tz: str = "UTC") -> tuple[list[ArchivedCrawl],
                                                                                           list[str]]:
    """What a rebuild of a window ending at ``before`` replays for ``site``: its archived crawls that started
    before then (oldest first) and their weeks, in order, each once."""
    archived = [a for a in archived_crawls(store, site) if a.started_at < before]
    return archived, list(dict.fromkeys(archive_week(a, tz) for a in archived))


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
