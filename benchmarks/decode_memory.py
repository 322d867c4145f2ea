"""Peak memory and time of the image intake's full decode (``images.decode``) on large pictures of the modes that
need conversion: RGBA (alpha composited on white), float and 32-bit integer greyscale (scaled to 8 bits), with a
plain RGB picture of the same size as the peer (the floor: Pillow's own decode of the pixels, no conversion).

    .venv/bin/python benchmarks/decode_memory.py [--side 8000] [--kinds rgba,float,int32,rgb] [--repeat 2]
    PYTHONPATH=/tmp/wt-base .venv/bin/python benchmarks/decode_memory.py ...   (the same on other code)

Inputs (written once to a temporary folder by a process of their own, not timed): smooth ``side`` x ``side`` pictures (gradients and stripes;
the RGBA one has a transparent outside around an opaque disc), as a PNG (RGBA, RGB; zlib level 6) or a TIFF with
Adobe deflate (float32 ``F``, int32 ``I`` with 16-bit values) -- the sizes ``images.ImageConfig.max_pixels``
(64,000,000 pixels) lets through. Each decode runs in a fresh process, started by a parent that
never held a picture (a child's ``ru_maxrss`` starts at its parent's peak on Linux): its peak resident set (MB), and
that peak minus the set before the decode, when the file's bytes are already in memory (the decode's own peak). The sha256 of
the decoded RGB pixels is printed, so two code versions can be compared for identical output.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

KINDS = ("rgba", "float", "int32", "rgb")


def write_input(kind: str, side: int, path: Path) -> None:
    y, x = np.indices((side, side), dtype=np.float32)
    if kind in ("float", "int32"):
        a = np.sin(x / 300) * np.cos(y / 200) * 0.5 + 0.5
        if kind == "float":
            a[0, 0] = np.nan  # a NaN sample, which the decode maps to 0
            Image.fromarray(a.astype(np.float32), "F").save(path, format="TIFF", compression="tiff_adobe_deflate")
        else:
            Image.fromarray((a * 65535).astype(np.int32), "I").save(path, format="TIFF",
                                                                     compression="tiff_adobe_deflate")
        return
    xi, yi = x.astype(np.uint32), y.astype(np.uint32)
    rgba = np.zeros((side, side, 4), np.uint8)
    rgba[..., 0], rgba[..., 1], rgba[..., 2] = (xi // 31) % 256, (yi // 17) % 256, ((xi + yi) // 64) % 256
    c = side // 2
    rgba[..., 3] = np.where((x - c) ** 2 + (y - c) ** 2 < (0.375 * side) ** 2, 255, 0)
    im = Image.fromarray(rgba, "RGBA") if kind == "rgba" else Image.fromarray(rgba[..., :3].copy(), "RGB")
    buf = io.BytesIO()
    im.save(buf, format="PNG", compress_level=6)
    path.write_bytes(buf.getvalue())


def child(path: str) -> None:
    import resource
    import time

    from lookbench_pipeline.images import decode

    data = Path(path).read_bytes()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    d = decode(data)
    took = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"peak_mb": round(peak / 1024), "decode_mb": round((peak - before) / 1024),
                      "seconds": round(took, 2), "flags": d.flags,
                      "sha256": hashlib.sha256(np.asarray(d.rgb).tobytes()).hexdigest()[:16]}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--side", type=int, default=8000)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--write", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return
    if args.write:
        write_input(args.write[0], args.side, Path(args.write[1]))
        return
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.kinds.split(","):
            path = Path(tmp) / f"{kind}.{'tif' if kind in ('float', 'int32') else 'png'}"
            # written by a process of its own: Linux hands a parent's peak RSS down to the children it starts
            subprocess.run([sys.executable, __file__, "--side", str(args.side), "--write", kind, str(path)],
                           check=True)
            runs = [json.loads(subprocess.run([sys.executable, __file__, "--child", str(path)], check=True,
                                              capture_output=True, text=True).stdout.strip().splitlines()[-1])
                    for _ in range(args.repeat)]
            r = runs[-1]
            print(f"{kind:6} {args.side}x{args.side} {path.stat().st_size / 1e6:6.1f} MB file: peak RSS "
                  f"{max(x['peak_mb'] for x in runs)} MB ({max(x['decode_mb'] for x in runs)} MB above the bytes "
                  f"read), {min(x['seconds'] for x in runs):.2f} s, pixels sha256 {r['sha256']}, flags {r['flags']}",
                  flush=True)


if __name__ == "__main__":
    main()
