"""One CLIP training step, kitm against open_clip's own, interleaved; and SavedModel encode throughput.

kitm's side: a `DualEncoder` whose towers are keras-hub's `CLIPVisionEncoder` / `CLIPTextEncoder` (built directly
from the configuration, random weights, no download) wrapped as kitm's `HubImageTower` / `HubTextTower`, the
DualEncoder's projections into the joint space, `InfoNCELoss` (learnable temperature) and Keras' AdamW, one step
= `model.train_on_batch(x, y)` (the tf.function Keras compiles for `fit`) on tensors made before the timing.

The peer: open_clip's own `CLIP` model of the same configuration (`open_clip.get_model_config(...)`; ViT-B/32 with
quick GELU, which is the activation keras-hub's CLIP encoders use), open_clip's `ClipLoss`, `torch.optim.AdamW`
with the same settings; one step = forward, loss, `zero_grad`, `backward`, `step`, as open_clip's `train_one_epoch`
does (without AMP: this is a CPU). Torch gets 1 thread by default (`--torch_threads`, as the other side-by-side
benchmarks: on 2 shared cores its 2 OpenMP threads run much slower than 1 when another job runs);
`--torch_threads 2` gives it TensorFlow's count, the fair comparison on a machine of its own. TensorFlow keeps its
default threads. `--phases` adds forward + loss, forward + loss + gradient and the optimizer update alone.

Throughput (`encode_image`, `encode_text`): kitm's SavedModel (`kitm.serving.export_saved_model`, with a CLIP BPE
tokenizer of the real 49,408-token vocabulary, built from open_clip's own `bpe_simple_vocab_16e6.txt.gz`) on a
batch of JPEG bytes and of raw caption strings, against open_clip in eval mode under `torch.no_grad()`, like for
like: PIL decode + resize to the image size + normalise for images, open_clip's own tokenizer for captions (rows
"... raw"); and open_clip on ready tensors alone (rows "... tensors": the model only, the peer's best case).

open_clip is not a kitm dependency: install it for this benchmark only, beside the venv's torch, e.g.

    pip install --no-deps --target /tmp/oc open_clip_torch==3.3.0 ftfy wcwidth

(regex, huggingface_hub, safetensors, tqdm are already in kitm's venv; timm is not needed for CLIP ViTs) and pass
`--open_clip_path /tmp/oc` (default) or put it on PYTHONPATH. open_clip imports torchvision at import time; no
torchvision wheel works with this CPU torch (2.13's only one is a CUDA build whose `_C` fails to load), so when
`import torchvision` fails this script puts a stand-in into `sys.modules` before importing open_clip: placeholder
classes for the names `open_clip.transform` imports (its image transforms; they raise if ever called) and for
`torchvision.ops.misc.FrozenBatchNorm2d` (used only to freeze ResNet towers). Nothing timed goes through them: the
model, the loss and the optimizer step are open_clip's and torch's own code. The script says when it used it.

    python benchmarks/bench_clip_step.py [--batch 32] [--repeats 3] [--quick]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import types

import _sidebyside as side
import numpy as np

FULL = {"name": "ViT-B-32-quickgelu", "batch": 32}
# Tiny CLIP for the smoke test: the same structure, 32 px images, 2 layers of width 32, 16 tokens (the real vocabulary,
# so the same tokenizers serve both modes).
QUICK_CONFIG = {"embed_dim": 16, "quick_gelu": True,
                "vision_cfg": {"image_size": 32, "layers": 2, "width": 32, "head_width": 16, "patch_size": 8},
                "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2}}


# ---------------------------------------------------------------------------------------------------------------
# open_clip, imported from its own target directory, with a torchvision stand-in where torchvision cannot load.

def _torchvision_standin() -> None:
    """Placeholders for what open_clip imports from torchvision at import time (module docstring)."""
    import enum

    import torch

    def placeholder(name):
        def fail(*args, **kwargs):
            raise RuntimeError(f"torchvision.{name} is a stand-in in bench_clip_step.py (torchvision does not load "
                               "here); open_clip's image transforms are not available in this benchmark.")
        return type(name, (), {"__init__": fail, "__call__": fail})

    class InterpolationMode(enum.Enum):
        NEAREST = "nearest"
        BILINEAR = "bilinear"
        BICUBIC = "bicubic"
        LANCZOS = "lanczos"

    class FrozenBatchNorm2d(torch.nn.Module):
        def __init__(self, *args, **kwargs):
            raise RuntimeError("torchvision.ops.misc.FrozenBatchNorm2d is a stand-in in bench_clip_step.py.")

    root = types.ModuleType("torchvision")
    root.__version__ = "0.0-standin"
    transforms = types.ModuleType("torchvision.transforms")
    for name in ("Normalize", "Compose", "RandomResizedCrop", "ToTensor", "Resize", "CenterCrop", "ColorJitter",
                 "Grayscale"):
        setattr(transforms, name, placeholder(f"transforms.{name}"))
    transforms.InterpolationMode = InterpolationMode
    functional = types.ModuleType("torchvision.transforms.functional")
    def functional_attribute(name):  # F.resize, F.pad, ...: called by transforms only
        if name.startswith("_"):
            raise AttributeError(name)
        return placeholder(f"transforms.functional.{name}")

    functional.__getattr__ = functional_attribute
    ops = types.ModuleType("torchvision.ops")
    misc = types.ModuleType("torchvision.ops.misc")
    misc.FrozenBatchNorm2d = FrozenBatchNorm2d
    root.transforms, transforms.functional, root.ops, ops.misc = transforms, functional, ops, misc
    sys.modules.update({"torchvision": root, "torchvision.transforms": transforms,
                        "torchvision.transforms.functional": functional, "torchvision.ops": ops,
                        "torchvision.ops.misc": misc})


def import_open_clip(path: str):
    """(open_clip, a note on how it was imported)."""
    if path and os.path.isdir(path) and path not in sys.path:
        sys.path.insert(0, path)
    note = "real torchvision"
    try:
        import torchvision  # noqa: F401
    except Exception as error:  # noqa: BLE001 - absent, or the CUDA build whose _C fails to load
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
        try:  # open_clip imports transformers, which probes for torchvision at import time: let it see none
            import transformers  # noqa: F401
        except ImportError:
            pass
        _torchvision_standin()
        note = (f"torchvision STAND-IN (import torchvision failed: {type(error).__name__}: {str(error)[:80]}); "
                "only open_clip's transforms and FrozenBatchNorm2d are placeholders, the timed model/loss/optimizer "
                "code is open_clip's and torch's own")
    try:
        import open_clip
    except ImportError as error:
        raise SystemExit(
            f"open_clip is not importable ({error}). It is not a kitm dependency; install it for this benchmark only:\n"
            f"  pip install --no-deps --target {path or '/tmp/oc'} open_clip_torch==3.3.0 ftfy wcwidth\n"
            "and pass --open_clip_path (default /tmp/oc).") from None
    return open_clip, f"open_clip {open_clip.__version__} from {os.path.dirname(os.path.dirname(open_clip.__file__))}; {note}"


# ---------------------------------------------------------------------------------------------------------------
# The two models of one configuration.

def peer_model(open_clip, config: dict, seed: int = 0):
    import torch

    torch.manual_seed(seed)
    return open_clip.CLIP(**config)


def clip_tokenizer(open_clip):
    """keras-hub's CLIPTokenizer with CLIP's 49,408-token vocabulary, built as open_clip's SimpleTokenizer builds it
    from the merges file open_clip ships (no download)."""
    import gzip

    import keras_hub
    from open_clip.tokenizer import bytes_to_unicode, default_bpe

    with gzip.open(default_bpe()) as file:
        merges = file.read().decode("utf-8").split("\n")[1:49152 - 256 - 2 + 1]
    byte_tokens = list(bytes_to_unicode().values())
    tokens = byte_tokens + [t + "</w>" for t in byte_tokens] + ["".join(m.split()) for m in merges]
    tokens += ["<|startoftext|>", "<|endoftext|>"]
    return keras_hub.tokenizers.CLIPTokenizer(vocabulary={t: i for i, t in enumerate(tokens)}, merges=merges)


def kitm_model(config: dict, *, learning_rate: float, weight_decay: float, seed: int = 0, fused: bool = True):
    """The DualEncoder with keras-hub CLIP towers of `config` (open_clip's configuration dict), compiled."""
    import keras
    import keras_hub

    from kitm.layers.hub_presets import FAMILY_NORMALIZATION
    from kitm.layers.hub_towers import HubImageTower, HubTextTower
    from kitm.losses import InfoNCELoss
    from kitm.models import DualEncoder

    keras.utils.set_random_seed(seed)
    vision, text = config["vision_cfg"], config["text_cfg"]
    vision_width = vision["width"]
    vision_heads = vision_width // vision.get("head_width", 64)  # open_clip's default head width is 64
    image_encoder = keras_hub.models.CLIPVisionEncoder(
        patch_size=vision["patch_size"], hidden_dim=vision_width, num_layers=vision["layers"], num_heads=vision_heads,
        intermediate_dim=int(vision_width * vision.get("mlp_ratio", 4.0)),
        image_shape=(vision["image_size"], vision["image_size"], 3))
    text_encoder = keras_hub.models.CLIPTextEncoder(
        vocabulary_size=text["vocab_size"], embedding_dim=text["width"], hidden_dim=text["width"],
        num_layers=text["layers"], num_heads=text["heads"], intermediate_dim=int(text["width"] * text.get("mlp_ratio", 4.0)),
        max_sequence_length=text["context_length"])
    mean, std = FAMILY_NORMALIZATION["clip"]
    model = DualEncoder(
        HubImageTower(image_encoder, "clip", [1.0 / s for s in std], [-m / s for m, s in zip(mean, std)],
                      name="image_backbone"),
        HubTextTower(text_encoder, "clip", name="text_backbone"), config["embed_dim"], name="dual_encoder")
    from kitm.training.fused_adam import FusedAdam

    # kitm's launcher uses the fused update for keras-hub towers (--fused_update=auto); --optimizer=keras: Keras' AdamW.
    optimizer = (FusedAdam if fused else keras.optimizers.AdamW)(learning_rate, weight_decay=weight_decay, beta_1=0.9,
                                                                 beta_2=0.98, epsilon=1e-6)
    model.compile(optimizer, losses={"infonce": InfoNCELoss()})
    return model


def make_batch(config: dict, batch: int, seed: int = 0) -> dict:
    """Images in [0, 1] [B, S, S, 3] and token ids [B, T]: <start>, random tokens, <end> (the largest id, where both
    sides pool), zeros after, captions of 8-20 tokens (clipped to T)."""
    rng = np.random.default_rng(seed)
    size, length, vocab = (config["vision_cfg"]["image_size"], config["text_cfg"]["context_length"],
                           config["text_cfg"]["vocab_size"])
    images = rng.random((batch, size, size, 3), dtype=np.float32)
    tokens = np.zeros((batch, length), np.int64)
    for row in range(batch):
        words = min(int(rng.integers(8, 21)), length - 2)
        tokens[row, 0] = vocab - 2
        tokens[row, 1:1 + words] = rng.integers(1, vocab - 2, size=words)
        tokens[row, 1 + words] = vocab - 1
    return {"images": images, "tokens": tokens}


# ---------------------------------------------------------------------------------------------------------------
# Throughput inputs: JPEG bytes and captions.

CAPTION_WORDS = ("a dog runs on the beach near the water while a man throws a red ball and two children watch from "
                 "the sand under a blue sky with white clouds").split()


def make_jpegs(count: int, size: tuple[int, int] = (320, 240), seed: int = 0) -> list[bytes]:
    from PIL import Image

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        low = rng.random((size[1] // 16, size[0] // 16, 3))
        pixels = np.kron(low, np.ones((16, 16, 1))) + 0.1 * rng.random((size[1], size[0], 3))
        buffer = io.BytesIO()
        Image.fromarray(np.clip(pixels * 230, 0, 255).astype(np.uint8)).save(buffer, "JPEG", quality=90)
        out.append(buffer.getvalue())
    return out


def make_captions(count: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(CAPTION_WORDS, size=int(rng.integers(8, 16)))).capitalize() + "."
            for _ in range(count)]


def throughput_rows(label: str, kitm_fn, peer_fn, items: int, *, repeats: int, warmup: int):
    comparison = side.interleaved(label, kitm_fn, peer_fn, repeats=repeats, warmup=warmup)
    kitm_rate, peer_rate = items / statistics.median(comparison.kitm), items / statistics.median(comparison.peer)
    print(f"  {label}: kitm {kitm_rate:.1f}/s, peer {peer_rate:.1f}/s over batches of {items}", flush=True)
    return comparison, kitm_rate, peer_rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=None, help="training batch (default 32; quick 8)")
    parser.add_argument("--encode_batch", type=int, default=None, help="throughput batch (default 32; quick 8)")
    parser.add_argument("--repeats", type=int, default=3, help="timed pairs per row")
    parser.add_argument("--warmup", type=int, default=1, help="untimed calls of each side before the pairs")
    parser.add_argument("--torch_threads", type=int, default=1, help="the peer's threads (0: torch's default)")
    parser.add_argument("--open_clip_path", default="/tmp/oc", help="where open_clip_torch was pip-installed")
    parser.add_argument("--phases", action="store_true", help="also time forward / gradient / apply on both sides")
    parser.add_argument("--skip_throughput", action="store_true")
    parser.add_argument("--optimizer", default="fused", choices=["fused", "keras"],
                        help="kitm's AdamW: fused (kitm.training.fused_adam, the launcher's choice for keras-hub "
                             "towers) or Keras' own")
    parser.add_argument("--quick", action="store_true", help="tiny CLIP, 2 pairs: the smoke test")
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.warmup = 2, 1
    batch = args.batch or (8 if args.quick else FULL["batch"])
    encode_batch = args.encode_batch or (8 if args.quick else 32)

    import tensorflow as tf
    import torch

    open_clip, how = import_open_clip(args.open_clip_path)
    config = QUICK_CONFIG if args.quick else open_clip.get_model_config(FULL["name"])
    print(f"CLIP step: {'quick tiny CLIP' if args.quick else FULL['name']} {config}, batch {batch}")
    print(how)
    print(side.configure_threads(args.torch_threads))
    print(f"TensorFlow {tf.__version__}, torch {torch.__version__} ({torch.get_num_threads()} threads)")
    print("before: " + side.load_average(), flush=True)

    lr, wd = 5e-4, 0.2
    data = make_batch(config, batch)
    x = {"image": tf.constant(data["images"]), "tokens": {"token_ids": tf.constant(data["tokens"], tf.int32)}}
    y = {"image_index": tf.range(batch, dtype=tf.int32)}
    model = kitm_model(config, learning_rate=lr, weight_decay=wd, fused=args.optimizer == "fused")
    print(f"kitm optimizer: {type(model.optimizer).__name__}", flush=True)
    model.build_from_inputs({"image": tf.TensorSpec([None, *data["images"].shape[1:]], tf.float32),
                             "tokens": {"token_ids": tf.TensorSpec([None, data["tokens"].shape[1]], tf.int32)}})

    peer = peer_model(open_clip, config)
    peer.train()
    peer_loss = open_clip.ClipLoss()
    peer_optimizer = torch.optim.AdamW(peer.parameters(), lr=lr, weight_decay=wd, betas=(0.9, 0.98), eps=1e-6)
    mean, std = torch.tensor(open_clip.OPENAI_DATASET_MEAN).view(1, 3, 1, 1), torch.tensor(
        open_clip.OPENAI_DATASET_STD).view(1, 3, 1, 1)
    # open_clip's dataloader hands over normalised NCHW tensors; kitm's tower normalises inside (part of its step).
    peer_images = ((torch.from_numpy(data["images"]).permute(0, 3, 1, 2) - mean) / std).contiguous()
    peer_tokens = torch.from_numpy(data["tokens"])
    kitm_params = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    peer_params = sum(p.numel() for p in peer.parameters())
    print(f"parameters: kitm {kitm_params:,}, open_clip {peer_params:,}", flush=True)

    def kitm_step():
        model.train_on_batch(x, y)

    def peer_step():  # open_clip's train_one_epoch, without AMP
        image_features, text_features, logit_scale = peer(peer_images, peer_tokens)
        loss = peer_loss(image_features, text_features, logit_scale)
        peer_optimizer.zero_grad()
        loss.backward()
        peer_optimizer.step()
        with torch.no_grad():  # open_clip clamps the scale after each step
            peer.logit_scale.clamp_(0, np.log(100))

    results = [side.interleaved("train step", kitm_step, peer_step, repeats=args.repeats, warmup=args.warmup,
                                unit="s")]
    if args.phases:
        results += time_phases(model, x, y, peer, peer_loss, peer_optimizer, peer_images, peer_tokens, args)

    rates = []
    if not args.skip_throughput:
        rates = throughput(model, config, peer, open_clip, encode_batch, args)
        results += [r[0] for r in rates]
    side.print_summary(results, note="; below 1: kitm faster")
    for comparison, kitm_rate, peer_rate in rates:
        print(f"  {comparison.label}: kitm {kitm_rate:.1f}/s, peer {peer_rate:.1f}/s")


def time_phases(model, x, y, peer, peer_loss, peer_optimizer, peer_images, peer_tokens, args):
    """Forward (+ loss), forward + gradient, and apply alone, on both sides."""
    import tensorflow as tf
    import torch

    loss_fn = model.loss_functions["infonce"]
    variables = model.optimizer_variables()

    @tf.function
    def kitm_forward():
        return loss_fn.compute_terms(y, model(x, training=True))

    @tf.function
    def kitm_gradient():
        with tf.GradientTape() as tape:
            terms = loss_fn.compute_terms(y, model(x, training=True))
            total = tf.add_n([tf.reduce_sum(v) for v in terms.values()])
        return tape.gradient(total, variables)

    grads = kitm_gradient()

    @tf.function(autograph=False)  # no control flow; autograph only warns about the closure over `grads`
    def kitm_apply():
        model.optimizer.apply_gradients(zip(grads, variables))

    def peer_forward():
        with torch.enable_grad():
            return peer_loss(*peer(peer_images, peer_tokens))

    def peer_gradient():
        peer_optimizer.zero_grad()
        peer_loss(*peer(peer_images, peer_tokens)).backward()

    peer_gradient()

    def peer_apply():
        peer_optimizer.step()

    return [side.interleaved("forward+loss", kitm_forward, peer_forward, repeats=args.repeats, warmup=args.warmup,
                             unit="s"),
            side.interleaved("forward+loss+gradient", kitm_gradient, peer_gradient, repeats=args.repeats,
                             warmup=args.warmup, unit="s"),
            side.interleaved("optimizer apply", kitm_apply, peer_apply, repeats=args.repeats, warmup=args.warmup)]


def throughput(model, config, peer, open_clip, batch, args):
    import tensorflow as tf
    import torch
    from PIL import Image

    from kitm.layers.hub_tokenizers import HubCaptionTokenizer
    from kitm.serving import export_saved_model

    size, length = config["vision_cfg"]["image_size"], config["text_cfg"]["context_length"]
    tokenizer = HubCaptionTokenizer(clip_tokenizer(open_clip), "clip", length, name="tokenizer")
    directory = tempfile.mkdtemp(prefix="bench_clip_")
    path = export_saved_model(model, tokenizer, os.path.join(directory, "1"), image_size=size)
    served = tf.saved_model.load(path)
    encode_image, encode_text = served.signatures["encode_image"], served.signatures["encode_text"]
    jpegs, captions = make_jpegs(batch), make_captions(batch)
    jpeg_tensor, caption_tensor = tf.constant(jpegs), tf.constant(captions)
    print(f"SavedModel at {path}; encode batches of {batch}: JPEGs 320x240 -> {size}, captions of 8-15 words",
          flush=True)

    peer.eval()
    peer_tokenizer = open_clip.tokenizer.SimpleTokenizer(context_length=length)
    mean = np.array(open_clip.OPENAI_DATASET_MEAN, np.float32)
    std = np.array(open_clip.OPENAI_DATASET_STD, np.float32)

    def peer_pixels(blobs):  # decode, resize the whole image (kitm's eval_crop_fraction 1.0), normalise, NCHW
        arrays = [np.asarray(Image.open(io.BytesIO(b)).convert("RGB").resize((size, size), Image.BICUBIC),
                             np.float32) for b in blobs]
        return torch.from_numpy(((np.stack(arrays) / 255.0 - mean) / std).transpose(0, 3, 1, 2).copy())

    ready_pixels, ready_tokens = peer_pixels(jpegs), peer_tokenizer(captions)

    def peer_image_raw():
        with torch.no_grad():
            peer.encode_image(peer_pixels(jpegs), normalize=True)

    def peer_text_raw():
        with torch.no_grad():
            peer.encode_text(peer_tokenizer(captions), normalize=True)

    def peer_image_ready():
        with torch.no_grad():
            peer.encode_image(ready_pixels, normalize=True)

    def peer_text_ready():
        with torch.no_grad():
            peer.encode_text(ready_tokens, normalize=True)

    def kitm_image():
        encode_image(images=jpeg_tensor)["embeddings"].numpy()

    def kitm_text():
        encode_text(captions=caption_tensor)["embeddings"].numpy()

    kw = {"repeats": args.repeats, "warmup": args.warmup}
    return [throughput_rows("encode_image raw (JPEG bytes; peer: PIL decode+resize+normalise)", kitm_image,
                            peer_image_raw, batch, **kw),
            throughput_rows("encode_image tensors (peer: model only, ready tensors)", kitm_image, peer_image_ready,
                            batch, **kw),
            throughput_rows("encode_text raw (strings; peer: open_clip's tokenizer)", kitm_text, peer_text_raw,
                            batch, **kw),
            throughput_rows("encode_text tensors (peer: model only, ready token ids)", kitm_text, peer_text_ready,
                            batch, **kw)]


if __name__ == "__main__":
    main()
