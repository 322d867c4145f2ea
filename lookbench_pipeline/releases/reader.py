"""Reading a published LookBench release: the consumer's side of the store layout that
:mod:`lookbench_pipeline.releases.publish` writes (``releases/v{YYYYMMDD}/...``, ``manifest.json`` written last,
``releases/latest``).

Listing versions, reading and checking a manifest, reading one file with its sha256 checked, and pulling a release
(or some of its subsets) to a folder, and the check that a file's table holds what scoring needs
(:func:`check_scored_table`, against the published schema). The bottom of :mod:`lookbench_pipeline.releases`: this
module imports only the store, the path checks and the schemas (never a sibling), so everything that reads
releases (contamination, changes, evaluation, the audit, the report, the CLI) sits below the release builder;
:mod:`lookbench_pipeline.releases` re-exports these names.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from ..safepath import UnsafePathError, check_key, check_version, resolve_inside, unwritable
from ..schemas import RELEASE, RELEASE_REQUIRED
from ..store import HttpStore, LocalStore, ObjectStore, ObjectTooLarge, S3Store, StoreError, _warn

SUBSETS = ["real_studio_flat", "aigen_studio", "real_streetlook", "aigen_streetlook"]
STREET_SUBSETS = ("real_streetlook", "aigen_streetlook")
NOISE = "noise"
"""The release's distractor gallery (``noise/gallery.parquet``): added to every subset's gallery when scoring, so a
pull of some subsets always brings it."""
SUBSET_TASK = {"real_studio_flat": ("single-item", "easy"), "aigen_studio": ("single-item", "medium"),
               "real_streetlook": ("multi-item", "hard"), "aigen_streetlook": ("multi-item", "hard"),
               NOISE: ("distractor", "n/a")}
MAX_KEY_CHARS = 1024
"""The longest file key a manifest may name, and each path segment at most 255 bytes (UTF-8; NAME_MAX on Linux,
macOS and Windows file systems)."""

LATEST_KEY = "releases/latest"
"""The key naming the newest published version (written after its manifest)."""
LATEST_MAX_BYTES = 1024
"""The most bytes ``releases/latest`` may have (it holds one version name): a longer one is refused unread."""
MANIFEST_MAX_BYTES = 16 << 20
"""The most bytes a ``manifest.json`` may have (a release's is a few kB): a store or mirror that sends more is
refused before it can fill the memory."""


class ReleaseExistsError(RuntimeError):
    """A release version is already published with different content; versions are immutable."""


class ReleaseIntegrityError(RuntimeError):
    """A file read back from the store does not have the sha256 or size that was written."""


DEFAULT_CONFIG_ORDER = ("real_studio_flat", "real_streetlook", "aigen_studio", "aigen_streetlook")
"""Which subset is the card's default config (``default: true``), first present first: the studio subset, the
LookBench site's first tab. Hugging Face ``datasets.load_dataset(folder)`` with no config name loads it."""


def default_config(subsets: list[str]) -> str | None:
    """The subset :data:`DEFAULT_CONFIG_ORDER` makes the default config (else the first subset; None if none)."""
    return next((s for s in DEFAULT_CONFIG_ORDER if s in subsets), subsets[0] if subsets else None)


def _card_front(text: str) -> tuple[dict[str, Any], int]:
    """``(front matter, where it ends)`` of a dataset card: its YAML front matter, with a ``configs`` list.
    Raises ValueError as :func:`limit_card` says."""
    if not text.startswith("---\n") or "\n---" not in text[4:]:
        raise ValueError("not a dataset card: no YAML front matter")
    end = text.index("\n---", 4)
    try:
        front = yaml.safe_load(text[4:end + 1])
    except yaml.YAMLError as exc:
        first = " ".join(str(exc).split())[:200]
        raise ValueError(f"not a dataset card: its front matter is not plain YAML ({first})") from None
    if not isinstance(front, dict) or not isinstance(front.get("configs"), list):
        raise ValueError("not a dataset card: its front matter has no configs list")
    return front, end


def card_config_names(text: str) -> list[str]:
    """The ``config_name`` of each config a dataset card's front matter lists, in its order (the one reading of a
    card for :func:`limit_card` and :func:`folder_gaps`). Raises ValueError as :func:`limit_card` says."""
    return [str(c["config_name"]) for c in _card_front(text)[0]["configs"]
            if isinstance(c, dict) and c.get("config_name") is not None]


def limit_card(text: str, subsets: list[str]) -> str:
    """A dataset card (``README.md`` as :func:`.card.dataset_card` writes it) whose front matter's ``configs``
    name only ``subsets`` (one of them ``default: true``); the body is unchanged. For a partially pulled release
    folder.

    Raises:
        ValueError: ``text`` has no YAML front matter with a ``configs`` list, or its front matter is not YAML
            ``yaml.safe_load`` reads (a Python tag such as ``!!python/object/apply`` is refused, never run).
    """
    front, end = _card_front(text)
    configs = [dict(c) for c in front["configs"] if isinstance(c, dict) and c.get("config_name") in subsets]
    for c in configs:
        c.pop("default", None)
    default = default_config([c["config_name"] for c in configs]) if configs else None
    for c in configs:
        if c["config_name"] == default:
            c["default"] = True
    front["configs"] = configs
    yml = yaml.safe_dump(front, sort_keys=False, allow_unicode=True, width=1000)
    return f"---\n{yml}" + text[end + 1:]


def release_prefix(version: str) -> str:
    return f"releases/{version}"


def all_files(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every file of a release with its ``sha256`` and ``bytes``: the data files and the metadata files."""
    return {**manifest["files"], **manifest.get("metadata_files", {})}


MAX_FILE_BYTES = 1 << 40
"""The largest file size a manifest may state (1 TiB): far above any release file (a 60,000-image gallery is a few
GB), so that a hostile or corrupt count is refused before a download is planned around it."""
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def check_manifest(m: Any, version: str, where: str) -> dict[str, Any]:
    """``m`` when it is a release manifest of ``version``: an object with a ``files`` object (and optionally a
    ``metadata_files`` object) whose ``version`` is ``version`` (the folder it was read from), every file key a
    safe relative path (:func:`safepath.check_key`, never ``manifest.json`` itself, never in both lists), every
    entry ``{"sha256": 64 lowercase hex digits, "bytes": an integer 0 .. MAX_FILE_BYTES, "rows": an integer >= 0
    when present}`` (booleans are not integers here).

    A manifest comes from a store or a mirror that someone else controls: ``pull``, ``info`` and ``evaluate`` all
    read it through this check, so a hostile entry is a one-line error, never a raw ``AttributeError``.

    Raises:
        ReleaseIntegrityError: any of the above does not hold (the message names the file and the field).
        UnsafePathError: a file key is not a safe relative path.
    """
    if not (isinstance(m, dict) and isinstance(m.get("files"), dict)
            and isinstance(m.get("metadata_files", {}), dict)):
        raise ReleaseIntegrityError(f"{version}: manifest.json in {where} is not a release manifest "
                                    "(an object with a 'files' object)")
    if m.get("version") != version:
        shown = repr(m.get("version"))
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        raise ReleaseIntegrityError(f"{version}: manifest.json in {where} names version {shown}, not {version} "
                                    "(the folder it was read from)")
    both = set(m["files"]) & set(m.get("metadata_files", {}))
    if both:
        raise ReleaseIntegrityError(f"{version}: manifest.json lists {sorted(both)[0]!r} both as a data file and "
                                    "as a metadata file")
    every = all_files(m)
    for k, meta in every.items():
        if k == "manifest.json":
            raise UnsafePathError(f"{version}: the manifest lists manifest.json itself")
        try:
            check_key(k)
        except UnsafePathError as exc:
            raise UnsafePathError(f"{version}: refused: the manifest names a file key that is not a plain relative "
                                  f"path inside the release: {exc}") from None
        _check_writable_key(k, version)

        def whole(v: Any, hi: int | None = None) -> bool:
            return isinstance(v, int) and not isinstance(v, bool) and v >= 0 and (hi is None or v <= hi)

        bad = (None if isinstance(meta, dict) else "the entry is not an object") or \
            (None if whole(meta.get("bytes"), MAX_FILE_BYTES) else
             f"bytes {meta.get('bytes')!r:.40} is not a whole number of bytes from 0 to {MAX_FILE_BYTES}") or \
            (None if isinstance(meta.get("sha256"), str) and _SHA256.match(meta["sha256"]) else
             f"sha256 {meta.get('sha256')!r:.80} is not 64 lowercase hex digits") or \
            (None if "rows" not in meta or whole(meta["rows"]) else
             f"rows {meta.get('rows')!r:.40} is not a whole number")
        if bad:
            raise ReleaseIntegrityError(f"{version}/{k}: manifest entry refused: {bad}")
    for k in every:  # a key that is also another key's folder cannot be written (``a`` and ``a/b``)
        parts = k.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in every:
                raise ReleaseIntegrityError(f"{version}: manifest.json lists {'/'.join(parts[:i])!r} both as a file "
                                            f"and as the folder of {k!r}")
    folded: dict[str, str] = {}
    for k in every:  # on a case-insensitive disk (macOS, Windows) these would be one file
        other = folded.setdefault(k.casefold(), k)
        if other != k:
            raise ReleaseIntegrityError(f"{version}: manifest.json lists {other!r} and {k!r}, which differ only in "
                                        "case")
    # a subset is scored on its query and gallery together: one without the other is no subset (the distractor
    # gallery, noise/, has no queries)
    for s in manifest_subsets(m, role="gallery"):
        if f"{s}/query.parquet" not in m["files"] and s != NOISE:
            raise ReleaseIntegrityError(f"{version}: manifest.json lists {s}/gallery.parquet without "
                                        f"{s}/query.parquet")
    for s in manifest_subsets(m):
        if f"{s}/gallery.parquet" not in m["files"]:
            raise ReleaseIntegrityError(f"{version}: manifest.json lists {s}/query.parquet without "
                                        f"{s}/gallery.parquet")
    return m


def manifest_subsets(m: dict[str, Any], role: str = "query") -> list[str]:
    """The subsets a manifest lists, sorted: the folders holding a ``<role>.parquet`` directly (``query``: the
    scored subsets, names this version does not know included; ``gallery``: those and the distractor gallery)."""
    return sorted({k.split("/")[0] for k in m["files"] if k.count("/") == 1 and k.endswith(f"/{role}.parquet")})


def no_subset_message(version: str, m: dict[str, Any]) -> str | None:
    """Why ``version``'s manifest ``m`` cannot be scored when it lists no subset (no subset's query and gallery
    files), or None when it lists one: the one wording for ``info`` and :func:`pull`."""
    if manifest_subsets(m):
        return None
    return (f"{version}: no subset to score: its manifest lists no subset's query and gallery files "
            f"({len(m['files'])} data files)")


def pull_keys(manifest: dict[str, Any], subsets: Sequence[str] | None = None) -> list[str]:
    """The files a pull of ``subsets`` (None: every subset) brings, data files then metadata files, sorted: the
    subsets' files, the distractor gallery's (``noise/``: every subset's gallery includes it) and the metadata
    files (``README.md``, ``croissant.json``, ``docs/``, ``CHANGES.md``, ``changes.parquet``), always. The one
    rule for :func:`pull` and for what a pulled folder must hold (:func:`folder_gaps`)."""
    data = sorted(manifest["files"])
    if subsets is not None:
        data = [k for k in data if k.split("/")[0] in {*subsets, NOISE}]
    return data + sorted(manifest.get("metadata_files", {}))


def folder_gaps(manifest: dict[str, Any], present: set[str], card: bytes | None,
                pulled_record: Sequence[str] | None = None) -> tuple[list[str], list[str]]:
    """``(subsets not pulled, files missing)`` of a pulled release folder holding the file keys ``present``, by
    :func:`pull_keys`: a pull brings whole subsets, and always ``noise/`` and the metadata files. Which subsets
    were pulled: those ``pulled_record`` names (the folder's :data:`PULLED_NAME`, :func:`read_pulled`: what the
    pulls into it brought), else (a folder pulled before that record) those the folder's dataset card (``card``:
    ``README.md``'s bytes, :func:`card_config_names`) names (a partial pull limits the card to the subsets it
    brought), else (no card, or one that could not be limited and so cannot be read) those with a file there;
    a subset with a file there was always pulled. Every other file :func:`pull_keys` names for the subsets pulled
    is missing: damage, which pulling again repairs."""
    subsets = sorted({k.split("/")[0] for k in manifest["files"] if "/" in k} - {NOISE})
    named: set[str] = set()
    if pulled_record is not None:
        named = set(pulled_record)
    elif card is not None:
        try:
            named = set(card_config_names(card.decode("utf-8")))
        except ValueError:  # UnicodeDecodeError too: no card to read, a subset wholly absent was not pulled
            named = set()
    pulled = [s for s in subsets if s in named
              or any(k in present for k in manifest["files"] if k.split("/")[0] == s)]
    missing = [k for k in pull_keys(manifest, pulled) if k not in present]
    return [s for s in subsets if s not in pulled], missing


def _check_writable_key(k: str, version: str) -> None:
    """Refuse a key that a pull could not write as named, before anything is written: longer than
    :data:`MAX_KEY_CHARS`, a segment over 255 bytes, or a name of pull's own (a ``.part`` download in progress,
    its lock file :data:`LOCK_NAME`)."""
    if len(k) > MAX_KEY_CHARS:
        raise ReleaseIntegrityError(f"{version}: manifest.json names a file key of {len(k)} characters "
                                    f"(at most {MAX_KEY_CHARS})")
    seg = max(k.split("/"), key=lambda x: len(x.encode("utf-8")))
    if len(seg.encode("utf-8")) > 255:
        raise ReleaseIntegrityError(f"{version}: manifest.json names a file whose name {seg[:40]!r}... is "
                                    f"{len(seg.encode('utf-8'))} bytes long (at most 255)")
    if k == LOCK_NAME:
        raise ReleaseIntegrityError(f"{version}: manifest.json names {k!r}, the lock file a pull holds while it "
                                    "writes")
    if k == PULLED_NAME:
        raise ReleaseIntegrityError(f"{version}: manifest.json names {k!r}, where a pull records the subsets it "
                                    "brought")
    if k.endswith(".part"):
        raise ReleaseIntegrityError(f"{version}: manifest.json names {k[:80]!r}: '.part' names the files a pull is "
                                    "still downloading")


def list_releases(store: ObjectStore) -> list[str]:
    """Published versions (those with a manifest), oldest first. Folders whose name is not a release version
    (``vYYYYMMDD``, :func:`safepath.check_version`) are not versions and are left out."""
    out = set()
    for key in store.list("releases/"):
        parts = key.split("/")
        if len(parts) == 3 and parts[2] == "manifest.json" and not parts[1].startswith("."):
            try:
                out.add(check_version(parts[1]))
            except UnsafePathError:
                continue
    return sorted(out)


def readable_releases(store: ObjectStore) -> tuple[list[str], dict[str, str]]:
    """The published versions whose manifest can be read and is valid, oldest first, and ``{version: why}`` for
    those left out: what ``lookbench releases`` lists, and what an error about a version that is not published
    suggests (never a version that could not be read either). Raises StoreError when the store cannot be listed."""
    ok: list[str] = []
    bad: dict[str, str] = {}
    for v in list_releases(store):
        try:
            read_manifest(store, v)
        except (ReleaseIntegrityError, UnsafePathError, StoreError) as exc:
            bad[v] = str(exc)
            continue
        ok.append(v)
    return ok, bad


def resolve_version(store: ObjectStore, version: str) -> str:
    """``version`` itself, or for ``latest`` the version ``releases/latest`` names (checked to be a version name
    with a manifest in the store).

    Raises:
        StoreError: ``latest`` was asked for and the store has none, or it names a version that is not published
            (the message says latest pointed there).
        UnsafePathError: the name (given or read from the store: then the message names ``releases/latest`` as
            the damaged file) is not a release version.
    """
    if version == "latest":
        if not store.exists(LATEST_KEY):
            raise StoreError(f"{store.url} has no releases/latest: name a version (vYYYYMMDD; `lookbench releases` "
                             "lists a folder's or a bucket's, a static http(s) mirror cannot be listed)")
        try:
            raw = read_small(store, LATEST_KEY, LATEST_MAX_BYTES)
        except ObjectTooLarge as exc:  # a mirror's web page (over the pointer's 1 KiB) is named as one
            ctype = store.content_type(LATEST_KEY) if isinstance(store, HttpStore) else None  # one HEAD request
            if "html" in (ctype or "").lower():
                raise ObjectTooLarge(mirror_served(store, LATEST_KEY, None, _POINTER, ctype) + f" ({exc})") from exc
            raise
        named = raw.decode("utf-8", errors="replace").strip()
        try:
            version = check_version(named)
        except UnsafePathError as exc:  # the store's fault, not the caller's: say which file is wrong
            if isinstance(store, HttpStore):  # a mirror cannot be listed: `lookbench releases` is no help there
                raise UnsafePathError(mirror_served(store, LATEST_KEY, raw, _POINTER)) from exc
            raise UnsafePathError(f"{store.url}/{LATEST_KEY} is damaged: {exc}; name a version instead "
                                  "(`lookbench releases` lists them)") from exc
        if not store.exists(f"{release_prefix(version)}/manifest.json"):
            raise _not_published(store, version, f" (releases/latest names it: latest points to a version that "
                                                 "is not published)")
        return version
    return check_version(version)


def _not_published(store: ObjectStore, version: str, why: str) -> StoreError:
    """The error for a version the store does not have: the published versions (listed, not read) and the closest
    one whose manifest can be read and is valid (difflib: at most three candidates read, never a damaged version
    suggested); for a store that cannot be listed (an http mirror), the version ``releases/latest`` names. Never
    calls itself again: the candidates are read as listed (:func:`read_manifest_bytes` with ``exists=True``)."""
    import difflib

    try:
        have = list_releases(store)  # the listing only: reading every manifest (N GETs) just to word an error is not
    except StoreError:  # a static mirror cannot be listed: say what it does have
        try:
            latest = check_version(read_small(store, LATEST_KEY, LATEST_MAX_BYTES).decode("utf-8", errors="replace")
                                   .strip())
        except (StoreError, UnsafePathError):
            latest = None
        listed = (f"it cannot be listed; its releases/latest is {latest}" if latest
                  else "it cannot be listed and has no releases/latest")
        hint = (f"; did you mean {latest}?" if latest and latest != version
                and difflib.get_close_matches(version, [latest], n=1) else "")
        return StoreError(f"release {version} was not found at {store.url}{why}{hint} ({listed})")
    near = next((v for v in difflib.get_close_matches(version, have, n=3) if _readable(store, v)), None)
    hint = f"; did you mean {near}?" if near else ""
    listed = f"published: {', '.join(have)}" if have else "it has no published release"
    return StoreError(f"release {version} is not published in {store.url}{why}{hint} ({listed})")


def _readable(store: ObjectStore, version: str) -> bool:
    """Whether ``version``'s manifest (listed in ``store``) can be read and is valid: what a suggestion must be."""
    try:
        read_manifest_bytes(store, version, exists=True)  # listed: not asked again, no path to _not_published
    except (ReleaseIntegrityError, UnsafePathError, StoreError):
        return False
    return True


_POINTER = "a LookBench release pointer (a version name, vYYYYMMDD)"


_ASK = object()  # mirror_served: the Content-Type not asked yet


def mirror_served(store: HttpStore, key: str, raw: bytes | None, wanted: str, ctype: Any = _ASK) -> str:
    """What to say when an http(s) mirror answered ``key`` (status 200) with something that is not ``wanted``: a
    web server's index or error page, typically, because the ``--store`` URL does not name the folder that holds
    ``releases/``. Names the URL, the ``Content-Type`` and the size and first bytes of ``raw`` (the body, when it
    was read), and says to check the URL (a mirror cannot be listed, so ``lookbench releases`` is no help).
    ``ctype``: the ``Content-Type`` when the caller has asked for it already (None: none given), else asked here."""
    if ctype is _ASK:
        ctype = store.content_type(key)
    served = f"Content-Type {ctype}" if ctype else "no Content-Type"
    if raw is not None:
        head = raw[:60].decode("utf-8", errors="replace")
        served += f", {len(raw)} bytes beginning {head!r}" + ("..." if len(raw) > 60 else "")
    page = " (a web page: a server's index or error page?)" if "html" in (ctype or "").lower() or (
        raw is not None and raw.lstrip()[:1] == b"<") else ""
    return (f"{store.url}/{key} did not serve {wanted}: it served {served}{page}; check the --store URL: it must "
            f"name the folder that holds releases/ (with releases/latest and releases/vYYYYMMDD/manifest.json)")


def read_manifest(store: ObjectStore, version: str) -> dict[str, Any]:
    """The manifest of a published version, checked by :func:`check_manifest`.

    Raises:
        StoreError: the version is not published (the message lists the published versions and the closest).
        ReleaseIntegrityError, UnsafePathError: the manifest is not JSON or not a valid manifest of ``version``.
    """
    return read_manifest_with_digest(store, version)[0]


def read_manifest_with_digest(store: ObjectStore, version: str) -> tuple[dict[str, Any], str]:
    """``(the checked manifest, the sha256 of its stored bytes)`` of a published version: the digest ``lookbench
    info`` ends with, the release's root of trust, so scores can name the exact release they were computed on.
    Raises as :func:`read_manifest`."""
    try:
        check_version(version)
        exists = store.exists(f"{release_prefix(version)}/manifest.json")
    except UnsafePathError as exc:
        exists, why = False, f" ({exc})"
    else:
        why = ""
    raw, manifest = read_manifest_bytes(store, version, exists, why)
    return manifest, hashlib.sha256(raw).hexdigest()


def read_manifest_bytes(store: ObjectStore, version: str, exists: bool | None = None, why: str = ""
                        ) -> tuple[bytes, dict[str, Any]]:
    """``(the stored bytes, the checked manifest)`` of a published version (see :func:`read_manifest`)."""
    if exists is None:
        exists = store.exists(f"{release_prefix(check_version(version))}/manifest.json")
    if not exists:
        raise _not_published(store, version, why)
    key = f"{release_prefix(version)}/manifest.json"
    raw = read_small(store, key, MANIFEST_MAX_BYTES)
    try:
        m = json.loads(raw, object_pairs_hook=_no_duplicate_keys)
    except _DuplicateKey as exc:
        raise ReleaseIntegrityError(f"{version}: manifest.json in {store.url} names {exc.args[0]!r:.120} twice in "
                                    "one object (a JSON reader keeps one of the two, another reader the other)"
                                    ) from None
    except (ValueError, UnicodeDecodeError) as exc:
        if isinstance(store, HttpStore):  # a web page answered with 200, most likely: the URL is the suspect
            raise ReleaseIntegrityError(f"{version}: " + mirror_served(store, key, raw, "a LookBench manifest (JSON)")
                                        + f" (not JSON: {exc})") from None
        raise ReleaseIntegrityError(f"{version}: manifest.json in {store.url} is not JSON ({exc})") from None
    except RecursionError:
        raise ReleaseIntegrityError(f"{version}: manifest.json in {store.url} nests too deeply to be a "
                                    "manifest") from None
    return raw, check_manifest(m, version, store.url)


class _DuplicateKey(ValueError):
    """A JSON object names a key twice (``args[0]``: the key)."""


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s ``object_pairs_hook``: the object, refusing one that names a key twice."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


def read_file(store: ObjectStore, version: str, subset: str, role: str, verify: bool = True,
              manifest: dict[str, Any] | None = None) -> pa.Table:
    """Read one release file, checking its size and sha256 against the manifest: ``manifest`` when the caller has
    read it (a command that reads several files checks them all against one read: a store or a mirror could
    answer a second read with another manifest), else the store's, read here. The file is streamed and never
    more than the manifest's ``bytes`` are accepted (with ``verify``).

    Raises:
        ReleaseIntegrityError: the bytes do not match the manifest (size or sha256), or are not a readable Parquet
            file (the message names the file).
        StoreError: the file cannot be read.
    """
    key = f"{subset}/{role}.parquet"
    if not verify:
        data = store.get_bytes(f"{release_prefix(version)}/{key}")
    else:
        meta = (manifest if manifest is not None else read_manifest(store, version))["files"].get(key)
        if meta is None:
            raise ReleaseIntegrityError(f"{version}/{key}: not in the manifest")
        size, h, buf = meta["bytes"], hashlib.sha256(), bytearray()
        for block in read_range(store, f"{release_prefix(version)}/{key}", 0, 1 << 20, size=size):
            if len(buf) + len(block) > size:
                raise ReleaseIntegrityError(f"{version}/{key}: the store sent more than the manifest's {size} bytes")
            buf += block
            h.update(block)
        if len(buf) != size:
            raise ReleaseIntegrityError(f"{version}/{key}: {len(buf)} bytes, the manifest says {size}")
        if h.hexdigest() != meta["sha256"]:
            raise ReleaseIntegrityError(f"{version}/{key}: sha256 does not match the manifest")
        data = buf
    try:  # read in place (pa.py_buffer does not copy): one copy of the file in memory, not two
        return pq.read_table(pa.BufferReader(pa.py_buffer(data)))
    except pa.ArrowException as exc:
        raise ReleaseIntegrityError(f"{version}/{key}: not a readable Parquet file ({exc})") from None


SCORED_COLUMNS = ("sample_id", "item_ID", "category", "attributes", "image_sha256", "first_seen_at", "image")
"""The columns of a release file (``<subset>/{query,gallery}.parquet``, ``noise/gallery.parquet``) that scoring
reads: each must be there with its type in the published schema (:data:`schemas.RELEASE`, ``docs/schema.json``)."""
NOT_NULL = RELEASE_REQUIRED
"""Columns no row may leave null (``"nullable": false`` in ``docs/schema.json``, though the Arrow fields are
nullable): ``sample_id`` names the row (embeddings are keyed by it), ``item_ID`` is what a query's positives are
found by (a query without one cannot be scored; a gallery or distractor row without one shows no item). The other
scored columns may be null: ``category`` / ``attributes`` (no label), ``first_seen_at`` (the noise gallery's
distractors; such a query is outside every ``--cutoff``)."""
_SHOWN = 3


def check_scored_schema(schema: pa.Schema, where: str, columns: tuple[str, ...] = SCORED_COLUMNS) -> None:
    """Raise ReleaseIntegrityError naming ``where`` (the file) and the column when ``schema`` lacks one of
    ``columns`` (:data:`SCORED_COLUMNS`) or has it with another type than the published schema's."""
    missing = [c for c in columns if c not in schema.names]
    if missing:
        raise ReleaseIntegrityError(f"{where}: no column {', '.join(missing)} (the published schema, docs/schema.json, "
                                    f"has it; scoring reads {', '.join(SCORED_COLUMNS)})")
    for c in columns:
        if schema.names.count(c) > 1:
            raise ReleaseIntegrityError(f"{where}: column {c} appears {schema.names.count(c)} times")
        want, got = RELEASE.field(c).type, schema.field(c).type
        if not got.equals(want):
            shown = str(got) if len(str(got)) <= 120 else str(got)[:117] + "..."
            raise ReleaseIntegrityError(f"{where}: column {c} is {shown}, the published schema (docs/schema.json) "
                                        f"has {want}")


def check_scored_table(table: pa.Table, where: str) -> None:
    """Check a release file's table (:data:`SCORED_COLUMNS` at least; the ``image`` column may be left out, it is
    read later) before it is scored: the columns and types of :func:`check_scored_schema`, no null or empty value in
    :data:`NOT_NULL`, every ``sample_id`` once.

    A release comes from a store or a mirror that someone else controls, and its manifest's sha256 only says the
    file is the one the manifest names: a rewritten manifest passes that. Each problem is one error naming the file
    (``where``), the column and the rows (their number, from 0, and ``sample_id``).

    Raises:
        ReleaseIntegrityError: any of the above does not hold.
    """
    check_scored_schema(table.schema, where,
                        tuple(c for c in SCORED_COLUMNS if c != "image" or "image" in table.column_names))
    ids = table.column("sample_id").to_pylist()
    for c in NOT_NULL:
        values = table.column(c).to_pylist()
        rows = [i for i, v in enumerate(values) if v is None or not str(v).strip()]  # null, or an empty string
        if rows:
            shown = ", ".join(f"row {i}" + (f" (sample_id {ids[i]!r})" if ids[i] is not None else "")
                              for i in rows[:_SHOWN])
            why = ("a query's positives are the gallery rows with its item_ID: a row without one cannot be scored"
                   if c == "item_ID" else "it names the row")
            many = "s" if len(rows) > 1 else ""
            raise ReleaseIntegrityError(f"{where}: column {c} is null or empty in {len(rows)} row{many}: {shown}"
                                        f"{'…' if len(rows) > _SHOWN else ''} ({why})")
    first: dict[str, int] = {}
    for i, s in enumerate(ids):
        j = first.setdefault(s, i)
        if j != i:
            raise ReleaseIntegrityError(f"{where}: column sample_id: {s!r} names rows {j} and {i} (a sample_id names "
                                        "one row of a file)")


def check_same_images(seen: dict[str, tuple[str, str]], table: pa.Table, where: str) -> None:
    """A ``sample_id`` in several files (a gallery row is in every subset's gallery) must name the same image there
    (``image_sha256``): ``seen`` maps each id met so far to ``(image_sha256, file)`` and is extended with
    ``table``'s. Raises ReleaseIntegrityError naming both files and the sample_id."""
    for s, h in zip(table.column("sample_id").to_pylist(), table.column("image_sha256").to_pylist()):
        before = seen.setdefault(s, (h, where))
        if before[0] != h and before[1] != where:
            raise ReleaseIntegrityError(f"{where}: column sample_id: {s!r} names another image (image_sha256 "
                                        f"{str(h)[:16]}…) than in {before[1]} ({str(before[0])[:16]}…)")


def choose_subsets(have: list[str], asked: list[str], what: str) -> list[str]:
    """``asked`` when every name is one of ``have``. Raises ValueError naming each unknown subset with the closest
    known one (difflib) and the known ones."""
    import difflib

    unknown = [s for s in dict.fromkeys(asked) if s not in have]
    if unknown:
        parts = []
        for s in unknown:
            near = difflib.get_close_matches(s, have, n=1)
            parts.append(f"{s!r}" + (f" (did you mean {near[0]}?)" if near else ""))
        raise ValueError(f"{what} has no subset {', '.join(parts)}; its subsets: {', '.join(have) or 'none'}")
    return list(dict.fromkeys(asked))


def _open_part(path: Path, append: bool) -> Any:
    """A ``.part`` file opened for writing without following a symbolic link (one planted there would send the
    download elsewhere). Raises UnsafePathError for a link, a folder or anything else than a plain file there,
    saying to remove it (a pull never makes one)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC) | getattr(os, "O_NOFOLLOW", 0)
    if path.is_symlink() or (path.exists() and not path.is_file()):
        import shlex

        kind = "a symbolic link" if path.is_symlink() else "a folder" if path.is_dir() else "not a plain file"
        raise UnsafePathError(f"{path} is {kind}, where a pull keeps its download of {path.name[:-5]} in progress: "
                              f"remove it (rm -r {shlex.quote(str(path))}) and run the same command again")
    return os.fdopen(os.open(path, flags, 0o644), "ab" if append else "wb")


def _fetch(store: ObjectStore, key: str, target: Path, size: int, sha256: str, bar: Any) -> None:
    """Download ``key`` to ``target`` through ``target.part``: resumed from a ``.part`` an interrupted pull left
    (its bytes hashed first), streamed (never more than ``size`` bytes accepted), then checked for size and
    sha256 and renamed into place. A resumed file that does not verify is downloaded once more from the start.
    Raises ReleaseIntegrityError (the ``.part`` is removed), StoreError."""
    part = target.with_name(target.name + ".part")
    for attempt in (0, 1):
        h = hashlib.sha256()
        start = 0
        if attempt == 0 and part.is_file() and not part.is_symlink() and part.stat().st_size <= size:
            with part.open("rb") as fh:
                for block in iter(lambda: fh.read(1 << 22), b""):
                    h.update(block)
                    start += len(block)
        resumed = start > 0
        if bar is not None and start:
            bar.update(start)
        done = start
        with _open_part(part, append=resumed) as out:
            if done < size:
                for chunk in read_range(store, key, done, size=size):
                    if done + len(chunk) > size:
                        part.unlink(missing_ok=True)
                        raise ReleaseIntegrityError(f"{key}: the store sent more than the manifest's {size} bytes")
                    out.write(chunk)
                    h.update(chunk)
                    done += len(chunk)
                    if bar is not None:
                        bar.update(len(chunk))
        if done == size and h.hexdigest() == sha256:
            part.replace(target)
            return
        part.unlink(missing_ok=True)
        if bar is not None:
            bar.update(-done)
        if not resumed:
            raise ReleaseIntegrityError(f"{key}: downloaded bytes do not match the manifest ({done} bytes with "
                                        f"sha256 {h.hexdigest()[:16]}…, expected {size} bytes with {sha256[:16]}…)")


def read_range(store: ObjectStore, key: str, start: int = 0, chunk: int = 1 << 20, size: int | None = None
               ) -> Any:
    """The bytes of ``key`` from offset ``start`` on, in chunks of at most ``chunk`` bytes (the store's
    ``read_range`` when it streams, else its ``get_bytes`` sliced). ``size``: the object's expected size in bytes
    (the manifest's), which sets an http(s) mirror's deadline (:class:`store.HttpStore`; every store's
    ``read_range`` takes it, :class:`store.ObjectStore`)."""
    fn = getattr(store, "read_range", None)
    if fn is not None:
        yield from fn(key, start, chunk, size=size)
        return
    data = store.get_bytes(key)
    for s in range(start, len(data), chunk):
        yield data[s : s + chunk]


def read_small(store: ObjectStore, key: str, max_bytes: int) -> bytes:
    """The whole object ``key``, which may have at most ``max_bytes`` bytes (a manifest, ``releases/latest``):
    reading stops there, so a hostile store or mirror cannot fill the memory.

    Raises:
        StoreError: the object has more than ``max_bytes`` bytes (the message names it and the limit), or cannot
            be read.
    """
    if isinstance(store, (HttpStore, S3Store)):  # an announced size over the limit is refused before the body
        return store.get_bytes(key, max_bytes=max_bytes)
    if isinstance(store, LocalStore):  # a file: its size is known before it is read
        try:
            size = store.path(key).stat().st_size
        except FileNotFoundError:
            size = 0  # get_bytes says it is missing
        if size > max_bytes:
            raise StoreError(f"{store.url}/{key}: {size} bytes, more than the {max_bytes} bytes it may have: refused")
        return store.get_bytes(key)
    out = bytearray()
    for block in read_range(store, key, 0, 1 << 16):
        out += block
        if len(out) > max_bytes:
            raise StoreError(f"{store.url}/{key}: more than {max_bytes} bytes, the most it may have: refused")
    return bytes(out)


def check_release_files(store: ObjectStore, version: str, manifest: dict[str, Any], keys: list[str] | None = None,
                        hash_files: bool = True) -> tuple[list[str], list[str]]:
    """Check the files of a release in ``store`` against its manifest (``keys``: these file keys only, default
    every one): each is there, is no symbolic link (a folder store's or pulled folder's, ``UnsafePathError``
    named), and has the manifest's size and, with ``hash_files``, its sha256 (streamed: memory stays at one
    chunk whatever the file's size). Returns ``(checked, problems)``: the keys checked and one line per file that
    is missing or differs. Raises UnsafePathError for a link; StoreError when the store cannot be read."""
    every = all_files(manifest)
    prefix = release_prefix(version)
    checked, problems = [], []
    for k in keys if keys is not None else sorted(every):
        meta, key = every[k], f"{prefix}/{k}"
        if not store.exists(key):
            problems.append(f"{k}: missing")
            continue
        checked.append(k)
        h, size = hashlib.sha256(), 0
        for block in read_range(store, key, 0, 1 << 22, size=meta["bytes"]):
            size += len(block)
            if size > meta["bytes"]:
                break
            if hash_files:
                h.update(block)
        if size != meta["bytes"]:
            problems.append(f"{k}: {'more than ' if size > meta['bytes'] else ''}{size} bytes, the manifest says "
                            f"{meta['bytes']}")
        elif hash_files and h.hexdigest() != meta["sha256"]:
            problems.append(f"{k}: sha256 {h.hexdigest()[:16]}…, the manifest says {meta['sha256'][:16]}…")
    return checked, problems


def _is_file(path: Path, size: int, sha256: str) -> bool:
    if not (path.is_file() and not path.is_symlink() and path.stat().st_size == size):
        return False
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest() == sha256


def _limit_card_to_present(out: Path, manifest: dict[str, Any], warn: Any = None) -> None:
    """After a partial pull: the folder's dataset card (``README.md``) names only the configs (subsets, and the
    ``noise`` gallery) whose data files are all in ``out`` (this pull's and an earlier one's), since Hugging Face
    ``datasets`` resolves every config's files when it opens the folder and fails on the first one missing. Its
    front matter is written again with those configs; its body is the published one. The card is left as
    published (its manifest sha256) when every config is there; a rerun of the pull fetches it again and limits
    it again.

    A card that cannot be limited (no YAML front matter, a tag ``yaml.safe_load`` refuses) is kept as published,
    and ``warn(message)`` says so (naming the file, the version and why): the pull itself is complete, and a
    rerun would meet the same card, so failing would leave the folder without its ``manifest.json`` for ever."""
    if "README.md" not in manifest.get("metadata_files", {}):
        return
    card = resolve_inside(out, "README.md")  # as every file pull writes: not through a link planted there
    if not card.is_file():
        return
    data = manifest["files"]
    configs = sorted({k.split("/")[0] for k in data if "/" in k})  # the subsets and the noise gallery
    present = [s for s in configs if all((out / k).is_file() for k in data if k.split("/")[0] == s)]
    if len(present) < len(configs):
        try:
            text = limit_card(card.read_text(encoding="utf-8", errors="strict"), present)
        except (ValueError, UnicodeDecodeError) as exc:  # UnicodeDecodeError is a ValueError too
            (warn or _warn)(f"{manifest.get('version')}/README.md (the dataset card) is kept as published, not "
                            f"limited to the subsets pulled: {exc}; datasets.load_dataset on the folder may fail "
                            "on a subset that was not pulled")
            return
        part = card.with_name("README.md.part")
        with _open_part(part, append=False) as fh:
            fh.write(text.encode("utf-8"))
        part.replace(card)


LOCK_NAME = ".pull.lock"
"""The file a pull holds locked (``flock``) in ``dest/<version>/`` while it writes there. It stays after the pull
(empty, harmless, left out of the folder's listings): removing it would let a pull that opened it before the
removal hold a lock that a third pull, creating the file anew, does not see."""
PULLED_NAME = ".pulled.json"
"""The file in ``dest/<version>/`` where pull records the subsets the pulls into the folder brought (a JSON list,
written before ``manifest.json``; left out of the folder's listings): what :func:`folder_gaps` reads first."""
PULLED_MAX_BYTES = 64 << 10


def read_pulled(folder: Path) -> list[str] | None:
    """The subsets ``folder/.pulled.json`` says the pulls into ``folder`` brought; None when there is no such
    record (a folder pulled before it, or one written by hand) or it is not a list of names (not a plain file,
    too long, not JSON): then :func:`folder_gaps` reads the dataset card."""
    try:
        path = resolve_inside(Path(folder), PULLED_NAME)
        if path.is_symlink() or not path.is_file() or path.stat().st_size > PULLED_MAX_BYTES:
            return None
        names = json.loads(path.read_bytes())
    except (OSError, ValueError, UnsafePathError):
        return None
    if not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
        return None
    return names


def _record_pulled(out: Path, manifest: dict[str, Any], subsets: Sequence[str] | None) -> None:
    """Write ``out/.pulled.json`` (atomically, through a ``.part``): the subsets this pull brought (None: every
    subset of the manifest) and those an earlier pull into ``out`` recorded."""
    brought = manifest_subsets(manifest) if subsets is None else list(subsets)
    names = sorted({*(read_pulled(out) or []), *brought})
    target = resolve_inside(out, PULLED_NAME)
    part = target.with_name(PULLED_NAME + ".part")
    with _open_part(part, append=False) as fh:
        fh.write(json.dumps(names).encode("utf-8"))
    part.replace(target)


class _FolderNotWritable(Exception):
    """:func:`_pull_lock` could not make its lock file: the folder is read-only (the OS's reason in ``args[0]``)."""


class PulledFiles(list):
    """:func:`pull`'s result: the paths of the release's files; ``read_only`` is the OS's reason when the folder
    could not be written and already held the complete, verified release (nothing written), else None."""

    read_only: str | None = None


def _complete_read_only(out: Path, version: str, keys: list[str], every: dict[str, Any], raw_manifest: bytes,
                        manifest: dict[str, Any], reason: str) -> PulledFiles:
    """A pull into a folder that cannot be written (``reason``): fine when the folder already holds the complete
    release (its ``manifest.json`` the store's bytes, each file asked for with its sha256 and size; the dataset card
    of a partial pull, limited to the subsets there, only present), as a rerun of a finished pull into a read-only
    copy: nothing to write. Raises ValueError naming the folder, the reason and how many files are missing."""
    data = manifest["files"]
    configs = {k.split("/")[0] for k in data if "/" in k}
    whole = all((out / k).is_file() for k in data) and bool(configs)  # else the card was limited: not the published
    here = resolve_inside(out, "manifest.json")
    bad = [k for k in keys if not (_is_file(resolve_inside(out, k), every[k]["bytes"], every[k]["sha256"])
                                   or (k == "README.md" and not whole and (out / k).is_file()))]
    if not (here.is_file() and not here.is_symlink() and here.read_bytes() == raw_manifest):
        bad.append("manifest.json")
    if bad:
        raise ValueError(f"{version}: cannot write in {out} ({reason}), and it does not hold the complete release "
                         f"yet ({len(bad)} file(s) missing or different, such as {bad[0]}): pull into a folder you "
                         "can write")
    files = PulledFiles(resolve_inside(out, k) for k in keys)
    files.read_only = reason
    return files


@contextlib.contextmanager
def _pull_lock(out: Path, version: str, warn: Any = None) -> Any:
    """Hold ``out/.pull.lock`` for the pull (on systems with ``fcntl.flock``): a second pull into the same folder
    stops at once with a ValueError saying another pull is writing there, instead of failing half-way on a
    ``.part`` file the first one renamed. The file stays afterwards (:data:`LOCK_NAME`). A file system that cannot
    lock (``flock`` failing otherwise than "held", as on some NFS, SMB or FUSE mounts) is said with ``warn``, and
    the pull goes on unlocked. Raises UnsafePathError for a link there."""
    try:
        import fcntl
    except ImportError:  # Windows: no lock
        yield
        return
    lock = resolve_inside(out, LOCK_NAME)
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError as exc:
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):  # nothing can be written there
            raise _FolderNotWritable(exc.strerror or str(exc)) from exc
        raise
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValueError(f"{version}: another pull is writing {out} (it holds {lock}): let it finish (or stop "
                             "it), then run this command again") from None
        except OSError as exc:
            (warn or _warn)(f"{version}: {out} cannot be locked ({exc.strerror or exc}): pulling without the lock; "
                            "do not run a second pull into this folder at the same time")
        yield
    finally:
        os.close(fd)


def _check_not_in_store(store: ObjectStore, dest: Path, out: Path) -> None:
    """Refuse a pull from a folder store into that folder (``dest`` is the store's folder or inside it: the copy
    would land among the published files) or into a folder that holds the store (``dest/<version>`` is the store
    or above it). A ``dest`` beside the store, or holding it elsewhere (``--store rel/store --dest rel``), is fine.
    Raises ValueError naming both folders."""
    root = getattr(store, "root", None)
    if not isinstance(root, Path):
        return
    r, d, o = root.resolve(), dest.resolve(), out.resolve()
    if d == r or r in d.parents:
        raise ValueError(f"--dest {dest} is inside the store {r} it would read from: pull into a folder outside "
                         "the store (the store already holds the release)")
    if o == r or o in r.parents:
        raise ValueError(f"the store {r} is inside {out}, the folder the pull would write: pull into another --dest")


def pull(store: ObjectStore, version: str, dest: Path, subsets: list[str] | None = None,
         progress: bool = True, manifest: tuple[bytes, dict[str, Any]] | None = None, warn: Any = None
         ) -> list[Path]:
    """Download a published release (or some of its subsets; ``version`` may be ``latest``) into
    ``dest/<version>/``, verifying every file's sha256 and size against the manifest before it is moved into
    place; ``manifest.json`` (the store's bytes) is written last. The metadata files (``README.md``,
    ``croissant.json``, ``CHANGES.md``, ``changes.parquet``) always come along, and so does the distractor
    gallery (``noise/``), which every subset's gallery includes when scoring. After a partial pull the dataset
    card's ``configs`` name only the subsets (and ``noise``) in the folder, so ``datasets`` can open it; its body
    is the published card's. The subsets pulled are recorded in ``dest/<version>/.pulled.json`` (with those of
    earlier pulls into the folder; :func:`read_pulled`), written before the manifest: how :func:`folder_gaps` tells
    a subset not pulled from a damaged folder.

    Resuming: a file already in place with the right sha256 is not downloaded again, and a file an interrupted
    pull left half-written (``<file>.part``) is continued from where it stopped (an HTTP / S3 range request), so
    a rerun of the same command finishes the pull. Every byte is checked before a file takes its name. The
    progress bar (tqdm, on stderr) counts bytes.

    ``manifest``: the ``(stored bytes, checked manifest)`` of ``version`` (:func:`read_manifest_bytes`) when the
    caller has read it already (then ``version`` must be a version, not ``latest``): the pull downloads what that
    one read names, and the store is not asked again (a store or mirror could answer a second read otherwise).
    ``warn(message)``: how a warning is given (default a ``UserWarning``): a published dataset card that cannot be
    limited to the subsets pulled is kept as it is, with a warning.

    A folder that cannot be written (read-only) is fine when it already holds the complete release, verified:
    nothing is written, and the result's ``read_only`` gives the OS's reason (:class:`PulledFiles`); otherwise
    a ValueError says so.

    Returns:
        the paths of the release's files under ``dest/<version>/`` (without the manifest), a :class:`PulledFiles`.
    Raises:
        StoreError: the version is not published.
        ReleaseIntegrityError: a downloaded file does not match the manifest (nothing is left for it), or the
            manifest is not valid (:func:`check_manifest`).
        UnsafePathError: the version name, a key of the manifest, or ``dest/<version>`` itself would write outside
            ``dest`` (through a symbolic link or a path) — nothing is written then.
        ValueError: the manifest lists no subset (:func:`no_subset_message`; nothing is written), an unknown
            subset was asked for, ``dest`` is not a folder, or the disk has too little room.
    """
    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise ValueError(f"destination {dest} exists and is not a folder")
    version = resolve_version(store, version)
    raw_manifest, manifest = manifest if manifest is not None else read_manifest_bytes(store, version)
    every = all_files(manifest)
    out = resolve_inside(dest, version)  # dest/<version> itself must not be a link out of dest
    _check_not_in_store(store, dest, out)
    # Every key the manifest names is checked before anything is written: a store or mirror controls the manifest
    # and must not make a pull write outside dest (absolute, network, drive, '..' and symbolic-link paths refused).
    for k in every:
        try:
            resolve_inside(out, k)
        except UnsafePathError as exc:
            if (out / k).is_symlink() or "is a symbolic link" in str(exc):  # the folder's link, not the manifest
                raise UnsafePathError(f"{version}: refused, nothing written: {out} holds a link: {exc}") from None
            raise UnsafePathError(f"{version}: refused, nothing written: the manifest names a file outside "
                                  f"{out}: {exc}") from None
    empty = no_subset_message(version, manifest)
    if empty:  # a folder with nothing to score is no pull
        raise ValueError(f"{empty}; nothing pulled")
    if subsets:
        subsets = choose_subsets(manifest_subsets(manifest), subsets, version)
    keys = pull_keys(manifest, subsets or None)
    if callable(getattr(store, "path", None)):  # a folder store: a symbolic link in it is refused before any write
        for k in keys:
            try:
                store.path(f"{release_prefix(version)}/{k}")
            except UnsafePathError as exc:
                raise UnsafePathError(f"{version}: refused, nothing written: {exc}") from None
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out} exists and is not a folder: the pull writes the release there; move it away, or "
                         "pull into another --dest")
    need = sum(every[k]["bytes"] for k in keys)
    base = next(p for p in [out, *out.parents] if p.exists())
    usage = shutil.disk_usage(base)
    if usage.total == 0:  # /proc, /sys: "0 GB free" would be nonsense
        raise ValueError(f"{base} is on a file system that holds no files (such as /proc or /sys): pull into a "
                         "folder on a disk")
    have_room = usage.free
    present = sum(p.stat().st_size for k in keys for p in [out / k] if p.is_file() and not p.is_symlink())
    if need - present > have_room:
        raise ValueError(f"{version}: the files need {need / 1e9:.2f} GB ({(need - present) / 1e9:.2f} GB still to "
                         f"download) but {out} has {have_room / 1e9:.2f} GB free")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"{version}: cannot make the folder {out}: {exc.strerror or exc}") from None
    why = unwritable(out)  # a read-only copy (the lock file an earlier pull left may still open): nothing written
    if why is not None:
        return _complete_read_only(out, version, keys, every, raw_manifest, manifest, why)
    try:
        with _pull_lock(out, version, warn):
            return PulledFiles(_pull_files(store, version, out, keys, every, need, progress, raw_manifest, manifest,
                                           warn, subsets or None))
    except _FolderNotWritable as exc:  # a read-only copy: fine when it holds the release already
        return _complete_read_only(out, version, keys, every, raw_manifest, manifest, exc.args[0])


def _pull_files(store: ObjectStore, version: str, out: Path, keys: list[str], every: dict[str, Any], need: int,
                progress: bool, raw_manifest: bytes, manifest: dict[str, Any], warn: Any,
                subsets: Sequence[str] | None = None) -> list[Path]:
    """:func:`pull`'s downloads, once everything is checked and the folder locked; the manifest written last."""
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=need, unit="B", unit_scale=True, desc=f"pull {version}")
    written = []
    try:
        for k in keys:
            meta = every[k]
            target = resolve_inside(out, k)  # again: a link may have appeared since the check above
            if _is_file(target, meta["bytes"], meta["sha256"]):
                if bar is not None:
                    bar.update(meta["bytes"])
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                resolve_inside(out, k)  # and after creating its folders
                _fetch(store, f"{release_prefix(version)}/{k}", target, meta["bytes"], meta["sha256"], bar)
            written.append(target)
    finally:
        if bar is not None:
            bar.close()
    _limit_card_to_present(out, manifest, warn)
    out.mkdir(parents=True, exist_ok=True)
    _record_pulled(out, manifest, subsets)
    target = resolve_inside(out, "manifest.json")
    with _open_part(target.with_name("manifest.json.part"), append=False) as fh:
        fh.write(raw_manifest)
    target.with_name("manifest.json.part").replace(target)
    return written
