"""Build, offline, a tiny randomly initialised Qwen2.5-VL checkpoint that vLLM can serve with images.

Run it with the vLLM environment's Python (``make vllm-model``)::

    .venv-vllm/bin/python tests/vllm/build_tiny_qwen.py [--out .cache/tiny-qwen2_5_vl] [--force]

What it writes (a Hugging Face model folder, about 3 MB, float32):

- ``config.json`` + ``model.safetensors``: ``Qwen2_5_VLForConditionalGeneration`` with a 2-layer text model
  (hidden size 128, 4 attention heads of 32, 2 key/value heads, multimodal RoPE sections 4/6/6 = head_dim/2) and
  a 2-block vision tower (hidden size 64, 2 heads of 32, patch 14, spatial merge 2, window attention in block 0,
  full attention in block 1), weights drawn with ``torch.manual_seed(SEED)``.
- ``tokenizer.json`` + ``tokenizer_config.json``: a byte-level BPE tokenizer trained with the ``tokenizers``
  library on a fixed English/JSON corpus plus the project's taxonomy files, with Qwen2.5-VL's special tokens
  (``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``, ``<|vision_start|>``, ``<|vision_end|>``,
  ``<|image_pad|>``, ``<|video_pad|>`` …) and Qwen2-VL's chat template.
- ``preprocessor_config.json`` (+ processor files): Qwen2-VL's image processor with small ``min_pixels`` /
  ``max_pixels`` (4 to 256 merged 28x28 patches, i.e. at most 256 image tokens per image).
- ``build_info.json``: the fingerprint of the inputs (this file's source, the taxonomy files, the library
  versions). The folder is rebuilt only when it is missing or the fingerprint changed, so a second run is a
  no-op that prints the path.

The weights are random: the model "answers" noise, which is what we want — the tests check the serving path
(image preprocessing, chat template, structured-output constraint, OpenAI API), not the answers. Same seed and
same library versions give byte-identical weights.

Nothing is downloaded: every file is made here.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / ".cache" / "tiny-qwen2_5_vl"
TAXONOMY_DIR = ROOT / "lookbench_pipeline" / "data"
SEED = 20250701
SERVED_NAME = "tiny-qwen2.5-vl"

# Qwen2.5-VL's special tokens, in the order Qwen's own vocabulary lists them (ids follow the trained vocabulary).
SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
]

# Qwen2-VL's chat template (the one Qwen ships with Qwen2-VL / Qwen2.5-VL Instruct): string or list content,
# one <|vision_start|><|image_pad|><|vision_end|> per image part, a default system message.
CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

CORPUS = """\
You are a helpful assistant. Describe the garment in the picture. Answer with one JSON object only.
Label the visible attributes of the product; answer "not visible" when an attribute cannot be seen.
{"color": "black", "pattern": "solid", "material": "cotton", "sleeve_length": "short", "neckline": "round"}
{"category": "dress", "length": "midi", "fit": "regular", "closure": "zip", "collar": "shirt collar"}
The quick brown fox jumps over the lazy dog. 0 1 2 3 4 5 6 7 8 9 10 100 1000 true false null [ ] { } : , "
A photo of a model wearing a striped linen shirt, wide-leg denim trousers and white leather sneakers.
"""

# Sizes: small enough to build in seconds and serve on two CPU cores; head sizes of 32 because vLLM's CPU
# attention kernels support a fixed list of head sizes (32 is the smallest).
TEXT = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=8192, rms_norm_eps=1e-6,
            rope_scaling={"type": "mrope", "mrope_section": [4, 6, 6]}, rope_theta=1000000.0)
VISION = dict(depth=2, hidden_size=64, intermediate_size=128, num_heads=2, in_channels=3, patch_size=14,
              spatial_merge_size=2, temporal_patch_size=2, window_size=112, fullatt_block_indexes=[1],
              tokens_per_second=2, hidden_act="silu")
MIN_PIXELS = 4 * 28 * 28
MAX_PIXELS = 256 * 28 * 28


def taxonomy_files() -> list[Path]:
    """The project's taxonomy files (their words are in the tokenizer's training text)."""
    return sorted(TAXONOMY_DIR.glob("taxonomy*.yaml"))


def fingerprint() -> str:
    """sha256 over this file, the taxonomy files and the versions of the libraries that write the folder."""
    from importlib.metadata import version  # not the packages themselves: a no-op run stays fast

    h = hashlib.sha256()
    h.update(Path(__file__).read_bytes())
    for f in taxonomy_files():
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    h.update(" ".join(version(p) for p in ("torch", "transformers", "tokenizers", "safetensors")).encode())
    return h.hexdigest()


def build_tokenizer():
    """A byte-level BPE tokenizer (any UTF-8 text encodes; no unknown token) with Qwen2.5-VL's special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1024, min_frequency=1, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    corpus = [CORPUS] + [f.read_text(encoding="utf-8") for f in taxonomy_files()]
    tok.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None,
        unk_token=None, model_max_length=8192, clean_up_tokenization_spaces=False, chat_template=CHAT_TEMPLATE,
    )
    return fast


def build(out: Path) -> None:
    import torch
    from transformers import GenerationConfig, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    tokenizer = build_tokenizer()
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    vocab_size = len(tokenizer)
    config = Qwen2_5_VLConfig(
        text_config=dict(TEXT, vocab_size=vocab_size, bos_token_id=ids["<|endoftext|>"],
                         eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"]),
        vision_config=dict(VISION, out_hidden_size=TEXT["hidden_size"]),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"],
        tie_word_embeddings=False, torch_dtype="float32",
    )
    torch.manual_seed(SEED)
    model = Qwen2_5_VLForConditionalGeneration(config).eval()
    # Random init gives logits near zero everywhere; a larger spread on the output layer makes the sampled
    # tokens vary with the input, so different images give different (still random) answers.
    with torch.no_grad():
        model.lm_head.weight.normal_(0.0, 0.5)
    model.generation_config = GenerationConfig(bos_token_id=ids["<|endoftext|>"],
                                               eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]],
                                               pad_token_id=ids["<|endoftext|>"])

    image_processor = Qwen2VLImageProcessorPil(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS, patch_size=14,
                                               temporal_patch_size=2, merge_size=2)

    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp, safe_serialization=True)
    image_processor.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "build_info.json").write_text(json.dumps({
        "fingerprint": fingerprint(), "seed": SEED, "served_model_name": SERVED_NAME,
        "vocab_size": vocab_size, "special_token_ids": ids, "min_pixels": MIN_PIXELS, "max_pixels": MAX_PIXELS,
        "parameters": sum(p.numel() for p in model.parameters()),
    }, indent=2) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="model folder (default: %(default)s)")
    ap.add_argument("--force", action="store_true", help="rebuild even when the folder is up to date")
    args = ap.parse_args(argv)
    out = args.out.resolve()
    info = out / "build_info.json"
    if not args.force and info.exists():
        try:
            if json.loads(info.read_text())["fingerprint"] == fingerprint():
                print(out)
                return 0
        except (ValueError, KeyError):
            pass
    build(out)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
