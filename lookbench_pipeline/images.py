"""Image intake: fetch or read the bytes, keep the original content-addressed by sha256, decode safely, normalise.

Normalisation (applied before anything looks at pixels: hash, detector, crops, embeddings):

1. the pixel count is checked against ``max_pixels`` from the header, before decoding (decompression bombs);
2. the whole file is decoded; a truncated file is rejected, never loaded half grey (a JPEG's scan data is also
   checked by libjpeg-turbo, strict, or where it cannot tell by probing Pillow's decoder: data cut short before
   an end-of-image marker is refused, see :func:`_check_jpeg_scan`; a GIF's or PNG's blocks are walked to the
   end, later frames included, and a file Pillow fails on is ``truncated`` when its own structure says it goes
   on, see :func:`_ends_early`);
3. EXIF orientation is applied (``ImageOps.exif_transpose``);
4. CMYK / ICC-tagged images are converted to sRGB through their profile (LittleCMS via ``PIL.ImageCms``);
5. 16-bit images are scaled to 8 bits (``>> 8``), not clipped;
6. alpha, palette transparency and a transparent colour key (RGB or grey, 8 or 16 bits; a 16-bit RGB key is
   matched on the high bytes Pillow keeps) are composited on white;
7. the first frame of an animated image is used, and the image is flagged ``animated``.

Every reference ends ``accepted`` or ``rejected`` with one reason from :class:`Reject`; ``in = accepted + rejected``.
"""

from __future__ import annotations

import errno
import hashlib
import io
import logging
import os
import re
import stat
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np
from PIL import Image, ImageCms, ImageOps

from .config import ImageConfig
from .foreground import block_codes, foreground_signature
from .store import ObjectStore, original_key

log = logging.getLogger(__name__)

PHASH_METHOD = "phash-v1:normalised-rgb,jpeg-draft>=128px,L601,lanczos32,dct2-8x8>median"
"""The one pHash method of this pipeline, stored with every hash so hashes of different releases compare:
the normalised image (EXIF orientation applied, alpha on white), JPEGs decoded in the DCT domain at the smallest
scale whose shorter side is >= 128 px, converted to luma (ITU-R 601-2), resized to 32 x 32 with Lanczos, 2-D DCT-II,
the top-left 8 x 8 coefficients compared with their median (row-major, first coefficient = most significant bit).
That is ``imagehash.phash`` (Zauner 2010) applied to a reduced decode; BENCHMARKS.md measures the agreement."""
PHASH_WORK_SIDE = 128
# The first 8 rows of the 32-point DCT-II matrix, scipy.fft.dct(type=2, norm=None): 2 cos(pi k (2n + 1) / 64).
_DCT32 = 2 * np.cos(np.pi * np.arange(8)[:, None] * (2 * np.arange(32)[None, :] + 1) / 64)


class Reject:
    """Named rejection reasons of the image intake."""

    FETCH_ERROR = "fetch_error"  # the crawl's own reasons pass through: host_not_allowed, robots_disallowed...
    NOT_DOWNLOADED = "not_downloaded"
    UNSUPPORTED_SCHEME = "unsupported_scheme"  # a crawled image URL that is not http(s): never fetched nor read
    TOO_LARGE = "too_large_bytes"
    NOT_FOUND = "file_not_found"
    UNREADABLE = "file_unreadable"  # permission denied, an I/O error
    LINK_OUTSIDE_DROP = "link_outside_drop"  # a symbolic link in an image drop that leads out of its folder
    NOT_REGULAR = "not_a_regular_file"  # a FIFO, a socket, a device: never opened (a FIFO's open would block)
    EMPTY = "empty_file"
    NOT_AN_IMAGE = "not_an_image"
    UNSUPPORTED_FORMAT = "unsupported_format"  # a format Pillow identifies (ICO, TGA, EPS…) the intake does not open
    TRUNCATED = "truncated"
    DECOMPRESSION_BOMB = "decompression_bomb"
    TOO_SMALL = "too_small"
    DECODE_ERROR = "decode_error"


@dataclass
class Decoded:
    """A decoded, normalised image: ``rgb`` is an RGB ``PIL.Image`` (8 bits per channel, sRGB).

    ``width`` x ``height`` is the full size in pixels after EXIF orientation; ``rgb`` has that size, or is smaller
    when the decode was asked for a reduced working size (JPEG DCT-domain scaling, see :func:`decode`).
    """

    rgb: Image.Image
    format: str
    n_frames: int
    width: int
    height: int
    flags: list[str] = field(default_factory=list)


class ImageRejected(Exception):
    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason, self.detail = reason, detail


_SRGB = ImageCms.createProfile("sRGB")
Image.init()
ALLOWED_FORMATS = tuple(f for f in ("JPEG", "PNG", "GIF", "WEBP", "AVIF", "TIFF", "BMP") if f in Image.OPEN)
"""Formats the intake opens; another format that Pillow identifies from its header (EPS, which Pillow hands to
Ghostscript to decode, PSD, ICO, TGA…) is ``unsupported_format`` (the format in the detail), never decoded; bytes
that no format of Pillow's identifies are ``not_an_image``."""
_OTHER_FORMATS = tuple(f for f in Image.OPEN if f not in ALLOWED_FORMATS)


def _other_format(data: bytes) -> str | None:
    """The format, not one the intake opens, that Pillow identifies ``data`` as from its header (``Image.open``
    reads the header only: nothing is decoded, no Ghostscript is run), else None."""
    try:
        with Image.open(io.BytesIO(data), formats=_OTHER_FORMATS) as im:
            return im.format
    except Exception:  # unidentified, a broken header, a decompression bomb: not an image the intake can name
        return None


def decode(data: bytes, cfg: ImageConfig | None = None, work_side: int | None = None,
           flag_uniform: bool = True, min_size: tuple[int, int] | None = None) -> Decoded:
    """See :func:`_decode`; any failure of a broken file inside Pillow is a ``decode_error`` rejection.
    ``flag_uniform=False`` skips the ``uniform`` flag's check (a caller that only needs the pixels)."""
    try:
        return _decode(data, cfg, work_side, flag_uniform, min_size)
    except ImageRejected:
        raise
    except Exception as exc:  # Pillow raises TypeError / IndexError / SyntaxError / struct.error on broken files
        raise ImageRejected(Reject.DECODE_ERROR, f"{type(exc).__name__}: {exc}") from exc


def _decode(data: bytes, cfg: ImageConfig | None = None, work_side: int | None = None,
            flag_uniform: bool = True, min_size: tuple[int, int] | None = None) -> Decoded:
    """Decode and normalise image bytes (see the module docstring for the steps).

    Args:
        work_side: when set, a JPEG is decoded in the DCT domain at the smallest scale (1/2, 1/4 or 1/8, Pillow's
            ``draft``) whose shorter side is still >= ``work_side`` pixels: every byte is still entropy-decoded
            (truncation is still detected) but the inverse DCT and colour conversion run on fewer pixels.
            Other formats are decoded at full size.
        min_size: when set, ``(width, height)`` in pixels after EXIF orientation: a JPEG is decoded at the largest
            DCT reduction (1/2, 1/4 or 1/8) at which both sides are still at least this large (a client that
            resizes to a pixel budget decodes no more pixels than it needs). Ignored when ``work_side`` is given.

    Raises:
        ImageRejected: with reason ``empty_file``, ``not_an_image``, ``unsupported_format``,
            ``decompression_bomb``, ``truncated``, ``decode_error`` or ``too_small`` (a side below
            ``cfg.min_side_px`` pixels). Bytes that carry an allowed format's signature (JPEG, PNG, GIF, TIFF, WebP,
            AVIF) but whose header Pillow cannot read are a broken image, ``truncated`` when the file ends inside
            the header, else ``decode_error``; bytes of another format Pillow identifies (ICO, TGA, EPS…) are
            ``unsupported_format``; only bytes that none identifies are ``not_an_image``.
    """
    cfg = cfg or ImageConfig()
    if not data:
        raise ImageRejected(Reject.EMPTY)
    try:
        im = Image.open(io.BytesIO(data), formats=ALLOWED_FORMATS)
    except Image.DecompressionBombError as exc:  # Pillow's own limit (2x MAX_IMAGE_PIXELS) trips at open
        raise ImageRejected(Reject.DECOMPRESSION_BOMB, str(exc)) from exc
    except Image.UnidentifiedImageError as exc:
        claimed = _signature_format(data)
        if claimed and _ends_early(data, claimed):
            raise ImageRejected(Reject.TRUNCATED, f"{claimed} signature, but the file ends inside its header") from exc
        if claimed:  # the bytes say JPEG, PNG… but Pillow cannot read their header: a broken image, not a non-image
            raise ImageRejected(Reject.DECODE_ERROR, f"{claimed} signature, but the header cannot be read") from exc
        other = _other_format(data)
        if other:
            raise ImageRejected(Reject.UNSUPPORTED_FORMAT, f"{other} (the intake opens {', '.join(ALLOWED_FORMATS)})"
                                ) from exc
        raise ImageRejected(Reject.NOT_AN_IMAGE, "no image format identifies it") from exc
    except OSError as exc:  # a JPEG cut inside its header: "Truncated File Read"
        raise _broken(data, _signature_format(data), exc) from exc
    except Exception as exc:
        raise _broken(data, _signature_format(data), exc) from exc
    fmt = im.format or "UNKNOWN"
    w, h = im.size
    if w * h > cfg.max_pixels:
        raise ImageRejected(Reject.DECOMPRESSION_BOMB, f"{w}x{h} > {cfg.max_pixels} pixels")
    if work_side and fmt == "JPEG" and im.mode in ("RGB", "YCbCr", "L"):
        scale = min(w, h) / work_side
        if scale >= 2:
            im.draft(im.mode if im.mode == "L" else "RGB", (max(1, w * work_side // min(w, h)),
                                                            max(1, h * work_side // min(w, h))))
    elif min_size and fmt == "JPEG" and im.mode in ("RGB", "YCbCr", "L"):
        mw, mh = max(1, min_size[0]), max(1, min_size[1])
        if im.getexif().get(0x0112, 1) in (5, 6, 7, 8):  # stored sideways: the stored width is the oriented height
            mw, mh = mh, mw
        if w // mw >= 2 and h // mh >= 2:  # Pillow picks the scale 1/s, s = 2, 4 or 8 <= min(w // mw, h // mh)
            im.draft(im.mode if im.mode == "L" else "RGB", (mw, mh))
    flags: list[str] = []
    if im.mode in ("RGB", "RGBA", "LA") and any(";16" in str(t.args) for t in im.tile):
        flags.append("16bit")  # a 16-bit colour PNG or TIFF: Pillow keeps 8 bits a channel (the high byte)
    try:
        n_frames = int(getattr(im, "n_frames", 1) or 1)  # a GIF's frames are counted by reading through them
    except Exception as exc:  # Pillow's GIF reader raises IndexError / OSError on a frame cut short
        raise _broken(data, fmt, exc) from exc
    if n_frames > 1:
        flags.append("animated")  # policy: first frame, flagged
    if Image.MAX_IMAGE_PIXELS and w * h > Image.MAX_IMAGE_PIXELS:
        # what Pillow only warns about (its error is at twice this); checked here rather than by turning the warning
        # into an error, since a warnings filter is process-wide and decodes run in several threads at once
        raise ImageRejected(Reject.DECOMPRESSION_BOMB, f"{w}x{h} > {Image.MAX_IMAGE_PIXELS} pixels (Pillow's limit)")
    try:
        im.load()
    except Image.DecompressionBombError as exc:
        raise ImageRejected(Reject.DECOMPRESSION_BOMB, str(exc)) from exc
    except OSError as exc:
        raise _broken(data, fmt, exc) from exc
    except Exception as exc:  # SyntaxError, ValueError from broken plugins
        raise _broken(data, fmt, exc) from exc
    if fmt == "JPEG" and _scan_may_be_cut(im):
        _check_jpeg_scan(data)
    if fmt in ("GIF", "PNG") and _ends_early(data, fmt):
        # the decoder stopped once it had the (first) frame's pixels: a cut in a later frame of an animation, or
        # in the checksum or the chunks after the pixel data, went unseen, and the stored original would be a
        # broken file (the whole download a second sha256)
        where = "a later frame" if n_frames > 1 else "what follows the pixel data"
        raise ImageRejected(Reject.TRUNCATED, f"{fmt}: the file ends inside {where}")
    orientation = im.getexif().get(0x0112, 1) if hasattr(im, "getexif") else 1
    if orientation in (2, 3, 4, 5, 6, 7, 8):  # other values are invalid and ignored, as exif_transpose does
        im = ImageOps.exif_transpose(im)
        flags.append("exif_rotated")
        if orientation in (5, 6, 7, 8):
            w, h = h, w
    rgb = _to_rgb(im, flags)
    if min(w, h) < cfg.min_side_px:
        raise ImageRejected(Reject.TOO_SMALL, f"{w}x{h} < {cfg.min_side_px} px side")
    if flag_uniform and _is_uniform(rgb):
        flags.append("uniform")
    return Decoded(rgb=rgb, format=fmt, n_frames=n_frames, width=w, height=h, flags=flags)


def _broken(data: bytes, fmt: str | None, exc: Exception) -> ImageRejected:
    """The rejection of a file Pillow failed on with ``exc``: ``truncated`` when Pillow's decoder says the data
    ran out (an ``OSError`` "image file is truncated" / "broken data stream") or the file ends before its structure
    does (:func:`_ends_early`; libwebp, for one, only says it "could not create decoder object"), else
    ``decode_error``. Other exceptions that use the word (a ``ValueError`` "Truncated tRNS chunk" in a whole file)
    describe a malformed part, not a cut."""
    msg = str(exc) if isinstance(exc, OSError) else repr(exc)
    low = msg.lower()
    if isinstance(exc, OSError) and ("truncated" in low or "broken data" in low):
        return ImageRejected(Reject.TRUNCATED, msg)
    if _ends_early(data, fmt):
        return ImageRejected(Reject.TRUNCATED, f"{msg} (the file ends before its {fmt} structure does)")
    return ImageRejected(Reject.DECODE_ERROR, msg)


_JPEG_CUT = "premature end"  # libjpeg's JWRN_HIT_MARKER / JWRN_JPEG_EOF: the scan data stops early
_JPEG_CORRUPT = ("bad huffman code", "bad arithmetic code", "instead of rst")  # JWRN_HUFF_BAD_CODE, _MUST_RESYNC…


def _scan_may_be_cut(im: Image.Image) -> bool:
    """Whether a decoded JPEG (before EXIF orientation) needs :func:`_check_jpeg_scan`.

    When a baseline scan stops early, libjpeg decodes the MCU in which the data ends from zero bits and leaves
    every later block with zero coefficients, which decode to luma exactly 128 (the level shift of ITU-T T.81,
    A.3.1): unless the data ends inside the last MCU, the last block, and so the last pixel in raster order, has
    luma 128 whatever the chroma its neighbours lend it through upsampling (at most 7/16 of theirs, which stays
    clear of clipping, so ``0.299 R + 0.587 G + 0.114 B`` gives the luma back within rounding). A last pixel whose
    luma is more than 2 from 128 rules out a cut before the last MCU (one inside it changes at most that MCU, 16 x
    16 pixels, and is let through); others, and the files where that reasoning does not hold (progressive, whose
    first scans can be whole while later ones are cut; CMYK / YCCK; modes other than RGB and L) are checked. On
    the 122 decodable JPEGs of ``../shared/realdata``: 1 of the 95 baseline ones has a mid-grey last pixel, and
    27 are progressive."""
    if im.mode not in ("RGB", "L") or im.info.get("progressive") or im.info.get("progression"):
        return True
    px = im.getpixel((im.width - 1, im.height - 1))
    luma = px if isinstance(px, (int, float)) else 0.299 * px[0] + 0.587 * px[1] + 0.114 * px[2]
    return abs(luma - 128) <= 2


def _check_jpeg_scan(data: bytes) -> None:
    """Reject a JPEG whose scan data libjpeg only *warns* about, which Pillow decodes without a word: data that
    stops early but is followed by an end-of-image marker (or a frame header that claims more rows than the data
    holds) is filled with mid-grey blocks, and a corrupt entropy code decodes to garbage.

    libjpeg-turbo (``simplejpeg``, strict) re-reads the scan at 1/8 scale: every entropy-coded byte is decoded
    again, which costs about as much as the intake's own reduced decode, so it runs only where
    :func:`_scan_may_be_cut` cannot rule a cut out. Warnings that do not lose pixels ("extraneous bytes before
    marker", an unknown JFIF revision…) are accepted, as libjpeg accepts them. Where libjpeg-turbo cannot tell
    (it cannot set the file up — an unusual sampling layout such as 4 x 2 luma that Pillow's libjpeg decodes —, or
    strict mode stopped at such a harmless warning before the end of the scan), :func:`_scan_ends_early` asks
    Pillow's decoder instead.

    Raises:
        ImageRejected: ``truncated`` for data that ends early, ``decode_error`` for a corrupt entropy code.
    """
    import simplejpeg

    try:
        colorspace = "CMYK" if simplejpeg.decode_jpeg_header(data)[2] in ("CMYK", "YCCK") else "GRAY"
        simplejpeg.decode_jpeg(data, colorspace=colorspace, min_factor=8, strict=True)
    except ValueError as exc:
        msg = str(exc)
        low = msg.lower()
        if _JPEG_CUT in low:
            raise ImageRejected(Reject.TRUNCATED, f"{msg}: libjpeg would fill the rest with grey") from exc
        if any(k in low for k in _JPEG_CORRUPT):
            raise ImageRejected(Reject.DECODE_ERROR, msg) from exc
        if _scan_ends_early(data):
            raise ImageRejected(Reject.TRUNCATED, f"the scan data ends before the frame does (libjpeg-turbo: {msg}; "
                                "Pillow would fill the rest with grey)") from exc


_SCAN_PROBE = bytes((i * 167 + 61) % 255 for i in range(512))
"""Entropy-coded bytes :func:`_scan_ends_early` puts before the end-of-image marker: a fixed pseudo-random run
(never 0xFF, so no marker and no stuffing) of 4,096 bits, which any Huffman or arithmetic decoder turns into
coefficients other than the all-zero blocks libjpeg fills a cut scan with."""


def _eoi_offset(data: bytes) -> int | None:
    """Where the end-of-image marker that ends the (last) scan starts: marker segments are skipped by their length
    fields (ITU-T T.81 B.1.1.4), each scan's entropy-coded data up to its first marker other than a stuffed
    0xFF00, a fill byte or a restart marker (B.1.1.5), and bytes between segments up to the next 0xFF, as libjpeg
    skips them. None when the structure does not lead to one."""
    n, pos = len(data), 2
    while pos + 2 <= n:
        if data[pos] != 0xFF:  # extraneous bytes before a marker, which libjpeg skips (with a warning)
            pos = data.find(b"\xff", pos)
            if pos < 0 or pos + 2 > n:
                return None
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
        elif marker == 0xD9:
            return pos
        elif marker in (0x01, 0xD8) or 0xD0 <= marker <= 0xD7:  # no length field
            pos += 2
        elif pos + 4 > n:
            return None
        else:
            pos += 2 + int.from_bytes(data[pos + 2:pos + 4], "big")
            if marker == 0xDA:  # start of scan: the entropy-coded data follows its header
                while True:
                    pos = data.find(b"\xff", pos)
                    if pos < 0 or pos + 1 >= n:
                        return None
                    if data[pos + 1] in (0x00, 0xFF) or 0xD0 <= data[pos + 1] <= 0xD7:
                        pos += 1
                        continue
                    break
    return None


def _scan_ends_early(data: bytes) -> bool:
    """Whether the last scan's entropy-coded data stops before the frame it belongs to is complete, told by
    Pillow's libjpeg, which has no word for it (it fills the missing blocks with zero coefficients, mid-grey).

    The file is decoded twice (at a 1/4 DCT reduction): as it is, and with :data:`_SCAN_PROBE` put between the
    scan's last byte and its end-of-image marker. In a whole scan the decoder has every block before it reaches
    the probe, which it then skips as "extraneous bytes before marker", so both decodes are identical, pixel for
    pixel; in a scan cut short the decoder reads the probe as the missing blocks' data and the picture changes.
    (Only a picture whose missing blocks would decode to the same pixels as the probe — a flat mid-grey one
    whose codes hold no other value — is not told apart, and loses nothing.) Files whose structure does not lead
    to an end-of-image marker, or that Pillow cannot decode once probed, are not called cut here."""
    end = _eoi_offset(data)
    if end is None:
        return False
    while data[end - 1] == 0xFF:  # fill bytes (or a cut's last byte, a lone 0xFF) stay with the marker
        end -= 1

    def pixels(b: bytes) -> bytes:
        im = Image.open(io.BytesIO(b), formats=("JPEG",))
        im.draft(im.mode, (max(1, im.width // 4), max(1, im.height // 4)))
        im.load()
        return im.tobytes()

    try:
        return pixels(data) != pixels(data[:end] + _SCAN_PROBE + data[end:])
    except Exception as exc:  # the probed file failing where the original decoded is no evidence of a cut
        log.debug("JPEG scan probe failed: %r", exc)
        return False


_SIGNATURES = ((b"\xff\xd8\xff", "JPEG"), (b"\x89PNG\r\n\x1a\n", "PNG"), (b"GIF87a", "GIF"), (b"GIF89a", "GIF"),
               (b"II*\x00", "TIFF"), (b"MM\x00*", "TIFF"))  # BMP's "BM" is too short to tell it from text


def _signature_format(data: bytes) -> str | None:
    """The allowed format whose file signature ("magic number") ``data`` starts with, else None."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP" if "WEBP" in ALLOWED_FORMATS else None
    if data[4:12] in (b"ftypavif", b"ftypavis"):
        return "AVIF" if "AVIF" in ALLOWED_FORMATS else None
    return next((f for sig, f in _SIGNATURES if data.startswith(sig) and f in ALLOWED_FORMATS), None)


_TIFF_TYPE_SIZE = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 1, 8: 2, 9: 4, 10: 8, 11: 4, 12: 8, 13: 4}  # bytes


def _ends_early(data: bytes, fmt: str | None) -> bool:
    """Whether ``data`` stops before the end its own structure declares (a download cut short).

    Asked of every file Pillow failed on, and of every GIF and PNG it decoded (their decoders stop once they have
    the first frame's pixels). Walks the container far enough to tell: a JPEG's marker segments up to the start
    of scan (each segment's length field, ITU-T T.81 B.1.1.4); a PNG's chunks up to IEND; a GIF's blocks and
    their data sub-blocks up to the trailer (GIF89a, sections 15-27), every frame included; a TIFF's first IFD
    and the values it points to (TIFF 6.0, section 2); a WebP's RIFF length; an AVIF's top-level ISO BMFF box
    sizes, and whole boxes that hold no picture data yet (no 'mdat', no 'idat' in 'meta'). A length that points
    past the last byte is a cut (or a corrupt length, which cannot be told apart and loses the same pixels).
    Anything else that does not parse is not a cut, nor is a GIF or PNG that ends between two blocks after its
    first pixel data (no trailer or IEND, which some encoders leave out). ``fmt`` is the signature's format
    (:func:`_signature_format`) or Pillow's; other formats give False."""
    n = len(data)
    if fmt == "JPEG":
        pos = 2
        while pos + 2 <= n:
            if data[pos] != 0xFF:
                return False
            marker = data[pos + 1]
            if marker == 0xFF:  # fill byte
                pos += 1
                continue
            if marker == 0xDA:  # start of scan: the header is whole
                return pos + 4 > n or pos + 2 + int.from_bytes(data[pos + 2:pos + 4], "big") > n
            if marker in (0x01, 0xD8) or 0xD0 <= marker <= 0xD7:  # no length field
                pos += 2
                continue
            if marker == 0xD9:
                return False
            if pos + 4 > n:
                return True
            pos += 2 + int.from_bytes(data[pos + 2:pos + 4], "big")
        return True
    if fmt == "PNG":
        pos, pixels = 8, False
        while pos + 8 <= n:
            length, tag = int.from_bytes(data[pos:pos + 4], "big"), data[pos + 4:pos + 8]
            if length > 0x7FFFFFFF:
                return False
            if pos + 12 + length > n:
                return True
            if tag == b"IEND":
                return False
            pixels = pixels or tag == b"IDAT"
            pos += 12 + length
        # ending between two chunks with no IEND: a cut if no pixel data came yet (some encoders omit IEND)
        return pos < n or not pixels
    if fmt == "GIF":
        if n < 13:
            return True
        pos, pixels = 13 + (3 << ((data[10] & 7) + 1) if data[10] & 0x80 else 0), False
        while pos < n:
            block = data[pos]
            if block == 0x2C:  # image descriptor (10 bytes), its local colour table, the LZW code size
                if pos + 10 > n:
                    return True
                pos += 11 + (3 << ((data[pos + 9] & 7) + 1) if data[pos + 9] & 0x80 else 0)
                pixels = True
            elif block == 0x21:  # extension: label, then sub-blocks
                pos += 2
            else:  # the trailer (0x3B) or a stray byte: not a cut
                return False
            while pos < n and data[pos]:  # data sub-blocks, each led by its size, up to a zero size
                pos += 1 + data[pos]
            if pos >= n:
                return True
            pos += 1
        return not pixels  # ending between two blocks with no trailer: as for a PNG without IEND
    if fmt == "TIFF":
        if n < 8:
            return True
        order = "little" if data[:2] == b"II" else "big"
        if int.from_bytes(data[2:4], order) == 43:  # BigTIFF: an 8-byte offset of the first IFD at byte 8
            return n < 16 or int.from_bytes(data[8:16], order) + 8 > n
        ifd = int.from_bytes(data[4:8], order)
        if ifd + 2 > n:
            return True
        entries = int.from_bytes(data[ifd:ifd + 2], order)
        if ifd + 2 + 12 * entries + 4 > n:
            return True
        for e in range(ifd + 2, ifd + 2 + 12 * entries, 12):  # a value of over 4 bytes lies at its offset
            size = _TIFF_TYPE_SIZE.get(int.from_bytes(data[e + 2:e + 4], order), 1)
            size *= int.from_bytes(data[e + 4:e + 8], order)
            if size > 4 and int.from_bytes(data[e + 8:e + 12], order) + size > n:
                return True
        return False
    if fmt == "WEBP":
        return n < 12 or 8 + int.from_bytes(data[4:8], "little") > n
    if fmt == "AVIF":
        pos, pixels = 0, False
        while pos + 8 <= n:
            size, kind = int.from_bytes(data[pos:pos + 4], "big"), data[pos + 4:pos + 8]
            if size == 1:  # a 64-bit size follows the type
                if pos + 16 > n:
                    return True
                size = int.from_bytes(data[pos + 8:pos + 16], "big")
            elif size == 0:  # runs to the end of the file
                return False
            if size < 8:
                return False
            if pos + size > n:
                return True
            # the coded picture is in an 'mdat' box, or in an 'idat' box inside 'meta' (ISO/IEC 23008-12, 9.3)
            pixels = pixels or kind == b"mdat" or (kind == b"meta" and b"idat" in data[pos:pos + size])
            pos += size
        return pos < n or not pixels  # whole boxes but no picture data: cut at a box boundary
    return False


def _to_rgb(im: Image.Image, flags: list[str]) -> Image.Image:
    icc = im.info.get("icc_profile")
    key = im.info.get("transparency")
    if im.mode == "RGB" and isinstance(key, tuple) and "16bit" in flags:
        # a 16-bit colour PNG's tRNS key is stored as 16-bit values, but Pillow keeps only each sample's high byte:
        # the key is compared on those, so a pixel within 1/256 of the key in every channel is taken as transparent
        im.info["transparency"] = tuple(int(k) >> 8 for k in key)
    # a 16/32-bit grey PNG's transparent colour key (tRNS), kept as a mask before the pixels are scaled to 8 bits
    grey_alpha = np.asarray(im) != key if im.mode.startswith("I") and isinstance(key, int) else None
    if im.mode in ("I;16", "I;16B", "I;16L", "I;16N"):
        flags.append("16bit")  # scaled by the bit depth, never by the image's own maximum
        im = Image.fromarray((np.asarray(im, dtype=np.uint32) >> 8).astype(np.uint8), "L")
    elif im.mode == "I":
        # 32-bit integer pixels: Pillow opens 16-bit greyscale PNG/TIFF this way (values 0..65535); one working
        # copy, changed in place (8 bytes a pixel)
        arr = np.array(im, dtype=np.int64)
        np.clip(arr, 0, None, out=arr)
        shift = 8 if arr.max(initial=0) <= 0xFFFF else 24
        flags.append("16bit" if shift == 8 else "32bit")
        np.right_shift(arr, shift, out=arr)
        im = Image.fromarray(np.clip(arr, 0, 255, out=arr).astype(np.uint8), "L")
    elif im.mode == "F":
        arr = np.nan_to_num(np.array(im, dtype=np.float64), copy=False)  # one working copy, changed in place
        top = 1.0 if arr.max(initial=0) <= 1.0 else 255.0
        flags.append("float")
        np.divide(arr, top, out=arr)
        np.clip(arr, 0, 1, out=arr)
        np.multiply(arr, 255, out=arr)
        im = Image.fromarray(np.round(arr, out=arr).astype(np.uint8), "L")
    if grey_alpha is not None and im.mode == "L":
        im = Image.merge("LA", (im, Image.fromarray(grey_alpha.astype(np.uint8) * 255, "L")))
    if im.mode == "P":
        im = im.convert("RGBA") if "transparency" in im.info else im.convert("RGB")
    if im.mode == "CMYK":
        flags.append("cmyk")
        if icc:
            try:
                src = ImageCms.ImageCmsProfile(io.BytesIO(icc))
                im = ImageCms.profileToProfile(im, src, _SRGB, outputMode="RGB")
                flags.append("icc_converted")
            except (ImageCms.PyCMSError, OSError):
                im = im.convert("RGB")
        else:
            im = im.convert("RGB")
    elif icc and im.mode in ("RGB", "RGBA", "L", "LA"):
        try:
            src = ImageCms.ImageCmsProfile(io.BytesIO(icc))
            if "srgb" not in (ImageCms.getProfileDescription(src) or "").lower():
                mode = "RGBA" if im.mode in ("RGBA", "LA") else "RGB"
                im = ImageCms.profileToProfile(im.convert(mode), src, _SRGB, outputMode=mode)
                flags.append("icc_converted")
        except (ImageCms.PyCMSError, OSError):
            pass
    if im.mode in ("RGBA", "LA", "PA") or (im.mode in ("RGB", "L") and "transparency" in im.info):
        flags.append("had_alpha")
        return _on_white(im)
    if im.mode != "RGB":
        if im.mode in ("L", "1"):
            flags.append("grayscale")
        im = im.convert("RGB")
    return im


_STRIP_PIXELS = 1 << 22  # pixels composited at a time: 16 MB of RGBA


def _on_white(im: Image.Image, strip_pixels: int = _STRIP_PIXELS) -> Image.Image:
    """``im`` (with alpha or a transparent colour key) composited on opaque white, as RGB of the same size.

    Pixels with alpha 0 become pure white whatever colour they hid. ``Image.alpha_composite`` over the whole
    picture holds four full-size copies at once (the RGBA conversion, the white canvas, the composite, its RGB
    conversion: 1.3 GB beside the decoded 256 MB for 8000 x 8000 RGBA); it runs here on strips of rows of about
    ``strip_pixels`` pixels, pixel for pixel the same result (the operation is per pixel), so only the RGB output
    (3 bytes a pixel) is held at full size."""
    out = Image.new("RGB", im.size)
    rows = max(1, strip_pixels // max(1, im.width))
    for top in range(0, im.height, rows):
        strip = im.crop((0, top, im.width, min(im.height, top + rows))).convert("RGBA")  # crop keeps a colour key
        white = Image.new("RGBA", strip.size, (255, 255, 255, 255))
        out.paste(Image.alpha_composite(white, strip).convert("RGB"), (0, top))
    return out


def _is_uniform(rgb: Image.Image, max_std: float = 2.0) -> bool:
    small = np.asarray(rgb.resize((32, 32), Image.Resampling.BILINEAR), dtype=np.float32)
    return float(small.reshape(-1, 3).std(axis=0).max()) <= max_std  # per channel: a flat red is uniform


def phash_hex(rgb: Image.Image) -> str:
    """64-bit pHash of an (already normalised) image as 16 hex digits; see :data:`PHASH_METHOD`."""
    px = np.asarray(rgb.convert("L").resize((32, 32), Image.Resampling.LANCZOS), dtype=np.float64)
    low = _DCT32 @ px @ _DCT32.T  # 2-D DCT-II (scipy's unnormalised convention), top-left 8 x 8 rows/cols only
    bits = low > np.median(low)
    return np.packbits(bits.ravel()).tobytes().hex()


def fast_phash(data: bytes, cfg: ImageConfig | None = None) -> str:
    """pHash straight from file bytes through the reduced decode (what the intake computes)."""
    return phash_hex(decode(data, cfg, work_side=PHASH_WORK_SIDE).rgb)


def color_signature(rgb: Image.Image) -> str:
    """An 8 x 8 RGB thumbnail (box-filtered) as 384 hex digits. pHash works on a 32 x 32 luminance image, so
    colour variants (and fine patterns) of the same packshot share a pHash; dedup confirms a near duplicate with
    this signature."""
    return rgb.resize((8, 8), Image.Resampling.BOX).tobytes().hex()


def encode_normalised(rgb: Image.Image) -> bytes:
    """JPEG bytes (quality 92, no EXIF or other metadata) of a normalised image: what a release publishes."""
    buf = io.BytesIO()
    rgb.save(buf, format="JPEG", quality=92, optimize=False)
    return buf.getvalue()


def publishable_jpeg(store: ObjectStore, sha256: str, cfg: ImageConfig | None = None) -> bytes:
    """The bytes a release publishes for an image: the original, fully decoded and normalised, re-encoded as
    JPEG without EXIF (no GPS or other personal metadata). The original stays in the private store."""
    return encode_normalised(decode(store.get_bytes(original_key(sha256)), cfg).rgb)


# ---------------------------------------------------------------------------------------------- fetching


@dataclass
class ImageRef:
    """One image reference to take in: a URL (crawl) or a file path (image drop)."""

    owner_type: str
    owner_id: str
    position: int
    source: str
    site: str
    first_seen_at: datetime

    @property
    def ref_id(self) -> str:
        return hashlib.sha1(f"{self.owner_type}\x00{self.owner_id}\x00{self.position}".encode()).hexdigest()


class SourceReader:
    """Reads the bytes of an image reference.

    URLs are not fetched here: the crawl downloaded them (through robots.txt, the host allow-list and throttling)
    and ``downloads`` (rows of the ``image_downloads`` table) says where each one's bytes are, or why there are
    none. Other sources are local file paths (image drops). ``confine``: the (resolved) drop folders; a path in
    one of them whose symbolic links lead out of it is rejected ``link_outside_drop`` and never opened.
    ``crawled``: the sources that a crawl named (product and look images): only their ``downloads`` row is read;
    one without a row and with another scheme than http(s) (``file:///etc/passwd``) is rejected
    ``unsupported_scheme`` and never opened.
    """

    def __init__(self, downloads: Iterable[dict] = (), max_bytes: int = 50_000_000, confine: Iterable[Path] = (),
                 crawled: Iterable[str] = ()):
        self.downloads = {d["url"]: d for d in downloads}
        self.max_bytes = max_bytes
        self.confine = [Path(r) for r in confine]
        self.crawled = set(crawled)

    def __call__(self, source: str) -> bytes:
        if source in self.crawled and source not in self.downloads \
                and not source.lower().startswith(("http://", "https://")):
            raise ImageRejected(Reject.UNSUPPORTED_SCHEME, source[:200])
        if source.startswith(("http://", "https://")) or source in self.crawled:
            d = self.downloads.get(source)
            if d is None:
                raise ImageRejected(Reject.NOT_DOWNLOADED, source)
            if not d["stored_path"]:
                raise ImageRejected(d["reason"] or Reject.FETCH_ERROR, source)
            source = d["stored_path"]
        p = Path(source.removeprefix("file://"))
        for root in self.confine:
            if p.is_relative_to(root):
                try:
                    target = p.resolve()
                except (OSError, RuntimeError):  # a link loop
                    raise ImageRejected(Reject.LINK_OUTSIDE_DROP, f"{source}: a symbolic link loop") from None
                if not target.is_relative_to(root):
                    raise ImageRejected(Reject.LINK_OUTSIDE_DROP, f"{source} -> {target}")
        try:
            st = p.stat()
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.ENAMETOOLONG):
                raise ImageRejected(Reject.NOT_FOUND, source) from None
            raise ImageRejected(Reject.UNREADABLE, f"{source}: {exc.strerror or exc}") from None
        if stat.S_ISDIR(st.st_mode):
            raise ImageRejected(Reject.NOT_FOUND, f"{source} is a folder")
        if not stat.S_ISREG(st.st_mode):
            raise ImageRejected(Reject.NOT_REGULAR, f"{source}: {_file_kind(st.st_mode)}")
        if st.st_size > self.max_bytes:
            raise ImageRejected(Reject.TOO_LARGE, f"{st.st_size} bytes")
        try:
            # O_NONBLOCK: a FIFO put in the file's place since the stat must not block the open; the fstat then
            # refuses it
            fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
            with os.fdopen(fd, "rb") as fh:
                mode = os.fstat(fh.fileno()).st_mode
                if not stat.S_ISREG(mode):
                    raise ImageRejected(Reject.NOT_REGULAR, f"{source}: {_file_kind(mode)}")
                data = fh.read(self.max_bytes + 1)  # a file that grew since the stat is still capped
        except FileNotFoundError:  # removed between the listing and the read
            raise ImageRejected(Reject.NOT_FOUND, source) from None
        except OSError as exc:  # no permission, an I/O error, a name too long
            raise ImageRejected(Reject.UNREADABLE, f"{source}: {exc.strerror or exc}") from None
        if len(data) > self.max_bytes:
            raise ImageRejected(Reject.TOO_LARGE, f"more than {self.max_bytes} bytes")
        return data


def _file_kind(mode: int) -> str:
    """What a file that is not a regular file is, in words (``st_mode``)."""
    for test, word in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return f"{word}, not a regular file"
    return "not a regular file"


DETAIL_CHARS = 300
"""The most characters of a rejection's ``detail`` kept in ``image_refs``."""
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _detail(text: str | None) -> str | None:
    """A rejection's detail as ``image_refs`` keeps it: None when empty, object addresses (``<... at 0x7f...>``,
    which differ from run to run) left out, at most :data:`DETAIL_CHARS` characters."""
    if not text:
        return None
    text = _ADDRESS.sub("", text)
    return text if len(text) <= DETAIL_CHARS else text[:DETAIL_CHARS - 1] + "…"


@dataclass
class IntakeResult:
    """Rows of ``image_refs`` (one per reference; a rejected one has its ``reason`` and, in words, its ``detail``)
    and ``images`` (one per distinct accepted sha256)."""

    refs: list[dict]
    images: list[dict]

    @property
    def counts(self) -> dict[str, int]:
        out = {"in": len(self.refs), "accepted": 0, "rejected": 0}
        for r in self.refs:
            out[r["status"]] += 1
            if r["reason"]:
                out[f"rejected.{r['reason']}"] = out.get(f"rejected.{r['reason']}", 0) + 1
        out["distinct_images"] = len(self.images)
        return out


def take_in(refs: list[ImageRef], fetch: Callable[[str], bytes], store: ObjectStore,
            cfg: ImageConfig | None = None, progress: Callable[[int, int], None] | None = None) -> IntakeResult:
    """Fetch, store, decode and hash every reference.

    Original bytes go to ``originals/<sha[:2]>/<sha>`` in ``store`` (skipped when already there: intake is
    idempotent). The publishable normalised JPEG is made later, only for images that a release uses
    (:func:`publishable_jpeg`). Returns one ``image_refs`` row per input reference, in
    input order, so ``len(result.refs) == len(refs)``.
    """
    cfg = cfg or ImageConfig()
    by_source: dict[str, list[ImageRef]] = {}
    for ref in refs:
        by_source.setdefault(ref.source, []).append(ref)

    def one(source: str) -> tuple[str, str | None, str | None, dict | None, str | None]:
        try:
            data = fetch(source)
        except ImageRejected as exc:
            return source, exc.reason, None, None, _detail(exc.detail)
        except Exception as exc:  # a fetcher's own failure is this reference's rejection, not the batch's end
            log.warning("intake: %s could not be fetched: %r", source, exc)
            return source, Reject.FETCH_ERROR, None, None, _detail(f"{type(exc).__name__}: {exc}")
        sha = hashlib.sha256(data).hexdigest()
        try:
            dec = decode(data, cfg, work_side=PHASH_WORK_SIDE)
        except ImageRejected as exc:
            return source, exc.reason, sha, None, _detail(exc.detail)
        except Exception as exc:  # never let one file end the batch
            log.warning("intake: %s failed to decode: %r", source, exc)
            return source, Reject.DECODE_ERROR, sha, None, _detail(f"{type(exc).__name__}: {exc}")
        if not store.exists(original_key(sha)):
            store.put_bytes(original_key(sha), data)
        info = {
            "image_sha256": sha, "store_key": original_key(sha), "format": dec.format,
            "width": dec.width, "height": dec.height, "n_frames": dec.n_frames,
            "flags": dec.flags, "phash": phash_hex(dec.rgb), "phash_method": PHASH_METHOD,
            "color_signature": color_signature(dec.rgb), "fg_signature": foreground_signature(dec.rgb),
            "block_codes": block_codes(dec.rgb),
        }
        return source, None, sha, info, None

    results: dict[str, tuple] = {}
    sources = list(by_source)
    with ThreadPoolExecutor(max_workers=max(1, cfg.fetch_workers)) as pool:
        for i, res in enumerate(pool.map(one, sources), 1):
            results[res[0]] = res
            if progress:
                progress(i, len(sources))

    ref_rows, images = [], {}
    for ref in refs:
        _, reason, sha, info, detail = results[ref.source]
        ref_rows.append({
            "ref_id": ref.ref_id, "owner_type": ref.owner_type, "owner_id": ref.owner_id,
            "position": ref.position, "source": ref.source, "site": ref.site,
            "status": "rejected" if reason else "accepted", "reason": reason, "detail": detail,
            "image_sha256": sha, "first_seen_at": ref.first_seen_at,
        })
        if info:
            prev = images.get(sha)
            if prev is None or ref.first_seen_at < prev["first_seen_at"]:
                images[sha] = {**info, "first_seen_at": ref.first_seen_at}
    return IntakeResult(refs=ref_rows, images=sorted(images.values(), key=lambda r: r["image_sha256"]))
