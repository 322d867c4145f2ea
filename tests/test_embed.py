"""Retrieval model backends on tiny random models of the real architectures, built here offline (no download):
shapes, dtypes, L2 normalisation, batching invariance, determinism, loading from a local path; the registry; the
embedding cache."""

import json

import numpy as np
import pytest
from PIL import Image

from lookbench_pipeline.embed import (BASELINE_ID, EmbedderUnavailable, EmbeddingCache, HsvHogEmbedder, ModelSpec,
                                      ModelSpecError, load_embedder, load_registry, resolve_spec, weights_checksum)

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("open_clip")
pytest.importorskip("timm")


def _images(n: int, seed: int = 0) -> list[Image.Image]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        h, w = rng.integers(40, 90, 2)
        out.append(Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)))
    out[0] = out[0].convert("L")  # a greyscale image goes through the same path
    return out


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory) -> dict[str, ModelSpec]:
    """One tiny random model per backend/architecture, saved the way each library saves it."""
    from safetensors.torch import save_file

    root = tmp_path_factory.mktemp("models")
    torch.manual_seed(0)
    specs: dict[str, ModelSpec] = {}
    small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32,
                 patch_size=8)

    from transformers import (BitImageProcessor, Dinov2Config, Dinov2Model, DINOv3ViTConfig, DINOv3ViTImageProcessor,
                              DINOv3ViTModel, SiglipConfig, SiglipImageProcessor, SiglipModel)

    d2 = root / "dinov2"
    Dinov2Model(Dinov2Config(**small)).save_pretrained(d2)
    BitImageProcessor(size={"shortest_edge": 36}, crop_size={"height": 32, "width": 32}, do_center_crop=True,
                      image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225]).save_pretrained(d2)
    specs["dinov2"] = ModelSpec(id="tiny/dinov2", backend="transformers", source=str(d2), pooling="cls",
                                input_size=32, dim=32)

    d3 = root / "dinov3"
    DINOv3ViTModel(DINOv3ViTConfig(**small, num_register_tokens=2)).save_pretrained(d3)
    DINOv3ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(d3)
    specs["dinov3"] = ModelSpec(id="tiny/dinov3", backend="transformers", source=str(d3), pooling="cls", dim=32)

    sg = root / "siglip"
    SiglipModel(SiglipConfig(
        text_config=dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                         vocab_size=100, bos_token_id=1, eos_token_id=2, pad_token_id=0),
        vision_config=small)).save_pretrained(sg)
    SiglipImageProcessor(size={"height": 32, "width": 32}).save_pretrained(sg)
    specs["siglip"] = ModelSpec(id="tiny/siglip", backend="transformers", source=str(sg), dim=32)

    # GR-Lite's shape: a DINOv3 state dict in a plain weights file (with a wrapper prefix), filled into the
    # architecture of a config folder, at a forced input size
    gr = root / "gr-lite.pt"
    torch.save({"model." + k: v for k, v in DINOv3ViTModel.from_pretrained(d3).state_dict().items()}, gr)
    specs["gr_lite_file"] = ModelSpec(id="tiny/gr-lite", backend="transformers", source=str(gr), architecture=str(d3),
                                      pooling="cls", input_size=32, dim=32,
                                      processor_kwargs={"size": {"height": 32, "width": 32}})

    oc = root / "open_clip"
    oc.mkdir()
    cfg = {"embed_dim": 24, "vision_cfg": {"image_size": 32, "layers": 2, "width": 32, "patch_size": 8,
                                           "head_width": 16},
           "text_cfg": {"context_length": 16, "vocab_size": 1000, "width": 32, "heads": 2, "layers": 1}}
    (oc / "open_clip_config.json").write_text(json.dumps({"model_cfg": cfg, "preprocess_cfg": {}}))
    import open_clip

    m = open_clip.create_model(f"local-dir:{oc}", load_weights=False)
    save_file({k: v.contiguous() for k, v in m.state_dict().items()}, oc / "open_clip_model.safetensors")
    specs["open_clip"] = ModelSpec(id="tiny/clip", backend="open_clip", source=f"local-dir:{oc}", input_size=32,
                                   dim=24)

    import timm

    kw = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2)
    tm = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=0, **kw)
    save_file(tm.state_dict(), root / "timm.safetensors")
    specs["timm"] = ModelSpec(id="tiny/timm-vit", backend="timm", source="vit_tiny_patch16_224",
                              pretrained=str(root / "timm.safetensors"), input_size=32, dim=32, model_kwargs=kw)
    return specs


BACKENDS = ["dinov2", "dinov3", "siglip", "gr_lite_file", "open_clip", "timm"]


@pytest.mark.parametrize("name", BACKENDS)
def test_backend_shapes_norms_batching_determinism(tiny_models, name):
    spec = tiny_models[name]
    emb = load_embedder(spec, device="cpu", batch_size=8)
    ims = _images(9)
    v = emb.embed(ims)
    assert v.shape == (9, spec.dim) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    # batch of one image at a time vs batches of eight: the same vectors
    emb.batch_size = 1
    np.testing.assert_allclose(emb.embed(ims[:8]), v[:8], atol=2e-5)
    # deterministic: a second load and run gives the same vectors; distinct images give distinct vectors
    np.testing.assert_allclose(load_embedder(spec, device="cpu").embed(ims), v, atol=1e-6)
    assert np.abs(v[1] - v[2]).max() > 1e-3
    info = emb.info()
    assert info["model_id"] == spec.id and info["dim"] == spec.dim and info["device"] == "cpu"
    assert info["dtype"] == "float32" and len(info["weights_sha256"]) == 64
    if spec.input_size:
        assert info["input_size"] == spec.input_size
    assert emb.embed([]).shape == (0, spec.dim)


def test_weights_checksum_identifies_the_weights(tiny_models):
    a = load_embedder(tiny_models["dinov3"], device="cpu")
    b = load_embedder(tiny_models["gr_lite_file"], device="cpu")  # the same weights through a file + prefix
    assert a.info()["weights_sha256"] == b.info()["weights_sha256"]
    sd = a.model.state_dict()
    k = next(iter(sd))
    changed = {**sd, k: sd[k] + 1}
    assert weights_checksum(changed) != weights_checksum(sd)


def test_spec_contradiction_and_missing_weights_are_errors(tiny_models, tmp_path):
    from dataclasses import replace

    with pytest.raises(ModelSpecError, match="declares dim"):
        load_embedder(replace(tiny_models["dinov2"], dim=64), device="cpu")
    with pytest.raises(ModelSpecError, match="input size"):
        load_embedder(replace(tiny_models["dinov2"], input_size=224), device="cpu")
    with pytest.raises(EmbedderUnavailable):
        load_embedder(ModelSpec(id="x", backend="transformers", source=str(tmp_path / "nothing-here")))
    bad = tmp_path / "bad.pt"
    torch.save({"unrelated.weight": torch.zeros(2)}, bad)
    with pytest.raises(ModelSpecError, match="do not fit"):
        load_embedder(replace(tiny_models["gr_lite_file"], source=str(bad)), device="cpu")
    with pytest.raises(ModelSpecError, match="backend"):
        ModelSpec(id="x", backend="onnx")


def test_registry_names_the_real_models():
    reg = load_registry()
    for mid in ("openai/clip-vit-b-32", "openai/clip-vit-l-14", "Marqo/marqo-fashionCLIP",
                "Marqo/marqo-fashionSigLIP", "google/siglip2-base-patch16-224", "facebook/dinov2-base",
                "facebook/dinov3-vitl16-pretrain-lvd1689m", "srpone/gr-lite", BASELINE_ID):
        assert mid in reg
    gr = reg["srpone/gr-lite"]
    assert (gr.backend, gr.input_size, gr.dim, gr.pooling) == ("transformers", 336, 1024, "cls")
    assert {s.backend for s in reg.values()} == {"numpy", "open_clip", "transformers", "timm", "efficientnet_lite"}
    # every trained model declares a cutoff (a random-weights floor has no training data)
    assert all(s.training_cutoff for s in reg.values() if s.backend != "numpy" and s.init_seed is None)
    assert resolve_spec("open_clip:ViT-B-32/openai").pretrained == "openai"
    assert resolve_spec("timm:vit_small_patch16_224").backend == "timm"
    assert resolve_spec("hf-hub:Marqo/marqo-fashionCLIP").backend == "open_clip"


class _Counting:
    """Wraps an embedder and counts the images it is asked to embed."""

    def __init__(self, inner):
        self.inner, self.calls, self.images = inner, 0, 0
        self.model_id, self.dim, self.input_size = inner.model_id, inner.dim, inner.input_size

    def embed(self, images):
        self.calls += 1
        self.images += len(images)
        return self.inner.embed(images)

    def info(self):
        return self.inner.info()


def test_cache_embeds_nothing_twice(tmp_path):
    ims = _images(30, seed=3)
    shas = [f"{i:064x}" for i in range(30)]
    emb = _Counting(HsvHogEmbedder())
    c1 = EmbeddingCache(tmp_path, emb.info(), flush_every=8)
    v1 = c1.embed(emb, shas[:20], lambda i: ims[i], batch=6)
    assert emb.images == 20
    # a new process (new cache object): the 20 known images are read, only the 10 new ones are embedded
    c2 = EmbeddingCache(tmp_path, emb.info())
    v2 = c2.embed(emb, shas, lambda i: ims[i])
    assert emb.images == 30 and c2.hits == 20 and c2.misses == 10
    np.testing.assert_array_equal(v1, v2[:20])
    np.testing.assert_allclose(v2, HsvHogEmbedder().embed(ims), atol=1e-6)
    # a re-run embeds nothing; a sha repeated in one call is embedded once
    c3 = EmbeddingCache(tmp_path, emb.info())
    c3.embed(emb, shas + shas[:3], lambda i: pytest.fail("re-embedded a cached image"))
    c4 = EmbeddingCache(tmp_path / "other", emb.info())
    c4.embed(emb, ["a" * 64, "a" * 64, "b" * 64], lambda i: ims[i])
    assert emb.images == 32
    # many segments are merged; nothing is lost
    c3.compact()
    c5 = EmbeddingCache(tmp_path, emb.info())
    assert len(c5) == 30 and len(list(c5.dir.glob("seg-*.npy"))) == 1
    np.testing.assert_array_equal(c5.get(shas)[0], v2)


def test_cache_is_keyed_by_model_revision_and_weights(tmp_path, tiny_models):
    base = {"model_id": "m", "revision": "r1", "dim": 4, "weights_sha256": "ab" * 32}
    a = EmbeddingCache(tmp_path, base)
    a.put(["x" * 64], np.ones((1, 4), np.float32))
    assert "x" * 64 in EmbeddingCache(tmp_path, base)
    assert "x" * 64 not in EmbeddingCache(tmp_path, {**base, "revision": "r2"})
    assert "x" * 64 not in EmbeddingCache(tmp_path, {**base, "weights_sha256": "cd" * 32})
    assert "x" * 64 not in EmbeddingCache(tmp_path, {**base, "model_id": "n"})
    # an interrupted write (vectors without their sha list) is ignored
    (a.dir / "seg-broken.npy").write_bytes(b"\x93NUMPY garbage")
    assert len(EmbeddingCache(tmp_path, base)) == 1


def test_baseline_unchanged():
    emb = load_embedder(BASELINE_ID)
    v = emb.embed(_images(3))
    assert v.shape == (3, 256) and emb.info()["weights_sha256"] is None
