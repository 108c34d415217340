"""The LoRA study's starting point before pretraining: a small CLIP preset with random weights (kitm.layers.hub_tiny),
its byte-pair vocabulary made of the words of the training captions of the worlds given, so that every word of the
pretraining and the fine-tuning world is one token.

    python studies/lora_vs_full/make_preset.py <out_dir> <data_dir> [<data_dir> ...]
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow loads

from kitm.data.pipeline import training_captions  # noqa: E402
from kitm.data.schema import load_info  # noqa: E402
from kitm.layers.hub_tiny import save_tiny_preset  # noqa: E402
from kitm.layers.tokenizer import build_vocabulary  # noqa: E402


def main(out_dir: str, *data_dirs: str) -> None:
    words = build_vocabulary(caption for data_dir in data_dirs for caption in training_captions(data_dir, "train"))
    image_size = {load_info(data_dir).image_size for data_dir in data_dirs}
    if len(image_size) != 1:
        raise SystemExit(f"The worlds {data_dirs} have images of different sizes: {sorted(image_size)}.")
    # ViT-style towers of 4 blocks, 128 wide (a patch of 8 pixels: 36 patches at 48 pixels), a 64-d joint space.
    path = save_tiny_preset(out_dir, "clip", image_size=image_size.pop(), patch_size=8, hidden_dim=128, num_layers=4,
                            num_heads=4, projection_dim=64, max_sequence_length=40, words=words, seed=0)
    print(f"{path}: a CLIP preset of random weights, {len(words)} words")


if __name__ == "__main__":
    main(*sys.argv[1:])
