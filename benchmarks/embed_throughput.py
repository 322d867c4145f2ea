"""Embedding throughput of a ViT-L/16 image tower at 336 x 336 pixels (GR-Lite's shape: DINOv3 ViT-L/16, 1,024-d),
bf16 autocast on CUDA, in images per second.

    .venv/bin/python benchmarks/embed_throughput.py [--device cuda] [--batch 128] [--batches 20] [--layers 24]

Weights are random (nothing can be downloaded here; throughput does not depend on the values): the same
architecture built from a ``transformers`` ``ViTConfig`` (patch 16, hidden 1,024, 24 layers, 16 heads, MLP 4,096).
Inputs are preprocessed tensors, so this is the model's forward pass plus the L2 normalisation, after 3 warm-up
batches; ``--layers`` / ``--size`` make a smaller model for a CPU smoke run. Needs torch and transformers.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--size", type=int, default=336)
    args = ap.parse_args()
    import torch
    from transformers import ViTConfig, ViTModel

    cfg = ViTConfig(image_size=args.size, patch_size=16, hidden_size=1024, num_hidden_layers=args.layers,
                    num_attention_heads=16, intermediate_size=4096)
    model = ViTModel(cfg, add_pooling_layer=False).eval().to(args.device)
    x = torch.randn(args.batch, 3, args.size, args.size, device=args.device)
    bf16 = args.device.startswith("cuda")

    def step():
        with torch.no_grad(), torch.autocast(args.device.split(":")[0], dtype=torch.bfloat16, enabled=bf16):
            f = model(pixel_values=x).last_hidden_state[:, 0]
            f = torch.nn.functional.normalize(f.float(), dim=1)
        return f

    for _ in range(3):
        step()
    if bf16:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.batches):
        step()
    if bf16:
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    name = torch.cuda.get_device_name() if bf16 else "cpu"
    print(f"ViT-L/16-shaped ({args.layers} layers) at {args.size} px, batch {args.batch}, "
          f"{'bf16 autocast' if bf16 else 'fp32'} on {name}: {args.batch * args.batches / dt:.1f} images/s")


if __name__ == "__main__":
    main()
