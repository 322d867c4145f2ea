"""Throughput of the VLM annotation client against a zero-latency scripted OpenAI-compatible server.

    .venv/bin/python benchmarks/vlm_client.py [--n 2000] [--concurrency 64] [--repeat 3]

The server (``lookbench_pipeline.testing.scripted_openai``) runs in its own process on 127.0.0.1 and answers every
chat completion at once with a schema-valid object, so the number measures the client: can it keep a GPU server
busy? (Qwen2.5-VL-72B on 4 A100s serves about 4 requests per second; the target is at least 200 requests/s with
64 in flight.)

Measured, in the same run, each ``--repeat`` times (the best and the median are printed):

* ``lookbench VlmAnnotator``: ``annotate_images`` on ``n`` distinct generated 160 x 200 JPEG packshots, category
  given (one attributes request per image), ``concurrency`` requests in flight, everything it does per item
  included — sha256, the image check (a 160 x 200 JPEG fits as it is: header, full decode to prove it is whole,
  base64 of the source bytes; ``prepare_image``'s passthrough), schema validation of the answer, a write to the
  on-disk SQLite cache;
* ``lookbench VlmAnnotator (resize)``: the same with ``max_image_tokens=16``, which the packshots exceed, so that
  every image is decoded, resized to multiples of 28 px and re-encoded as JPEG (the path of a photo of several
  megapixels, or of a crop);
* ``bare openai (create)``: the peer — a loop of ``AsyncOpenAI().chat.completions.create`` with the same messages
  (one pre-encoded image) and the same ``response_format`` schema, ``concurrency`` in flight, default transport;
* ``bare openai (create, aiohttp)``: the same loop with the SDK's aiohttp transport (``DefaultAioHttpClient``);
* ``bare openai (post, aiohttp)``: the same body through ``client.post("/chat/completions", cast_to=ChatCompletion)``
  (what VlmAnnotator sends with): the cost of ``create``'s parameter transformation, without any of our work.

Wall-clock requests/s depend on the CPU the client gets (on a shared machine, little): requests per CPU-second of
the client process are printed too.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from lookbench_pipeline.taxonomy import Taxonomy
from lookbench_pipeline.vlm import ImageItem, VlmAnnotator, _messages, attributes_prompt, prepare_image

MODEL = "scripted/vlm"


def images(n: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        a = np.full((200, 160, 3), rng.integers(0, 256, 3), np.uint8)
        a[40:160, 30:130] = rng.integers(0, 256, 3)
        a = np.clip(a.astype(np.int16) + rng.integers(-8, 9, a.shape), 0, 255).astype(np.uint8)
        b = io.BytesIO()
        Image.fromarray(a).save(b, "JPEG", quality=90)
        out.append(b.getvalue())
    return out


def run_ours(url: str, tax: Taxonomy, n: int, conc: int, seed: int, max_image_tokens: int = 1280
             ) -> tuple[float, float]:
    data = images(n, seed)
    with tempfile.TemporaryDirectory() as tmp:
        ann = VlmAnnotator(url, MODEL, tax, cache=Path(tmp) / "cache.sqlite", concurrency=conc, max_retries=0,
                           max_image_tokens=max_image_tokens)
        items = [ImageItem(f"item-{seed}-{i}", d, category="dress") for i, d in enumerate(data)]
        t, c = time.perf_counter(), time.process_time()
        labels = ann.annotate_images(items)
        dt, dc = time.perf_counter() - t, time.process_time() - c
        ann.cache.close()
    sent = sum(lb.requests for lb in labels)
    assert sent == n and all(lb.status == "labelled" for lb in labels), (sent, n)
    return n / dt, n / dc


async def _bare(url: str, body: dict, n: int, conc: int, aiohttp: bool, raw: bool = False) -> tuple[float, float]:
    import openai
    from openai.types.chat import ChatCompletion

    http = openai.DefaultAioHttpClient() if aiohttp else openai.DefaultAsyncHttpxClient()
    client = openai.AsyncOpenAI(base_url=url, api_key="EMPTY", max_retries=0, http_client=http)
    sem = asyncio.Semaphore(conc)

    async def one() -> None:
        async with sem:
            if raw:
                r = await client.post("/chat/completions", cast_to=ChatCompletion, body=body)
            else:
                r = await client.chat.completions.create(**body)
            json.loads(r.choices[0].message.content)

    await asyncio.gather(*[one() for _ in range(min(n, conc))])  # connections up
    t, c = time.perf_counter(), time.process_time()
    await asyncio.gather(*[one() for _ in range(n)])
    dt, dc = time.perf_counter() - t, time.process_time() - c
    await client.close()
    return n / dt, n / dc


def run_bare(url: str, tax: Taxonomy, n: int, conc: int, aiohttp: bool, raw: bool = False) -> tuple[float, float]:
    img = prepare_image(images(1, 99)[0])
    schema = tax.json_schema("dress")
    body = {"model": MODEL, "messages": _messages(img.data_url, attributes_prompt(tax, "dress", False)),
            "response_format": {"type": "json_schema", "json_schema": {"name": "lookbench_dress", "schema": schema,
                                                                       "strict": True}},
            "temperature": 0.0, "top_p": 1.0, "max_tokens": 512, "seed": 0}
    return asyncio.run(_bare(url, body, n, conc, aiohttp, raw))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    tax = Taxonomy.load()
    proc = subprocess.Popen([sys.executable, "-m", "lookbench_pipeline.testing.scripted_openai",
                             "--model", MODEL, "--no-inspect-images"], stdout=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()
        run_ours(url, tax, 64, a.concurrency, seed=10_000)  # warm-up: imports, connections
        results: dict[str, list[tuple[float, float]]] = {
            "lookbench VlmAnnotator": [], "lookbench VlmAnnotator (resize)": [], "bare openai (create)": [], "bare openai (create, aiohttp)": [],
            "bare openai (post, aiohttp)": []}
        for r in range(a.repeat):
            results["lookbench VlmAnnotator"].append(run_ours(url, tax, a.n, a.concurrency, seed=r))
            results["lookbench VlmAnnotator (resize)"].append(run_ours(url, tax, a.n, a.concurrency, seed=100 + r,
                                                                       max_image_tokens=16))
            results["bare openai (create)"].append(run_bare(url, tax, a.n, a.concurrency, aiohttp=False))
            results["bare openai (create, aiohttp)"].append(run_bare(url, tax, a.n, a.concurrency, aiohttp=True))
            results["bare openai (post, aiohttp)"].append(run_bare(url, tax, a.n, a.concurrency, aiohttp=True,
                                                                   raw=True))
    finally:
        proc.terminate()
        proc.wait(10)
    print(f"n={a.n} requests per run, {a.concurrency} in flight, {a.repeat} runs, server: zero latency, own process;"
          f" {os.cpu_count()} CPUs, load average at the end {os.getloadavg()[0]:.1f}")
    print("req/s: requests per wall-clock second; req/CPU-s: per CPU-second of the client process (all threads), "
          "what the client would sustain with a core to itself")
    print(f"{'client':32s} {'best req/s':>11s} {'median req/s':>13s} {'median req/CPU-s':>17s}")
    for name, v in results.items():
        wall, cpu = [x[0] for x in v], [x[1] for x in v]
        print(f"{name:32s} {max(wall):11.1f} {statistics.median(wall):13.1f} {statistics.median(cpu):17.1f}")
    ours = statistics.median(x[0] for x in results["lookbench VlmAnnotator"])
    print(f"target >= 200 requests/s (wall): {'met' if ours >= 200 else 'NOT met'} (median {ours:.1f})")


if __name__ == "__main__":
    main()
