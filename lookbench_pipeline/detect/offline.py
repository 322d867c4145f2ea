"""Running ultralytics with no network (see the package docstring, "Offline operation"): the environment and
settings :func:`prepare_offline` sets before ultralytics is imported, the stand-in fonts, the device, and weights by
path or by Hugging Face id from the local cache only."""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

from PIL import Image

from ..config.inference import HF_MODEL_ID
from .core import DetectorError

log = logging.getLogger(__name__)

HF_ID = HF_MODEL_ID  # owner/repo: one pattern for the configuration check and the loader
"""A Hugging Face model id: ``owner/repo``."""

INTEGRATIONS_OFF = {"sync": False, "clearml": False, "comet": False, "dvc": False, "mlflow": False,
                    "raytune": False, "tensorboard": False, "wandb": False}
"""Ultralytics settings that would send data out (analytics, experiment trackers): all off."""

FONT_NAMES = ("Arial.ttf", "Arial.Unicode.ttf")

DEFAULT_CACHE = Path(tempfile.gettempdir()) / f"lookbench-ultralytics-{os.getuid()}"
"""Ultralytics' settings folder when no cache folder is named (the pipeline uses ``<data_dir>/detector``)."""


def find_font() -> Path:
    """A TrueType font on this machine to stand in for Arial: matplotlib's DejaVu Sans, else Debian's, else any
    ``.ttf`` under ``/usr/share/fonts``. Raises DetectorError when there is none."""
    candidates: list[Path] = []
    try:
        import matplotlib

        candidates.append(Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf")
    except ImportError:
        pass
    candidates.append(Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"))
    for p in candidates:
        if p.is_file():
            return p
    for p in sorted(Path("/usr/share/fonts").rglob("*.ttf")) if Path("/usr/share/fonts").is_dir() else []:
        return p
    raise DetectorError("no TrueType font found (matplotlib's DejaVuSans.ttf or /usr/share/fonts/**/*.ttf); "
                        "ultralytics would try to download Arial.ttf")


def prepare_offline(cache_dir: Path, offline: bool = True) -> Path:
    """Set up the environment ultralytics reads at import time, place the fonts it looks for, import it, and turn
    off its settings that send data out. Returns ultralytics' user config folder (``USER_CONFIG_DIR``).

    ``offline`` also sets ``HF_HUB_OFFLINE=1``. Environment variables the user set already are kept (a
    ``YOLO_CONFIG_DIR`` of their own wins). When ultralytics was imported before this call, its constants were
    fixed then: the fonts go to its own config folder, and a warning says that its online probe may have run.
    """
    cache_dir = Path(cache_dir)
    os.environ.setdefault("YOLO_CONFIG_DIR", str(cache_dir / "ultralytics"))
    os.environ.setdefault("MPLCONFIGDIR", str(cache_dir / "matplotlib"))  # ultralytics' font check imports it
    os.environ["YOLO_AUTOINSTALL"] = "false"
    if offline:
        os.environ["YOLO_OFFLINE"] = "1"
        os.environ["HF_HUB_OFFLINE"] = "1"
    already = "ultralytics" in sys.modules
    font = find_font()
    cfg_dir = Path(os.environ["YOLO_CONFIG_DIR"]) / "Ultralytics"
    _place_fonts(cfg_dir, font)
    from ultralytics import utils as ul

    _undo_pil_patch()
    if already and Path(ul.USER_CONFIG_DIR) != cfg_dir:
        _place_fonts(Path(ul.USER_CONFIG_DIR), font)
    if offline and ul.ONLINE:
        log.warning("ultralytics was imported before lookbench_pipeline.detect.prepare_offline and thinks it is "
                    "online; import lookbench_pipeline.detect first (or set YOLO_OFFLINE=1)")
    want = {**INTEGRATIONS_OFF, "runs_dir": str(cache_dir / "runs"), "datasets_dir": str(cache_dir / "datasets"),
            "weights_dir": str(cache_dir / "weights")}
    if any(ul.SETTINGS.get(k) != v for k, v in want.items()):
        ul.SETTINGS.update(want)
    return Path(ul.USER_CONFIG_DIR)


def _undo_pil_patch() -> None:
    """Importing ultralytics replaces ``PIL.Image.open`` for the whole process with a wrapper that, on a file
    Pillow cannot identify, tries to install and register ``pi-heif`` (``ultralytics.utils.patches``): intake would
    then reject a non-image as ``decode_error`` (an ImportError) instead of ``not_an_image``. Detection gets decoded
    images and needs no HEIF, so Pillow's own ``open`` is put back."""
    from ultralytics.utils import patches

    original = getattr(patches, "_image_open", None)
    if original is not None and Image.open is not original and getattr(Image.open, "__module__", "") == patches.__name__:
        Image.open = original


def _place_fonts(folder: Path, font: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in FONT_NAMES:
        target = folder / name
        if not target.is_file():
            tmp = folder / f".{name}.tmp"
            shutil.copyfile(font, tmp)
            tmp.replace(target)


def resolve_device(device: str = "auto") -> str:
    """``auto``: ``cuda:0`` when torch sees a CUDA device, else ``cpu``; anything else is passed through."""
    if device != "auto":
        return device
    import torch

    return "cuda:0" if torch.cuda.is_available() else "cpu"


def resolve_weights(weights: str, *, weights_file: str | None = None, revision: str | None = None,
                    offline: bool = True) -> Path:
    """The local file of ``weights``: a path, or a Hugging Face model id ``owner/repo`` (the file ``weights_file``,
    default the repo's only ``*.pt``), fetched with ``huggingface_hub`` -- only from the local cache while
    ``offline``.

    Raises:
        DetectorError: no such file, not an id, or not in the local Hugging Face cache while offline.
    """
    p = Path(os.path.expandvars(weights)).expanduser()
    if p.is_file():
        return p.resolve()
    if p.is_absolute() or weights.startswith((".", "~")) or not HF_ID.fullmatch(weights):
        raise DetectorError(f"detector weights {weights!r}: no such file, and not a Hugging Face model id "
                            "(owner/repo)")
    try:
        from huggingface_hub import hf_hub_download, snapshot_download
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError
    except ImportError as exc:
        raise DetectorError(f"detector weights {weights!r} name a Hugging Face model, but huggingface_hub is not "
                            f"installed: {exc}") from exc
    try:
        if weights_file:
            return Path(hf_hub_download(weights, weights_file, revision=revision, local_files_only=offline))
        folder = Path(snapshot_download(weights, revision=revision, allow_patterns=["*.pt"],
                                        local_files_only=offline))
    except (LocalEntryNotFoundError, FileNotFoundError) as exc:
        raise DetectorError(
            f"detector weights {weights!r} (file {weights_file or '*.pt'}) are not in the local Hugging Face cache "
            "and detect.offline is true: download them where there is network (`hf download "
            f"{weights}`), copy the cache here, or name a local .pt file") from exc
    except (HfHubHTTPError, OSError, ValueError) as exc:
        raise DetectorError(f"detector weights {weights!r}: {exc}") from exc
    pts = sorted(folder.rglob("*.pt"))
    if len(pts) != 1:
        raise DetectorError(f"Hugging Face repo {weights!r} has {len(pts)} .pt files ({[x.name for x in pts]}); "
                            "name one with detect.weights_file")
    return pts[0]
