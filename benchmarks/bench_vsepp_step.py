"""One VSE++ training step on precomputed features: kitm against the VSE++ reference in PyTorch, interleaved.

The reference is fartashf/vsepp `model.py` re-created in PyTorch (`_sidebyside.vsepp_reference`: precomputed-feature
image encoder = Linear + l2norm, word embedding + unidirectional GRU with packed sequences, max-violation contrastive
loss, Adam, gradient clip 2.0). kitm's side is a `DualEncoder` with a pass-through image tower (its projection + L2
norm is the reference's image encoder), `GRUTextEncoder(bidirectional=False)`, `TripletLoss(max_violation=True)`,
Adam with `global_clipnorm=2.0`, trained with `train_on_batch` on tensors. Same shapes: batch 128, 2048-d features
-> 1024, word dim 300, GRU 1024, 10,000 words, COCO-like caption lengths (about 12.5 tokens with <start>/<end>).

Rows: kitm with its defaults (`keras_default`: Keras' jit_compile "auto", off on a CPU; the packed GRU; Adam's update as
TensorFlow's fused kernel), `masked` (the masked GRU and Keras' Adam update, the defaults before 2026-11-27), kitm with XLA (jit_compile=True; the GRU
then runs over the whole padded width, XLA needing static shapes), and kitm fed its pipeline's fixed caption width
(max_caption_length 32), which the GRU text encoder trims to each batch's longest caption (`trim_padding`; the
reference packs each caption to its own length). Each row prints every pair (kitm, peer), the median ratio and its
spread. The row "packed" is kitm with `GRUTextEncoder(recurrence="packed")`, which skips the rows whose caption
has ended, as the reference's packed sequences do (kitm.ops.packed_gru). The row "equal_lengths" gives every caption of a batch the batch's mean length, on both sides: the
reference's packed GRU then skips no padded step, so the two sides do the same work.

    python benchmarks/bench_vsepp_step.py [--repeats 7] [--steps 3] [--quick]
"""

from __future__ import annotations

import argparse
import itertools

import _sidebyside as side


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7, help="timed pairs per row")
    parser.add_argument("--steps", type=int, default=3, help="steps per timed block")
    parser.add_argument("--rows", default="keras_default,masked,xla,width32", help="which kitm variants to compare")
    parser.add_argument("--torch_threads", type=int, default=1, help="the peer's threads (0: torch's default)")
    parser.add_argument("--quick", action="store_true", help="tiny shapes, 2 pairs: the smoke test")
    args = parser.parse_args()
    shapes = side.QUICK if args.quick else side.FULL
    repeats, steps = (2, 1) if args.quick else (args.repeats, args.steps)
    rows = "keras_default,masked" if args.quick else args.rows  # quick: two rows, the smoke test's budget

    import tensorflow as tf
    import torch

    from kitm.losses import TripletLoss

    print(f"VSE++ step, batch {shapes.batch}, features {shapes.image_dim} -> {shapes.embed}, word dim "
          f"{shapes.word_dim}, GRU {shapes.embed}, vocabulary {shapes.vocabulary}")
    print(side.configure_threads(args.torch_threads))
    print(f"TensorFlow {tf.__version__}, torch {torch.__version__} ({torch.get_num_threads()} threads)")
    print("before: " + side.load_average(), flush=True)
    batches = side.make_batches(4, shapes)
    peer = side.vsepp_reference(shapes)

    def peer_step():
        b = next(peer_inputs)
        peer.train_emb(b["images"], b["captions"], b["lengths"])

    results = []
    # keras_default: what the launcher builds by default (Keras' jit "auto", the packed GRU, the fused Adam update);
    # masked: the masked GRU and Keras' Adam update, the defaults before 2026-11-27.
    variants = {"keras_default": dict(jit_compile="auto", pad_to=None),
                "masked": dict(jit_compile="auto", pad_to=None, recurrence="masked", fused_update=False),
                "packed": dict(jit_compile="auto", pad_to=None, recurrence="packed"),
                "xla": dict(jit_compile=True, pad_to=None),
                "width32": dict(jit_compile="auto", pad_to=32),
                "equal_lengths": dict(jit_compile="auto", pad_to=None, equal_lengths=True)}
    for row in rows.split(","):
        variant = variants[row]
        if variant.get("equal_lengths"):  # both sides get these batches: the peer's packing saves nothing
            kitm_batches = side.make_batches(4, shapes, equal_lengths=True)
            peer_inputs = itertools.cycle([side.torch_batch(b) for b in kitm_batches])
        else:
            kitm_batches = batches if variant["pad_to"] is None else side.make_batches(4, shapes, pad_to=32)
            peer_inputs = itertools.cycle([side.torch_batch(b) for b in batches])
        model = side.kitm_vsepp_model(shapes, {"triplet": TripletLoss(0.2, max_violation=True)},
                                      jit_compile=variant["jit_compile"],
                                      recurrence=variant.get("recurrence", "auto"),
                                      fused_update=variant.get("fused_update", True))
        inputs = itertools.cycle([side.kitm_inputs(b) for b in kitm_batches])

        def kitm_step():
            x, y = next(inputs)
            model.train_on_batch(x, y)

        width = kitm_batches[0]["tokens"].shape[1]
        label = f"kitm[{row}: jit_compile={variant['jit_compile']}, caption width {width}] vs VSE++ reference"
        print(label, flush=True)
        results.append(side.interleaved(row, kitm_step, peer_step, repeats=repeats, per_block=steps))
    side.print_summary(results)


if __name__ == "__main__":
    main()
