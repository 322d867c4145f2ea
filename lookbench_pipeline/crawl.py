"""Running a site's crawl: serve the demo shop or the replayed pages on 127.0.0.1 when the site needs it (with
the local server the caller passes in), run the Scrapy ``shop`` spider in a child process (Twisted's reactor cannot restart inside one process), and read its feed.

Then :func:`merge_catalog` turns the feed into the ``products``, ``looks`` and ``crawl_log`` tables, keeping
``first_seen_at`` from the previous state of the same site: the first crawl that saw an item sets it for good.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import pyarrow as pa
import pyarrow.parquet as pq

from . import schemas
from .config import SiteConfig
from .crawl_tables import MAX_PAGES_REACHED, REJECTED, CrawlTables
from .extract import canonical, path_key, product_key
from .layout import DataLayout, site_state_dir

log = logging.getLogger(__name__)

CRAWLERS_DIR = Path(__file__).resolve().parents[1] / "crawlers"


class CrawlError(RuntimeError):
    """The spider process failed (the message carries the end of its log)."""


@dataclass
class CrawlOutput:
    site: str
    feed: Path
    log_file: Path
    base_url: str
    items: list[dict]
    crawl_id: str | None = None  # stable across the attempts of one resumed crawl (its archive's key)
    started_at: str | None = None  # the first attempt's start (UTC, ISO 8601)
    reused: bool = False  # a finished crawl read back, not crawled again
    base_urls: list[str] | None = None  # every attempt's serving origin, oldest first (the last is base_url)
    unreachable: dict[str, int] | None = None  # the site did not answer (:func:`unreachable_reasons`): its reasons
    # a crawl again (``again``) found the site unreachable: its reasons; the finished crawl was kept and is read back
    again_unreachable: dict[str, int] | None = None

    def __post_init__(self) -> None:
        if self.unreachable is None:
            self.unreachable = unreachable_reasons(self.items) or None

    def of_kind(self, kind: str) -> list[dict]:
        return [i for i in self.items if i.get("kind") == kind]


def spider_command(site_config_path: Path, base_url: str, out_dir: Path, user_agent: str,
                   cache_dir: Path | None = None, resume: bool = False,
                   extra_settings: dict[str, str] | None = None,
                   origin_aliases: list[str] | None = None) -> tuple[list[str], dict[str, str]]:
    """The ``scrapy crawl shop`` command line and environment for one site (see :func:`run_spider`).
    ``extra_settings``: more Scrapy settings (``-s NAME=VALUE``), e.g. a replay's. ``origin_aliases``: origins
    an earlier attempt of the same crawl served ``{{BASE}}`` from; the spider requests their URLs from
    ``base_url`` instead."""
    feed, logf, warc = out_dir / "items.jsonl", out_dir / "scrapy.log", out_dir / "crawl.warc.gz"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(CRAWLERS_DIR), str(CRAWLERS_DIR.parent),
                                                      env.get("PYTHONPATH")]))
    env["SCRAPY_SETTINGS_MODULE"] = "lookbench_crawlers.settings"
    site = SiteConfig.from_yaml(site_config_path)
    cmd = [sys.executable, "-m", "scrapy", "crawl", "shop",
           "-a", f"site_config={site_config_path}", "-a", f"base_url={base_url}",
           "-s", f"USER_AGENT={user_agent}",
           *[a for k, v in site_settings(site, base_url).items() for a in ("-s", f"{k}={v}")],
           "-s", f"LOG_FILE={logf}", "-s", f"FILES_STORE={out_dir / 'files'}",
           "-s", f"LOOKBENCH_WARC_PATH={warc}", "-s", f"LOOKBENCH_STATS_PATH={out_dir / 'stats.json'}",
           "-o", f"{feed}:jsonlines"]
    if cache_dir is not None and not site.render_js:
        cmd += ["-s", "HTTPCACHE_ENABLED=True", "-s", f"HTTPCACHE_DIR={cache_dir}"]
    if site.render_js:
        handler = "scrapy_playwright.handler.ScrapyPlaywrightDownloadHandler"
        cmd += ["-s", "DOWNLOAD_HANDLERS=" + json.dumps({"http": handler, "https": handler}),
                "-s", "PLAYWRIGHT_BROWSER_TYPE=chromium",
                "-s", "PLAYWRIGHT_LAUNCH_OPTIONS=" + json.dumps({
                    "executable_path": site.chromium_path, "headless": True,
                    "args": ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                             "--disable-component-update", "--disable-sync", "--no-first-run",
                             "--disable-dev-shm-usage"]}),
                "-s", "PLAYWRIGHT_MAX_CONTEXTS=1", "-s", "PLAYWRIGHT_MAX_PAGES_PER_CONTEXT=4",
                # a rendered page's navigation gets the URL's whole download budget (milliseconds)
                "-s", f"PLAYWRIGHT_DEFAULT_NAVIGATION_TIMEOUT={int(site.download_budget_s * 1000)}",
                "-s", f"CONCURRENT_REQUESTS={min(4, site.concurrency_per_domain)}"]
    if resume:  # finished pages: no items again, and their links are read from the crawl's own WARC
        cmd += ["-a", f"resume_feed={feed}", "-s", f"LOOKBENCH_RESUME_WARC={warc}"]
    aliases = [a.rstrip("/") for a in origin_aliases or () if a and a.rstrip("/") != base_url.rstrip("/")]
    if aliases:  # the spider requests their URLs from base_url; the WARC's records of them answer as its
        cmd += ["-a", "origin_aliases=" + ",".join(aliases),
                "-s", "LOOKBENCH_ORIGINS=" + ",".join(aliases + [base_url.rstrip("/")])]
    for name, value in (extra_settings or {}).items():
        cmd += ["-s", f"{name}={value}"]
    return cmd, env


def site_settings(site: SiteConfig, base_url: str) -> dict[str, str]:
    """The crawler settings a site's YAML sets (``Scrapy -s NAME=VALUE`` strings): its per-domain concurrency, its
    delay between requests (seconds), its download budget (seconds per URL), its allowed ports and its egress
    allowances (:func:`egress_allowances`). Given on :func:`spider_command`'s command line, and applied by the
    spider itself when it runs on its own (``scrapy crawl shop -a site_config=…``), so both crawl alike."""
    return {"CONCURRENT_REQUESTS_PER_DOMAIN": str(site.concurrency_per_domain),
            "DOWNLOAD_DELAY": str(site.download_delay_s),
            "LOOKBENCH_DOWNLOAD_BUDGET": str(site.download_budget_s),
            "LOOKBENCH_EGRESS_PORTS": ",".join(str(p) for p in site.allowed_ports),
            "LOOKBENCH_EGRESS_ALLOW": ",".join(egress_allowances(site, base_url))}


def egress_allowances(site: SiteConfig, base_url: str) -> list[str]:
    """The exact ``ip:port`` pairs the crawl of ``site`` may reach whatever their address (``egress``): the site's
    ``allowed_addresses``; for a demo or replay site, its own local server (``base_url``, where the pipeline serves
    it on 127.0.0.1: without it such a crawl could fetch nothing); and, with ``allow_private_addresses``, the
    origins of its own start and sitemap URLs (``{{BASE}}`` replaced by ``base_url``) when they are IP literals or
    ``localhost``. Nothing wider: an image host or a redirect to another private address stays refused."""
    import ipaddress
    from urllib.parse import urlsplit

    from .egress import LOCALHOST_ADDRESSES

    out = list(site.allowed_addresses)
    urls = site.start_urls + site.sitemap_urls if site.allow_private_addresses else []
    if site.kind in ("demo", "replay") and base_url:
        urls = [*urls, base_url]
    for u in urls:
        parts = urlsplit(u.replace("{{BASE}}", base_url.rstrip("/")))
        host = (parts.hostname or "").lower()
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
        ips = list(LOCALHOST_ADDRESSES) if host == "localhost" else [host]
        for ip in ips:
            try:
                addr = ipaddress.ip_address(ip)
            except ValueError:
                continue
            out.append(f"[{addr}]:{port}" if addr.version == 6 else f"{addr}:{port}")
    return sorted(set(out))


PARENT_PID_ENV = "LOOKBENCH_PARENT_PID"
"""The pid of the process that runs a crawl (:func:`run_spider`): the crawl is killed when that process dies
(``lookbench_crawlers.extensions.DieWithParent``), so a build killed with ``kill -9`` leaves no orphan crawl that
logs every remaining page as a fetch error against the dead process's demo or replay server."""


def run_spider(site_config_path: Path, base_url: str, out_dir: Path, user_agent: str,
               timeout_s: float = 1800, cache_dir: Path | None = None, resume: bool = False,
               extra_settings: dict[str, str] | None = None,
               origin_aliases: list[str] | None = None) -> tuple[Path, Path]:
    """Run ``scrapy crawl shop`` for one site in a child process; returns (feed JSONL path, log path).

    The feed (``items.jsonl``), the log and the WARC archive (``crawl.warc.gz``) are written under ``out_dir``.
    ``cache_dir`` turns on the per-site HTTP cache, so pages are revalidated with conditional requests.
    ``resume=True`` continues an interrupted crawl in the same ``out_dir`` (finished pages yield nothing again and
    are answered from the crawl's WARC, not fetched; the feed and the WARC are appended to); otherwise both start
    empty. ``origin_aliases``: see :func:`spider_command`.

    Raises:
        CrawlError: the process exited non-zero or timed out.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    feed, logf = out_dir / "items.jsonl", out_dir / "scrapy.log"
    if not resume:
        feed.unlink(missing_ok=True)
        (out_dir / "crawl.warc.gz").unlink(missing_ok=True)
    logf.unlink(missing_ok=True)
    site = SiteConfig.from_yaml(site_config_path)
    cmd, env = spider_command(site_config_path, base_url, out_dir, user_agent, cache_dir, resume, extra_settings,
                              origin_aliases)
    env[PARENT_PID_ENV] = str(os.getpid())  # the crawl dies with this process (lookbench_crawlers.extensions)
    try:
        proc = subprocess.run(cmd, cwd=CRAWLERS_DIR, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise CrawlError(f"crawl of {site.name} timed out after {timeout_s} s") from exc
    if proc.returncode != 0:
        tail = (logf.read_text()[-3000:] if logf.exists() else "") + proc.stderr[-3000:]
        raise CrawlError(f"crawl of {site.name} failed (exit {proc.returncode}):\n{tail}")
    return feed, logf


FINISHED = "finished.json"
ATTEMPTS = "attempts.json"
UNREACHABLE = "unreachable.json"  # a crawl of a site that did not answer (:func:`unreachable_reasons`)

# The page reasons of a fetch that got no response for a network reason, the crawler's vocabulary
# (lookbench_crawlers.fetch_errors; robots_unreachable: lookbench_crawlers.middlewares.robots_unreachable_reason).
# This module imports nothing of the crawler: tests/test_robots_unreachable.py keeps the two in step.
NETWORK_REASONS = ("download_timeout", "name_not_resolved")
NETWORK_REASON_PREFIXES = ("fetch_error:", "robots_unreachable:")


def network_reason(reason: str | None) -> bool:
    """Whether a page's reason says the site gave no response for a network reason: a fetch error
    (``fetch_error:connection_refused``…), a timeout, a name that did not resolve, or a robots.txt that could not
    be read (``robots_unreachable:…``, a 5xx answer included: RFC 9309's "unreachable")."""
    return bool(reason) and (reason in NETWORK_REASONS or reason.startswith(NETWORK_REASON_PREFIXES))


def unreachable_reasons(items: list[dict]) -> dict[str, int]:
    """The page reasons of a crawl in which the site never answered (empty when it did): every page row rejected
    without an HTTP status for a network reason (:func:`network_reason`), and no product or look found. Such a
    crawl is not recorded as finished (:func:`crawl_site`): it says nothing of the site's pages, so the week is
    crawled again by the next build instead of being read back as an empty week."""
    pages = [it for it in items if it.get("kind") == "page"]
    if not pages or any(it.get("kind") in ("product", "look") for it in items):
        return {}
    if any(p.get("status") or p.get("outcome") != "rejected" or not network_reason(p.get("reason")) for p in pages):
        return {}
    return dict(Counter(p["reason"] for p in pages).most_common())


def repair_feed_tail(feed: Path) -> int:
    """Cut a JSON-lines feed back to its last whole line (a crawl killed mid-write leaves a torn one, and the next
    item appended would be glued to it); returns the number of bytes removed."""
    if not feed.is_file():
        return 0
    data = feed.read_bytes()
    keep = data.rfind(b"\n") + 1
    if keep < len(data):
        with open(feed, "r+b") as fh:
            fh.truncate(keep)
    return len(data) - keep


SUBRESOURCE_REFUSED = "subresource_refused"  # a rendered page's refused sub-request: a crawl-log row, not a page


def resume_key(url: str) -> str:
    """A page's identity across the attempts of one crawl: its URL without the fragment, the scheme and host
    lower-cased, and without the port when the host is a loopback address (the demo and replay servers listen on
    another 127.0.0.1 port each attempt). The host counts: ``https://www.shop.example/`` and
    ``https://shop.example/`` are two pages."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    netloc = host if _loopback(host) else parts.netloc.lower()
    return f"{parts.scheme.lower()}://{netloc}{parts.path}?{parts.query}"


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def finished_urls(items: list[dict]) -> set[str]:
    """The URLs of the pages an interrupted crawl finished: a page item in the feed with an HTTP response
    (``status`` not 0) and as many product / look items for that URL (or listed by it: ``from_page``, Shopify's
    ``products.json``) as the page item's ``n_items`` (a page's items wait for their image downloads, so a kill can
    leave its page item without them). A page whose fetch got no response (a connection refused, a timeout, a
    refusal: ``status`` 0) is not finished: the kill may be why (the demo or replay server died with the build), so
    a resume fetches it again, and its row is pruned (:func:`prune_unfinished`) so that it is logged once."""
    pages: dict[str, int] = {}
    counts: Counter = Counter()
    for it in items:
        kind, url = it.get("kind"), it.get("url")
        if not isinstance(url, str):
            continue
        if kind == "page" and it.get("outcome") != SUBRESOURCE_REFUSED and it.get("status"):
            n = it.get("n_items")
            pages[url] = n if type(n) is int and n >= 0 else 0
        elif kind in ("product", "look"):
            page = it.get("from_page")  # an item a page listed under another url (Shopify's products.json)
            counts[page if isinstance(page, str) else url] += 1
    return {u for u, n in pages.items() if counts[u] >= n}


def prune_unfinished(feed: Path) -> int:
    """Keep in a resumed crawl's feed only the items of the pages it finished (:func:`finished_urls`), so the page
    a kill interrupted, fetched again, is in the feed once, with the items of one fetch; returns the number of
    lines removed. A refused sub-resource's row goes with the page that requested it (``from_page``; kept when it
    names none, as rows written before it did). Lines of an unknown kind are kept."""
    if not feed.is_file():
        return 0
    lines = feed.read_bytes().splitlines(keepends=True)
    parsed = []
    for line in lines:
        try:
            it = json.loads(line)
        except ValueError:
            it = None
        parsed.append(it if isinstance(it, dict) else None)
    done = finished_urls([it for it in parsed if it is not None])

    def keep(it: dict | None) -> bool:
        if it is None or it.get("kind") not in ("page", "product", "look"):
            return it is not None
        page = it.get("from_page")
        if it.get("outcome") == SUBRESOURCE_REFUSED:
            return not isinstance(page, str) or page in done
        return (page if isinstance(page, str) else it.get("url")) in done

    kept = [line for line, it in zip(lines, parsed) if keep(it)]
    if len(kept) < len(lines):
        tmp = feed.with_name(feed.name + ".tmp")
        tmp.write_bytes(b"".join(kept))
        os.replace(tmp, feed)
    return len(lines) - len(kept)


def crawl_site(site_config_path: Path, work_dir: Path, user_agent: str, cache_dir: Path | None = None,
               resume: bool = False, local_server: LocalServer | None = None, again: bool = False,
               image_max_bytes: int | None = None) -> CrawlOutput:
    """Crawl one configured site. ``demo`` and ``replay`` sites are served on 127.0.0.1 for the duration of the
    crawl by ``local_server(site, work_dir)``, a context manager giving the base URL, which the caller passes in
    (the stages pass :func:`lookbench_pipeline.demo.serve.local_site`: the demo shop generated under
    ``work_dir/site``, a replay site's ``pages_dir``); this module imports nothing of the demo. ``cache_dir``: the
    site's HTTP cache (conditional requests on re-crawls).

    ``resume``: ``work_dir`` belongs to one crawl (a week's, ``crawl_dir``), and a killed attempt left its feed,
    WARC and downloads there: a finished crawl (``finished.json``) is read back and not crawled again; an
    unfinished one continues (torn feed line and WARC record cut off, the items of pages it did not finish
    removed from the feed, :func:`prune_unfinished`; finished pages are not fetched again and yield nothing again,
    their links are read from the WARC; the rest appended). Every attempt's serving origin is recorded
    (``attempts.json``, ``CrawlOutput.base_urls``): the items of all attempts get the site's recorded origin, an
    earlier attempt's URLs are requested from this attempt's origin, and the archive names them all so a replay
    finds every page. Each attempt's WARC records carry its number (``WARC-LookBench-Attempt``). Without
    ``resume`` the crawl starts empty.

    ``image_max_bytes``: the largest image the crawl downloads (the pipeline passes ``images.max_bytes``, what the
    image intake takes; a larger one is recorded ``too_large_bytes``); None: the crawler's ``DOWNLOAD_MAXSIZE``.

    ``again`` (with ``resume``): a finished crawl is not read back but crawled again from an empty folder, as a
    new crawl (new ``crawl_id``, so its archive is stored beside the earlier one; every page and image fetched and
    archived anew: the earlier crawl's downloaded files are not reused); the finished crawl is kept aside
    (``crawl.previous``) until the new one finishes, and put back when it fails or is interrupted; an unfinished
    crawl still continues. What ``lookbench build --force`` asks for: the site's pages as they are now, e.g. after
    editing a site file. When the site does not answer the new crawl (unreachable, below), the finished crawl is
    put back and read back (``reused``), its ``again_unreachable`` the new crawl's reasons: an outage never
    replaces a week's crawl by an empty one.

    A crawl in which the site never answered (:func:`unreachable_reasons`: every page failed for a network reason,
    nothing kept) is not recorded as finished but as unreachable (``unreachable.json``, its reasons): the next
    attempt crawls the week again from an empty folder, as a new crawl, so the outage does not stay in the week
    as an empty crawl read back. ``CrawlOutput.unreachable`` holds its reasons."""
    import shutil
    import uuid

    from .warc import truncate_torn_tail

    site = SiteConfig.from_yaml(site_config_path)
    out_dir = work_dir / "crawl"
    out_dir.mkdir(parents=True, exist_ok=True)
    attempts_file, marker, feed = out_dir / ATTEMPTS, out_dir / FINISHED, out_dir / "items.jsonl"
    if resume and (out_dir / UNREACHABLE).is_file():
        # the last crawl of this folder found the site unreachable: it is not continued but done again, as a new
        # crawl (its own crawl_id, so its archive is stored beside the unreachable one's, not refused as written)
        log.info("crawling %s again: its last crawl in %s found it unreachable", site.name, out_dir)
        shutil.rmtree(out_dir)
        out_dir.mkdir(parents=True)
    state = json.loads(attempts_file.read_text()) if resume and attempts_file.is_file() else {}
    finished = resume and marker.is_file() and feed.is_file()
    if finished and not again:
        return _read_crawl(site, feed, out_dir / "scrapy.log", state, reused=True)
    if finished:  # crawled again in an empty folder; the finished crawl waits aside until the new one finishes
        log.info("crawling %s again: its finished crawl of %s in %s is replaced when the new one finishes",
                 site.name, state.get("started_at"), out_dir)
        previous = out_dir.with_name(out_dir.name + ".previous")
        shutil.rmtree(previous, ignore_errors=True)
        out_dir.rename(previous)
        try:
            out = crawl_site(site_config_path, work_dir, user_agent, cache_dir=cache_dir, resume=True,
                             local_server=local_server, image_max_bytes=image_max_bytes)
        except BaseException:
            shutil.rmtree(out_dir, ignore_errors=True)
            previous.rename(out_dir)
            raise
        if out.unreachable:  # an outage must not replace the week's finished crawl by an empty one
            log.warning("site %s was unreachable when crawled again (%s): its finished crawl of %s is kept",
                        site.name, ", ".join(f"{k} {v}" for k, v in out.unreachable.items()), state.get("started_at"))
            shutil.rmtree(out_dir, ignore_errors=True)
            previous.rename(out_dir)
            kept = _read_crawl(site, feed, out_dir / "scrapy.log", state, reused=True)
            kept.again_unreachable = out.unreachable
            return kept
        shutil.rmtree(previous, ignore_errors=True)
        return out
    continuing = resume and feed.is_file() and not finished
    if continuing:
        cut = repair_feed_tail(feed) + truncate_torn_tail(out_dir / "crawl.warc.gz")
        pruned = prune_unfinished(feed)
        log.info("resuming the crawl of %s in %s (%d torn bytes cut, %d items of unfinished pages removed)",
                 site.name, out_dir, cut, pruned)
    else:
        state = {}
        marker.unlink(missing_ok=True)
    state.setdefault("crawl_id", uuid.uuid4().hex)
    state.setdefault("started_at", datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
    state.setdefault("bases", [])
    with ExitStack() as stack:
        base_url = ""
        if site.kind in ("demo", "replay"):
            if local_server is None:
                raise CrawlError(f"{site.kind} site {site.name} is served on 127.0.0.1 by the server the caller "
                                 "passes (local_server=lookbench_pipeline.demo.serve.local_site)")
            base_url = stack.enter_context(local_server(site, work_dir))
        earlier = [b for b in state["bases"] if b != base_url]
        state["bases"] = earlier + [base_url]
        state["attempts"] = (state.get("attempts") or 0) + 1 if continuing else 1
        attempts_file.write_text(json.dumps(state, indent=1))
        feed, logf = run_spider(site_config_path, base_url, out_dir, user_agent, cache_dir=cache_dir,
                                resume=continuing, origin_aliases=earlier,
                                extra_settings={"LOOKBENCH_ATTEMPT": str(state["attempts"]),
                                                **({"LOOKBENCH_IMAGE_MAX_BYTES": str(image_max_bytes)}
                                                   if image_max_bytes else {})})
    out = _read_crawl(site, feed, logf, state)
    if resume and out.unreachable:  # not finished: the next attempt crawls the site again (UNREACHABLE)
        log.warning("site %s was unreachable: every page failed without a response (%s); the crawl in %s is not "
                    "recorded as finished, the next build crawls it again", site.name,
                    ", ".join(f"{k} {v}" for k, v in out.unreachable.items()), out_dir)
        (out_dir / UNREACHABLE).write_text(json.dumps({"at": datetime.now(timezone.utc).isoformat(),
                                                       "reasons": out.unreachable, **state}, indent=1))
    elif resume:
        marker.write_text(json.dumps({"finished_at": datetime.now(timezone.utc).isoformat(), **state}, indent=1))
    return out


def _read_crawl(site: SiteConfig, feed: Path, logf: Path, state: dict, reused: bool = False) -> CrawlOutput:
    """The crawl's items with every attempt's serving origin replaced by the site's recorded origin."""
    bases = state.get("bases") or [""]
    items = read_feed(feed)
    if site.recorded_origin:
        for base in bases:
            if base:
                items = [_rebase(it, base, site.recorded_origin) for it in items]
    return CrawlOutput(site=site.name, feed=feed, log_file=logf, base_url=bases[-1], items=items,
                       crawl_id=state.get("crawl_id"), started_at=state.get("started_at"), reused=reused,
                       base_urls=[b for b in bases if b])


def crawl_dir(data_dir: Path, week: str, site: str) -> Path:
    """The folder of one week's crawl of one site (``data_dir/crawls/<week>/<site>``, :meth:`DataLayout.crawl_dir`):
    the same for every attempt, so a killed build or Dagster run resumes it (``crawl_site(resume=True)``)."""
    return DataLayout(Path(data_dir)).crawl_dir(week, site)


def replay_site(site_config_path: Path, warc_paths: list[Path], base_url: str, work_dir: Path,
                user_agent: str, base_urls: list[str] | None = None) -> CrawlOutput:
    """Crawl one site again from archived WARC files instead of the network: the same spider, robots.txt, host
    policy and extraction, with every response answered from the archive
    (``lookbench_crawlers.replay.WarcReplayMiddleware``) and no network download handler, so nothing leaves the
    machine. ``base_url`` is the origin the archived crawl served ``{{BASE}}`` from (its warcinfo record's
    ``base-url``; empty for a site without ``{{BASE}}``); ``base_urls``: every origin it served from, oldest first
    (``base-urls``: a crawl resumed after a kill served each attempt from another port), whose archived URLs are
    answered as ``base_url``'s. Of the records of one URL the latest attempt's wins. Items carry the archived
    fetch times as ``crawled_at``, so replaying a site's crawls in order rebuilds its state and tables as they
    were.

    Raises:
        CrawlError: the spider failed, or it tried to reach the network (``lookbench/replay/network_attempts``).
    """
    site = SiteConfig.from_yaml(site_config_path)
    handler = "lookbench_crawlers.replay.NoNetworkDownloadHandler"
    origins = [b.rstrip("/") for b in (base_urls or []) if b and b.rstrip("/") != base_url.rstrip("/")]
    origins += [base_url.rstrip("/")] if base_url else []
    settings = {"LOOKBENCH_REPLAY_WARC": ",".join(str(p) for p in warc_paths),
                "DOWNLOAD_HANDLERS": json.dumps({"http": handler, "https": handler}),
                "AUTOTHROTTLE_ENABLED": "False", "RETRY_ENABLED": "False"}
    out_dir = work_dir / "crawl"
    feed, logf = run_spider(site_config_path, base_url, out_dir, user_agent, extra_settings=settings,
                            origin_aliases=origins[:-1])
    stats_file = out_dir / "stats.json"
    stats = json.loads(stats_file.read_text()) if stats_file.is_file() else {}
    if stats.get("lookbench/replay/network_attempts"):
        raise CrawlError(f"replay of {site.name} tried to reach the network "
                         f"{stats['lookbench/replay/network_attempts']} times")
    items = read_feed(feed)
    if site.recorded_origin:
        for origin in origins:
            items = [_rebase(it, origin, site.recorded_origin) for it in items]
    return CrawlOutput(site=site.name, feed=feed, log_file=logf, base_url=base_url, items=items,
                       base_urls=origins)


def read_feed(feed: Path) -> list[dict]:
    """The items of a JSON-lines feed; a torn last line (a crawl killed mid-write) is skipped."""
    items = []
    for line in feed.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            items.append(json.loads(line))
        except json.JSONDecodeError:
            log.warning("%s: skipping a torn feed line", feed)
    return items


def rebase_url(url: str, old: str, new: str) -> str:
    """``url`` with the origin ``old`` replaced by ``new`` when it is that origin or a URL under it (``…:4000`` is
    not ``…:40001/x``); any other URL unchanged. The one rewrite of a serving origin: the recorded origin of a
    local site's items, an earlier attempt's port on a resume or in a replay."""
    old = old.rstrip("/")
    return new + url[len(old):] if old and (url == old or url.startswith(old + "/")) else url


def _rebase(obj, base: str, origin: str):
    """Replace the local serving origin by the site's recorded origin in every URL of an item."""
    if isinstance(obj, str):
        return rebase_url(obj, base, origin)
    if isinstance(obj, list):
        return [_rebase(x, base, origin) for x in obj]
    if isinstance(obj, dict):
        return {k: (v if k == "path" else _rebase(v, base, origin)) for k, v in obj.items()}
    return obj


def _ts(s: str | None) -> datetime | None:
    if not s:
        return None
    dt = datetime.fromisoformat(s)
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)


def _previous(path: Path, key: str) -> dict[str, dict]:
    if not path.is_file():
        return {}
    return {r[key]: r for r in pq.read_table(path).to_pylist()}


_VOLATILE = {"crawled_at", "first_seen_at", "last_seen_at", "disappeared_at"}


def _unchanged_since(prev: dict, row: dict, crawled: datetime) -> datetime:
    """``crawled_at`` is when the crawl fetched the content this row holds: kept from the previous crawl while the
    extracted content is unchanged (so an unchanged shop rebuilds a byte-identical release), else now."""
    if prev and prev.get("crawled_at") and all(prev.get(k) == v for k, v in row.items() if k not in _VOLATILE):
        return prev["crawled_at"]
    return crawled


@dataclass(frozen=True)
class PageProduct:
    """One product a page yielded, as a look's link is resolved against it."""

    product_id: str
    variant_id: str | None
    sku: str | None


def _title_key(title: object) -> str:
    """A title as compared between a page's items: whitespace collapsed, lower case."""
    return " ".join(str(title or "").split()).lower()


def _keyless_owners(site: str, items: list[dict], previous: dict[str, dict]) -> dict[str, str]:
    """For each product key that items without id and colour share with items of other titles (the products a page
    lists with nothing to tell them apart but their titles): the title (:func:`_title_key`) of the item that keeps
    the key. It is the title the stored row of that key has, when one of them has it, so that ids do not swap when
    the page lists them in another order; else the first in page order. Keys with one title are left out."""
    titles: dict[str, list[str]] = {}
    for it in items:
        if it.get("variant_id", it.get("sku")):
            continue
        t = _title_key(it.get("title"))
        if t:
            seen = titles.setdefault(product_key(site, it["url"], None, it.get("color")), [])
            if t not in seen:
                seen.append(t)
    owners = {}
    for pid, ts in titles.items():
        if len(ts) > 1:
            stored = _title_key((previous.get(pid) or {}).get("title"))
            owners[pid] = stored if stored in ts else ts[0]
    return owners


def in_page_order(items: list[dict]) -> list[dict]:
    """Product feed items sorted by their page's canonical URL, then by ``page_position`` (the spider's index of the
    item among its page's products), then by feed order (a feed written before ``page_position`` existed, or a page
    processed twice by a resumed crawl)."""
    def key(e: tuple[int, dict]) -> tuple[str, int, int]:
        i, it = e
        pos = it.get("page_position")
        return canonical(str(it.get("url") or "")), pos if type(pos) is int and pos >= 0 else 1 << 62, i

    return [it for _, it in sorted(enumerate(items), key=key)]


def resolve_look_link(site: str, link: str, on_page: dict[str, list[PageProduct]]) -> tuple[str | None, str]:
    """The product a look's link to ``link`` stands for, and how it was chosen: ``(product_id or None, how)``.

    ``on_page`` maps a page's :func:`~lookbench_pipeline.extract.path_key` to the products it yielded, in page order.
    A page that sells one item gives it (``single``). A page of several (the colours of one model) gives the one
    the link names: a query value equal to its ``variant_id``, else to its ``sku`` (a sku the page's colours share,
    the reference printed for the product, names the page's first item), case-insensitive, as in
    ``?variant=<id>`` (``named_in_link``); else the page's first item, the colour the page opens on and the item
    :func:`~lookbench_pipeline.extract.main_product` calls the page's own (``page_default``). A link whose exact
    page was not crawled resolves only when the same page without the query was, and the query names one of its
    items. Otherwise ``(None, "unresolved")``: the link is dropped from ``product_ids`` and counted in
    ``looks_unresolved_products``.
    """
    parts = urlsplit(link)
    named = {v.strip().lower() for _, v in parse_qsl(parts.query) if v.strip()}

    def named_item(page: list[PageProduct]) -> PageProduct | None:
        # the item's own id first: a page's colours may share one sku (the reference the page prints for the
        # product, extract.products._page_reference); a shared sku names the page's first item, its own product
        for field in ("variant_id", "sku"):
            hits = [e for e in page if str(getattr(e, field) or "").strip().lower() in named]
            if len(hits) == 1 or (hits and field == "sku" and all(e.sku == hits[0].sku for e in hits)
                                  and hits[0] is page[0]):
                return hits[0]
        return None

    page = on_page.get(path_key(site, link))
    if page:
        if len(page) == 1:
            return page[0].product_id, "single"
        hit = named_item(page)
        return (hit.product_id, "named_in_link") if hit else (page[0].product_id, "page_default")
    bare = on_page.get(path_key(site, urlunsplit(parts._replace(query="", fragment=""))))
    hit = named_item(bare) if bare and named else None
    return (hit.product_id, "named_in_link") if hit else (None, "unresolved")


LocalServer = Callable[[SiteConfig, Path], AbstractContextManager[str]]
"""Serves a ``demo`` or ``replay`` site on 127.0.0.1 for a ``with`` block and gives its base URL."""

Catalog = CrawlTables  # the name this module used before CrawlTables had one owner


def _new_items(out: CrawlOutput, items: dict[str, dict], prev: dict[str, dict]) -> int:
    """How many of a crawl's ``items`` (id -> row) no earlier crawl saw: not in the state before (``prev``). A
    finished crawl read back (``out.reused``) finds its own items in the state already (its first merge put them
    there): an item is new then when it was first seen by this crawl (``first_seen_at`` not before the crawl's
    earliest item), so the crawl read back counts what it counted when it finished, as ``products_disappeared``
    does."""
    if not out.reused:
        return sum(1 for k in items if k not in prev)
    times = [_ts(it["crawled_at"]) for it in out.items if it.get("crawled_at")]
    if not times:
        return 0
    start = min(times)
    return sum(1 for k, v in items.items() if k not in prev or v["first_seen_at"] >= start)


def _seen_after(prev: dict, t: datetime) -> bool:
    """Whether the state's row ``prev`` holds what a crawl after ``t`` (UTC) found: the item seen (``last_seen_at``)
    or found gone (``disappeared_at``) later than ``t``."""
    times = [v for v in (prev.get("last_seen_at"), prev.get("disappeared_at")) if v is not None]
    return bool(times) and max(times) > t


def _next_state(prev: dict[str, dict], seen: dict[str, dict], now: datetime) -> tuple[dict[str, dict], dict[str, dict]]:
    """The site's next state of one kind of item (products or looks, id -> row) after a crawl that ended at ``now``
    and saw ``seen`` (rows whose ``first_seen_at`` is already the earlier of the state's and this crawl's); returns
    ``(gone, state)``: ``gone`` the state's rows of the items this crawl did not see and no later crawl saw, marked
    ``disappeared_at`` (the first crawl that missed them keeps its time), and ``state`` every row. An item a later
    crawl saw keeps the state's row (with this ``first_seen_at``); one last seen before this crawl but found gone by
    a later one takes this crawl's row and keeps that ``disappeared_at``; any other item seen now takes this
    crawl's row."""
    gone = {k: {**v, "disappeared_at": v.get("disappeared_at") or now}
            for k, v in prev.items() if k not in seen and not _seen_after(v, now)}
    later = {k: v for k, v in prev.items() if k not in seen and k not in gone}
    for k, row in seen.items():
        p = prev.get(k)
        if p is None or not _seen_after(p, row["last_seen_at"]):
            continue
        if p.get("last_seen_at") is not None and p["last_seen_at"] >= row["last_seen_at"]:
            later[k] = {**p, "first_seen_at": row["first_seen_at"]}
        else:
            later[k] = {**row, "disappeared_at": p["disappeared_at"]}
    return gone, {**gone, **seen, **later}


def merge_catalog(out: CrawlOutput, state_dir: Path) -> Catalog:
    """Build this crawl's tables and update the site's state (``state_dir/<site>/{products,looks}.parquet``).

    ``first_seen_at`` is the earliest crawl that saw the item (kept from the state); ``last_seen_at`` is this
    crawl; ``crawled_at`` is the crawl that fetched the current content (kept while the content is unchanged).
    Product items are taken in page order (by URL, then ``page_position``), never in the feed's order, which is
    the order their image downloads finished: an item seen on several pages in one crawl is one row (the page
    whose canonical URL sorts first wins, later pages add images). A look's links to products are resolved by
    :func:`resolve_look_link`. The state keeps items not seen in this crawl, so an item that comes back keeps its
    first time.
    """
    sdir = site_state_dir(state_dir, out.site)
    sdir.mkdir(parents=True, exist_ok=True)
    prev_p = _previous(sdir / "products.parquet", "product_id")
    prev_l = _previous(sdir / "looks.parquet", "look_id")

    products: dict[str, dict] = {}
    on_page: dict[str, list[PageProduct]] = {}  # path_key of a page -> its products, in page order
    product_items = in_page_order(out.of_kind("product"))
    merged, told_apart = 0, set()
    owner = _keyless_owners(out.site, product_items, prev_p)
    for it in product_items:
        # an item of a feed written before variant_id existed: its sku was its id
        vid = it.get("variant_id", it.get("sku"))
        pid = product_key(out.site, it["url"], vid, it.get("color"))
        crawled = _ts(it["crawled_at"])
        page = on_page.setdefault(path_key(out.site, it["url"]), [])
        title = _title_key(it.get("title"))
        if not vid and title and owner.get(pid, title) != title:
            # another product the same page lists with no id and no colour (an accessory, a recommendation): its
            # own id, by its title, rather than its pictures folded into the row of the product that owns the key
            pid = product_key(out.site, it["url"], None, it.get("color"), title=it.get("title"))
            told_apart.add(pid)
        if all(e.product_id != pid for e in page):
            page.append(PageProduct(pid, it.get("variant_id"), it.get("sku")))
        if pid in products:  # the same item again (another page, a second card): one row, its pictures added
            products[pid]["image_urls"] = list(dict.fromkeys(products[pid]["image_urls"]
                                                             + (it.get("image_urls") or [])))
            merged += 1
            continue
        prev = prev_p.get(pid, {})
        first = prev.get("first_seen_at") or crawled
        row = {**{k: it.get(k) for k in schemas.PRODUCTS.names if k in it}, "product_id": pid,
               "image_urls": it.get("image_urls") or []}
        products[pid] = {**row, "crawled_at": _unchanged_since(prev, row, crawled),
                         "first_seen_at": min(first, crawled), "last_seen_at": crawled}
    looks: dict[str, dict] = {}
    resolved_by: dict[str, list[str]] = {}  # look_id -> how each of its links was resolved
    for it in out.of_kind("look"):
        lid = path_key(out.site, it["url"])
        crawled = _ts(it["crawled_at"])
        pids, resolved_by[lid] = [], []
        for u in it.get("product_urls") or []:
            pid, how = resolve_look_link(out.site, u, on_page)
            pids.append(pid)
            resolved_by[lid].append(how)
        prev = prev_l.get(lid, {})
        first = prev.get("first_seen_at") or crawled
        row = {"look_id": lid, "site": out.site, "url": it["url"], "image_url": it["image_url"],
               "product_urls": it.get("product_urls") or [], "product_ids": [p for p in pids if p]}
        looks[lid] = {**row, "crawled_at": _unchanged_since(prev, row, crawled),
                      "first_seen_at": min(first, crawled), "last_seen_at": crawled}
    pages = [{**{k: it.get(k) for k in schemas.CRAWL_LOG.names}, "crawled_at": _ts(it["crawled_at"]),
              "status": int(it.get("status") or 0)} for it in out.of_kind("page")]

    files_root = out.feed.parent / "files"
    downloads: dict[str, dict] = {}
    for it in product_items + out.of_kind("look"):
        for d in it.get("images") or []:
            row = {"site": out.site, "url": d["url"], "reason": d.get("reason"),
                   "stored_path": str(files_root / d["path"]) if d.get("path") else None}
            # one row per image URL: the first in page order, except that a stored file wins over a failure of the
            # same URL (too_many_images depends on the item: refused on one item, downloaded for another)
            if d["url"] not in downloads or (row["stored_path"] and not downloads[d["url"]]["stored_path"]):
                downloads[d["url"]] = row
    d_tab = schemas.from_rows(sorted(downloads.values(), key=lambda r: r["url"]), schemas.IMAGE_DOWNLOADS)
    p_tab = schemas.from_rows(sorted(products.values(), key=lambda r: r["product_id"]), schemas.PRODUCTS)
    l_tab = schemas.from_rows(sorted(looks.values(), key=lambda r: r["look_id"]), schemas.LOOKS)
    c_tab = schemas.from_rows(sorted(pages, key=lambda r: r["url"]), schemas.CRAWL_LOG)

    # state = previous items (not seen now: marked disappeared, first time only) + this crawl's. A crawl of a site
    # that did not answer (out.unreachable) saw nothing: the state is left as it was, no item marked disappeared.
    # The state only moves forward: a crawl older than what the state holds (a finished week read back after a later
    # week was crawled, e.g. an old partition materialised again) lowers first_seen_at if it saw an item earlier,
    # but neither marks gone an item a later crawl saw nor brings back one a later crawl found gone.
    # The crawl's time is that of the pages it did not reject and their items: a rejected row may be stamped when
    # it was written rather than when its page was fetched (a request that got no response: robots, fetch error,
    # max_pages cut; a replay's 404 for a page not archived), which in a replay is today, not the archived week.
    # A crawl that kept no page and no item has no such time and shows nothing of what the shop lists: like one of
    # a site that did not answer, it leaves the state as it was.
    kept = [r["crawled_at"] for r in pages if r["outcome"] != REJECTED]
    kept += [v["last_seen_at"] for v in (*products.values(), *looks.values())]
    now = max(kept or [r["crawled_at"] for r in pages] or [datetime.now(timezone.utc)])
    gone_p, gone_l = {}, {}
    if kept and not out.unreachable:
        gone_p, state_p = _next_state(prev_p, {r["product_id"]: r for r in p_tab.to_pylist()}, now)
        gone_l, state_l = _next_state(prev_l, {r["look_id"]: r for r in l_tab.to_pylist()}, now)
        pq.write_table(schemas.from_rows(sorted(state_p.values(), key=lambda r: r["product_id"]),
                                         schemas.PRODUCTS), sdir / "products.parquet")
        pq.write_table(schemas.from_rows(sorted(state_l.values(), key=lambda r: r["look_id"]), schemas.LOOKS),
                       sdir / "looks.parquet")
    outcomes: dict[str, int] = {}
    for pg in pages:
        key = pg["outcome"] if pg["outcome"] != "rejected" else f"rejected.{pg['reason']}"
        outcomes[f"pages.{key}"] = outcomes.get(f"pages.{key}", 0) + 1
    links_by = Counter(how for lid in looks for how in resolved_by[lid])  # the looks kept (a page seen twice: once)
    counts = {"pages": len(pages), "product_items": len(out.of_kind("product")), "products": len(products),
              "product_items_merged": merged, "products_told_apart_by_title": len(told_apart),
              "products_new": _new_items(out, products, prev_p),
              "products_disappeared": sum(1 for v in gone_p.values() if v["disappeared_at"] == now),
              "looks": len(looks), "looks_unresolved_products": sum(
                  len(lk["product_urls"]) - len(lk["product_ids"]) for lk in looks.values()),
              **{f"look_links.{k}": v for k, v in sorted(links_by.items())}, **outcomes}
    stats_file = out.feed.parent / "stats.json"
    st = json.loads(stats_file.read_text()) if stats_file.is_file() else {}
    if stats_file.is_file():
        keep = ("downloader/request_count", "downloader/response_count", "item_scraped_count", "item_dropped_count",
                "robotstxt/forbidden", "httpcache/hit", "httpcache/miss", "httpcache/revalidate",
                "log_count/ERROR", "retry/count", "finish_reason", "elapsed_time_seconds",
                "lookbench/max_pages_reached", "lookbench/max_pages_cut_unlisted", "lookbench/max_pages_cut_untracked")
        counts["scrapy"] = {k: v for k, v in st.items() if k in keep or k.startswith(
            ("downloader/response_status_count/", "downloader/exception_type_count/", "lookbench/replay/",
             "lookbench/fetch_errors/"))}  # a page row's fetch_error reason by the exception's class
    # the URLs the site's max_pages cut: a rejected row each (max_pages_reached), the first MAX_PAGES_CUT_ROWS of
    # them; the further ones counted by the spider only, once per distinct URL (lookbench/max_pages_cut_unlisted),
    # beyond MAX_PAGES_CUT_TRACKED of those per discovery (lookbench/max_pages_cut_untracked: a lower bound then)
    cut_rows = outcomes.get(f"pages.rejected.{MAX_PAGES_REACHED}", 0)
    if cut_rows or st.get("lookbench/max_pages_reached"):
        def stat(name):
            v = st.get(name, 0)
            return v if type(v) is int and v > 0 else 0

        untracked = stat("lookbench/max_pages_cut_untracked")
        counts["max_pages_cut"] = cut_rows + stat("lookbench/max_pages_cut_unlisted") + untracked
        if untracked:
            counts["max_pages_cut_at_least"] = True
    counts["image_urls"] = len(downloads)
    counts["image_urls_downloaded"] = sum(1 for d in downloads.values() if d["stored_path"])
    if out.unreachable:
        counts["unreachable"] = dict(out.unreachable)
    return Catalog(products=p_tab, looks=l_tab, crawl_log=c_tab, downloads=d_tab, counts=counts)
