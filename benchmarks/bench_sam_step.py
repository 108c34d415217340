"""One SAM training step: kitm's `loss=["sam"]` step against the SAM reference's step in PyTorch, interleaved.

The reference (AndresPMD/semantic_adaptive_margin, `model_CVSE.py`): the triplet plus `cider_weight x
ContrastiveLossMetric`, whose `forward` draws the two negative index vectors (its default `metric_samples="random"`,
a Python list comprehension over the batch), then computes CIDEr-D in Python on every step with the reference's own
`CiderD` scorer (training-corpus idf from a pickled document-frequency table): three `compute_score` calls, for the
positive pairs and for each direction's negatives; the margins `min((pos - neg) / metric_div, 1)` are added to the
cost matrices, which are indexed with the sampled negatives. It is re-created here in PyTorch on the VSE++ model of
`bench_vsepp_step.py` (the reference trains CVSE; "same model shapes" on both sides is what matters), with its
defaults metric_div 3, cider_weight 5, margin 0.2, max violation, Adam, clip 2.0. The CIDEr-D scorer itself
(`cocoeval/pyciderevalcap/ciderD/ciderD_scorer.py`) is loaded at run time from a fetched mirror of the repository
(`--sam_mirror`, a bare git directory); without one, pycocoevalcap's `CiderScorer` stands in (same computation, the
batch's own idf) and the script says so.

kitm's side: `SAMLoss(tau=3, sampling="random", pairing="reference", sam_weight=5)` (what `--loss=sam` builds with
those settings) in a `DualEncoder` like the reference's, with y["relevance"] from the records: the batch's CIDEr-D
matrix built in the tf.data graph (`kitm.data.pipeline.batch_relevance_matrix`, `kitm.relevance.batch`) from the
features stored per record. The data is a synthetic world built with CIDEr-D relevance rows (`--data_dir`); the
captions, their token ids and the relevance features are those of its training batches, the image features random.

Rows: "step" times the step alone (the reference's margins looked up in the batch relevance matrix instead of its
per-step CIDEr-D; kitm fed y["relevance"]); "relevance" times kitm's relevance op on one raw batch against the
reference's three CIDEr-D calls; "step+relevance" times both together (kitm: the relevance op then the step, one
after the other; in training, tf.data overlaps it with the previous step); "step, equal lengths" times the step with
every caption of a batch at the batch's mean length, where the reference's packed GRU skips nothing (same work).

    python benchmarks/bench_sam_step.py [--repeats 7] [--steps 2] [--data_dir /tmp/kitm_bench/synthetic_cider] [--quick]
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import os
import pathlib
import pickle
import random
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

import numpy as np

import _sidebyside as side

DEFAULT_MIRROR = "/work/.mirror/AndresPMD+semantic_adaptive_margin/repo"
SCORER_FILES = ("cocoeval/pyciderevalcap/ciderD/ciderD_scorer.py", "cocoeval/pyciderevalcap/ciderD/ciderD.py")


def reference_cider_class(mirror: str, workdir: pathlib.Path):
    """The reference's `CiderD` class, from the mirror's files (git show), or None without a mirror."""
    if not mirror or not os.path.isdir(mirror):
        return None
    package = workdir / "sam_ciderD"
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text("")
    for path in SCORER_FILES:
        text = subprocess.run(["git", "--git-dir", mirror, "show", f"HEAD:{path}"], check=True, capture_output=True,
                              text=True).stdout
        (package / pathlib.Path(path).name).write_text(text)
    sys.path.insert(0, str(workdir))
    spec = importlib.util.find_spec("sam_ciderD.ciderD")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CiderD


def ensure_data(data_dir: pathlib.Path, num_scenes: int) -> None:
    from kitm.data import schema

    if (data_dir / schema.INFO_FILE).is_file():
        return
    from kitm.data.synthetic_records import build_synthetic

    started = time.perf_counter()
    build_synthetic(data_dir, num_scenes=num_scenes, seed=0, image_size=32, relevance=("cider",), progress=False)
    print(f"built {data_dir} in {time.perf_counter() - started:.1f} s")


def image_captions(data_dir: pathlib.Path) -> dict:
    """image id -> its reference captions (lower-cased, whitespace-split words joined: what the reference scores)."""
    from kitm.data.pipeline import PipelineConfig, _records

    _, records = _records(data_dir, "train", PipelineConfig(), training=False)
    groups = {}
    for parsed in records:
        groups[int(parsed["image/id"])] = [" ".join(c.decode().lower().split()) for c in parsed["captions"].numpy()]
    return groups


def write_document_frequency(groups: dict, path: pathlib.Path) -> None:
    """The reference's cached-tokens pickle: n-gram document frequencies over the training images, log(#images)."""
    document_frequency = defaultdict(float)
    for refs in groups.values():
        grams = set()
        for ref in refs:
            words = ref.split()
            for k in range(1, 5):
                grams.update(tuple(words[i:i + k]) for i in range(len(words) - k + 1))
        for gram in grams:
            document_frequency[gram] += 1
    with open(path, "wb") as handle:
        pickle.dump({"document_frequency": document_frequency, "ref_len": np.log(float(len(groups)))}, handle)


def reference_metric_loss(metric, *, metric_div=3.0, cider_weight=5.0, margin=0.2, lookup=None):
    """`cider_weight x ContrastiveLossMetric.forward` (model_CVSE.py), metric_samples="random".

    `metric` is the reference's CiderD (or None with `lookup`: the step alone, margins from the relevance matrix).
    """
    import torch

    del margin  # ContrastiveLossMetric is built with ContrastiveLoss's defaults; its forward adds no fixed margin

    def prepare_for_metric(caption_gts, caption_batch):
        res = [{"image_id": ix, "caption": [cap]} for ix, cap in enumerate(caption_batch)]
        gts = {ix: cap for ix, cap in enumerate(caption_gts)}
        return res, gts

    def forward_metric(caption_gts, caption_batch, neg_ix):
        res, gts = prepare_for_metric(caption_gts, caption_batch)
        pos_score = metric.compute_score(gts, res)[1]
        caption_batch = np.array(caption_batch)
        res, gts = prepare_for_metric(caption_gts, caption_batch[neg_ix[0]].tolist())
        neg_score_i2t = metric.compute_score(gts, res)[1]
        res, gts = prepare_for_metric(caption_gts, caption_batch[neg_ix[1]].tolist())
        neg_score_t2i = metric.compute_score(gts, res)[1]
        return pos_score, neg_score_i2t, neg_score_t2i

    def forward(im, s, caption_gts, caption_batch, relevance=None):
        scores = im.mm(s.t())
        diagonal = scores.diag().view(im.size(0), 1)
        d1 = diagonal.expand_as(scores)
        d2 = diagonal.t().expand_as(scores)
        cost_s = scores - d1
        cost_im = scores - d2
        indxs = [[j for j in np.arange(im.size()[0]) if j != i] for i in range(im.size()[0])]
        hard_neg_indexes = ([random.choice(elm) for elm in indxs], [random.choice(elm) for elm in indxs])
        if relevance is None:
            pos_score, neg_score_i2t, neg_score_t2i = forward_metric(caption_gts, caption_batch, hard_neg_indexes)
        else:  # the step alone: the same scores, looked up (relevance[p, q] of caption q to image p)
            rows = np.arange(len(caption_batch))
            pos_score = relevance[rows, rows]
            neg_score_i2t = relevance[rows, hard_neg_indexes[0]]
            neg_score_t2i = relevance[rows, hard_neg_indexes[1]]
        margin_s = torch.Tensor(pos_score - neg_score_t2i)
        margin_im = torch.Tensor(pos_score - neg_score_i2t)
        margin_s /= metric_div
        margin_im /= metric_div
        margin_s = margin_s.clamp(max=1.0)
        margin_im = margin_im.clamp(max=1.0)
        cost_s = (cost_s + margin_s).clamp(min=0)
        cost_im = (cost_im + margin_im).clamp(min=0)
        cost_s = cost_s[torch.arange(im.size(0)), hard_neg_indexes[0]]
        cost_im = cost_im[torch.arange(im.size(0)), hard_neg_indexes[1]]
        return cider_weight * (cost_s.sum() + cost_im.sum())

    return forward


def prepared_batches(data_dir, shapes, count, tokenizer, info):
    """Raw training batches sorted longest caption first (the reference's collate order), with token ids, features,
    the image's reference captions and kitm's relevance matrix."""
    import tensorflow as tf

    from kitm.data.pipeline import PipelineConfig, batch_relevance_matrix, batched_samples

    config = PipelineConfig(batch_size=shapes.batch, image_size=32, captions="all", relevance="cider", flip=False,
                            seed=0)
    _, samples = batched_samples(data_dir, "train", config)
    relevance_op = tf.function(lambda b: batch_relevance_matrix(b, "cider", info, 1))
    rng = np.random.default_rng(0)
    batches = []
    for raw in samples.take(count):
        raw.pop("image")
        tokens = tokenizer(raw["caption"]).numpy()
        order = np.argsort(-(tokens > 0).sum(axis=1), kind="stable")
        raw = tf.nest.map_structure(lambda t: tf.gather(t, order), raw)
        tokens = tokens[order]
        lengths = np.maximum((tokens > 0).sum(axis=1), 1)
        tokens[lengths == 1, 0] = np.where(tokens[lengths == 1, 0] == 0, 1, tokens[lengths == 1, 0])
        features = rng.standard_normal((shapes.batch, shapes.image_dim)).astype(np.float32)
        features /= np.linalg.norm(features, axis=1, keepdims=True)
        batches.append({"raw": raw, "tokens": tokens, "lengths": lengths, "features": features,
                        "image_index": raw["image_index"].numpy(),
                        "captions": [" ".join(c.decode().lower().split()) for c in raw["caption"].numpy()],
                        "relevance": relevance_op(raw).numpy()})
    return batches, relevance_op


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--steps", type=int, default=2, help="steps per timed block")
    parser.add_argument("--data_dir", default="/tmp/kitm_bench/synthetic_cider")
    parser.add_argument("--num_scenes", type=int, default=3000)
    parser.add_argument("--sam_mirror", default=DEFAULT_MIRROR, help="bare git dir of the SAM reference (fetched)")
    parser.add_argument("--jit_compile", default="auto", choices=["auto", "true", "false"])
    parser.add_argument("--recurrence", default="auto", choices=["auto", "masked", "packed"],
                        help="kitm's GRU: auto (kitm's default: packed, masked under XLA), masked (Keras' GRU) or "
                             "packed (skips finished rows, kitm.ops.packed_gru)")
    parser.add_argument("--fused_update", default="true", choices=["true", "false"],
                        help="Adam's update: TensorFlow's fused kernel (kitm's default) or Keras' (false)")
    parser.add_argument("--torch_threads", type=int, default=1, help="the peer's threads (0: torch's default)")
    parser.add_argument("--quick", action="store_true", help="tiny shapes and data, 2 pairs: the smoke test")
    args = parser.parse_args()
    shapes = side.QUICK if args.quick else side.FULL
    repeats, steps = (2, 1) if args.quick else (args.repeats, args.steps)
    data_dir = pathlib.Path(args.data_dir + ("_quick" if args.quick else ""))

    import tensorflow as tf
    import torch

    from kitm.data import schema
    from kitm.data.pipeline import training_captions
    from kitm.layers import CaptionTokenizer, build_vocabulary
    from kitm.losses import SAMLoss

    print(side.configure_threads(args.torch_threads))
    print("before: " + side.load_average(), flush=True)
    ensure_data(data_dir, 200 if args.quick else args.num_scenes)
    info = schema.load_info(data_dir)
    tokenizer = CaptionTokenizer(build_vocabulary(training_captions(data_dir)), max_length=32)
    # The model's vocabulary size as in the other step benchmarks; the world's words are its first ids.
    shapes = type(shapes)(**{**shapes.__dict__, "vocabulary": max(shapes.vocabulary, tokenizer.vocabulary_size)})
    batches, relevance_op = prepared_batches(data_dir, shapes, 4, tokenizer, info)
    groups = image_captions(data_dir)

    workdir = pathlib.Path(tempfile.mkdtemp(prefix="kitm_sam_bench_"))
    cider_class = reference_cider_class(args.sam_mirror, workdir)
    if cider_class is not None:
        write_document_frequency(groups, workdir / "train-words.p")
        metric = cider_class(df=str(workdir / "train-words"))  # the reference opens os.path.join('data', df + '.p')
        print(f"reference CIDEr-D: CiderD from the mirror {args.sam_mirror} (training-corpus idf, "
              f"{len(groups)} images)")
    else:
        from pycocoevalcap.cider.cider_scorer import CiderScorer

        class CorpusCider:  # the reference's CiderD API over pycocoevalcap's scorer (idf of the scored batch)
            def compute_score(self, gts, res):
                scorer = CiderScorer(n=4, sigma=6.0)
                for item in res:
                    scorer += (item["caption"][0], gts[item["image_id"]])
                return scorer.compute_score()

        metric = CorpusCider()
        print("reference CIDEr-D: no mirror found; pycocoevalcap CiderScorer stands in (batch idf)")
    print(f"SAM step, batch {shapes.batch}, features {shapes.image_dim} -> {shapes.embed}, GRU {shapes.embed}, "
          f"vocabulary {shapes.vocabulary}; {info.num_images('train')} training images; TensorFlow {tf.__version__}, "
          f"torch {torch.__version__}", flush=True)

    peer = side.vsepp_reference(shapes)
    full_loss = reference_metric_loss(metric)
    peer_batches = []
    for b in batches:
        tb = side.torch_batch(b)
        tb["gts"] = [groups[int(i)] for i in b["image_index"]]
        tb["captions_text"] = b["captions"]
        tb["relevance"] = b["relevance"]
        peer_batches.append(tb)
    peer_cycle = itertools.cycle(peer_batches)

    def peer_step():  # margins looked up: the step without its CIDEr-D
        b = next(peer_cycle)
        peer.train_emb(b["images"], b["captions"], b["lengths"],
                       extra_loss=lambda im, s: full_loss(im, s, b["gts"], b["captions_text"], b["relevance"]))

    def peer_step_with_cider():
        b = next(peer_cycle)
        peer.train_emb(b["images"], b["captions"], b["lengths"],
                       extra_loss=lambda im, s: full_loss(im, s, b["gts"], b["captions_text"]))

    indexes = list(range(shapes.batch))

    def peer_cider_only():
        b = next(peer_cycle)
        neg = ([random.choice(indexes) for _ in indexes], [random.choice(indexes) for _ in indexes])
        caption_batch = np.array(b["captions_text"])
        for hypotheses in (b["captions_text"], caption_batch[neg[0]].tolist(), caption_batch[neg[1]].tolist()):
            res = [{"image_id": ix, "caption": [cap]} for ix, cap in enumerate(hypotheses)]
            metric.compute_score(dict(enumerate(b["gts"])), res)

    jit = {"auto": "auto", "true": True, "false": False}[args.jit_compile]
    loss = SAMLoss(3.0, sampling="random", pairing="reference", sam_weight=5.0, margin=0.2, max_violation=True, seed=0)
    model = side.kitm_vsepp_model(shapes, {"sam": loss}, jit_compile=jit, recurrence=args.recurrence,
                                  fused_update=args.fused_update == "true")
    print(f"kitm's GRU: {args.recurrence}; fused Adam update: {args.fused_update}", flush=True)
    kitm_inputs = [side.kitm_inputs(b, {"relevance": tf.constant(b["relevance"])}) for b in batches]
    for (x, y), b in zip(kitm_inputs, batches):
        y["image_index"] = tf.constant(b["image_index"].astype(np.int32))
    kitm_cycle = itertools.cycle(list(zip(kitm_inputs, batches)))

    def kitm_step():
        (x, y), _ = next(kitm_cycle)
        model.train_on_batch(x, y)

    def kitm_relevance_only():
        _, b = next(kitm_cycle)
        relevance_op(b["raw"]).numpy()

    def kitm_step_with_relevance():
        (x, y), b = next(kitm_cycle)
        y = dict(y, relevance=relevance_op(b["raw"]))
        model.train_on_batch(x, y)

    # The same batches with every caption brought to its batch's mean length (cut, or filled with word id 1; the
    # words do not matter to the step's time): the reference's packed GRU then skips no padded step, so the two sides
    # do the same work (the remainder of the "step" row is the packing's saving).
    def equal_lengths(b):
        length = int(round(b["lengths"].mean()))
        positions = np.arange(b["tokens"].shape[1])[None, :]
        tokens = np.where(positions < length, np.where(b["tokens"] > 0, b["tokens"], 1), 0).astype(b["tokens"].dtype)
        return dict(b, tokens=tokens, lengths=np.full_like(b["lengths"], length))

    equal = [equal_lengths(b) for b in batches]
    equal_peer = itertools.cycle([dict(pb, **{k: v for k, v in side.torch_batch(b).items() if k in ("captions", "lengths")})
                                  for pb, b in zip(peer_batches, equal)])
    equal_kitm = itertools.cycle([(dict(x, tokens=tf.constant(b["tokens"])), y) for (x, y), b in zip(kitm_inputs, equal)])

    def peer_step_equal():
        b = next(equal_peer)
        peer.train_emb(b["images"], b["captions"], b["lengths"],
                       extra_loss=lambda im, s: full_loss(im, s, b["gts"], b["captions_text"], b["relevance"]))

    def kitm_step_equal():
        x, y = next(equal_kitm)
        model.train_on_batch(x, y)

    results = []
    print("step alone (kitm fed y['relevance']; reference margins looked up)", flush=True)
    results.append(side.interleaved("step", kitm_step, peer_step, repeats=repeats, per_block=steps))
    print("relevance alone (kitm's tf.data op on one raw batch; reference's three CIDEr-D calls)", flush=True)
    results.append(side.interleaved("relevance", kitm_relevance_only, peer_cider_only, repeats=repeats,
                                    per_block=steps))
    print("step + relevance (the reference's real step)", flush=True)
    results.append(side.interleaved("step+relevance", kitm_step_with_relevance, peer_step_with_cider,
                                    repeats=repeats, per_block=steps))
    print(f"step alone, every caption at its batch's mean length ({', '.join(str(int(b['lengths'][0])) for b in equal)} "
          "tokens): the same work on both sides", flush=True)
    results.append(side.interleaved("step, equal lengths", kitm_step_equal, peer_step_equal, repeats=repeats,
                                    per_block=steps))
    side.print_summary(results)


if __name__ == "__main__":
    main()
