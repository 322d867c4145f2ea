"""A published release used with the tools consumers already have: Hugging Face `datasets` (plain Parquet and the
dataset card's configs), the public `look-bench` package (its loader and its Recall@K evaluator, compared with our
metrics on the same embeddings), `mlcroissant` (validation and records) and the card's front matter."""

from __future__ import annotations

import hashlib
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything here is local; never ask the Hub
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from release_factory import make_release

from lookbench_pipeline.embed import load_embedder
from lookbench_pipeline.evaluate import EmbeddingCache, evaluate_release
from lookbench_pipeline.releases import docs as release_docs
from lookbench_pipeline.releases import all_files, pull
from lookbench_pipeline.releases.publish import publish
from lookbench_pipeline.store import LocalStore

V1, V2 = "v20260301", "v20260701"
SUBSETS = ["real_streetlook", "real_studio_flat"]
MODEL = "baseline/hsv-hog-v1"


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """Two published versions (the second with a previous one to diff against), the second pulled to a folder."""
    root = tmp_path_factory.mktemp("consumers")
    store = LocalStore(root / "store")
    publish(make_release(V1, range(0, 10)), store, {"code_version": "test"})
    manifest = publish(make_release(V2, range(5, 21)), store, {"code_version": "test"})
    pull(store, V2, root / "pulled", progress=False)
    return store, manifest, root / "pulled" / V2


def test_datasets_loads_the_parquet_files_unchanged(released, tmp_path):
    import datasets

    _, manifest, folder = released
    for subset in SUBSETS:
        files = {role: str(folder / subset / f"{role}.parquet") for role in ("query", "gallery")}
        ds = datasets.load_dataset("parquet", data_files=files, cache_dir=str(tmp_path / "hf"))
        for role in ("query", "gallery"):
            ours = pq.read_table(files[role])
            theirs = ds[role]
            assert isinstance(theirs.features["image"], datasets.Image)
            assert theirs.num_rows == ours.num_rows == manifest["files"][f"{subset}/{role}.parquet"]["rows"]
            # decoded: a picture of the recorded size; undecoded: exactly our rows, bytes and timestamps included
            first = theirs[0]["image"]
            assert first.size == (ours["width"][0].as_py(), ours["height"][0].as_py())
            raw = theirs.cast_column("image", datasets.Image(decode=False))
            assert raw.to_list() == ours.to_pylist()
            assert raw.features["first_seen_at"] == datasets.Value("timestamp[us, tz=UTC]")


def test_datasets_loads_the_release_folder_through_the_card_configs(released, tmp_path):
    import datasets

    _, manifest, folder = released
    for subset in SUBSETS:
        ds = datasets.load_dataset(str(folder), subset, cache_dir=str(tmp_path / "hf"))
        assert set(ds) == {"query", "gallery"}
        for role in ("query", "gallery"):
            assert ds[role].num_rows == manifest["files"][f"{subset}/{role}.parquet"]["rows"]
            assert ds[role]["sample_id"] == pq.read_table(folder / subset / f"{role}.parquet")["sample_id"].to_pylist()


def test_datasets_loads_the_release_folder_with_no_config_name(released, tmp_path):
    import datasets

    _, manifest, folder = released
    ds = datasets.load_dataset(str(folder), cache_dir=str(tmp_path / "hf"))  # the card's default config
    assert set(ds) == {"query", "gallery"}
    for role in ("query", "gallery"):
        assert ds[role]["sample_id"] == pq.read_table(folder / "real_studio_flat" / f"{role}.parquet")["sample_id"].to_pylist()
    assert datasets.get_dataset_config_names(str(folder)) == SUBSETS


def test_a_partial_pull_opens_in_datasets_and_a_full_pull_restores_the_published_card(released, tmp_path):
    """`datasets` resolves every config's files when it opens a folder: a pull of one subset must give a card
    that names only what is there; a later pull of the rest gives back the published card, byte for byte."""
    import datasets

    store, manifest, _ = released
    pull(store, V2, tmp_path / "part", ["real_streetlook"], progress=False)
    folder = tmp_path / "part" / V2
    assert not (folder / "real_studio_flat").exists()
    assert datasets.get_dataset_config_names(str(folder)) == ["real_streetlook"]
    ds = datasets.load_dataset(str(folder), cache_dir=str(tmp_path / "hf"))  # the one config is the default
    assert ds["query"].num_rows == manifest["files"]["real_streetlook/query.parquet"]["rows"]
    card = (folder / "README.md").read_text()
    assert card.split("\n---", 1)[1] == store.get_bytes(f"releases/{V2}/README.md").decode().split("\n---", 1)[1]
    pull(store, V2, tmp_path / "part", progress=False)
    published = manifest["metadata_files"]["README.md"]["sha256"]
    assert hashlib.sha256((folder / "README.md").read_bytes()).hexdigest() == published
    assert datasets.get_dataset_config_names(str(folder)) == SUBSETS


def test_look_bench_loader_and_recall_equal_ours_on_the_same_embeddings(released, tmp_path, monkeypatch):
    import torch
    from look_bench.metrics import RankEvaluator
    from look_bench.utils import load_lookbench_dataset

    store, _, folder = released
    # look-bench's loader reads the Hub id srpone/look-bench; `datasets` takes a local folder of that name first
    monkeypatch.chdir(tmp_path)
    (tmp_path / "srpone").mkdir()
    (tmp_path / "srpone" / "look-bench").symlink_to(folder, target_is_directory=True)

    scores, skipped = evaluate_release(store, V2, [MODEL], tmp_path / "emb", ks=[1, 5, 10])
    assert not skipped
    ours = {(r["subset"], r["metric"]): r["value"] for r in scores.to_pylist()}
    assert any(0 < v < 1 for (s, m), v in ours.items() if "recall" in m), "trivial scores prove nothing"
    emb = load_embedder(MODEL)
    cache = EmbeddingCache(tmp_path / "emb", emb.info())
    compared = 0
    for subset in SUBSETS:
        ds = load_lookbench_dataset(subset, cache_dir=str(tmp_path / "hf"))
        q, g = ds["query"], ds["gallery"]
        assert q["sample_id"] == pq.read_table(folder / subset / "query.parquet")["sample_id"].to_pylist()
        qv = emb.embed([r["image"] for r in q])  # pictures as look-bench's loader decodes them
        gv = emb.embed([r["image"] for r in g])
        # the same embeddings our evaluation computed and cached for these pictures (keyed by the sha256 of the
        # published bytes, which these test pictures' image_sha256 is)
        for vecs, shas in ((qv, q["image_sha256"]), (gv, g["image_sha256"])):
            cached, missing = cache.get(shas)
            assert not missing
            np.testing.assert_array_equal(vecs, cached)

        def label(row_cat, row_attrs):  # category + every attribute: equality = our Fine match (all rows here
            return row_cat + "|" + ";".join(sorted(f"{a['name']}={a['value']}" for a in row_attrs))  # carry all)

        labels = {"coarse_recall": ("category", None), "item_recall": ("item_ID", None), "fine_recall": (None, label)}
        for metric, (column, fn) in labels.items():
            ql = np.array(q[column] if column else [fn(c, a) for c, a in zip(q["category"], q["attributes"])])
            gl = np.array(g[column] if column else [fn(c, a) for c, a in zip(g["category"], g["attributes"])])
            res = RankEvaluator(rank_values=[1, 5, 10]).evaluate(
                torch.from_numpy(qv), ql, torch.from_numpy(gv), gl, l2norm=True)
            for k in (1, 5, 10):
                assert res[f"recall@{k}"] == pytest.approx(round(100 * ours[(subset, f"{metric}@{k}")], 2), abs=1e-9), \
                    (subset, metric, k)
                compared += 1
    assert compared == 2 * 3 * 3


def test_croissant_validates_and_iterates_our_rows(released):
    import mlcroissant as mlc

    _, manifest, folder = released
    ds = mlc.Dataset(jsonld=str(folder / "croissant.json"))
    issues = ds.metadata.ctx.issues
    assert not issues.errors and not issues.warnings, issues.report()
    # every file but the Croissant file itself is described with the manifest's sha256 (the documents too)
    dist = {d.id: d.sha256 for d in ds.metadata.distribution}
    assert dist == {k: v["sha256"] for k, v in all_files(manifest).items() if k != "croissant.json"}
    for subset in SUBSETS:
        for role in ("query", "gallery"):
            ours = pq.read_table(folder / subset / f"{role}.parquet").to_pylist()
            rs = f"{subset}/{role}"
            records = list(ds.records(rs))
            assert len(records) == len(ours)
            for rec, row in zip(records, ours):
                assert rec[f"{rs}/item_ID"].decode() == row["item_ID"]
                assert rec[f"{rs}/category"].decode() == row["category"]
                assert rec[f"{rs}/first_seen_at"].to_pydatetime() == row["first_seen_at"]
                assert [(a[f"{rs}/attributes/name"].decode(), a[f"{rs}/attributes/value"].decode())
                        for a in rec[f"{rs}/attributes"]] == [(a["name"], a["value"]) for a in row["attributes"]]
                assert rec[f"{rs}/image"].size == (row["width"], row["height"])
    changes = pq.read_table(folder / "changes.parquet")
    assert len(list(ds.records("changes"))) == changes.num_rows > 0


def test_dataset_card_front_matter(released):
    from huggingface_hub import DatasetCard

    _, manifest, folder = released
    text = (folder / "README.md").read_text()
    assert text.startswith("---\n")
    front = yaml.safe_load(text.split("---\n")[1])
    assert front["configs"] == [{"config_name": s, "data_files": [
        {"split": "query", "path": f"{s}/query.parquet"}, {"split": "gallery", "path": f"{s}/gallery.parquet"}],
        **({"default": True} if s == "real_studio_flat" else {})} for s in SUBSETS]
    assert front["license"] == "other" and front["license_name"]
    assert front["size_categories"] == ["n<1K"]
    assert front["task_categories"] == ["image-feature-extraction"]
    card = DatasetCard(text)
    assert card.data.license == "other" and len(card.data.configs) == 2
    # card, Croissant and changes are in the manifest with their sha256, and the pulled copies match
    assert set(manifest["metadata_files"]) == {"README.md", "croissant.json", "CHANGES.md", "changes.parquet",
                                              *release_docs.PATHS}
    for name, meta in manifest["metadata_files"].items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == meta["sha256"]


def test_a_partial_pull_keeps_the_noise_config_it_brought_along(tmp_path):
    """The distractor gallery (``noise/``) always comes with a partial pull, so its config stays on the card."""
    from lookbench_pipeline.releases.reader import _limit_card_to_present

    configs = [{"config_name": s, "data_files": [{"split": r, "path": f"{s}/{r}.parquet"} for r in roles]}
               for s, roles in (("noise", ["gallery"]), ("real_streetlook", ["query", "gallery"]),
                                ("real_studio_flat", ["query", "gallery"]))]
    configs[2]["default"] = True
    (tmp_path / "README.md").write_text("---\n" + yaml.safe_dump({"configs": configs}, sort_keys=False)
                                        + "---\n\n# LookBench\n\nThe `noise` config has only a gallery split.\n")
    files = {f"{c['config_name']}/{d['split']}.parquet": {} for c in configs for d in c["data_files"]}
    for k in files:
        if not k.startswith("real_studio_flat/"):
            (tmp_path / k).parent.mkdir(exist_ok=True)
            (tmp_path / k).write_bytes(b"x")
    _limit_card_to_present(tmp_path, {"files": files, "metadata_files": {"README.md": {}}})
    text = (tmp_path / "README.md").read_text()
    front = yaml.safe_load(text.split("---\n")[1])
    assert [c["config_name"] for c in front["configs"]] == ["noise", "real_streetlook"]
    assert [c["config_name"] for c in front["configs"] if c.get("default")] == ["real_streetlook"]
    assert text.endswith("---\n\n# LookBench\n\nThe `noise` config has only a gallery split.\n")
