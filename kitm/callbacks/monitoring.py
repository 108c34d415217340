"""TensorBoard monitoring beyond Keras' own scalars: batch relevance statistics, the embedding projector and an
hparams summary of the run's settings.

- `RelevanceStatistics`: a Keras metric for `DualEncoder.compile(monitors=[...])`. Over an epoch it pools the
  batch relevance matrix R (`y_true["relevance"]`, R[p, q] = relevance of caption q to image p) and reports

      relevance/negative_mean = mean of R[p, q] over negative pairs (q != p, and not two captions of one image)
      relevance/negative_std  = sqrt(E[R^2] - E[R]^2) over the same pairs
      relevance/positive_mean = mean of the diagonal R[p, p]

  which shows how much graded relevance the semantic losses actually see per batch (with a sharp
  relevance source the negatives' mean is near 0 and SAM or the ladder behave like the plain triplet).
  Keras' TensorBoard callback writes them to the `train` writer as `epoch_relevance/...`.
- `ProjectorCallback` / `write_projector`: the TensorBoard embedding projector
  (`tensorboard.plugins.projector`) for a validation subset: image and caption embeddings as one tensor in a
  TF checkpoint, `metadata.tsv` (kind, image, caption text) and `projector_config.pbtxt`, in
  `<logs>/projector/`, a run directory of its own (a one-line text summary makes TensorBoard list it), so
  no other run picks up the checkpoint.
- `write_hparams` / `write_final_figures`: the hparams plugin's experiment config and session
  (`tensorboard.plugins.hparams.api`: `hp.hparams_config`, `hp.hparams`) with the run's flags, and the
  final test figures as scalars in `<logs>/test`, so the HPARAMS tab lists them next to the flags.
Every file is written under a temporary name and renamed.
"""

from __future__ import annotations

import math
import os
import pathlib
from collections.abc import Iterable, Mapping, Sequence

import keras
import numpy as np
import tensorflow as tf

from kitm.models.inference import paired_encoder
from kitm.ops.similarity import negative_mask

PROJECTOR_DIR = "projector"
PROJECTOR_TENSOR = "embedding/.ATTRIBUTES/VARIABLE_VALUE"  # the checkpoint key of tf.train.Checkpoint(embedding=v)


class RelevanceStatistics(keras.metrics.Metric):
    """Pooled statistics of the batch relevance matrix over an epoch (module docstring).

    `update_state(y_true, y_pred)` takes the pipeline's `y` dict; without a "relevance" entry it does nothing.
    Accumulates in float64 (an epoch of COCO has ~10^9 negative pairs); under a distribution strategy the
    replicas' sums add up.
    """

    def __init__(self, name: str = "relevance", **kwargs):
        super().__init__(name=name, **kwargs)
        self.sums = {key: self.add_variable(shape=(), initializer="zeros", dtype="float64", name=key)
                     for key in ("negative_count", "negative_sum", "negative_squares", "positive_count",
                                 "positive_sum")}

    def update_state(self, y_true, y_pred=None, sample_weight=None):
        relevance = y_true.get("relevance") if isinstance(y_true, Mapping) else None
        if relevance is None:
            return
        relevance = tf.cast(relevance, tf.float64)
        mask = tf.cast(negative_mask(relevance, y_true.get("image_index")), tf.float64)
        diagonal = tf.linalg.diag_part(relevance)
        updates = {"negative_count": tf.reduce_sum(mask), "negative_sum": tf.reduce_sum(relevance * mask),
                   "negative_squares": tf.reduce_sum(tf.square(relevance) * mask),
                   "positive_count": tf.cast(tf.size(diagonal), tf.float64), "positive_sum": tf.reduce_sum(diagonal)}
        for key, value in updates.items():
            self.sums[key].assign_add(value)

    def result(self):
        negatives = tf.maximum(self.sums["negative_count"], 1.0)
        mean = self.sums["negative_sum"] / negatives
        variance = tf.maximum(self.sums["negative_squares"] / negatives - tf.square(mean), 0.0)
        positive = self.sums["positive_sum"] / tf.maximum(self.sums["positive_count"], 1.0)
        return {f"{self.name}/negative_mean": tf.cast(mean, tf.float32),
                f"{self.name}/negative_std": tf.cast(tf.sqrt(variance), tf.float32),
                f"{self.name}/positive_mean": tf.cast(positive, tf.float32)}


# ---- embedding projector ---------------------------------------------------------------------------------------

def _tsv_cell(text: str) -> str:
    # Tabs and newlines would shift the metadata's columns and rows.
    return " ".join(str(text).split())


def _write_text_atomically(path: pathlib.Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_projector(log_dir: str | os.PathLike, image_embeddings: np.ndarray, text_embeddings: np.ndarray,
                    captions: Sequence[str], *, captions_per_image: int, step: int = 0,
                    description: str = "") -> pathlib.Path:
    """Write one projector tensor: the images' rows, then their captions' rows (caption j of image i at
    row N + i * C + j), with metadata columns kind, image, caption. Returns the projector directory.

    Args:
      log_dir: the TensorBoard log directory; files go to `<log_dir>/projector/`.
      image_embeddings: [N, D]; text_embeddings: [N * C, D]; captions: the N * C caption texts.
      step: the checkpoint number (the epoch): the newest checkpoint wins, older ones are deleted.
    """
    from google.protobuf import text_format
    from tensorboard.plugins import projector

    images = np.asarray(image_embeddings, np.float32)
    texts = np.asarray(text_embeddings, np.float32)
    count = images.shape[0]
    if texts.shape != (count * captions_per_image, images.shape[1]) or len(captions) != texts.shape[0]:
        raise ValueError(f"write_projector: {count} images need {count * captions_per_image} caption embeddings "
                         f"and captions of width {images.shape[1]}; got {texts.shape} and {len(captions)} captions.")
    directory = pathlib.Path(log_dir) / PROJECTOR_DIR
    directory.mkdir(parents=True, exist_ok=True)

    rows = ["kind\timage\tcaption"]  # a header: the projector reads several metadata columns
    rows += [f"image\t{i}\t{_tsv_cell(captions[i * captions_per_image])}" for i in range(count)]
    rows += [f"caption\t{k // captions_per_image}\t{_tsv_cell(text)}" for k, text in enumerate(captions)]
    _write_text_atomically(directory / "metadata.tsv", "\n".join(rows) + "\n")

    # TF's checkpoint writer stages the shards and renames them; the manager's state file is replaced
    # atomically and keeps only the newest checkpoint.
    checkpoint = tf.train.Checkpoint(embedding=tf.Variable(np.concatenate([images, texts]), trainable=False))
    manager = tf.train.CheckpointManager(checkpoint, str(directory), max_to_keep=1, checkpoint_name="embeddings")
    manager.save(checkpoint_number=int(step))

    config = projector.ProjectorConfig()
    embedding = config.embeddings.add()
    embedding.tensor_name = PROJECTOR_TENSOR
    embedding.metadata_path = "metadata.tsv"  # relative to the config file
    _write_text_atomically(directory / "projector_config.pbtxt", text_format.MessageToString(config))

    # TensorBoard lists a directory as a run (and looks for its projector config) only if it holds events.
    with tf.summary.create_file_writer(str(directory)).as_default():
        tf.summary.text("projector", description or f"{count} images and {texts.shape[0]} captions", step=int(step))
    return directory


class ProjectorCallback(keras.callbacks.Callback):
    """Write the projector for the first images of an `evaluation_dataset` every `every_epochs` epochs (0: only
    at the end of training) and at the end of training.

    Args:
      dataset: a `kitm.data.pipeline.evaluation_dataset` (images or test-time crops, "tokens", "captions"),
        best made with `limit=num_images`.
      log_dir: the TensorBoard log directory.
      num_images: images shown (the first ones of `dataset`, with all their captions).
      captions_per_image: C.
    """

    def __init__(self, dataset, log_dir: str | os.PathLike, *, num_images: int, captions_per_image: int,
                 every_epochs: int = 0):
        super().__init__()
        if isinstance(num_images, bool) or int(num_images) != num_images or num_images < 1:
            raise ValueError(f"num_images must be a positive integer; got {num_images!r}.")
        self.dataset = dataset
        self.log_dir = pathlib.Path(log_dir)
        self.num_images, self.captions_per_image = int(num_images), int(captions_per_image)
        self.every_epochs = int(every_epochs)
        self.written_epoch: int | None = None
        self.last_epoch: int | None = None

    def write(self, epoch: int) -> pathlib.Path:
        """Embed the subset and write the projector files for 1-based epoch `epoch`."""
        images, texts, captions = [], [], []
        seen = 0
        for batch in self.dataset:
            keep = self.num_images - seen
            if keep <= 0:
                break
            batch = {key: value[:keep] for key, value in batch.items()}
            seen += int(tf.shape(batch["image"])[0])
            encode = paired_encoder(self.model, batch["image"].shape.rank)
            image_embeddings, text_embeddings = encode(batch["image"], batch["tokens"])
            images.append(image_embeddings.numpy())
            texts.append(text_embeddings.numpy())
            captions.extend(c.decode("utf-8") for c in batch["captions"].numpy().reshape(-1))
        if not images:
            raise ValueError("ProjectorCallback: the dataset is empty.")
        directory = write_projector(self.log_dir, np.concatenate(images), np.concatenate(texts), captions,
                                    captions_per_image=self.captions_per_image, step=epoch,
                                    description=f"epoch {epoch}: {len(captions) // self.captions_per_image} "
                                                f"images and {len(captions)} captions")
        self.written_epoch = epoch
        return directory

    def on_epoch_end(self, epoch, logs=None):
        self.last_epoch = epoch + 1
        if self.every_epochs and self.last_epoch % self.every_epochs == 0:
            self.write(self.last_epoch)

    def on_train_end(self, logs=None):
        if self.last_epoch is not None and self.written_epoch != self.last_epoch:
            self.write(self.last_epoch)


# ---- hparams ---------------------------------------------------------------------------------------------------

# The figures the HPARAMS tab shows beside the flags: (tag, run directory under the logs).
HPARAM_METRICS = (
    ("epoch_loss", "train"),
    ("epoch_rsum", "validation"), ("epoch_i2t_R@1", "validation"), ("epoch_t2i_R@1", "validation"),
    ("rsum", "test"), ("i2t_R@1", "test"), ("i2t_R@5", "test"), ("i2t_R@10", "test"),
    ("t2i_R@1", "test"), ("t2i_R@5", "test"), ("t2i_R@10", "test"),
)


def hparam_value(value):
    """A flag value as the hparams plugin takes it: bool, int, float or str (lists joined by commas)."""
    if isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if value is None:
        return ""
    if isinstance(value, Iterable):
        return ",".join(str(v) for v in value)
    return str(value)


def write_hparams(log_dir: str | os.PathLike, hparams: Mapping[str, object], *, trial_id: str = "",
                  metrics: Sequence[tuple[str, str]] = HPARAM_METRICS) -> None:
    """The hparams experiment config (every hparam, the metrics by tag and run) and this run's session, written
    to the root of `log_dir` (the session's directory; the metrics' runs are its subdirectories)."""
    from tensorboard.plugins.hparams import api as hp

    values = {name: hparam_value(value) for name, value in sorted(hparams.items())}
    with tf.summary.create_file_writer(str(log_dir)).as_default():
        hp.hparams_config(hparams=[hp.HParam(name) for name in values],
                          metrics=[hp.Metric(tag, group=group, display_name=f"{group}/{tag}") for tag, group in metrics])
        hp.hparams(values, trial_id=trial_id or None)


def write_final_figures(log_dir: str | os.PathLike, figures: Mapping[str, float], *, step: int,
                        run: str = "test") -> None:
    """Scalars `figures` (e.g. {"i2t_R@1": 40.0, "rsum": ...}) in `<log_dir>/<run>` at `step`."""
    with tf.summary.create_file_writer(str(pathlib.Path(log_dir) / run)).as_default():
        for name, value in figures.items():
            if value is not None and np.isfinite(value):
                tf.summary.scalar(name, float(value), step=int(step))
