"""Throughput of the VLM annotation client on what the pipeline sends, against a zero-latency OpenAI-compatible server,
with the bare ``openai`` client sending the same already-fitted bytes in the same run.

    .venv/bin/python benchmarks/vlm_client.py [--n 400] [--repeat 3] [--real ../shared/realdata/images]
        [--cache /tmp/lookbench-vlm-bench]

What is sent: what ``vlm.attributes.label_images`` runs, from the shipped configuration (``annotate`` defaults: 16
requests in flight, judge enabled, ``max_image_tokens`` 1280, category from the catalogue text, so two requests per
item: attributes, then the judge), each item's image an original in an object store (a local folder): first the fit
stage (``vlm.fit_inputs``: every image fitted once to the budget, in 2 threads, and stored), then the annotator
(``annotator_from_config(..., fitted_store=store)``) reading the fitted inputs from the store. Images, ``--n`` per
run, all distinct:

* 65% generated JPEG packshots of 1.3 to 3.1 MP (1000 x 1334 ... 1536 x 2048; quality 80-92; a third progressive);
* 15% generated PNG packshots of the same sizes;
* 20% the real photos of ``--real`` (``studio``, ``street``; 0.05 to 5.6 MP, most 0.8 MP), each copy made distinct
  by a JPEG comment segment, as the same photo served by two shops would be.

The server (``lookbench_pipeline.demo.scripted_openai``, its own process, 127.0.0.1) answers every chat
completion at once with a schema-valid object. Measured in each of ``--repeat`` rounds:

* ``fit stage``: ``fit_inputs`` on a fresh store, timed on its own (images/s, CPU-ms and kB stored per image; the
  table shows it as requests/s, two requests per fitted image, for comparison);
* ``lookbench annotator (fitted inputs)``: ``annotate_images`` on the items after the fit stage — everything it does
  per item included: the store reads, the fitted input's header check and base64, schema validation, the SQLite
  cache; requests/s over the wall clock and per CPU-second of the client;
* ``lookbench annotator (fitting itself)``: the same without the fit stage, fitting every image in the client (how
  the annotator ran before the fit stage, and how it runs on crops);
* ``bare openai create``: the peer — ``AsyncOpenAI().chat.completions.create`` (default transport), the same two
  request bodies per item with the same fitted images (fitted before the clock starts), 16 in flight;
* ``bare openai post (aiohttp)``: the same bodies through ``client.post("/chat/completions")`` on the SDK's aiohttp
  transport (what the annotator sends with).

The machine's load average is printed with every round (other jobs share the 2 cores; the client and the server
share them too).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image

from lookbench_pipeline.config import load_config
from lookbench_pipeline.store import LocalStore, original_key, sha256_hex
from lookbench_pipeline.taxonomy import Taxonomy
from lookbench_pipeline.vlm import (ImageItem, _messages, attributes_prompt, fit_inputs, judge_prompt,
                                    judge_schema, prepare_image)
from lookbench_pipeline.vlm.attributes import annotator_from_config

MODEL = "scripted/vlm"
SIZES = [(1000, 1334), (1125, 1500), (1200, 1600), (1365, 2048), (1500, 2000), (1536, 2048)]
ROOT = Path(__file__).resolve().parents[1]


def packshot(rng: np.random.Generator, w: int, h: int) -> Image.Image:
    """A garment-like shape with a woven texture and shading on an off-white background (laid out at 1/4 scale,
    enlarged, then the texture and sensor noise added at full size)."""
    sw, sh = w // 4, h // 4
    yy, xx = np.mgrid[0:sh, 0:sw].astype(np.float32)
    cx, cy = sw * rng.uniform(0.4, 0.6), sh * rng.uniform(0.45, 0.55)
    rx, ry = sw * rng.uniform(0.25, 0.4), sh * rng.uniform(0.3, 0.42)
    inside = ((xx - cx) / rx) ** 2 + ((yy - cy) / ry) ** 4 < 1
    small = np.full((sh, sw, 3), rng.integers(238, 252), np.float32)
    colour = rng.integers(20, 230, 3).astype(np.float32)
    small[inside] = colour - 30 * ((yy - cy) / ry)[inside][:, None]
    base = np.asarray(Image.fromarray(np.clip(small, 0, 255).astype(np.uint8)).resize((w, h), Image.BICUBIC))
    mask = np.asarray(Image.fromarray(inside.astype(np.uint8) * 255).resize((w, h), Image.BILINEAR)) > 127
    period = rng.uniform(3, 9)
    ty, tx = np.mgrid[0:64, 0:64].astype(np.float32)
    tile = 12 * np.sin(tx / period) * np.sin(ty / (period * 1.3)) + rng.normal(0, 2.0, (64, 64))
    grain = rng.normal(0, 1.5, (61, 67)).astype(np.float32)  # co-prime tile sizes: no visible repeat
    tex = np.where(mask, np.tile(tile.astype(np.float32), (h // 64 + 1, w // 64 + 1))[:h, :w],
                   np.tile(grain, (h // 61 + 1, w // 67 + 1))[:h, :w])
    return Image.fromarray(np.clip(base + tex[..., None], 0, 255).astype(np.uint8))


def _with_comment(jpeg: bytes, text: bytes) -> bytes:
    """The same JPEG with a COM segment after SOI: other bytes (another sha256), the same pixels."""
    return jpeg[:2] + b"\xff\xfe" + struct.pack(">H", len(text) + 2) + text + jpeg[2:]


def make_images(n: int, real_dir: Path, seed: int = 0, cache: Path | None = None) -> list[tuple[str, bytes]]:
    """``n`` (kind, bytes), seeded; kept in ``cache`` (a folder) between runs when given."""
    if cache is not None:
        f = cache / f"images-{n}-{seed}.npz"
        if f.exists():
            z = np.load(f)
            return [(str(k), z[f"d{i}"].tobytes()) for i, k in enumerate(z["kinds"])]
        out = make_images(n, real_dir, seed)
        cache.mkdir(parents=True, exist_ok=True)
        np.savez(f, kinds=np.array([k for k, _ in out]),
                 **{f"d{i}": np.frombuffer(d, np.uint8) for i, (_, d) in enumerate(out)})
        return out
    rng = np.random.default_rng(seed)
    real = sorted(p for sub in ("studio", "street") for p in (real_dir / sub).glob("*")
                  if p.suffix.lower() in (".jpg", ".jpeg"))
    out: list[tuple[str, bytes]] = []
    for i in range(n):
        u = rng.random()
        if u < 0.2 and real:
            p = real[i % len(real)]
            out.append(("real", _with_comment(p.read_bytes(), f"lookbench-bench-{seed}-{i}".encode())))
            continue
        w, h = SIZES[rng.integers(len(SIZES))]
        img = packshot(rng, w, h)
        b = io.BytesIO()
        if u < 0.35:
            img.save(b, "PNG")
            out.append(("png", b.getvalue()))
        else:
            img.save(b, "JPEG", quality=int(rng.integers(80, 93)), progressive=bool(rng.random() < 1 / 3))
            out.append(("jpeg", b.getvalue()))
    return out


def load() -> float:
    return os.getloadavg()[0]


def run_ours(url: str, images: list[tuple[str, bytes]], round_: int,
             fit_stage: bool) -> tuple[float, float, int, dict | None]:
    """The annotator on ``images`` from a fresh store, as ``vlm.attributes.label_images`` runs it: with
    ``fit_stage``, ``fit_inputs`` first (timed on its own) and the annotator reading the fitted inputs from the store;
    without, the annotator fitting every image itself (the client before the fit stage). Returns requests/s,
    requests per client CPU-second, requests sent, and the fit stage's counts."""
    with tempfile.TemporaryDirectory() as tmp:
        store = LocalStore(Path(tmp) / "store")
        shas = []
        for _, data in images:
            sha = sha256_hex(data)
            store.put_bytes(original_key(sha), data)
            shas.append(sha)
        cfg = load_config(data_dir=Path(tmp) / "data", annotate={"endpoint": url, "model": MODEL})
        fit = fit_inputs(store, shas, cfg.annotate.max_image_tokens).as_dict() if fit_stage else None
        ann = annotator_from_config(cfg, Taxonomy.load(), fitted_store=store if fit_stage else None)
        items = [ImageItem(f"item-{round_}-{i}", (lambda s=sha: store.get_bytes(original_key(s))), sha256=sha,
                           category="dress") for i, sha in enumerate(shas)]
        t, c = time.perf_counter(), time.process_time()
        labels = ann.annotate_images(items)
        dt, dc = time.perf_counter() - t, time.process_time() - c
        ann.cache.close()
        assert ann.fitted_reads == (len(set(shas)) if fit_stage else 0), ann.fitted_reads
    sent = sum(lb.requests for lb in labels)
    bad = [lb for lb in labels if lb.status != "labelled"]
    assert not bad, [(lb.status, lb.reason) for lb in bad[:5]]
    return sent / dt, sent / dc, sent, fit


def bodies(tax: Taxonomy, fitted: list[str]) -> list[dict]:
    """The two request bodies per item the annotator sends (attributes, then the judge of every attribute)."""
    schema = tax.json_schema("dress")
    labels = {a: tax.allowed("dress", a)[0] for a in tax.categories["dress"].attributes}
    jschema = judge_schema(tax, "dress", labels)
    base = {"temperature": 0.0, "top_p": 1.0, "max_tokens": 512, "seed": 0, "model": MODEL}
    out = []
    for url in fitted:
        out.append({**base, "messages": _messages(url, attributes_prompt(tax, "dress", False)),
                    "response_format": {"type": "json_schema", "json_schema": {
                        "name": "lookbench_dress", "schema": schema, "strict": True}}})
        out.append({**base, "messages": _messages(url, judge_prompt(tax, "dress", labels, False)),
                    "response_format": {"type": "json_schema", "json_schema": {
                        "name": "lookbench_dress_judge", "schema": jschema, "strict": True}}})
    return out


async def _bare(url: str, reqs: list[dict], conc: int, post: bool) -> tuple[float, float, int]:
    import openai
    from openai.types.chat import ChatCompletion

    http = openai.DefaultAioHttpClient() if post else openai.DefaultAsyncHttpxClient()
    client = openai.AsyncOpenAI(base_url=url, api_key="EMPTY", max_retries=0, http_client=http)
    sem = asyncio.Semaphore(conc)

    async def one(body: dict) -> None:
        async with sem:
            if post:
                r = await client.post("/chat/completions", cast_to=ChatCompletion, body=body)
            else:
                r = await client.chat.completions.create(**body)
            json.loads(r.choices[0].message.content)

    await asyncio.gather(*[one(b) for b in reqs[:conc]])  # connections up
    t, c = time.perf_counter(), time.process_time()
    await asyncio.gather(*[one(b) for b in reqs])
    dt, dc = time.perf_counter() - t, time.process_time() - c
    await client.close()
    return len(reqs) / dt, len(reqs) / dc, len(reqs)


def fitted_urls(images: list[tuple[str, bytes]]) -> list[str]:
    """The fitted images the peers send (``prepare_image``, the bytes the fit stage stores), made off the clock."""
    with ThreadPoolExecutor(2) as ex:
        return list(ex.map(lambda im: prepare_image(im[1]).data_url, images))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=400)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--real", type=Path, default=ROOT.parent / "shared" / "realdata" / "images")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "lookbench-vlm-bench",
                    help="where the generated images are kept between runs")
    a = ap.parse_args()
    tax = Taxonomy.load()
    conc = load_config().annotate.concurrency
    t = time.perf_counter()
    images = make_images(a.n, a.real, cache=a.cache)
    kinds = {k: sum(1 for x, _ in images if x == k) for k in ("jpeg", "png", "real")}
    mp = [Image.open(io.BytesIO(d)).size for _, d in images]
    print(f"{a.n} images ({kinds}; median {statistics.median(w * h for w, h in mp) / 1e6:.2f} MP, "
          f"{sum(len(d) for _, d in images) / a.n / 1e3:.0f} kB mean), made in {time.perf_counter() - t:.0f} s; "
          f"{os.cpu_count()} CPUs; {conc} requests in flight (annotate.concurrency); load average {load():.1f}")
    proc = subprocess.Popen([sys.executable, "-m", "lookbench_pipeline.demo.scripted_openai",
                             "--model", MODEL, "--no-inspect-images"], stdout=subprocess.PIPE, text=True)
    rows: dict[str, list[tuple[float, float, int, float]]] = {}
    fits: list[dict] = []
    try:
        url = proc.stdout.readline().strip()
        run_ours(url, images[:20], -1, True)  # warm-up: imports, the server's first connections
        fitted = fitted_urls(images)
        reqs = bodies(tax, fitted)
        stage = "fit stage (fit_inputs: images/s x 2 requests)"
        for r in range(a.repeat):
            ours_rps, ours_cpu, ours_n, fit = run_ours(url, images, r, True)
            rows.setdefault(stage, []).append((2 * fit["images"] / fit["seconds"],
                                               2 * fit["images"] / fit["cpu_s"], 0, load()))
            fits.append(fit)
            rows.setdefault("lookbench annotator (fitted inputs)", []).append((ours_rps, ours_cpu, ours_n, load()))
            rows.setdefault("lookbench annotator (fitting itself)", []).append(
                (*run_ours(url, images, r, False)[:3], load()))
            rows.setdefault("bare openai create", []).append((*asyncio.run(_bare(url, reqs, conc, False)), load()))
            rows.setdefault("bare openai post (aiohttp)", []).append((*asyncio.run(_bare(url, reqs, conc, True)),
                                                                      load()))
            ours, itself, create, post = (rows[k][-1][0] for k in (
                "lookbench annotator (fitted inputs)", "lookbench annotator (fitting itself)", "bare openai create",
                "bare openai post (aiohttp)"))
            print(f"round {r + 1}: ours {ours:.1f} req/s, bare create {create:.1f} ({ours / create:.2f}x), bare post "
                  f"{post:.1f} ({ours / post:.2f}x); ours fitting itself {itself:.1f} ({itself / create:.2f}x "
                  f"create); fit stage {fit['images'] / fit['seconds']:.1f} images/s, "
                  f"{1000 * fit['cpu_s'] / fit['images']:.1f} CPU-ms and {fit['bytes_stored'] / fit['images'] / 1e3:.0f}"
                  f" kB stored per image; load average {load():.1f}", flush=True)
    finally:
        proc.terminate()
        proc.wait(10)
    print(f"\n{'client':36s} {'median req/s':>13s} {'best req/s':>11s} {'median req/CPU-s':>17s} {'requests':>9s}")
    for name, v in rows.items():
        wall, cpu = [x[0] for x in v], [x[1] for x in v]
        print(f"{name:36s} {statistics.median(wall):13.1f} {max(wall):11.1f} {statistics.median(cpu):17.1f} "
              f"{v[-1][2]:9d}")
    med = {k: statistics.median(x[0] for x in v) for k, v in rows.items()}
    ours = med["lookbench annotator (fitted inputs)"]
    print(f"target >= 150 requests/s: {'met' if ours >= 150 else 'NOT met'} (median {ours:.1f}); "
          f">= 0.8x bare create: {ours / med['bare openai create']:.2f}x; "
          f">= 0.8x bare post: {ours / med['bare openai post (aiohttp)']:.2f}x; fitting itself: "
          f"{med['lookbench annotator (fitting itself)'] / med['bare openai create']:.2f}x create; "
          f"load average at the end {load():.1f}")
    f = fits[-1]
    print(f"fit stage, last round: {f['images']} images, {f['fitted']} fitted, {f['reused']} reused, refused "
          f"{f['refused']}; {f['bytes_stored'] / 1e6:.1f} MB stored ({f['bytes_stored'] / f['images'] / 1e3:.0f} kB "
          f"per image, originals {sum(len(d) for _, d in images) / len(images) / 1e3:.0f} kB)")

if __name__ == "__main__":
    main()
