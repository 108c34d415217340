"""Retrieval evaluation during training: Keras logs (hence TensorBoard scalars), an image summary of
top-5 retrievals, and one JSON line per evaluation.

Every `every_epochs` epochs the callback embeds the validation dataset, scores
``sims = images @ captions.T`` and computes the figures of :func:`kitm.eval.report.build_report`
(the same function behind ``python -m kitm.eval``): R^V@K, R@K, medr, meanr, mAP, and, when a
relevance source is given, NCS@K, SR@K and CS@K, both directions.

Where the figures go:

- Keras logs, as ``<prefix><direction>_<name>`` (``val_i2t_R@1``, ``val_t2i_NCS@5``,
  ``val_i2t_CS@100``, ``val_rsum``). ``keras.callbacks.TensorBoard`` placed after this callback
  writes ``val_*`` keys to its ``validation`` writer without the prefix (``epoch_i2t_R@1``);
  History, EarlyStopping and ModelCheckpoint(monitor="val_rsum") see them too.
- With `log_dir`, the callback's own ``tf.summary`` writer: an image per fixed caption query
  (a row of the query's true image, then the top-5 retrieved images, framed green when an image
  is the query's own, red otherwise; the caption and the ranks in the summary's description),
  and, with ``write_scalars=True`` (for training without a TensorBoard callback), the scalars as
  ``epoch_<name>`` at step = epoch index, the tags Keras' TensorBoard callback would use.
- With `jsonl_path`, one JSON line per evaluation: {"epoch": 1-based, every flat figure}.

The figures are numpy arithmetic on the embeddings; TensorFlow is imported only for what is its job here: the
summary writer and the thumbnails it shows (with `log_dir`). The dataset is the tf.data evaluation pipeline.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence

import keras
import numpy as np

from kitm.callbacks.every_q_batches import to_numpy
from kitm.eval.ranking import top_k_indices
from kitm.eval.report import build_report, flatten_figures, rsum
from kitm.models.inference import paired_encoder

RelevanceFn = Callable[[Sequence[str], int], np.ndarray]

_FRAME = 2  # pixels of the coloured frame around each thumbnail
_GAP = 6  # pixels between the query's true image and its retrievals
_HIT, _MISS, _QUERY = (40, 200, 60), (220, 50, 40), (90, 90, 90)


def flatten_report(report: dict, prefix: str) -> dict[str, float]:
    """{"i2t": {"recall_vse": {1: 40.0}}} -> {"<prefix>i2t_R@1": 40.0, ...}: flat scalar names for logs.

    Names: recall_vse -> R, recall -> IR_R, ncs -> NCS, semantic_recall -> SR, coherent_score -> CS;
    medr, meanr and map keep theirs (:func:`kitm.eval.report.flatten_figures`).
    """
    return flatten_figures(report, prefix)


def _check_positive(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer; got {value!r}.")
    return int(value)


class RetrievalEvaluation(keras.callbacks.Callback):
    """Every `every_epochs` epochs: embed `dataset`, evaluate retrieval, log it (module docstring).

    Args:
      dataset: a ``kitm.data.pipeline.evaluation_dataset`` (elements with "image" [B, H, W, 3], test-time
        crops [B, N, H, W, 3] (embeddings averaged) or features [B, F], "tokens" [B, C, T] and "captions"
        [B, C]), every image once.
      captions_per_image: C.
      every_epochs: evaluate after epochs every_epochs, 2 * every_epochs, ...
      prefix: prefix of the log keys ("val_": Keras' TensorBoard callback routes them to its
        validation writer).
      ks: cut-offs of R, R^V, NCS and SR.
      jsonl_path: append one JSON line per evaluation here.
      num_images: evaluate only the first num_images images of `dataset` (all when None).
      relevance: precomputed relevance [num_captions, num_images] of the evaluated images, in
        dataset order (e.g. ``kitm.eval.split_relevance.split_relevance(read_split(data_dir, "val",
        limit=n), "truth")``). Enables NCS, SR and CS.
      relevance_fn: instead, ``relevance_fn(captions, captions_per_image)`` -> [num_captions,
        num_images], called once at the first evaluation with the evaluated captions in row order
        (e.g. ``kitm.eval.relevance_sources.cider_relevance``); the result is kept.
      cs_ks: CS cut-offs (default N/10 and N for N images; :func:`kitm.eval.report.coherent_cutoffs`).
      include_gt, semantic_threshold: NCS and SR settings (:func:`kitm.eval.evaluate`).
      log_dir: directory for the callback's own summary writer (e.g. ``<logdir>/validation``, the
        directory Keras' TensorBoard callback writes "val_" figures to); None: no image summary.
      write_scalars: also write the scalars with that writer (only without a TensorBoard callback,
        which writes them from the logs already).
      image_queries: number of fixed caption queries shown (caption 0 of evenly spaced images);
        0 disables the image summary. Needs image inputs (not features).
      top_k_images: retrieved images shown per query.
      thumbnail_size: side of each image in the summary, in pixels.
    """

    def __init__(self, dataset, *, captions_per_image: int = 5, every_epochs: int = 1, prefix: str = "val_",
                 ks: Iterable[int] = (1, 5, 10), jsonl_path: str | None = None, num_images: int | None = None,
                 relevance: np.ndarray | None = None, relevance_fn: RelevanceFn | None = None,
                 cs_ks: Iterable[int] | None = None, include_gt: bool = False, semantic_threshold: int = 1,
                 log_dir: str | None = None, write_scalars: bool = False, image_queries: int = 3,
                 top_k_images: int = 5, thumbnail_size: int = 64):
        super().__init__()
        if isinstance(every_epochs, bool) or not isinstance(every_epochs, (int, np.integer)) or every_epochs < 1:
            raise ValueError(f"every_epochs must be >= 1; got {every_epochs}.")
        if relevance is not None and relevance_fn is not None:
            raise ValueError("give `relevance` (a precomputed matrix) or `relevance_fn`, not both.")
        if relevance_fn is not None and not callable(relevance_fn):
            raise ValueError(f"`relevance_fn` must be callable(captions, captions_per_image); got {relevance_fn!r}.")
        if write_scalars and log_dir is None:
            raise ValueError("write_scalars=True needs a `log_dir` to write to.")
        if isinstance(image_queries, bool) or not isinstance(image_queries, (int, np.integer)) or image_queries < 0:
            raise ValueError(f"image_queries must be an integer >= 0; got {image_queries!r}.")
        self.dataset = dataset
        self.captions_per_image = _check_positive(captions_per_image, "captions_per_image")
        self.every_epochs = int(every_epochs)
        self.prefix, self.ks, self.jsonl_path = prefix, tuple(ks), jsonl_path
        self.num_images = None if num_images is None else _check_positive(num_images, "num_images")
        self.relevance = None if relevance is None else np.asarray(relevance)
        self.relevance_fn = relevance_fn
        self.cs_ks = None if cs_ks is None else tuple(cs_ks)
        self.include_gt, self.semantic_threshold = bool(include_gt), semantic_threshold
        self.log_dir, self.write_scalars = log_dir, bool(write_scalars)
        self.image_queries = int(image_queries)
        self.top_k_images = _check_positive(top_k_images, "top_k_images")
        self.thumbnail_size = _check_positive(thumbnail_size, "thumbnail_size")
        self.last_report: dict | None = None
        self._last_embedded: dict | None = None
        self._last_sims: np.ndarray | None = None
        self._writer = None

    # ---- embedding -------------------------------------------------------------------------------

    def _wants_thumbnails(self) -> bool:
        return self.log_dir is not None and self.image_queries > 0

    def _embed(self) -> dict[str, object]:
        """Embeddings, captions and thumbnails of the evaluated images, in dataset order."""
        images, texts, captions, thumbnails = [], [], [], []
        seen = 0
        want_captions = self.relevance_fn is not None or self._wants_thumbnails()
        for batch in self.dataset:
            pixels = batch["image"]
            if self.num_images is not None:
                keep = min(int(pixels.shape[0]), self.num_images - seen)
                if keep <= 0:
                    break
                batch = keras.tree.map_structure(lambda value: value[:keep], batch)  # tokens may be a dict
                pixels = batch["image"]
            # One compiled function per model, kept across evaluations (a new one would retrace every time).
            rank = len(pixels.shape)
            image_embeddings, text_embeddings = paired_encoder(self.model, rank)(pixels, batch["tokens"])
            images.append(to_numpy(image_embeddings))
            texts.append(to_numpy(text_embeddings))
            seen += images[-1].shape[0]
            if want_captions and "captions" in batch:
                strings = batch["captions"]
                strings = np.asarray(strings.numpy() if hasattr(strings, "numpy") else strings)  # tf.string: bytes
                captions.extend(c.decode("utf-8") if isinstance(c, bytes) else str(c) for c in strings.reshape(-1))
            if self._wants_thumbnails() and rank == 5:  # test-time crops: show the first
                pixels, rank = pixels[:, 0], 4
            if self._wants_thumbnails() and rank == 4:
                thumbnails.append(self._thumbnails(pixels))
        if not images:
            raise ValueError("The evaluation dataset is empty.")
        return {"images": np.concatenate(images), "texts": np.concatenate(texts), "captions": captions,
                "thumbnails": np.concatenate(thumbnails) if thumbnails else None}

    def _thumbnails(self, pixels) -> np.ndarray:
        """uint8 [b, s, s, 3] thumbnails of pixels in [0, 1], for the TensorBoard image summary."""
        import tensorflow as tf  # TensorBoard's images, only with log_dir (pixels come from the tf.data pipeline)

        small = tf.image.resize(pixels, [self.thumbnail_size] * 2, antialias=True)
        return tf.image.convert_image_dtype(tf.clip_by_value(small, 0.0, 1.0), tf.uint8, saturate=True).numpy()

    # ---- evaluation ------------------------------------------------------------------------------

    def _relevance_for(self, captions: Sequence[str]) -> np.ndarray | None:
        if self.relevance is None and self.relevance_fn is not None:
            if not captions:
                raise ValueError("`relevance_fn` needs the captions, but the evaluation dataset's elements have no "
                                 "\"captions\" entry.")
            self.relevance = np.asarray(self.relevance_fn(list(captions), self.captions_per_image))
        return self.relevance

    def evaluate_now(self) -> dict:
        """Embed, score and evaluate; returns {"i2t": {...}, "t2i": {...}} (also kept in `last_report`)."""
        embedded = self._embed()
        sims = embedded["images"] @ embedded["texts"].T
        self._last_embedded, self._last_sims = embedded, sims  # for the image summary
        report = build_report(sims, captions_per_image=self.captions_per_image,
                              relevance=self._relevance_for(embedded["captions"]), ks=self.ks,
                              include_gt=self.include_gt, semantic_threshold=self.semantic_threshold,
                              cs_ks=self.cs_ks, fold_size=None)
        self.last_report = report["all"]
        return self.last_report

    def on_epoch_end(self, epoch, logs=None):
        if (epoch + 1) % self.every_epochs:
            return
        report = self.evaluate_now()
        flat = flatten_report(report, self.prefix)
        flat[f"{self.prefix}rsum"] = rsum(report)
        if logs is not None:
            logs.update(flat)
        if self.log_dir is not None:
            self._write_summaries(epoch, flat)
        if self.jsonl_path:
            with open(self.jsonl_path, "a") as handle:
                handle.write(json.dumps({"epoch": epoch + 1, **flat}) + "\n")

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    # ---- summaries -------------------------------------------------------------------------------

    def _write_summaries(self, epoch: int, flat: Mapping[str, float]) -> None:
        import tensorflow as tf  # TensorBoard's event files: TensorFlow's job

        if self._writer is None:
            self._writer = tf.summary.create_file_writer(self.log_dir)
        with self._writer.as_default(step=epoch):
            if self.write_scalars:
                for name, value in flat.items():
                    tag = name[len(self.prefix):] if name.startswith(self.prefix) else name
                    tf.summary.scalar(f"epoch_{tag}", value)
            thumbnails = self._last_embedded["thumbnails"]
            if thumbnails is not None:
                grids = self.retrieval_grids(self._last_sims, thumbnails, self._last_embedded["captions"])
                for j, (grid, description) in enumerate(grids):
                    tf.summary.image(f"retrieval_top{self.top_k_images}/query_{j}", grid[None],
                                     description=description)
        self._writer.flush()

    def query_captions(self, num_images: int) -> np.ndarray:
        """The fixed caption queries: caption 0 of `image_queries` evenly spaced images."""
        count = min(self.image_queries, num_images)
        images = np.unique(np.linspace(0, num_images - 1, count).round().astype(np.int64))
        return images * self.captions_per_image

    def retrieval_grids(self, sims: np.ndarray, thumbnails: np.ndarray,
                        captions: Sequence[str] = ()) -> list[tuple[np.ndarray, str]]:
        """One (uint8 [h, w, 3] grid, Markdown description) per fixed caption query.

        Grid: the query's true image (grey frame), a gap, then the top `top_k_images` images by
        the model's score (ties by lower index), framed green for the true image, red otherwise.

        Args:
          sims: [num_images, num_captions].
          thumbnails: uint8 [num_images, h, w, 3].
          captions: the caption texts in row order, for the descriptions (row numbers if absent).
        """
        num_images = sims.shape[0]
        queries = self.query_captions(num_images)
        k = min(self.top_k_images, num_images)
        scores = np.ascontiguousarray(sims[:, queries].T)  # [queries, images]
        top = top_k_indices(scores, k)
        true_images = queries // self.captions_per_image
        # 1-based rank of the true image under the same tie rule: images scoring higher, plus lower-index ties.
        own = scores[np.arange(len(queries)), true_images][:, None]
        index = np.arange(num_images)[None, :]
        ranks = 1 + ((scores > own) | ((scores == own) & (index < true_images[:, None]))).sum(axis=1)
        out = []
        for row, caption_row in enumerate(queries):
            tiles = [_framed(thumbnails[true_images[row]], _QUERY)]
            tiles += [_framed(thumbnails[i], _HIT if i == true_images[row] else _MISS) for i in top[row]]
            height = tiles[0].shape[0]
            gap = np.full((height, _GAP, 3), 255, np.uint8)
            grid = np.concatenate([tiles[0], gap, *tiles[1:]], axis=1)
            text = captions[caption_row] if caption_row < len(captions) else f"caption {caption_row}"
            retrieved = ", ".join(f"{int(i)} ({scores[row, i]:.3f})" for i in top[row])
            description = (f"**Query** (caption {int(caption_row)}, of image {int(true_images[row])}): "
                           f"\"{text}\"  \n"
                           f"Left: its image; then the top {k} images by score (green: the true image). "
                           f"True image rank: {int(ranks[row])} of {num_images}.  \nRetrieved: {retrieved}")
            if self.relevance is not None:
                degrees = ", ".join(f"{self.relevance[caption_row, i]:.3f}" for i in top[row])
                description += f"  \nRelevance of the retrieved images: {degrees}"
            out.append((grid, description))
        return out


def _framed(thumbnail: np.ndarray, colour: tuple[int, int, int]) -> np.ndarray:
    h, w, _ = thumbnail.shape
    framed = np.empty((h + 2 * _FRAME, w + 2 * _FRAME, 3), np.uint8)
    framed[...] = colour
    framed[_FRAME:_FRAME + h, _FRAME:_FRAME + w] = thumbnail
    return framed
