"""Image-model inputs fitted once per original image and token budget, and kept in the object store.

Fitting a 1–3 MP photo to the model's pixel budget (decode, resize, JPEG encode: :func:`.fit.prepare_image`) costs
several milliseconds of CPU, more than everything else the client does for a request. :func:`fit_inputs` does it
once per (image sha256, token budget, :data:`.fit.FIT_METHOD`), in worker threads, before any request is sent, and
stores the bytes to send under :func:`lookbench_pipeline.store.fitted_key` (content-addressed, so a rerun, the
judge, a re-annotation and the next release's annotation of the same image fit nothing). The annotator
(:class:`.annotator.VlmAnnotator` with ``fitted_store``) reads them back with :func:`read_fitted`: a header parse and
a base64 encode, no decode.

What is stored is exactly what :func:`.fit.prepare_image` sends: the fitted JPEG (``width`` x ``height`` on the
processor's 28-pixel grid), or the original bytes where it passes them through. Whole images only (a detection's
crop box is fitted by the annotator as before).
"""

from __future__ import annotations

import base64
import io
import re
import time
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from PIL import Image

from ..cpus import usable_cpus
from ..store import ObjectStore, StoreError, fitted_key, original_key, put_new
from .fit import (_PASSTHROUGH_MIME, FIT_METHOD, ImageRefused, PreparedImage, check_image_tokens, image_tokens,
                  prepare_image, server_size_as_is)


def payload(prepared: PreparedImage) -> tuple[bytes, str]:
    """The bytes a :class:`PreparedImage` sends and their media type (from its ``data:`` URL)."""
    head, _, b64 = prepared.data_url.partition(",")
    return base64.b64decode(b64), head.removeprefix("data:").removesuffix(";base64")


def _complete(data: bytes, fmt: str) -> bool:
    """Whether stored bytes end as a whole file of ``fmt`` does (a cut-off object is never sent): a JPEG's EOI marker
    in its last 1 KiB (encoders may pad after it), a PNG's IEND chunk at the end, a WebP's RIFF size."""
    if fmt == "JPEG":
        return b"\xff\xd9" in data[-1024:]
    if fmt == "PNG":
        return data[-12:-8] == b"\x00\x00\x00\x00" and data[-8:-4] == b"IEND"
    return len(data) >= 12 and int.from_bytes(data[4:8], "little") + 8 <= len(data)


def read_fitted(data: bytes, max_image_tokens: int) -> PreparedImage | None:
    """A stored fitted input as a :class:`PreparedImage`, checked without decoding a JPEG's pixels: an image the
    server takes unchanged within ``max_image_tokens`` (:func:`.fit.server_size_as_is`: format, mode, frames,
    transparency, colour profile, rotation, size and token count from the header) whose bytes end as a whole file
    does. ``width``/``height`` are that processor size; ``source_size`` is the stored image's size; ``passthrough``
    whether the server resizes it. None when any of this fails (the caller fits the original instead)."""
    try:
        im = Image.open(io.BytesIO(data), formats=tuple(_PASSTHROUGH_MIME))
        target = server_size_as_is(im, max_image_tokens)
        if target is None or not _complete(data, im.format):
            return None
        w, h = im.size
        mime = _PASSTHROUGH_MIME[im.format]
    except Exception:  # noqa: BLE001 - anything odd: fit the original
        return None
    url = f"data:{mime};base64," + base64.b64encode(data).decode("ascii")
    return PreparedImage(url, target[0], target[1], image_tokens(*target), (w, h), False,
                         passthrough=(w, h) != target)


@dataclass
class FitCounts:
    """What :func:`fit_inputs` did. ``images`` (distinct sha256) = ``fitted`` + ``reused`` + ``refused`` +
    ``unreadable``: ``fitted`` were fitted and stored now (``repaired`` of them replaced a stored input that
    :func:`read_fitted` would not send: cut off, over budget, not an image), ``reused`` were already in the store and
    sound, ``refused`` were refused by :func:`prepare_image` (by reason; the annotator records the same refusal for
    their items), ``unreadable`` have no readable original (``no_original``) or are not a sha256 (``bad_sha256``).
    ``bytes_stored``: the fitted inputs written; ``cpu_s``/``seconds``: process CPU and wall time."""

    images: int = 0
    fitted: int = 0
    repaired: int = 0
    reused: int = 0
    refused: Counter = field(default_factory=Counter)
    unreadable: Counter = field(default_factory=Counter)
    bytes_stored: int = 0
    seconds: float = 0.0
    cpu_s: float = 0.0

    def as_dict(self) -> dict:
        return {"images": self.images, "fitted": self.fitted, "repaired": self.repaired, "reused": self.reused,
                "refused": dict(self.refused), "unreadable": dict(self.unreadable),
                "bytes_stored": self.bytes_stored, "seconds": round(self.seconds, 3), "cpu_s": round(self.cpu_s, 3),
                "method": FIT_METHOD}


_SHA256 = re.compile(r"[0-9a-f]{64}")


def fit_inputs(store: ObjectStore, shas: Iterable[str], max_image_tokens: int, *, workers: int | None = None,
               progress=None) -> FitCounts:
    """Fit every original ``originals/<sha>`` in ``store`` that has no sound fitted input for ``max_image_tokens``
    and store the bytes to send under ``fitted_key(sha, max_image_tokens, FIT_METHOD)``: a new key is created only
    if absent (another writer's counts as reused); a stored input :func:`read_fitted` refuses is replaced (the bytes
    for a key are always the same: the fit is deterministic). ``workers`` threads (default: the CPUs this process may
    run on; the decode, resize and encode release the GIL). ``progress(done, total)`` is called as images finish.

    Never raises for a bad image or a bad sha256 (they are counted, :class:`FitCounts`).

    Raises:
        ValueError: ``max_image_tokens`` outside what :func:`prepare_image` accepts.
        StoreError: the store fails other than by a missing object (e.g. no permission to write).
    """
    check_image_tokens(max_image_tokens)  # what prepare_image accepts: fail once, not per image
    todo = sorted(set(shas), key=repr)  # repr: a non-string among them is counted, not a TypeError here
    counts = FitCounts(images=len(todo))
    t, c = time.perf_counter(), time.process_time()

    def one(sha: str) -> tuple[str, str | None, int]:
        if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
            return "unreadable", "bad_sha256", 0
        key = fitted_key(sha, max_image_tokens, FIT_METHOD)
        stale = False
        if store.exists(key):
            try:
                if read_fitted(store.get_bytes(key), max_image_tokens) is not None:
                    return "reused", None, 0
            except StoreError:  # gone since exists(): fit it
                pass
            stale = True
        try:
            data = store.get_bytes(original_key(sha))
        except StoreError:
            return "unreadable", "no_original", 0
        try:
            prepared = prepare_image(data, None, max_image_tokens)
        except ImageRefused as exc:
            return "refused", exc.reason, 0
        body, mime = payload(prepared)
        if stale:
            store.put_bytes(key, body, mime)
            return "repaired", None, len(body)
        if not put_new(store, key, body, mime):
            return "reused", None, 0
        return "fitted", None, len(body)

    with ThreadPoolExecutor(usable_cpus(workers)) as ex:
        for done, (what, why, size) in enumerate(ex.map(one, todo), 1):
            if what in ("fitted", "repaired"):
                counts.fitted += 1
                counts.repaired += what == "repaired"
                counts.bytes_stored += size
            elif what == "reused":
                counts.reused += 1
            elif what == "refused":
                counts.refused[why] += 1
            else:
                counts.unreadable[why] += 1
            if progress:
                progress(done, len(todo))
    counts.seconds, counts.cpu_s = time.perf_counter() - t, time.process_time() - c
    return counts

