"""The AI-generated subsets: requests, the endpoint and job-file backends against the scripted image endpoint on
127.0.0.1, the same intake, the reference check, and the release's aigen_studio / aigen_streetlook queries."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

from lookbench_pipeline import aigen, schemas
from lookbench_pipeline.aigen.reference_check import (PixelColourAnnotator, compare_attributes, delta_e_cmc,
                                                      locate, prepare_reference, srgb_to_lab)
from lookbench_pipeline.config import AigenEndpointConfig, ConfigError, load_config
from lookbench_pipeline.demo import aigen_server
from lookbench_pipeline.demo.shop import COLORS, alt_shot, packshot, plan
from lookbench_pipeline.embed import HsvHogEmbedder
from lookbench_pipeline.pipeline import (stage_aigen_check, stage_aigen_generate, stage_aigen_intake,
                                         stage_aigen_requests, stage_attributes, stage_dedup, stage_images,
                                         stage_release, store_of)
from lookbench_pipeline.releases import SUBSET_TASK, check_candidate
from lookbench_pipeline.store import original_key
from lookbench_pipeline.taxonomy import Taxonomy
from lookbench_pipeline.windows import Window

NOW = datetime.now(timezone.utc)
WINDOW = Window(NOW - timedelta(days=30), NOW + timedelta(days=30))
SIZE = "384x384"


def _config(tmp: Path, **aigen_overrides):
    a = {"items_per_subset": 5, "endpoint": {"size": SIZE, "backoff_s": 0.0, "concurrency": 2}}
    for k, v in aigen_overrides.items():
        if isinstance(v, dict) and isinstance(a.get(k), dict):
            a[k] = {**a[k], **v}
        else:
            a[k] = v
    return load_config(None, data_dir=str(tmp / "data"), store={"url": str(tmp / "store")}, aigen=a)


class World:
    """A small catalogue taken in through the real stages (no crawl): demo-shop garments with a packshot and an
    alternative shot each, labelled by the catalogue-text annotator."""

    def __init__(self, tmp: Path, n: int = 10, seed: int = 11):
        self.tmp = tmp
        self.cfg = _config(tmp)
        self.store = store_of(self.cfg)
        files = tmp / "files"
        files.mkdir(parents=True, exist_ok=True)
        prods, _ = plan(n, 0, seed)
        rows, downloads = [], []
        self.truth = {}
        for p in prods:
            urls = []
            for i, im in enumerate((packshot(p), alt_shot(p))):
                f = files / f"{p.slug}-{i}.jpg"
                im.save(f, quality=90)
                urls.append(f"https://demo.invalid/{p.slug}-{i}.jpg")
                downloads.append({"site": "demo", "url": urls[-1], "stored_path": str(f), "reason": None})
            pid = f"demo-{p.sku}"
            self.truth[pid] = p
            rows.append({"product_id": pid, "site": "demo", "url": f"https://demo.invalid/{p.slug}", "title": p.title,
                         "description": f"{p.title}. Made of {p.material}.", "sku": p.sku, "color": p.color,
                         "material": p.material, "category_text": p.category, "image_urls": urls,
                         "extracted_from": "json-ld", "crawled_at": NOW - timedelta(days=1),
                         "first_seen_at": NOW - timedelta(days=1), "last_seen_at": NOW - timedelta(days=1)})
        self.products = schemas.from_rows(rows, schemas.PRODUCTS)
        self.looks = schemas.empty(schemas.LOOKS)
        self.drops = schemas.empty(schemas.DROP_ITEMS)
        self.downloads = schemas.from_rows(downloads, schemas.IMAGE_DOWNLOADS)
        self.refs, self.images, _ = stage_images(self.cfg, self.products, self.looks, self.drops, self.downloads,
                                                 self.store)
        self.clusters, _ = stage_dedup(self.cfg, self.refs, self.images)
        self.annotations, _ = stage_attributes(self.cfg, self.products, self.drops)

    def requests(self, cfg=None):
        return stage_aigen_requests(cfg or self.cfg, self.products, self.drops, self.refs, self.annotations, WINDOW)


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    return World(tmp_path_factory.mktemp("aigen"))


def _endpoint(srv, **kw):
    return {"base_url": srv.base_url, "model": aigen_server.MODEL, "model_version": aigen_server.VERSION,
            "size": SIZE, "backoff_s": 0.0, **kw}


# ----------------------------------------------------------------------------------------------- requests


def test_requests_are_built_from_labels_and_deterministic(world):
    reqs, counts = world.requests()
    assert counts["items"] == counts["eligible"] + counts["not_labelled"] + counts["no_accepted_image"] \
        + counts["outside_window"] == 10
    assert reqs.num_rows == 10 and counts["requests.aigen_studio"] == counts["requests.aigen_streetlook"] == 5
    ann = {r["item_id"]: r for r in world.annotations.to_pylist()}
    for r in reqs.to_pylist():
        p = world.truth[r["reference_item_id"]]
        assert r["kind"] == aigen.KIND_OF_SUBSET[r["subset"]]
        assert r["category"] == ann[r["reference_item_id"]]["category"] == p.category
        assert p.color in r["prompt"] and p.category in r["prompt"]
        assert r["prompt"].startswith("Street-style" if r["kind"] == "street" else "Lifestyle studio")
        # the reference is the product's gallery picture: its first accepted image (the packshot)
        first = [x for x in world.refs.to_pylist() if x["owner_id"] == r["reference_item_id"] and x["position"] == 0]
        assert r["reference_image_sha256"] == first[0]["image_sha256"]
        assert 0 <= r["seed"] < 2**31 and r["size"] == SIZE
    # categories are spread: five picks from at least four categories per subset
    for subset in ("aigen_studio", "aigen_streetlook"):
        assert len({r["category"] for r in reqs.to_pylist() if r["subset"] == subset}) >= 4
    again, _ = world.requests()
    assert again.equals(reqs), "same inputs, same requests (ids, seeds, prompts)"
    other, _ = world.requests(world.cfg.model_copy(update={"aigen": world.cfg.aigen.model_copy(update={"seed": 5})}))
    assert set(other["request_id"].to_pylist()) != set(reqs["request_id"].to_pylist())


def test_requests_respect_categories_window_and_disabling(world):
    cats = sorted({p.category for p in world.truth.values()})[:2]
    cfg = world.cfg.model_copy(update={"aigen": world.cfg.aigen.model_copy(update={"categories": cats,
                                                                                   "subsets": ["aigen_studio"]})})
    reqs, counts = world.requests(cfg)
    assert set(reqs["category"].to_pylist()) <= set(cats) and set(reqs["subset"].to_pylist()) == {"aigen_studio"}
    assert counts["category_not_selected"] == sum(p.category not in cats for p in world.truth.values())
    past = Window(NOW - timedelta(days=400), NOW - timedelta(days=200))
    reqs, counts = stage_aigen_requests(world.cfg, world.products, world.drops, world.refs, world.annotations, past)
    assert reqs.num_rows == 0 and counts["outside_window"] == 10
    off = world.cfg.model_copy(update={"aigen": world.cfg.aigen.model_copy(update={"enabled": False})})
    reqs, counts = world.requests(off)
    assert reqs.num_rows == 0 and counts == {"enabled": False, "requests": 0}


def test_describe_item_reads_like_a_product():
    tax = Taxonomy.load()
    s = aigen.describe_item("top", {"color": "red", "pattern": "striped", "material": "cotton",
                                    "sleeve_length": "short", "neckline": "not visible"}, tax)
    assert s == "a red striped cotton top (sleeve length: short)"
    assert aigen.describe_item("bag", {"color": "black", "pattern": "solid"}, tax) == "a solid black bag"
    with pytest.raises(ValueError):
        aigen.build_prompt("runway", "top", {}, tax)


# ----------------------------------------------------------------------------------------------- endpoint backend


def _req(rid: str, prompt: str, seed: int = 1, sha: str = "ref") -> dict:
    return {"request_id": rid, "prompt": prompt, "seed": seed, "size": "64x64", "reference_image_sha256": sha}


def test_endpoint_backend_retries_backs_off_and_records_failures(tmp_path):
    script = {"good": ["good"], "flaky": ["http_500", "http_429", "good"], "garbled": ["malformed_json", "good"],
              "down": ["http_500"], "empty": ["no_b64"], "refused": []}

    def plan(info):
        steps = script[info.prompt]
        return steps[min(info.attempt, len(steps) - 1)]

    ref = Image.new("RGB", (64, 80), "white")
    ref.paste(Image.new("RGB", (30, 40), COLORS["red"]), (17, 20))
    buf = __import__("io").BytesIO()
    ref.save(buf, format="PNG")
    waits: list[float] = []
    with aigen_server.scripted_endpoint(plan) as srv:
        ecfg = AigenEndpointConfig(**_endpoint(srv, backoff_s=0.5, backoff_max_s=1.5, max_attempts=4))
        be = aigen.EndpointBackend(ecfg, srv.base_url, aigen_server.MODEL, "1", tmp_path / "out",
                                   sleep=waits.append)
        outs = {k: be.one(_req(k, k), buf.getvalue()) for k in ("good", "flaky", "garbled", "down", "empty")}
        bad_size = be.one({**_req("refused", "refused"), "size": "huge"}, buf.getvalue())
        served = list(srv.served)
    assert outs["good"].status == "generated" and outs["good"].attempts == 1
    assert Image.open(outs["good"].path).size == (64, 64) and outs["good"].model == aigen_server.MODEL
    assert outs["flaky"].status == "generated" and outs["flaky"].attempts == 3
    assert outs["garbled"].status == "generated" and outs["garbled"].attempts == 2
    assert (outs["down"].status, outs["down"].reason, outs["down"].attempts) == ("failed", "http_500", 4)
    assert (outs["empty"].status, outs["empty"].reason) == ("failed", "no_image_in_response")
    assert (bad_size.status, bad_size.reason, bad_size.attempts) == ("failed", "http_400", 1), "a 4xx is not retried"
    # exponential backoff from 0.5 s, capped at 1.5 s: flaky 0.5 1.0; garbled 0.5; down 0.5 1.0 1.5; empty 0.5 1.0 1.5
    assert waits == [0.5, 1.0, 0.5, 0.5, 1.0, 1.5, 0.5, 1.0, 1.5]
    edits = [s for s in served if s.route == "/v1/images/edits"]
    assert len(edits) == len(served) and all(s.has_reference for s in edits)
    assert all(s.fields["seed"] == "1" and s.fields["model"] == aigen_server.MODEL for s in edits)
    assert all(s.fields["response_format"] == "b64_json" for s in edits)


def test_endpoint_generations_route_and_unreachable_server(tmp_path):
    with aigen_server.scripted_endpoint() as srv:
        ecfg = AigenEndpointConfig(**_endpoint(srv, route="generations", send_seed=False, response_format=None,
                                               extra_body={"num_inference_steps": 4}))
        be = aigen.EndpointBackend(ecfg, srv.base_url, "m", "v", tmp_path)
        o = be.one(_req("g", "Lifestyle studio photograph of a blue dress"), None)
        [s] = srv.served
    assert o.status == "generated" and s.route == "/v1/images/generations" and not s.has_reference
    assert "seed" not in s.fields and "response_format" not in s.fields and s.fields["num_inference_steps"] == "4"
    closed = AigenEndpointConfig(base_url="http://127.0.0.1:9/v1", model_version="x", max_attempts=2, backoff_s=0,
                                 timeout_s=5)
    o = aigen.EndpointBackend(closed, closed.base_url, "m", "v", tmp_path).one(_req("c", "x"), b"png")
    assert (o.status, o.reason, o.attempts) == ("failed", "connection_error", 2)


# ----------------------------------------------------------------------------------------------- the whole path


@pytest.fixture(scope="module")
def generated(world):
    """Requests sent to a scripted endpoint (configured as a real one) with a behaviour per request."""
    reqs, _ = world.requests()
    rows = reqs.to_pylist()
    behaviours = ["good", "good", "good", "off_product", "recolour", "copy_reference", "not_an_image", "http_500",
                  "good", "good"]
    by_seed = {r["seed"]: b for r, b in zip(rows, behaviours)}
    with aigen_server.scripted_endpoint(lambda info: by_seed[info.seed]) as srv:
        cfg = _config(world.tmp, endpoint=_endpoint(srv, max_attempts=2))
        gen, gcounts = stage_aigen_generate(cfg, reqs, world.store, WINDOW)
        n_served = len(srv.served)
    refs, imgs, icounts = stage_aigen_intake(cfg, gen, world.store)
    checks, ccounts = stage_aigen_check(cfg, gen, refs, imgs, world.images, world.annotations,
                                        schemas.empty(schemas.CONTAMINATION_INDEX), world.store)
    expect = {r["request_id"]: b for r, b in zip(rows, behaviours)}
    return {"cfg": cfg, "reqs": reqs, "gen": gen, "gcounts": gcounts, "refs": refs, "imgs": imgs,
            "icounts": icounts, "checks": checks, "ccounts": ccounts, "expect": expect, "served": n_served}


def test_generated_images_keep_provenance_and_counts_reconcile(generated):
    gen, c = generated["gen"], generated["gcounts"]
    assert c["requests"] == c["generated"] + c["failed"] + c["pending"] + c["skipped"] == 10
    assert (c["generated"], c["failed"]) == (9, 1) and c["failed.http_500"] == 1
    for g in gen.to_pylist():
        if g["status"] == "generated":
            assert Path(g["path"]).is_file()
            assert (g["generator_model"], g["generator_version"]) == (aigen_server.MODEL, aigen_server.VERSION)
            assert g["prompt"] and g["seed"] is not None and g["first_seen_at"] in WINDOW
            rec = json.loads((generated["cfg"].data_dir / "aigen/results" / f"{g['request_id']}.json").read_text())
            assert rec["generator_model"] == aigen_server.MODEL and rec["path"] == g["path"]
    ic = generated["icounts"]
    assert ic["in"] == 9 == ic["accepted"] + ic["rejected"] and ic["rejected.not_an_image"] == 1


def test_reference_check_accepts_the_product_and_rejects_everything_else(generated):
    checks, cc = generated["checks"], generated["ccounts"]
    assert cc["in"] == cc["accepted"] + cc["rejected"] == 10
    by_id = {r["request_id"]: r for r in checks.to_pylist()}
    reasons = {}
    for rid, b in generated["expect"].items():
        r = by_id[rid]
        reasons.setdefault(b, []).append(r["reason"])
        if b in ("off_product", "recolour"):
            assert r["status"] == "rejected"
            assert "attribute_disagreement:color" in r["reason"] or "similarity_below_threshold" in r["reason"]
            assert r["similarity"] is not None and r["annotator"] == "pixel-colour/1"
    assert reasons["copy_reference"] == ["duplicate_of_real_image"]
    assert reasons["not_an_image"] == ["intake:not_an_image"]
    assert reasons["http_500"] == ["generation_failed:http_500"]
    goods = [by_id[rid] for rid, b in generated["expect"].items() if b == "good"]
    assert sum(r["status"] == "accepted" for r in goods) >= 4, [(r["reason"], r["similarity"]) for r in goods]
    for r in goods:
        if r["status"] == "accepted":
            assert r["similarity"] >= 0.85 and r["attributes_compared"] >= 1
            assert r["attributes_agreed"] == r["attributes_compared"]


def test_release_gains_aigen_subsets(world, generated):
    rel = stage_release(generated["cfg"], "v20990101", WINDOW, {
        "products": world.products, "looks": world.looks, "drop_items": world.drops, "image_refs": world.refs,
        "images": world.images, "clusters": world.clusters, "annotations": world.annotations,
        "contamination": schemas.empty(schemas.CONTAMINATION), "generated_checks": generated["checks"]},
        world.store)
    c = rel.counts
    assert c["candidates"] == c["query_rows"] + c["gallery_rows_distinct"] + c["rejected"]
    assert c["rejected_by_reason"]["duplicate_of_real_image"] == 1
    accepted = {r["request_id"]: r for r in generated["checks"].to_pylist() if r["status"] == "accepted"}
    n = 0
    for subset in ("aigen_studio", "aigen_streetlook"):
        q = rel.files[(subset, "query")].to_pylist()
        g = rel.files[(subset, "gallery")]
        n += len(q)
        gallery_by_item = {}
        for row in g.to_pylist():
            gallery_by_item.setdefault(row["item_ID"], []).append(row["image_sha256"])
        for row in q:
            assert (row["task"], row["difficulty"]) == SUBSET_TASK[subset]
            gen = row["generation"]
            src = accepted[gen["request_id"]]
            assert row["item_ID"] == src["reference_item_id"] and row["image_sha256"] == src["image_sha256"]
            assert gen["reference_image_sha256"] in gallery_by_item[row["item_ID"]], "the positive is the reference"
            assert gen["generator_model"] == aigen_server.MODEL and gen["prompt"] and gen["seed"] is not None
            assert (row["look_id"] or "").startswith("aigen-") == (subset == "aigen_streetlook")
            Image.open(__import__("io").BytesIO(row["image"]["bytes"])).verify()
    assert n == len(accepted)
    assert all(ok for ok, _ in check_candidate(rel).values())
    # published, the provenance column reads back through Croissant (mlcroissant) and Hugging Face datasets
    import os

    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    import datasets
    import mlcroissant as mlc

    from lookbench_pipeline.releases import pull
    from lookbench_pipeline.releases.publish import publish
    from lookbench_pipeline.store import LocalStore

    store = LocalStore(world.tmp / "published")
    publish(rel, store, {"code_version": "test"})
    folder = world.tmp / "pulled"
    pull(store, "v20990101", folder, progress=False)
    folder = folder / "v20990101"
    ds = mlc.Dataset(jsonld=str(folder / "croissant.json"))
    assert not ds.metadata.ctx.issues.errors, ds.metadata.ctx.issues.report()
    ours = rel.files[("aigen_studio", "query")].to_pylist()
    recs = list(ds.records("aigen_studio/query"))
    rs = "aigen_studio/query/generation"
    assert [(r[rs][f"{rs}/request_id"].decode(), r[rs][f"{rs}/seed"]) for r in recs] == \
        [(q["generation"]["request_id"], q["generation"]["seed"]) for q in ours]
    hf = datasets.load_dataset("parquet", data_files={"query": str(folder / "aigen_streetlook/query.parquet")},
                               cache_dir=str(world.tmp / "hf"))["query"]
    assert [r["generation"]["generator_model"] for r in hf] == [aigen_server.MODEL] * hf.num_rows
    assert (SUBSET_TASK["aigen_studio"], SUBSET_TASK["aigen_streetlook"]) == (("single-item", "medium"),
                                                                              ("multi-item", "hard"))


def test_with_an_image_model_configured_generated_images_are_labelled_by_it(world, generated):
    """annotate.endpoint set: the same image model that labels the real items labels each generated image's
    located region, category included, and a category that is not the reference's is a rejection."""
    from lookbench_pipeline.demo.scripted_openai import ScriptedOpenAI, default_answer

    def answer(schema, body):
        out = default_answer(schema, body)
        if "category" in schema.get("properties", {}):
            out["category"] = "bag"  # this model sees a bag in every picture
        return out

    with ScriptedOpenAI(answer=answer) as srv:
        cfg = _config(world.tmp).model_copy(update={"annotate": load_config(
            None, annotate={"endpoint": srv.url, "model": "scripted/vlm", "judge": {"enabled": False},
                            "cache": str(world.tmp / "vlm.sqlite")}).annotate})
        table, counts = stage_aigen_check(cfg, generated["gen"], generated["refs"], generated["imgs"], world.images,
                                          world.annotations, schemas.empty(schemas.CONTAMINATION_INDEX), world.store)
        asked = sum(1 for e in srv.log if "category" in (e.get("schema") or ""))
    checked = [r for r in table.to_pylist() if r["similarity"] is not None]
    assert checked and asked == len(checked), "one category question per located picture"
    assert counts["in"] == counts["accepted"] + counts["rejected"]
    ref_cat = {r["item_id"]: r["category"] for r in world.annotations.to_pylist()}
    for r in checked:
        assert r["annotator"].startswith("vlm") or "scripted/vlm" in r["annotator"]
        assert ("category_disagreement" in r["reason"]) == (ref_cat[r["reference_item_id"]] != "bag")


def test_a_rerun_sends_nothing_twice_and_keeps_first_seen_at(world, generated):
    reqs, gen1 = generated["reqs"], generated["gen"]
    with aigen_server.scripted_endpoint(lambda info: "http_500") as srv:
        cfg = _config(world.tmp, endpoint=_endpoint(srv, max_attempts=1))
        gen2, counts = stage_aigen_generate(cfg, reqs, world.store, WINDOW)
        served = len(srv.served)
    assert served == 1 and counts["from_earlier_runs"] == 9, "only the failed request is sent again"
    keep = lambda t: {r["request_id"]: (r["path"], r["first_seen_at"]) for r in t.to_pylist()  # noqa: E731
                      if r["status"] == "generated"}
    assert keep(gen2) == keep(gen1)
    # a closed window sends nothing: its images could never be first seen inside it
    closed = Window(NOW - timedelta(days=400), NOW - timedelta(days=200))
    with aigen_server.scripted_endpoint() as srv:
        cfg = _config(world.tmp, endpoint=_endpoint(srv))
        gen3, counts = stage_aigen_generate(cfg, reqs, world.store, closed)
        assert not srv.served
    assert counts["skipped"] == 1 and counts["skipped.window_closed"] == 1 and counts["generated"] == 9


def test_an_empty_data_dir_restores_results_from_the_store(tmp_path, world, generated):
    """The generation record lives in the store too: a run with an empty data_dir (a backfill) sends only the
    request that failed, and gets every other result back with the same bytes and first_seen_at."""
    import hashlib

    with aigen_server.scripted_endpoint(lambda info: "http_500") as srv:
        cfg = _config(tmp_path, endpoint=_endpoint(srv, max_attempts=1))
        gen, counts = stage_aigen_generate(cfg, generated["reqs"], world.store, WINDOW)
        served = len(srv.served)
    assert served == 1 and counts["from_earlier_runs"] == 9
    sha = lambda p: hashlib.sha256(Path(p).read_bytes()).hexdigest()  # noqa: E731
    keep = lambda t: {r["request_id"]: (sha(r["path"]), r["first_seen_at"], r["generator_model"])  # noqa: E731
                      for r in t.to_pylist() if r["status"] == "generated"}
    assert keep(gen) == keep(generated["gen"])
    assert all(str(tmp_path) in r["path"] for r in gen.to_pylist() if r["status"] == "generated")


def test_an_unreadable_reference_is_a_recorded_failure(tmp_path):
    cfg = _config(tmp_path)
    reqs = schemas.from_rows([{**_req("r1", "Lifestyle studio photograph of a red top", sha="0" * 64),
                               "kind": "studio", "subset": "aigen_studio", "reference_item_id": "x"}],
                             schemas.GENERATION_REQUESTS)
    with aigen_server.scripted_endpoint() as srv:
        cfg = _config(tmp_path, endpoint=_endpoint(srv))
        gen, counts = stage_aigen_generate(cfg, reqs, store_of(cfg), WINDOW)
        assert not srv.served
    [row] = gen.to_pylist()
    assert (row["status"], row["reason"]) == ("failed", "reference_unreadable") and counts["failed"] == 1


def test_street_outfits_feed_detection_and_its_boxes_drive_the_check(world, generated):
    """The integration point with garment detection: street outfits as looks for the detection stage, and the
    boxes it matches to the reference item used by the check (and published as the query's box)."""
    looks, refs = aigen.detection_inputs(generated["gen"], generated["refs"])
    assert looks.schema == schemas.LOOKS and refs.schema == schemas.IMAGE_REFS
    street = [g for g in generated["gen"].to_pylist() if g["kind"] == "street" and g["status"] == "generated"
              and g["request_id"] in {r["owner_id"] for r in generated["refs"].to_pylist() if r["status"] == "accepted"}]
    assert looks.num_rows == refs.num_rows == len(street) > 0
    for lk, ref, g in zip(looks.to_pylist(), refs.to_pylist(), street):
        assert lk["look_id"] == ref["owner_id"] == f"aigen-{g['request_id']}" and ref["owner_type"] == "look"
        assert lk["product_ids"] == [g["reference_item_id"]] and ref["status"] == "accepted"
    # what the detection stage writes (schemas.DETECTIONS): the true region for one accepted outfit, with its crop
    # in the store; a wrong box for another (and an unlabelled box, which the check ignores)
    from lookbench_pipeline.images import decode, encode_normalised
    from lookbench_pipeline.store import derived_key, original_key

    checks = {c["request_id"]: c for c in generated["checks"].to_pylist()}
    ok = [g["request_id"] for g in street if checks[g["request_id"]]["status"] == "accepted"]
    right, wrong = ok[0], ok[1]
    box = checks[right]["region"]
    crop = encode_normalised(decode(world.store.get_bytes(original_key(checks[right]["image_sha256"]))).rgb
                             .crop(tuple(round(v) for v in box)))
    crop_sha = __import__("hashlib").sha256(crop).hexdigest()
    world.store.put_bytes(derived_key(crop_sha), crop)
    det = {"owner_type": "look", "status": "matched", "score": 0.9, "model_class": "top"}
    dets = schemas.from_rows([
        {**det, "detection_id": "d1", "owner_id": f"aigen-{right}", "image_sha256": checks[right]["image_sha256"],
         "item_index": 1, "box": box, "item_id": checks[right]["reference_item_id"], "crop_sha256": crop_sha,
         "crop_width": round(box[2]) - round(box[0]), "crop_height": round(box[3]) - round(box[1])},
        {**det, "detection_id": "d2", "owner_id": f"aigen-{wrong}", "image_sha256": checks[wrong]["image_sha256"],
         "item_index": 0, "box": [0.0, 0.0, 40.0, 40.0], "item_id": checks[wrong]["reference_item_id"],
         "crop_sha256": "0" * 64, "crop_width": 40, "crop_height": 40},
        {**det, "detection_id": "d3", "owner_id": f"aigen-{wrong}", "status": "unlabelled", "item_index": 1,
         "box": checks[wrong]["region"]}], schemas.DETECTIONS)
    regions = aigen.regions_from_detections(dets)
    assert [d["detection_id"] for d in regions[right]] == ["d1"] and [d["detection_id"] for d in regions[wrong]] == ["d2"]
    cfg = generated["cfg"]
    table, _ = stage_aigen_check(cfg, generated["gen"], generated["refs"], generated["imgs"], world.images,
                                 world.annotations, schemas.empty(schemas.CONTAMINATION_INDEX), world.store,
                                 detections=dets)
    by_id = {c["request_id"]: c for c in table.to_pylist()}
    assert by_id[right]["region_source"] == "detector" and by_id[right]["status"] == "accepted"
    assert by_id[right]["region"] == pytest.approx(box, abs=1e-3)
    assert (by_id[right]["item_index"], by_id[right]["crop_sha256"]) == (1, crop_sha)
    assert by_id[wrong]["region_source"] == "detector" and by_id[wrong]["status"] == "rejected"
    assert all(c["region_source"] == "window_search" for rid, c in by_id.items()
               if rid not in (right, wrong) and c["similarity"] is not None)
    rel = stage_release(cfg, "v20990101", WINDOW, {
        "products": world.products, "looks": world.looks, "drop_items": world.drops, "image_refs": world.refs,
        "images": world.images, "clusters": world.clusters, "annotations": world.annotations,
        "contamination": schemas.empty(schemas.CONTAMINATION), "generated_checks": table}, world.store)
    [row] = [q for q in rel.files[("aigen_streetlook", "query")].to_pylist() if q["generation"]["request_id"] == right]
    assert row["box"] == pytest.approx(box, abs=1e-3) and row["item_index"] == 1
    assert row["image_sha256"] == crop_sha and row["image"]["bytes"] == crop, "the query is the detected item's crop"


# ----------------------------------------------------------------------------------------------- job-file backend


def test_job_file_backend_writes_jobs_and_ingests_a_drop_folder(tmp_path, world):
    from lookbench_pipeline.store import LocalStore, original_key

    cfg = _config(tmp_path, backend="job_file", items_per_subset=2)
    reqs, _ = stage_aigen_requests(cfg, world.products, world.drops, world.refs, world.annotations, WINDOW)
    # a store of its own with the reference images: the module's store holds the endpoint tests' generation records
    # for the same requests, which any data_dir reading that store reuses (lookbench_pipeline.records)
    store = LocalStore(tmp_path / "store")
    for sha in set(reqs["reference_image_sha256"].to_pylist()):
        store.put_bytes(original_key(sha), world.store.get_bytes(original_key(sha)))
    gen, c = stage_aigen_generate(cfg, reqs, store, WINDOW)
    assert c["pending"] == 4 == c["requests"] and set(gen["reason"].to_pylist()) == {"awaiting_external_generator"}
    [job] = (cfg.data_dir / "aigen/jobs").glob("requests-*.jsonl")
    lines = [json.loads(x) for x in job.read_text().splitlines()]
    assert sorted(x["request_id"] for x in lines) == sorted(reqs["request_id"].to_pylist())
    drop = cfg.data_dir / "aigen/drop"
    drop.mkdir(parents=True)
    # the external generator: answers three requests, one without its provenance sidecar, plus a stray file
    for i, job_line in enumerate(lines):
        ref = Image.open(job.parent / job_line["reference_image"])
        if i == 3:
            continue
        img = aigen_server.paint(job_line["kind"], job_line["prompt"], job_line["seed"], (320, 320), "good", ref)
        img.save(drop / f"{job_line['request_id']}.png")
        if i == 0:
            (drop / f"{job_line['request_id']}.json").write_text(json.dumps({"model": "flux-kontext", "version": "dev-1",
                                                                             "seed": 7}))
        elif i == 1:
            (drop / f"{job_line['request_id']}.json").write_text(json.dumps({"model": "flux-kontext"}))
    (drop / "holiday.jpg").write_bytes(b"not ours")
    gen2, c2 = stage_aigen_generate(cfg, reqs, store, WINDOW)
    by_id = {r["request_id"]: r for r in gen2.to_pylist()}
    ok, bad_side, no_side, waiting = (by_id[x["request_id"]] for x in lines)
    assert (ok["status"], ok["generator_model"], ok["generator_version"], ok["seed"]) == \
        ("generated", "flux-kontext", "dev-1", 7)
    assert ok["path"] == str((drop / f"{ok['request_id']}.png").resolve()) and ok["first_seen_at"] is not None
    assert (bad_side["status"], bad_side["reason"]) == ("failed", "invalid_sidecar")
    assert (no_side["status"], no_side["reason"]) == ("failed", "no_provenance_sidecar")
    assert waiting["status"] == "pending"
    assert c2["unmatched_files"] == 1 and c2["unmatched_examples"] == ["holiday.jpg"]
    assert c2["requests"] == c2["generated"] + c2["failed"] + c2["pending"] + c2["skipped"]
    # ingested once: the next run keeps its first_seen_at; the job file lists only what nobody answered
    gen3, c3 = stage_aigen_generate(cfg, reqs, store, WINDOW)
    assert {r["request_id"]: r["first_seen_at"] for r in gen3.to_pylist() if r["status"] == "generated"} == \
        {ok["request_id"]: ok["first_seen_at"]}
    newest = max((cfg.data_dir / "aigen/jobs").glob("requests-*.jsonl"), key=lambda p: p.stat().st_mtime_ns)
    assert [json.loads(x)["request_id"] for x in newest.read_text().splitlines()] == [waiting["request_id"]]


# ----------------------------------------------------------------------------------------------- the check's parts


def test_colour_difference_and_lab_match_colour_science():
    colour = pytest.importorskip("colour")
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, (50, 3)).astype(np.uint8)
    ours = srgb_to_lab(rgb)
    ref = colour.XYZ_to_Lab(colour.sRGB_to_XYZ(rgb / 255.0))
    assert np.abs(ours - ref).max() < 0.05
    a, b = ours[:25], ours[25:]
    np.testing.assert_allclose(delta_e_cmc(b, a), colour.delta_E(a, b, method="CMC", l=2, c=1), rtol=1e-6)


def test_pixel_colour_annotator_names_garment_colours_under_other_light():
    ann = PixelColourAnnotator(allowed=list(Taxonomy.load().values["color"]))
    for name, rgb in COLORS.items():
        for light in (0.95, 1.0, 1.05):
            px = np.tile(np.clip(np.array(rgb) * light, 0, 255).astype(np.uint8), (400, 1))
            assert ann.label(px) == {"color": name, "pattern": "solid"}, (name, light)
    stripes = np.concatenate([np.tile(np.array(COLORS["red"], np.uint8), (200, 1)),
                              np.tile(np.array(COLORS["white"], np.uint8), (200, 1))])
    assert ann.label(stripes) == {"color": "red"}, "a red garment with white stripes is red, and not solid"
    assert ann.label(stripes[:10]) == {}
    assert compare_attributes({"color": "red", "pattern": "solid"}, {"color": "red", "pattern": "striped",
                                                                    "material": "silk"}) == (2, 1, ["pattern"])
    assert compare_attributes({"color": "red"}, {"color": "not visible"}) == (0, 0, [])


def test_detector_boxes_drive_the_check():
    """The hook for garment detection: given boxes, the check looks there and nowhere else."""
    p = plan(4, 0, 3)[0][0]
    ref = packshot(p)
    img = aigen_server.paint("street", f"Street-style photograph with a {p.color} {p.category}", 3, (512, 512),
                             "good", ref)
    emb = HsvHogEmbedder()
    r = prepare_reference(ref, emb)
    found = locate(r, img, emb)
    x1, y1, x2, y2 = found.box
    assert found.similarity >= 0.85
    on = locate(r, img, emb, regions=[found.box])
    off = locate(r, img, emb, regions=[(0, 0, 60, 60)])
    assert on.similarity >= 0.85 > off.similarity
    assert off.box[2] < 100 and off.box[3] < 100


# ----------------------------------------------------------------------------------------------- configuration


def test_aigen_config_is_strict(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="model_version"):
        load_config(None, aigen={"endpoint": {"base_url": "http://gpu:8000/v1"}})
    with pytest.raises(ConfigError, match="extra_forbidden|Extra inputs"):
        load_config(None, aigen={"item_per_subset": 3})
    with pytest.raises(ConfigError, match="not categories"):
        load_config(None, aigen={"categories": ["spacesuit"]})
    with pytest.raises(ConfigError, match="WIDTHxHEIGHT"):
        load_config(None, aigen={"endpoint": {"size": "big"}})
    monkeypatch.setenv("LOOKBENCH_AIGEN__ENDPOINT__BASE_URL", "http://gpu:8000/v1")
    monkeypatch.setenv("LOOKBENCH_AIGEN__ENDPOINT__MODEL_VERSION", "FLUX.1-Kontext-dev@abc123")
    cfg = load_config(None)
    assert cfg.aigen.endpoint.base_url == "http://gpu:8000/v1"
    y = tmp_path / "p.yaml"
    y.write_text("aigen:\n  backend: job_file\n  drop_dir: results\n")
    monkeypatch.delenv("LOOKBENCH_AIGEN__ENDPOINT__BASE_URL")
    assert load_config(y).aigen.drop_dir == (tmp_path / "results").resolve()


def test_a_missing_image_endpoint_is_an_error_unless_the_config_is_the_demo(world, tmp_path, caplog):
    """Without aigen.endpoint.base_url only the demo (a site of kind demo) generates, with the scripted endpoint
    the stage passes in; any other configuration is refused before anything is sent or recorded."""
    (tmp_path / "shop.yaml").write_text("name: shop\nkind: web\nstart_urls: ['https://shop.example/']\n")
    web = load_config(None, data_dir=str(tmp_path / "data"), store={"url": str(tmp_path / "store")},
                      sites=[str(tmp_path / "shop.yaml")], aigen={"endpoint": {"size": SIZE}})
    assert web.demo_site() is None and load_config(None).demo_site() is not None
    one = world.requests()[0].slice(0, 1)
    store = store_of(web)  # the reference image only: no result of an earlier test to reuse
    key = original_key(one.to_pylist()[0]["reference_image_sha256"])
    store.put_bytes(key, world.store.get_bytes(key))
    with pytest.raises(ConfigError, match="no image endpoint configured"):
        stage_aigen_generate(web, one, store, WINDOW)
    assert not (tmp_path / "data" / "aigen" / "results").exists()
    with pytest.raises(ConfigError, match="aigen.endpoint.base_url"):
        with aigen.endpoint_for(web.aigen.endpoint):
            pass
    demo = aigen.ScriptedEndpoint(aigen_server.scripted_endpoint, aigen_server.MODEL, aigen_server.VERSION)
    with caplog.at_level("WARNING"), aigen.endpoint_for(web.aigen.endpoint, demo) as (url, model, version, key, desc):
        assert url.startswith("http://127.0.0.1:") and (model, version, key) == (aigen_server.MODEL, "1", "scripted")
        assert desc.startswith("no image endpoint configured (aigen.endpoint.base_url): the scripted endpoint")
    assert "the scripted endpoint" in caplog.text


def test_generated_images_tables_have_their_schemas():
    for name in ("generation_requests", "generated_images", "generated_checks"):
        assert schemas.TABLES[name].names[0] == "request_id"
    assert "generation" in schemas.RELEASE.names
    assert pa.types.is_struct(schemas.RELEASE.field("generation").type)
