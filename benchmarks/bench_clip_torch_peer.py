"""The PyTorch peer of kitm's CLIP step on the GPU (issue 47, item 5): transformers' `CLIPModel` built from a
`CLIPConfig` (ViT-B/32: 224 px, 12 vision layers of 768; 12 text layers of 512, 77 tokens; random weights, no
download), CLIP's symmetric InfoNCE with the model's learnable temperature, bf16 autocast, AdamW with its fused CUDA
update, compiled with `torch.compile`; batch 512, the step timed after warm-up steps, samples/s and MFU printed.

It is what `benchmarks/bench_gpu_step.py --backend=jax --rows clip_infonce` is compared with, side by side in one
lease on the device machine (JAX and PyTorch there, no TensorFlow; this script imports neither kitm nor
TensorFlow):

    python benchmarks/bench_clip_torch_peer.py [--batch 512] [--steps 20] [--no_compile] [--attention sdpa|eager]
    KERAS_BACKEND=jax python benchmarks/bench_gpu_step.py --backend=jax --rows clip_infonce --batch 512

`--quick` runs a tiny configuration (2 layers of 64, 32 px, 16 tokens, batch 8) on the CPU, float32, eager, with
the same code path otherwise: what the tests run (tests/benchmarks/test_benchmarks_run.py), never timed there.
FLOPs per pair as bench_gpu_step.clip_b32_flops counts them (forward x 3); MFU against `--peak_tflops` (H100/H200
SXM dense bf16: 989).
"""

from __future__ import annotations

import argparse
import statistics
import time


def transformer_flops(layers: int, width: int, tokens: int) -> float:
    """Forward FLOPs of a transformer tower (as benchmarks/bench_gpu_step.py counts them)."""
    return layers * (2 * 12 * width * width * tokens + 4 * tokens * tokens * width)


def step_flops(batch: int, config) -> float:
    vision, text = config.vision_config, config.text_config
    patches = (vision.image_size // vision.patch_size) ** 2
    image = transformer_flops(vision.num_hidden_layers, vision.hidden_size, patches + 1) + (
        2 * 3 * vision.patch_size ** 2 * vision.hidden_size * patches)
    words = transformer_flops(text.num_hidden_layers, text.hidden_size, text.max_position_embeddings)
    return 3 * batch * (image + words)


def clip_config(quick: bool):
    from transformers import CLIPConfig

    if quick:
        return CLIPConfig(
            text_config={"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
                         "max_position_embeddings": 16, "vocab_size": 512},
            vision_config={"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                           "num_attention_heads": 2, "image_size": 32, "patch_size": 8},
            projection_dim=32)
    # ViT-B/32 as open_clip and OpenAI define it (quick GELU, as keras-hub's CLIP encoders).
    return CLIPConfig(
        text_config={"hidden_size": 512, "intermediate_size": 2048, "num_hidden_layers": 12, "num_attention_heads": 8,
                     "max_position_embeddings": 77, "vocab_size": 49408, "hidden_act": "quick_gelu"},
        vision_config={"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
                       "num_attention_heads": 12, "image_size": 224, "patch_size": 32, "hidden_act": "quick_gelu"},
        projection_dim=512)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--no_compile", action="store_true", help="eager PyTorch instead of torch.compile")
    parser.add_argument("--attention", default="sdpa", choices=("sdpa", "eager"),
                        help="transformers' attention implementation (sdpa: torch's fused kernels)")
    parser.add_argument("--peak_tflops", type=float, default=989.0)
    parser.add_argument("--quick", action="store_true", help="a tiny configuration on the CPU (the tests' check)")
    args = parser.parse_args()

    import torch
    import torch.nn.functional as F
    from transformers import CLIPModel

    quick = args.quick
    device = "cuda" if torch.cuda.is_available() and not quick else "cpu"
    batch = 8 if quick else args.batch
    steps, warmup = (2, 1) if quick else (args.steps, args.warmup)
    config = clip_config(quick)
    torch.manual_seed(0)
    model = CLIPModel._from_config(config, attn_implementation=args.attention).to(device).train()
    # AdamW as open_clip trains CLIP (lr 5e-4, betas 0.9 / 0.98, eps 1e-6, weight decay 0.2), its fused update on CUDA.
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.2,
                                  fused=device == "cuda")
    vision, text = config.vision_config, config.text_config
    generator = torch.Generator(device="cpu").manual_seed(1)
    pixels = torch.rand(batch, 3, vision.image_size, vision.image_size, generator=generator).to(device)
    tokens = torch.randint(1, text.vocab_size, (batch, text.max_position_embeddings), generator=generator).to(device)
    labels = torch.arange(batch, device=device)
    autocast = torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda")

    def step():
        with autocast:
            out = model(input_ids=tokens, pixel_values=pixels, return_loss=False)
            logits = out.logits_per_image.float()
            loss = 0.5 * (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.detach()

    run = step if args.no_compile or quick else torch.compile(step)
    synchronize = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(warmup):
        first = run()
    synchronize()
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        loss = run()
        synchronize()
        times.append(time.perf_counter() - started)
    median = statistics.median(times)
    flops = step_flops(batch, config)
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    mode = "eager" if args.no_compile or quick else "torch.compile"
    print(f"PyTorch {torch.__version__} CLIPModel ({'tiny' if quick else 'ViT-B/32'}) on {name}, {mode}, "
          f"{'bf16 autocast' if device == 'cuda' else 'float32'}, attention {args.attention}, batch {batch}")
    print(f"step median {median * 1e3:.1f} ms over {steps} steps; {batch / median:,.0f} samples/s; "
          f"{flops / median / 1e12:.2f} TFLOP/s, MFU {100 * flops / median / (args.peak_tflops * 1e12):.1f}% "
          f"(peak {args.peak_tflops:g} TFLOP/s); loss {float(first):.4f} -> {float(loss):.4f}")


if __name__ == "__main__":
    main()
