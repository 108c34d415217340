"""Shared by the side-by-side benchmarks (kitm against a peer on the same work, in one process, interleaved).

* `interleaved(kitm_fn, peer_fn, ...)`: after warm-up calls of both, alternates timed blocks of kitm and the peer
  (kitm first in even pairs, the peer first in odd ones, so a drift in the machine's load hits both sides alike),
  prints each pair's times and ratio, and returns the medians and the spread of the ratio.
* `VSEPPReference`: the VSE++ reference model re-created in PyTorch, faithfully to fartashf/vsepp `model.py`
  (commit abe382f, read from a fetched mirror: `EncoderImagePrecomp`, `EncoderText`, `ContrastiveLoss`, the
  `VSE.train_emb` step). Its module cannot be imported as it stands (it imports torchvision at the top, calls
  `.cuda()` unconditionally in `EncoderText.forward`, and `forward_loss` uses the pre-0.4 `loss.data[0]`), so the
  classes below repeat its computations line for line on the CPU; nothing of it is in kitm.
* `kitm_vsepp_model`: kitm's equivalent, a `DualEncoder` whose image tower passes the precomputed features through
  (the DualEncoder's own projection + L2 norm is VSE++'s `EncoderImagePrecomp`) and whose text tower is
  `GRUTextEncoder(bidirectional=False)`; the DualEncoder also projects the GRU state (one 1024 x 1024 dense layer
  the reference does not have: about 2% of the step's FLOPs at the issue's sizes).
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402


def configure_threads(torch_threads: int) -> str:
    """Torch's intra-op threads (OpenMP). On 2 cores shared with other jobs, torch's 2 OpenMP threads ran its VSE++
    step 5-7x slower than 1 thread (14-40 s against 2-4 s at load average 8: the threads wait for each other at
    every op's barrier), so the step benchmarks give the peer 1 thread by default; TensorFlow keeps its default."""
    import torch

    if torch_threads > 0:
        torch.set_num_threads(torch_threads)
    return f"torch threads {torch.get_num_threads()} (--torch_threads), TensorFlow default threads"


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} cores)"


@dataclass
class Comparison:
    label: str
    kitm: list
    peer: list

    @property
    def ratios(self) -> list:
        return [k / p for k, p in zip(self.kitm, self.peer)]

    def summary(self) -> str:
        r = self.ratios
        return (f"{self.label}: kitm {statistics.median(self.kitm) * 1e3:.1f} ms, peer "
                f"{statistics.median(self.peer) * 1e3:.1f} ms; kitm/peer median {statistics.median(r):.2f} "
                f"(spread {min(r):.2f}-{max(r):.2f} over {len(r)} pairs)")


def print_summary(results, note: str = "") -> None:
    """The closing lines every side-by-side script prints: the load after, then each comparison's summary."""
    print("after: " + load_average())
    print(f"summary (kitm/peer, median of pairs{note}):")
    for result in results:
        print("  " + result.summary())


def interleaved(label: str, kitm_fn, peer_fn, *, repeats: int, per_block: int = 1, warmup: int = 2,
                unit: str = "ms", verbose: bool = True) -> Comparison:
    """Seconds per call of each side, `repeats` pairs of `per_block` calls each, after `warmup` calls of each."""
    for _ in range(warmup):
        kitm_fn()
        peer_fn()
    kitm_times, peer_times = [], []

    def block(fn):
        started = time.perf_counter()
        for _ in range(per_block):
            fn()
        return (time.perf_counter() - started) / per_block

    for pair in range(repeats):
        if pair % 2 == 0:
            k = block(kitm_fn)
            p = block(peer_fn)
        else:
            p = block(peer_fn)
            k = block(kitm_fn)
        kitm_times.append(k)
        peer_times.append(p)
        if verbose:
            scale, suffix = (1e3, "ms") if unit == "ms" else (1.0, "s")
            print(f"  {label} pair {pair}: kitm {k * scale:8.1f} {suffix}  peer {p * scale:8.1f} {suffix}  "
                  f"ratio {k / p:5.2f}", flush=True)
    comparison = Comparison(label, kitm_times, peer_times)
    print("  " + comparison.summary(), flush=True)
    return comparison


# ---------------------------------------------------------------------------------------------------------------
# Shapes: VSE++ on precomputed ResNet features (the sizes) and a quick smoke-test size.

@dataclass(frozen=True)
class Shapes:
    batch: int = 128
    image_dim: int = 2048
    embed: int = 1024
    word_dim: int = 300
    vocabulary: int = 10_000
    mean_words: float = 10.5  # COCO captions; the reference adds <start> and <end> tokens


FULL = Shapes()
QUICK = Shapes(batch=16, image_dim=64, embed=32, word_dim=16, vocabulary=500)


def caption_lengths(rng: np.random.Generator, batch: int, shapes: Shapes) -> np.ndarray:
    """Token counts of one batch (words + <start> + <end>), sorted longest first as VSE++'s collate_fn sorts."""
    words = np.clip(np.round(rng.normal(shapes.mean_words, 2.4, size=batch)), 5, 30).astype(np.int64)
    return np.sort(words + 2)[::-1].copy()


def make_batches(count: int, shapes: Shapes, seed: int = 0, pad_to: int | None = None,
                 equal_lengths: bool = False) -> list:
    """`count` batches of {features [B, F] (unit rows), tokens [B, T] (0-padded), lengths [B]}; T is the longest
    caption over all batches (or `pad_to`), so kitm's compiled step sees one shape. `equal_lengths`: every caption
    of a batch as long as the batch's mean (a packed GRU then skips nothing; the same work on both sides)."""
    rng = np.random.default_rng(seed)
    lengths = [caption_lengths(rng, shapes.batch, shapes) for _ in range(count)]
    if equal_lengths:
        lengths = [np.full_like(lens, int(round(lens.mean()))) for lens in lengths]
    width = pad_to or max(int(lens[0]) for lens in lengths)
    batches = []
    for lens in lengths:
        features = rng.standard_normal((shapes.batch, shapes.image_dim)).astype(np.float32)
        features /= np.linalg.norm(features, axis=1, keepdims=True)
        tokens = np.zeros((shapes.batch, width), np.int32)
        for row, length in enumerate(lens):
            tokens[row, :min(length, width)] = rng.integers(2, shapes.vocabulary, size=min(length, width))
        batches.append({"features": features, "tokens": tokens, "lengths": np.minimum(lens, width)})
    return batches


# ---------------------------------------------------------------------------------------------------------------
# The VSE++ reference, re-created in PyTorch (module docstring).

def vsepp_reference(shapes: Shapes, *, margin: float = 0.2, grad_clip: float = 2.0, learning_rate: float = 2e-4,
                    seed: int = 0):
    import torch
    from torch import nn
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    torch.manual_seed(seed)

    def l2norm(x):
        norm = torch.pow(x, 2).sum(dim=1, keepdim=True).sqrt()
        return torch.div(x, norm)

    class EncoderImagePrecomp(nn.Module):
        def __init__(self, img_dim, embed_size):
            super().__init__()
            self.fc = nn.Linear(img_dim, embed_size)
            r = np.sqrt(6.) / np.sqrt(self.fc.in_features + self.fc.out_features)  # Xavier, as init_weights
            self.fc.weight.data.uniform_(-r, r)
            self.fc.bias.data.fill_(0)

        def forward(self, images):
            return l2norm(self.fc(images))

    class EncoderText(nn.Module):
        def __init__(self, vocab_size, word_dim, embed_size, num_layers=1):
            super().__init__()
            self.embed_size = embed_size
            self.embed = nn.Embedding(vocab_size, word_dim)
            self.rnn = nn.GRU(word_dim, embed_size, num_layers, batch_first=True)
            self.embed.weight.data.uniform_(-0.1, 0.1)

        def forward(self, x, lengths):
            x = self.embed(x)
            packed = pack_padded_sequence(x, lengths, batch_first=True)
            out, _ = self.rnn(packed)
            padded = pad_packed_sequence(out, batch_first=True)
            index = torch.LongTensor(lengths).view(-1, 1, 1)
            index = index.expand(x.size(0), 1, self.embed_size) - 1
            out = torch.gather(padded[0], 1, index).squeeze(1)
            return l2norm(out)

    class ContrastiveLoss(nn.Module):
        def __init__(self, margin=0.0, max_violation=False):
            super().__init__()
            self.margin, self.max_violation = margin, max_violation

        def forward(self, im, s):
            scores = im.mm(s.t())
            diagonal = scores.diag().view(im.size(0), 1)
            d1 = diagonal.expand_as(scores)
            d2 = diagonal.t().expand_as(scores)
            cost_s = (self.margin + scores - d1).clamp(min=0)
            cost_im = (self.margin + scores - d2).clamp(min=0)
            mask = torch.eye(scores.size(0)) > .5
            cost_s = cost_s.masked_fill_(mask, 0)
            cost_im = cost_im.masked_fill_(mask, 0)
            if self.max_violation:
                cost_s = cost_s.max(1)[0]
                cost_im = cost_im.max(0)[0]
            return cost_s.sum() + cost_im.sum()

    class VSE:
        def __init__(self):
            self.grad_clip = grad_clip
            self.img_enc = EncoderImagePrecomp(shapes.image_dim, shapes.embed)
            self.txt_enc = EncoderText(shapes.vocabulary, shapes.word_dim, shapes.embed)
            self.criterion = ContrastiveLoss(margin=margin, max_violation=True)
            self.params = list(self.txt_enc.parameters()) + list(self.img_enc.fc.parameters())
            self.optimizer = torch.optim.Adam(self.params, lr=learning_rate)
            self.img_enc.train()
            self.txt_enc.train()

        def forward_emb(self, images, captions, lengths):
            return self.img_enc(images), self.txt_enc(captions, lengths)

        def train_emb(self, images, captions, lengths, extra_loss=None):
            """`VSE.train_emb`; `extra_loss(img_emb, cap_emb)` adds a term (the SAM reference's metric loss)."""
            img_emb, cap_emb = self.forward_emb(images, captions, lengths)
            self.optimizer.zero_grad()
            loss = self.criterion(img_emb, cap_emb)
            if extra_loss is not None:
                loss = loss + extra_loss(img_emb, cap_emb)
            loss.backward()
            if self.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(self.params, self.grad_clip)
            self.optimizer.step()
            return loss.item()

    return VSE()


def torch_batch(batch: dict) -> dict:
    """The reference's inputs: float features, int64 token ids trimmed to the batch's longest caption (its collate
    pads to that), lengths as a Python list (what `pack_padded_sequence` and `EncoderText.forward` take)."""
    import torch

    lengths = [int(v) for v in batch["lengths"]]
    return {"images": torch.from_numpy(batch["features"]),
            "captions": torch.from_numpy(batch["tokens"][:, :max(lengths)].astype(np.int64)),
            "lengths": lengths}


# ---------------------------------------------------------------------------------------------------------------
# kitm's equivalent.

def kitm_vsepp_model(shapes: Shapes, losses: dict, *, jit_compile=False, learning_rate: float = 2e-4,
                     grad_clip: float = 2.0, image_tower: str = "identity", text_width: int | None = None,
                     recurrence: str = "auto", fused_update: bool = True):
    """kitm's side with kitm's defaults (the launcher's): the GRU's recurrence "auto" (packed where it trims, masked
    under XLA) and Adam's update as TensorFlow's fused kernel (`FusedAdam`); `recurrence="masked"` and
    `fused_update=False` give the slower forms that earlier rows measured."""
    import keras

    from kitm.layers import GRUTextEncoder
    from kitm.layers.image_encoders import FeatureMLP
    from kitm.models import DualEncoder
    from kitm.training.fused_adam import FusedAdam

    keras.utils.set_random_seed(0)
    image_encoder = keras.layers.Identity(name="image_backbone") if image_tower == "identity" else \
        FeatureMLP(shapes.embed, name="image_backbone")
    # XLA needs static shapes: the encoder keeps the fixed width there, as kitm's launcher builds it.
    text_encoder = GRUTextEncoder(shapes.vocabulary, shapes.word_dim, shapes.embed, bidirectional=False,
                                  trim_padding=jit_compile is not True, recurrence=recurrence,
                                  name="text_backbone")
    model = DualEncoder(image_encoder, text_encoder, shapes.embed, name="dual_encoder")
    optimizer = (FusedAdam if fused_update else keras.optimizers.Adam)(learning_rate, global_clipnorm=grad_clip)
    model.compile(optimizer, losses=losses, jit_compile=jit_compile)
    return model


def kitm_inputs(batch: dict, extra_y: dict | None = None):
    """(x, y) as tensors, converted once outside the timed region (the tf.data pipeline hands tensors over)."""
    import tensorflow as tf

    size = batch["features"].shape[0]
    x = {"image": tf.constant(batch["features"]), "tokens": tf.constant(batch["tokens"])}
    y = {"image_index": tf.range(size, dtype=tf.int32), **(extra_y or {})}
    return x, y
