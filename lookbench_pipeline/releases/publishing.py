"""Moving a release's files into the object store so that a reader never sees a partial release.

Order of writes (``releases.publish.publish`` calls :func:`publish_files`):

1. stale staging of this version (a killed run's leftovers, with S3's unfinished multipart uploads) is removed, and
   so is every file under ``releases/<version>/`` while that version has no manifest (a run killed between steps 3
   and 4 moved files there that no manifest names: orphans a raw listing would see);
2. every file is uploaded under ``releases/.staging/<version>-<nonce>/`` and read back: its sha256 and size must
   be what was written (never the ETag: a multipart ETag is not an MD5);
3. every file is copied to ``releases/<version>/`` (server-side on S3) and read back and checked again;
4. ``releases/<version>/manifest.json`` is created (create-only where the store supports it: S3 ``If-None-Match``,
   a local link) and read back — the version exists from this moment;
5. ``releases/latest`` names the version (if it is the newest);
6. the staging folder is removed.

Readers (``list_releases``, ``read_manifest``, ``pull``) only see versions that have a manifest, and a manifest is
only written once all its files are in place and verified, so a run killed at any point leaves either the old
state or the new one. A rerun starts again from step 1 (or, if the manifest is already there, only completes
steps 5 and 6). One publisher per version at a time: a rerun removes an older run's staging of the same version.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Callable, Mapping

from .reader import LATEST_KEY, ReleaseExistsError, ReleaseIntegrityError, release_prefix
from ..store import ObjectStore, StoreError, put_new

log = logging.getLogger(__name__)

STAGING_ROOT = "releases/.staging"


def staging_dirs(store: ObjectStore) -> dict[str, set[str]]:
    """Staging folders in the store: ``{"<version>-<nonce>": {keys}}``."""
    out: dict[str, set[str]] = {}
    for key in store.list(STAGING_ROOT + "/"):
        name = key[len(STAGING_ROOT) + 1:].split("/", 1)[0]
        out.setdefault(name, set()).add(key)
    return out


def clean_staging(store: ObjectStore, version: str, published: set[str] | None = None) -> int:
    """Remove the staging folders of ``version`` and of every version in ``published`` (already complete, so
    their staging is garbage); on S3 also abort their unfinished multipart uploads. Returns objects removed.
    Raises StoreError."""
    targets = {version, *(published or set())}
    n = 0
    with_staging = {version}
    for name, keys in staging_dirs(store).items():
        if name.rsplit("-", 1)[0] in targets:
            with_staging.add(name.rsplit("-", 1)[0])
            for key in sorted(keys):
                store.delete(key)
                n += 1
    abort = getattr(store, "abort_uploads", None)
    if abort is not None:
        for v in sorted(with_staging):
            # unfinished multipart uploads (and multipart copies) of a killed or retried run; none is legitimate
            # under a version's prefix, since its files are only ever written by the one publisher of the version
            n += abort(f"{STAGING_ROOT}/{v}-") + abort(f"releases/{v}/")
    return n


def verify(store: ObjectStore, key: str, sha256: str, size: int) -> None:
    """Read ``key`` back and compare sha256 and size. Raises ReleaseIntegrityError (or StoreError)."""
    back = store.get_bytes(key)
    if len(back) != size or hashlib.sha256(back).hexdigest() != sha256:
        raise ReleaseIntegrityError(f"{store.url}/{key}: read back {len(back)} bytes with sha256 "
                                    f"{hashlib.sha256(back).hexdigest()[:16]}…, expected {size} bytes with "
                                    f"{sha256[:16]}…")


def update_latest(store: ObjectStore, version: str) -> None:
    """Point ``releases/latest`` at ``version`` unless a newer version is already there."""
    try:
        current = store.get_bytes(LATEST_KEY).decode().strip()
    except StoreError:
        current = ""
    if version >= current and version != current:
        store.put_bytes(LATEST_KEY, version.encode(), "text/plain")


def remove_orphans(store: ObjectStore, version: str) -> int:
    """Delete the files under ``releases/<version>/`` when the version has no manifest (nothing published names
    them: a killed publish left them); returns how many. A published version is never touched. Raises StoreError."""
    prefix = release_prefix(version)
    if store.exists(f"{prefix}/manifest.json"):
        return 0
    keys = sorted(store.list(prefix + "/"))
    for key in keys:
        store.delete(key)
    if keys:
        log.info("removed %d unpublished files of %s left by a killed publish", len(keys), version)
    return len(keys)


def publish_files(store: ObjectStore, version: str, files: Mapping[str, tuple[bytes, str]], manifest: bytes,
                  published: set[str] | None = None, on_step: Callable[[str, str], None] | None = None) -> bool:
    """Stage, verify, move and then commit (``manifest.json``, ``latest``) one release; see the module docstring.

    Args:
        files: ``{relative key: (bytes, content type)}``, e.g. ``"real_studio_flat/query.parquet"``.
        manifest: the encoded ``manifest.json``.
        published: versions already complete (their leftover staging is removed too).
        on_step: called with (step, key) after each verified step, for progress reports.
    Returns:
        True if this call created the manifest; False if an identical manifest was already there (a rerun after a
        kill between the manifest and the end).
    Raises:
        ReleaseIntegrityError: a file read back does not match.
        ReleaseExistsError: another manifest appeared for this version meanwhile.
        StoreError: the store failed (retries exhausted); nothing of this version is visible then.
    """
    prefix = release_prefix(version)
    removed = clean_staging(store, version, published) + remove_orphans(store, version)
    if removed:
        log.info("removed %d leftover staging objects", removed)
    stage = f"{STAGING_ROOT}/{version}-{secrets.token_hex(6)}"
    meta = {k: (hashlib.sha256(d).hexdigest(), len(d)) for k, (d, _) in files.items()}
    for key, (data, ctype) in sorted(files.items()):
        store.put_bytes(f"{stage}/{key}", data, ctype)
        verify(store, f"{stage}/{key}", *meta[key])
        if on_step:
            on_step("staged", key)
    manifest_key = f"{prefix}/manifest.json"
    if store.exists(manifest_key) and store.get_bytes(manifest_key) != manifest:
        # another publisher completed this version while we staged: its files must not be touched
        raise ReleaseExistsError(f"release {version} was published by another run meanwhile; nothing overwritten")
    for key in sorted(files):
        store.copy(f"{stage}/{key}", f"{prefix}/{key}")
        verify(store, f"{prefix}/{key}", *meta[key])
        if on_step:
            on_step("moved", key)
    created = put_new(store, manifest_key, manifest, "application/json")
    if not created and store.get_bytes(manifest_key) != manifest:
        raise ReleaseExistsError(f"release {version} was published by another run meanwhile; nothing overwritten")
    verify(store, manifest_key, hashlib.sha256(manifest).hexdigest(), len(manifest))
    if on_step:
        on_step("committed", "manifest.json")
    update_latest(store, version)
    clean_staging(store, version)
    return created


def complete(store: ObjectStore, version: str, published: set[str] | None = None) -> None:
    """Finish a version whose manifest exists: ``latest`` and staging clean-up (steps 5-6). Raises StoreError."""
    update_latest(store, version)
    clean_staging(store, version, published)
