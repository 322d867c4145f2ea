"""The object store: a local folder by default, S3 (or any S3-compatible server) through boto3 when configured.

Keys are ``/``-separated relative paths (``originals/ab/abcdef….jpg``, ``releases/v20260701/manifest.json``).
Both stores write atomically: a reader never sees half an object (local: write to a temp file, then ``os.replace``;
S3: a PUT, a completed multipart upload and a copy are atomic per object). A folder store's objects get the mode
any new file gets (0o666 less the umask), so a folder served as a mirror can be read by the server's user.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol


def _file_mode() -> int:
    """The mode a plain ``open()`` gives a new file: 0o666 less the process's umask (read from /proc where it can
    be, since ``os.umask`` can only be read by setting it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return 0o666 & ~old


class StoreError(RuntimeError):
    """An object-store operation failed (the message names the key and the store)."""


class ObjectTooLarge(StoreError):
    """An object is larger than the most the reader accepts for it (``max_bytes``): refused, read no further."""


class UnsupportedStoreURL(StoreError):
    """A store URL whose scheme :func:`open_store` does not read (the message names the schemes it does)."""


class BadStoreURL(UnsupportedStoreURL):
    """A store URL of a known scheme that names no store: ``s3://`` without a bucket, ``http://`` without a host, a
    ``file://`` URL without a local path."""


class NoSuchStore(StoreError):
    """A folder store opened for reading (``create=False``) whose folder does not exist (or is a file)."""


STORE_URL_FORMS = ("a folder (a plain path, or file:///absolute/path), s3://bucket/prefix, or an http:// or https:// "
                   "mirror")
"""What :func:`open_store` opens, as error messages name it."""


class ObjectExistsError(StoreError):
    """A create-only write (``put_new``) found the object already there."""


class ObjectStore(Protocol):
    url: str

    def put_bytes(self, key: str, data: bytes, content_type: str | None = None) -> None: ...
    def get_bytes(self, key: str) -> bytes: ...
    def exists(self, key: str) -> bool: ...
    def list(self, prefix: str = "") -> Iterator[str]: ...
    def delete(self, key: str) -> None: ...
    def copy(self, src: str, dst: str) -> None: ...
    def read_range(self, key: str, start: int = 0, chunk: int = 1 << 20, size: int | None = None
                   ) -> Iterator[bytes]: ...


def _check_key(key: str) -> str:
    if not key or key.startswith("/") or ".." in key.split("/"):
        raise StoreError(f"invalid object key {key!r}")
    return key


def _walk_files(root: Path, prefix: str) -> list[str]:
    """The ``/``-separated paths, relative to ``root`` and sorted, of the files under ``root`` that start with
    ``prefix`` (only the prefix's folder is walked). Raises UnsafePathError naming the first symbolic link on the
    way there or below it (never followed)."""
    from .safepath import UnsafePathError

    def refuse(path: Path) -> None:
        raise UnsafePathError(f"{str(path)!r} is a symbolic link (to {os.readlink(path)!r}), refused: links in a "
                              "store or release folder are not followed; replace the link by the folder or file "
                              "it points to")

    start = root
    for part in [p for p in prefix.split("/")[:-1] if p]:
        start = start / part
        if start.is_symlink():
            refuse(start)
    if not start.is_dir():
        return []
    out = []
    for folder, dirs, files in os.walk(start):
        here = Path(folder)
        for name in sorted(dirs) + sorted(files):
            if (here / name).is_symlink():
                refuse(here / name)
        for name in files:
            rel = (here / name).relative_to(root).as_posix()
            if rel.startswith(prefix):
                out.append(rel)
    return sorted(out)


class LocalStore:
    """A folder on disk used as an object store.

    Writes are atomic (temp file + ``os.replace``); ``durable=True`` also fsyncs each object before the rename
    (survives a power cut, about 2 ms per object here).
    """

    def __init__(self, root: str | Path, durable: bool = False, create: bool = True):
        self.durable = durable
        self.root = Path(root).resolve()
        if create:
            self.root.mkdir(parents=True, exist_ok=True)
        elif not self.root.is_dir():
            raise NoSuchStore(f"no store at {self.root}: " + ("it is a file, not a folder" if self.root.exists()
                                                               else "no such folder"))
        self.url = str(self.root)

    def path(self, key: str) -> Path:
        """The file of ``key``. Raises StoreError for an invalid key, UnsafePathError for a symbolic link on the
        way (the root aside): objects are plain files, a link is never followed."""
        from .safepath import refuse_links

        return refuse_links(self.root, _check_key(key))

    def put_bytes(self, key: str, data: bytes, content_type: str | None = None) -> None:
        dest = self.path(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".tmp-")
        try:
            os.fchmod(fd, _file_mode())  # mkstemp's 0600 would keep a folder store's objects from other readers
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                if self.durable:
                    fh.flush()
                    os.fsync(fh.fileno())
            os.replace(tmp, dest)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def put_new(self, key: str, data: bytes, content_type: str | None = None) -> None:
        """Create ``key`` only if it does not exist (atomic: a hard link of a complete temp file).
        Raises ObjectExistsError."""
        dest = self.path(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".tmp-")
        try:
            os.fchmod(fd, _file_mode())  # mkstemp's 0600 would keep a folder store's objects from other readers
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                if self.durable:
                    fh.flush()
                    os.fsync(fh.fileno())
            os.link(tmp, dest)
        except FileExistsError as exc:
            raise ObjectExistsError(f"{key!r} already exists in {self.url}") from exc
        finally:
            Path(tmp).unlink(missing_ok=True)

    def get_bytes(self, key: str) -> bytes:
        try:
            return self.path(key).read_bytes()
        except FileNotFoundError as exc:
            raise StoreError(f"no object {key!r} in {self.url}") from exc

    def exists(self, key: str) -> bool:
        return self.path(key).is_file()

    def read_range(self, key: str, start: int = 0, chunk: int = 1 << 20, size: int | None = None) -> Iterator[bytes]:
        """The bytes of ``key`` from offset ``start`` on, in chunks of ``chunk`` bytes (``size``, the expected
        size, is not needed here: every store's ``read_range`` takes it). Raises StoreError."""
        try:
            fh = self.path(key).open("rb")
        except FileNotFoundError as exc:
            raise StoreError(f"no object {key!r} in {self.url}") from exc
        with fh:
            fh.seek(start)
            yield from iter(lambda: fh.read(chunk), b"")

    def list(self, prefix: str = "") -> Iterator[str]:
        """The keys starting with ``prefix``, sorted (a write's temp files left out). Raises UnsafePathError naming
        a symbolic link met on the way to the prefix's folder or below it (``releases/`` or a version folder that
        is a link): as :meth:`path` refuses to read through one, the listing does not pass one over in silence."""
        for rel in _walk_files(self.root, prefix):
            if not rel.rsplit("/", 1)[-1].startswith(".tmp-"):
                yield rel

    def delete(self, key: str) -> None:
        """Remove ``key`` (no error if absent) and the folders it leaves empty."""
        p = self.path(key)
        p.unlink(missing_ok=True)
        for parent in p.parents:
            if parent == self.root or self.root not in parent.parents:
                break
            try:
                parent.rmdir()
            except OSError:  # not empty (or gone)
                break

    def copy(self, src: str, dst: str) -> None:
        """Copy object ``src`` to ``dst`` (atomic like :meth:`put_bytes`). Raises StoreError when ``src`` is missing."""
        self.put_bytes(dst, self.get_bytes(src))


class ReleaseFolder(LocalStore):
    """A pulled release (``lookbench pull``'s ``DEST/<version>/``: ``manifest.json`` and the files it names) read
    as a store that holds that one version, so everything that reads a store (``evaluate``, ``info``) reads it in
    place: key ``releases/<version>/<file>`` is ``<folder>/<file>``. The version is the manifest's (the folder
    may have been renamed). Read-only.

    Raises:
        StoreError: the folder has no ``manifest.json``, or the manifest names no valid version.
    """

    def __init__(self, folder: str | Path):
        import json

        from .safepath import UnsafePathError, check_version, refuse_links

        folder = Path(folder)
        if not (folder / "manifest.json").is_file():
            raise StoreError(f"{folder} is not a release folder: it has no manifest.json (`lookbench pull VERSION "
                             "--dest DIR` writes one to DIR/VERSION/)")
        super().__init__(folder, create=False)
        manifest = refuse_links(self.root, "manifest.json")  # UnsafePathError for a link, named as one
        try:
            version = json.loads(manifest.read_bytes()).get("version")
            self.version = check_version(version)
        except (ValueError, AttributeError, UnsafePathError) as exc:
            raise StoreError(f"{self.root}/manifest.json is not a release manifest with a version ({exc})") from None
        self.prefix = f"releases/{self.version}/"

    def path(self, key: str) -> Path:
        from .safepath import refuse_links

        if not key.startswith(self.prefix):
            raise StoreError(f"{self.url} holds only release {self.version}, not {key!r}")
        return refuse_links(self.root, _check_key(key[len(self.prefix):]))

    def exists(self, key: str) -> bool:
        return key.startswith(self.prefix) and self.path(key).is_file()

    def list(self, prefix: str = "") -> Iterator[str]:
        """The keys starting with ``prefix`` (``releases/<version>/<file>``), sorted (``.part`` downloads and pull's
        own ``.pull.lock`` and ``.pulled.json`` left out).
        Raises UnsafePathError naming a symbolic link in the folder."""
        for rel in _walk_files(self.root, ""):
            key = self.prefix + rel
            if not rel.endswith(".part") and rel not in (".pull.lock", ".pulled.json") and key.startswith(prefix):
                yield key

    def _read_only(self, *args, **kwargs):
        raise StoreError(f"{self.url} is a pulled release folder, read-only")

    put_bytes = put_new = delete = copy = _read_only


class S3Store:
    """An S3 bucket (optionally under a prefix) through boto3.

    ``checksum_mode="when_required"`` turns off the CRC trailers that boto3 >= 1.36 adds by default, which several
    S3-compatible servers reject or store wrongly. Integrity is checked by our own sha256 after upload, never by ETag
    (the ETag of a multipart upload is not the MD5 of the object).

    Objects larger than ``multipart_threshold`` bytes are uploaded (and copied) in parts of ``multipart_chunksize``
    bytes (boto3's ``TransferConfig``; S3 needs parts of at least 5 MiB, so s3transfer raises smaller chunk sizes to
    5 MiB). ``max_attempts`` is botocore's retry budget per request (standard mode: 5xx, throttling and connection
    errors are retried with exponential backoff).

    Reads are bounded as a mirror's are, by the same rule (:class:`_ReadDeadline`): ``timeout_s`` seconds to
    connect and for each network read (botocore's ``connect_timeout`` and ``read_timeout``), and an overall
    deadline per object read (:meth:`get_bytes`, :meth:`read_range`) of ``deadline_s + expected bytes /
    min_bytes_per_s`` seconds (the expected bytes: the caller's ``size``, else the answer's ``Content-Length``,
    else ``max_bytes``; the defaults: :data:`HTTP_DEADLINE_S`, :data:`HTTP_MIN_BYTES_PER_S`), retries included,
    so a server that trickles bytes is given up with a StoreError naming the object and the limit. The deadline
    counts the time spent waiting for the server, not the caller's own time between two blocks.
    :meth:`get_bytes` takes ``max_bytes`` (the release readers pass small limits for ``manifest.json`` and
    ``releases/latest``): an answer that announces more is refused before its body is read.
    """

    def __init__(
        self,
        url: str,
        endpoint_url: str | None = None,
        region: str = "us-east-1",
        checksum_mode: str = "when_required",
        multipart_threshold: int = 8 * 1024 * 1024,
        multipart_chunksize: int = 8 * 1024 * 1024,
        max_attempts: int = 8,
        anonymous: bool = False,
        timeout_s: float = 60,
        deadline_s: float | None = None,
        min_bytes_per_s: float | None = None,
    ):
        import boto3
        from botocore import UNSIGNED
        from botocore.config import Config

        if not url.lower().startswith("s3://"):
            raise StoreError(f"not an s3:// URL: {url!r}")
        url = "s3://" + url[5:]
        bucket, _, prefix = url[5:].partition("/")
        if not bucket:
            raise BadStoreURL(f"{url!r} names no bucket: s3://BUCKET/PREFIX")
        self.bucket, self.prefix, self.url = bucket, prefix.strip("/"), url
        self.deadline_s = HTTP_DEADLINE_S if deadline_s is None else deadline_s
        self.min_bytes_per_s = HTTP_MIN_BYTES_PER_S if min_bytes_per_s is None else min_bytes_per_s
        from boto3.s3.transfer import TransferConfig

        cfg = Config(
            request_checksum_calculation=checksum_mode,
            response_checksum_validation=checksum_mode,
            retries={"max_attempts": max_attempts, "mode": "standard"},
            connect_timeout=timeout_s,
            read_timeout=timeout_s,
            s3={"addressing_style": "path"},
            **({"signature_version": UNSIGNED} if anonymous else {}),
        )
        self.client = boto3.client("s3", endpoint_url=endpoint_url, region_name=region, config=cfg)
        self.transfer = TransferConfig(multipart_threshold=multipart_threshold,
                                       multipart_chunksize=multipart_chunksize)

    def _key(self, key: str) -> str:
        _check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _error(self, what: str, exc: Exception) -> StoreError:
        """A StoreError for ``what`` failing with ``exc``; without credentials it says how to read a public
        bucket."""
        from botocore.exceptions import NoCredentialsError

        hint = (" (for a public bucket, read it unsigned: anonymous=True, --anon on the command line)"
                if isinstance(exc, NoCredentialsError) else "")
        return StoreError(f"{what} {self.url} failed: {exc}{hint}")

    def _no_bucket(self) -> StoreError | None:
        """A StoreError when the bucket does not exist (asked once, on a missing key: S3 answers a HEAD of a key in
        a missing bucket with a bare 404), else None."""
        from botocore.exceptions import ClientError

        if not hasattr(self, "_bucket_missing"):
            try:
                self.client.head_bucket(Bucket=self.bucket)
                self._bucket_missing = False
            except ClientError as exc:
                self._bucket_missing = exc.response.get("Error", {}).get("Code") in ("404", "NoSuchBucket", "NotFound")
            except Exception:  # unreachable, no credentials: the caller's own request says so
                self._bucket_missing = False
        return StoreError(f"no such bucket {self.bucket!r} ({self.url})") if self._bucket_missing else None

    def put_bytes(self, key: str, data: bytes, content_type: str | None = None) -> None:
        import io

        extra = {"ContentType": content_type} if content_type else {}
        try:
            # upload_fileobj switches to a multipart upload above the threshold.
            self.client.upload_fileobj(
                io.BytesIO(data), self.bucket, self._key(key), ExtraArgs=extra or None, Config=self.transfer,
            )
        except Exception as exc:  # botocore.exceptions.ClientError, EndpointConnectionError...
            raise StoreError(f"upload of {key!r} to {self.url} failed: {exc}") from exc

    def put_new(self, key: str, data: bytes, content_type: str | None = None) -> None:
        """Create ``key`` only if it does not exist (a conditional PUT, ``If-None-Match: *``; a store that ignores
        the condition overwrites). Raises ObjectExistsError, StoreError."""
        from botocore.exceptions import ClientError

        extra = {"ContentType": content_type} if content_type else {}
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, IfNoneMatch="*", **extra)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "412"):
                raise ObjectExistsError(f"{key!r} already exists in {self.url}") from exc
            raise StoreError(f"upload of {key!r} to {self.url} failed: {exc}") from exc
        except Exception as exc:
            raise StoreError(f"upload of {key!r} to {self.url} failed: {exc}") from exc

    def _bounded_read(self, key: str, start: int, chunk: int, size: int | None, max_bytes: int | None = None
                      ) -> Iterator[bytes]:
        """The body of ``key`` from ``start`` on, in blocks of ``chunk`` bytes, within the overall deadline and
        (``max_bytes``) the size limit (see the class; the rule: :class:`_ReadDeadline`). The GET and its reads run
        in a daemon thread, as a read blocked on a slow socket cannot be timed out from outside; past the deadline
        the thread is left to finish its block or reach botocore's ``read_timeout``, and then closes the answer
        (its connection released) without reading on. Raises StoreError past the deadline, ObjectTooLarge over
        ``max_bytes``, and what botocore raises."""
        import queue
        import threading

        bound = _ReadDeadline(f"{self.url}/{key}", self.deadline_s, self.min_bytes_per_s, max_bytes)
        handed: queue.Queue = queue.Queue(maxsize=2)
        stop = threading.Event()

        def hand(item: tuple[str, Any]) -> bool:
            while not stop.is_set():
                try:
                    handed.put(item, timeout=0.5)
                    return True
                except queue.Full:
                    continue
            return False

        def read() -> None:
            body = None
            try:
                answer = self.client.get_object(Bucket=self.bucket, Key=self._key(key),
                                                **({"Range": f"bytes={start}-"} if start else {}))
                body = answer["Body"]
                status = (answer.get("ResponseMetadata") or {}).get("HTTPStatusCode")
                if hand(("length", (answer.get("ContentLength"), status))):
                    for block in body.iter_chunks(chunk):
                        if not hand(("block", block)):
                            return
                    hand(("end", None))
            except BaseException as exc:  # handed to the caller's thread
                hand(("error", exc))
            finally:
                if body is not None:
                    body.close()

        threading.Thread(target=read, name="lookbench-s3-get", daemon=True).start()
        got = skip = 0
        try:
            while True:
                try:  # waits of at most an hour: a huge announced length would overflow the queue's timeout
                    kind, value = handed.get(timeout=min(max(bound.left(), 0), 3600))
                except queue.Empty:
                    if bound.left() > 0:
                        continue
                    raise bound.expired() from None
                if kind == "length":
                    length, status = value
                    # a store that ignores Range (some S3-compatible servers) answers 200 and the whole object: its
                    # first ``start`` bytes are skipped, as the mirror's are, so a resumed file is not written twice
                    whole = bool(start) and status == 200
                    skip = start if whole else 0
                    bound.expect(None if size is None else size - (0 if whole else start), length)
                elif kind == "block":
                    value, skip = _skip_held(value, skip)
                    if not value:
                        continue
                    got += len(value)
                    bound.received(got)
                    bound.handed()
                    yield value
                    bound.resumed()
                elif kind == "end":
                    return
                else:
                    raise value
        finally:
            stop.set()

    def get_bytes(self, key: str, max_bytes: int | None = None) -> bytes:
        """The whole object ``key``, within the deadline (see the class); ``max_bytes``: refuse one longer than
        that many bytes (an announced ``Content-Length`` above it before reading the body, else once more has
        arrived). Raises StoreError (ObjectTooLarge over ``max_bytes``)."""
        try:
            return b"".join(self._bounded_read(key, 0, 1 << 20, None, max_bytes))
        except StoreError:
            raise
        except self.client.exceptions.NoSuchKey as exc:
            raise StoreError(f"no object {key!r} in {self.url}") from exc
        except self.client.exceptions.NoSuchBucket as exc:
            raise StoreError(f"no such bucket {self.bucket!r} ({self.url})") from exc
        except Exception as exc:
            raise self._error(f"download of {key!r} from", exc) from exc

    def read_range(self, key: str, start: int = 0, chunk: int = 1 << 20, size: int | None = None) -> Iterator[bytes]:
        """The bytes of ``key`` from offset ``start`` on (a ranged GET; a store that ignores ``Range`` answers the
        whole object, whose first ``start`` bytes are skipped), streamed in chunks (``size``, the expected size,
        sets the deadline: see the class). Raises StoreError."""
        try:
            yield from self._bounded_read(key, start, chunk, size)
        except StoreError:
            raise
        except self.client.exceptions.NoSuchKey as exc:
            raise StoreError(f"no object {key!r} in {self.url}") from exc
        except self.client.exceptions.NoSuchBucket as exc:
            raise StoreError(f"no such bucket {self.bucket!r} ({self.url})") from exc
        except Exception as exc:
            raise self._error(f"download of {key!r} from", exc) from exc

    def exists(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(key))
            return True
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                missing = self._no_bucket()
                if missing is not None:
                    raise missing from exc
                return False
            raise StoreError(f"head of {key!r} in {self.url} failed: {exc}") from exc
        except Exception as exc:  # EndpointConnectionError, NoCredentialsError, ...
            raise self._error(f"head of {key!r} in", exc) from exc

    def list(self, prefix: str = "") -> Iterator[str]:
        full = self._key(prefix) if prefix else (self.prefix + "/" if self.prefix else "")
        paginator = self.client.get_paginator("list_objects_v2")
        strip = len(self.prefix) + 1 if self.prefix else 0
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=full):
                for obj in page.get("Contents", []):
                    yield obj["Key"][strip:]
        except self.client.exceptions.NoSuchBucket as exc:
            raise StoreError(f"no such bucket {self.bucket!r} ({self.url})") from exc
        except StoreError:
            raise
        except Exception as exc:
            raise self._error(f"listing {prefix!r} in", exc) from exc

    def delete(self, key: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._key(key))
        except Exception as exc:
            raise StoreError(f"delete of {key!r} in {self.url} failed: {exc}") from exc

    def copy(self, src: str, dst: str) -> None:
        """Server-side copy (a multipart copy above the threshold); content type and metadata are kept.
        Raises StoreError."""
        try:
            self.client.copy({"Bucket": self.bucket, "Key": self._key(src)}, self.bucket, self._key(dst),
                             Config=self.transfer)
        except Exception as exc:
            raise StoreError(f"copy of {src!r} to {dst!r} in {self.url} failed: {exc}") from exc

    def abort_uploads(self, prefix: str) -> int:
        """Abort the unfinished multipart uploads under ``prefix`` (left by a killed run; invisible to readers but
        billed by S3). Returns how many were aborted. Raises StoreError."""
        try:
            n = 0
            pages = self.client.get_paginator("list_multipart_uploads").paginate(Bucket=self.bucket,
                                                                                 Prefix=self._key(prefix))
            for page in pages:
                for up in page.get("Uploads", []):
                    self.client.abort_multipart_upload(Bucket=self.bucket, Key=up["Key"], UploadId=up["UploadId"])
                    n += 1
            return n
        except Exception as exc:
            raise StoreError(f"aborting uploads under {prefix!r} in {self.url} failed: {exc}") from exc


HTTP_DEADLINE_S = 120.0
"""Seconds an http(s) mirror is given for one request besides the time its bytes take at
:data:`HTTP_MIN_BYTES_PER_S` (:class:`HttpStore`'s ``deadline_s``)."""
HTTP_MIN_BYTES_PER_S = 32 * 1024
"""The slowest transfer an http(s) mirror may keep up, in bytes per second: a request of ``n`` expected bytes is
given up after ``HTTP_DEADLINE_S + n / HTTP_MIN_BYTES_PER_S`` seconds (a 2 GB gallery: about 17 hours)."""


def _skip_held(block: bytes, skip: int) -> tuple[bytes, int]:
    """``(block less its first skip bytes, what is left to skip)``: the bytes a resumed read already holds, from an
    answer that ignored its ``Range`` and sent the whole object (mirror and S3 alike)."""
    cut = min(skip, len(block))
    return block[cut:], skip - cut


class _ReadDeadline:
    """The bounds of one read from someone else's server, for :class:`HttpStore` and :class:`S3Store` alike (one
    owner of the rule and its messages): the overall deadline, ``deadline_s + expected bytes / min_bytes_per_s``
    seconds (until the answer's length is known: ``deadline_s`` alone), and the size limit ``max_bytes`` when the
    caller gives one (an announced size above it is refused before any byte of the body is read).

    The clock counts the time spent waiting for the server (the request, its headers, each block), not the
    caller's own time between two blocks: a consumer that writes each block to a slow disk and hashes it is not
    the server being slow. ``where`` names the object in the messages, ``server`` the kind of server (``mirror``,
    ``store``), ``advice`` what to do past the deadline."""

    def __init__(self, where: str, deadline_s: float, min_bytes_per_s: float, max_bytes: int | None = None,
                 server: str = "store", advice: str = "try again later"):
        import time

        self.where, self.server, self.advice = where, server, advice
        self.deadline_s, self.min_bytes_per_s, self.max_bytes = deadline_s, min_bytes_per_s, max_bytes
        self.expected: int | None = None
        self.limit = deadline_s
        self.waited = 0.0  # seconds spent waiting for the server before the current wait began
        self.since = time.monotonic()  # when the current wait began

    def expect(self, size: int | None, announced: int | None) -> None:
        """Set the limit from the expected bytes: ``size`` (the caller's), else ``announced`` (the answer's
        length), else ``max_bytes``. Raises ObjectTooLarge when ``announced`` is above ``max_bytes``."""
        if self.max_bytes is not None and announced is not None and announced > self.max_bytes:
            raise ObjectTooLarge(f"{self.where}: the {self.server} announces {announced} bytes, more than the "
                                 f"{self.max_bytes} bytes this file may have: refused")
        self.expected = max(next((n for n in (size, announced, self.max_bytes) if n is not None), 0), 0)
        self.limit = self.deadline_s + self.expected / self.min_bytes_per_s

    def left(self) -> float:
        """Seconds left of the deadline (negative: past it)."""
        import time

        return self.limit - self.waited - (time.monotonic() - self.since)

    def received(self, got: int) -> None:
        """Check the bytes received so far (``got``) as a block arrives. Raises StoreError past the deadline,
        ObjectTooLarge above ``max_bytes``."""
        if self.left() < 0:
            raise self.expired()
        if self.max_bytes is not None and got > self.max_bytes:
            raise ObjectTooLarge(f"{self.where}: more than {self.max_bytes} bytes, the most this file may have: "
                                 "refused (not a file of a release)")

    def handed(self) -> None:
        """The block goes to the caller: its time until it asks for the next is not counted."""
        import time

        self.waited += time.monotonic() - self.since

    def resumed(self) -> None:
        """The caller asks for the next block: waiting for the server again."""
        import time

        self.since = time.monotonic()

    def expired(self) -> StoreError:
        """The error past the deadline, naming the object and the limit."""
        said = "no answer" if self.expected is None else "not complete"
        rate = "" if self.expected is None else (f" (the limit for {self.expected} bytes: {self.deadline_s:.0f} s "
                                                 f"plus {self.min_bytes_per_s:.0f} bytes per second)")
        return StoreError(f"{self.where}: {said} after {self.limit:.0f} s{rate}: the {self.server} is too slow; "
                          f"{self.advice}")


def _warn(message: str) -> None:
    import warnings

    warnings.warn(message, UserWarning, stacklevel=3)


def _mirror_session(store_url: str, warn: Any = _warn) -> Any:
    """A ``requests.Session`` for a mirror that refuses a redirect from https to http (the bytes would travel in
    the clear, and a manifest read that way is no root of trust) and warns once per host pair (``warn(message)``,
    by default a ``UserWarning``) when a redirect leads to another host: a mirror commonly sends its files from a
    CDN, so that is followed, but said, since the bytes then come from a server the ``--store`` URL does not name.
    Redirects to other schemes (``file://``) are refused by requests itself (``InvalidSchema``)."""
    from urllib.parse import urljoin, urlsplit

    import requests

    warned: set[tuple[str, str]] = set()

    class _Session(requests.Session):
        def get_redirect_target(self, resp: Any) -> str | None:
            target = super().get_redirect_target(resp)
            if target:
                here, there = urlsplit(resp.url), urlsplit(urljoin(resp.url, target))
                if here.scheme.lower() == "https" and there.scheme.lower() == "http":
                    raise StoreError(f"{resp.url}: refused a redirect from https to http ({there.geturl()[:200]}): "
                                     "the release would be read unencrypted")
                pair = (here.netloc.lower(), there.netloc.lower())
                # another scheme (file:, ftp:) is refused by requests itself (InvalidSchema): no warning before it
                if there.scheme.lower() in ("http", "https") and pair[0] != pair[1] and pair not in warned:
                    warned.add(pair)
                    warn(f"{store_url}: the mirror {pair[0]} redirects to another host, {pair[1]}: reading from "
                         f"{pair[1]} (every file is still checked against the manifest's sha256)")
            return target

    return _Session()


class HttpStore:
    """A read-only static mirror of a store over http(s) (``https://host/prefix``: ``releases/<v>/…`` below it, as
    a web server or a public bucket's website endpoint serves them). It cannot be listed: name a version, or
    ``latest`` (``releases/latest``). Writes raise StoreError.

    A mirror is someone else's server, so every read is bounded: ``timeout_s`` seconds for each network read, and
    an overall deadline per request of ``deadline_s + expected bytes / min_bytes_per_s`` seconds (the expected
    bytes: ``size`` when the caller knows it, else the response's ``Content-Length``, else ``max_bytes``; the
    defaults: :data:`HTTP_DEADLINE_S`, :data:`HTTP_MIN_BYTES_PER_S`), so a server that trickles bytes is given up
    with an error naming the URL and the limit (the rule: :class:`_ReadDeadline`, shared with :class:`S3Store`;
    the deadline counts the time spent waiting for the server, not the caller's own time between two blocks, and
    is checked as bytes arrive: a server that sends nothing at all is given up after ``timeout_s``).
    :meth:`get_bytes` takes ``max_bytes`` (the release readers pass small limits for ``manifest.json`` and
    ``releases/latest``; a ``Content-Length`` above it is refused before the body is read), and :meth:`read_range`
    ``size``. Redirects: see :func:`_mirror_session` (https to http refused, another host
    followed with a warning: ``warn(message)``, an attribute, by default a ``UserWarning``; the CLI prints a
    ``warning:`` line).
    """

    def __init__(self, url: str, timeout_s: float = 60, deadline_s: float | None = None,
                 min_bytes_per_s: float | None = None):
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.deadline_s = HTTP_DEADLINE_S if deadline_s is None else deadline_s
        self.min_bytes_per_s = HTTP_MIN_BYTES_PER_S if min_bytes_per_s is None else min_bytes_per_s
        self.warn = _warn
        self.session = _mirror_session(self.url, lambda message: self.warn(message))

    def _get(self, key: str, method: str = "GET", headers: dict[str, str] | None = None):
        import requests

        try:
            r = self._answer(f"{self.url}/{_check_key(key)}", headers or {}, method)
        except requests.RequestException as exc:
            raise StoreError(f"{self.url}/{key}: {type(exc).__name__}: {exc}") from exc
        return r

    def _stream(self, key: str, start: int, chunk: int, max_bytes: int | None, size: int | None
                ) -> Iterator[bytes]:
        """The body of ``key`` from ``start`` on, in blocks of at most ``chunk`` bytes, within the deadline and
        (``max_bytes``) the size limit (the rule: :class:`_ReadDeadline`). Raises StoreError (ObjectTooLarge over
        ``max_bytes``)."""
        import requests
        import urllib3

        url = f"{self.url}/{_check_key(key)}"
        bound = _ReadDeadline(url, self.deadline_s, self.min_bytes_per_s, max_bytes, server="mirror",
                              advice="try again later or another mirror")
        try:
            with self._answer(url, {"Range": f"bytes={start}-"} if start else {}) as r:
                if r.status_code not in ((200, 206) if start else (200,)):
                    raise StoreError(f"{url}: HTTP {r.status_code}")
                try:
                    length = int(r.headers.get("Content-Length", ""))
                except ValueError:
                    length = None
                # a 200 to a ranged request (a server that ignores Range) sends the whole body, not size - start
                whole = r.status_code == 200
                bound.expect(None if size is None else size - (0 if whole else start), length)
                skip = start if (start and r.status_code == 200) else 0
                got = 0
                while True:
                    # read1: what one network read brings (read(n) would wait for all n bytes, a trickle for ever)
                    block = r.raw.read1(chunk, decode_content=True)
                    if not block:
                        break
                    block, skip = _skip_held(block, skip)
                    got += len(block)
                    bound.received(got)
                    if block:
                        bound.handed()
                        yield block
                        bound.resumed()
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise StoreError(f"{url}: {type(exc).__name__}: {exc}") from exc

    def _answer(self, url: str, headers: dict[str, str], method: str = "GET") -> Any:
        """The streamed response to a ``method`` request of ``url``, its status line and headers in within
        ``deadline_s`` seconds (a server can trickle its headers too, each byte within ``timeout_s``). The request
        runs in a daemon thread that is left to the socket's own timeout when the deadline passes; the request is
        then abandoned, and a response that still arrives is closed there (its connection and socket released), so
        a timed-out request leaves no open response behind (the thread ends with the request). Raises StoreError,
        and what requests raises."""
        import threading

        box: dict[str, Any] = {}
        lock = threading.Lock()

        def get() -> None:
            try:
                r = self.session.request(method, url, timeout=self.timeout_s, stream=True, headers=headers)
            except BaseException as exc:  # handed to the caller's thread
                with lock:
                    box["exc"] = exc
                return
            with lock:
                if not box.get("abandoned"):
                    box["r"] = r
                    return
            r.close()  # the caller gave up on it: nobody else would close it

        worker = threading.Thread(target=get, name="lookbench-mirror-get", daemon=True)
        worker.start()
        worker.join(self.deadline_s)
        with lock:
            if "r" not in box and "exc" not in box:
                box["abandoned"] = True
                raise StoreError(f"{url}: no complete answer (status and headers) after {self.deadline_s:.0f} s: "
                                 "the mirror is too slow; try again later or another mirror")
        if "exc" in box:
            raise box["exc"]
        return box["r"]

    def get_bytes(self, key: str, max_bytes: int | None = None) -> bytes:
        """The whole object ``key``; ``max_bytes``: refuse one longer than that many bytes (read no further).
        Raises StoreError (HTTP error, over ``max_bytes``, past the deadline)."""
        return b"".join(self._stream(key, 0, 1 << 16, max_bytes, None))

    def read_range(self, key: str, start: int = 0, chunk: int = 1 << 20, size: int | None = None) -> Iterator[bytes]:
        """The bytes of ``key`` from offset ``start`` on (a ``Range`` request; a server that ignores it answers 200
        with the whole body, whose first ``start`` bytes are skipped), streamed in chunks of at most ``chunk``
        bytes. ``size``: the object's expected size in bytes (the manifest's), which sets the deadline. Raises
        StoreError."""
        yield from self._stream(key, start, chunk, None, size)

    def exists(self, key: str) -> bool:
        """Whether the mirror serves ``key``: a HEAD request, or, where the server does not answer HEAD (405, 501:
        some static hosts and proxies), a GET of its first byte (``Range: bytes=0-0``), the body not read. Raises
        StoreError for any other error status."""
        r = self._get(key, "HEAD")
        r.close()  # no body: the connection goes back to the pool
        if r.status_code in (405, 501):
            r = self._get(key, headers={"Range": "bytes=0-0"})
            r.close()
        if r.status_code in (404, 403, 410):
            return False
        if r.status_code >= 400:
            raise StoreError(f"{self.url}/{key}: HTTP {r.status_code}")
        return True

    def content_type(self, key: str) -> str | None:
        """The ``Content-Type`` the mirror gives ``key`` (a HEAD request), None when it gives none or the request
        fails: what an error names when a mirror's answer is not the file asked for (an index page, say)."""
        try:
            r = self._get(key, "HEAD")
        except StoreError:
            return None
        r.close()
        return r.headers.get("Content-Type") or None

    def list(self, prefix: str = "") -> Iterator[str]:
        raise StoreError(f"{self.url} is a static http(s) mirror and cannot be listed: name a version or 'latest'")

    def _read_only(self, *args, **kwargs):
        raise StoreError(f"{self.url} is a read-only http(s) mirror")

    put_bytes = put_new = delete = copy = _read_only


def put_new(store: ObjectStore, key: str, data: bytes, content_type: str) -> bool:
    """Create ``key`` only if it does not exist (stores without ``put_new`` fall back to exists + put).
    Returns False when it already existed (its content is left alone)."""
    fn = getattr(store, "put_new", None)
    if fn is None:
        if store.exists(key):
            return False
        store.put_bytes(key, data, content_type)
        return True
    try:
        fn(key, data, content_type)
        return True
    except ObjectExistsError:
        return False


def open_store(url: str, endpoint_url: str | None = None, region: str = "us-east-1",
               checksum_mode: str = "when_required", anonymous: bool = False, create: bool = True,
               **s3_options) -> ObjectStore:
    """Open ``url``: ``s3://bucket/prefix`` gives an :class:`S3Store` (``anonymous``: unsigned requests, for a
    public bucket; ``s3_options``: its ``multipart_threshold``, ``multipart_chunksize``, ``max_attempts``),
    ``http(s)://…`` a read-only :class:`HttpStore` mirror, anything else a :class:`LocalStore` folder (made when
    missing, unless ``create`` is False: a reader's mistyped folder is an error, not an empty store).

    Schemes are case-insensitive (``HTTP://`` is ``http://``). A ``file://`` URL names a local folder
    (``file:///abs/path``, or ``file://localhost/abs/path``).

    Raises:
        UnsupportedStoreURL: an unsupported URL scheme.
        BadStoreURL: ``s3://`` without a bucket, ``http(s)://`` without a host, ``file://`` without a local path.
        NoSuchStore: (``create=False``) no such folder, or a file.
    """
    from urllib.parse import unquote, urlsplit

    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower() if sep else ""
    if scheme == "s3":
        return S3Store("s3://" + rest, endpoint_url=endpoint_url, region=region, checksum_mode=checksum_mode,
                       anonymous=anonymous, **s3_options)
    if scheme in ("http", "https"):
        if not urlsplit(f"{scheme}://{rest}").hostname:
            raise BadStoreURL(f"{url[:200]!r} names no host: {scheme}://HOST/PREFIX")
        return HttpStore(f"{scheme}://{rest}")
    if scheme == "file":
        parts = urlsplit(f"file://{rest}")
        if parts.netloc not in ("", "localhost") or not parts.path:
            host = (f" (file://{parts.netloc[:40]}/… reads {parts.netloc[:40]!r} as a host: a file:// URL takes an "
                    "absolute path)") if parts.netloc not in ("", "localhost") else ""
            raise BadStoreURL(f"{url[:200]!r} names no local folder{host}: write file:///ABSOLUTE/PATH, or the "
                              "folder as a plain path (a relative one too)")
        return LocalStore(unquote(parts.path), create=create)
    if sep:
        raise UnsupportedStoreURL(f"unsupported store URL scheme {url.split('://')[0][:20] + '://'!r} in "
                                  f"{url[:200]!r}; a store is {STORE_URL_FORMS}")
    return LocalStore(url, create=create)


def configured_store(cfg: Any, create: bool = True) -> ObjectStore:
    """The store a :class:`lookbench_pipeline.config.PipelineConfig` names (``store.url``, else
    ``<data_dir>/store``), with its endpoint, region, checksum mode and multipart sizes."""
    extra = ({"multipart_threshold": cfg.store.multipart_threshold, "multipart_chunksize": cfg.store.multipart_chunksize}
             if cfg.store_url.startswith("s3://") else {})
    return open_store(cfg.store_url, cfg.store.endpoint_url, cfg.store.region, cfg.store.checksum_mode,
                      create=create, **extra)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def original_key(sha256: str) -> str:
    """Content-addressed key of an original image: ``originals/<2 hex>/<sha256>``."""
    return f"originals/{sha256[:2]}/{sha256}"


def fitted_key(sha256: str, max_image_tokens: int, method: str) -> str:
    """Content-addressed key of an image-model input fitted from the original ``sha256`` to a budget of
    ``max_image_tokens`` image tokens by the fitting ``method`` (``vlm.fit.FIT_METHOD``):
    ``vlm-inputs/<method>-t<budget>/<2 hex>/<sha256>`` (the bytes sent to the model; see ``vlm.fitted``)."""
    return f"vlm-inputs/{method}-t{int(max_image_tokens)}/{sha256[:2]}/{sha256}"


def derived_key(sha256: str) -> str:
    """Content-addressed key of a derived image (a detection's crop, JPEG): ``derived/<2 hex>/<sha256>``."""
    return f"derived/{sha256[:2]}/{sha256}"
