"""The TensorBoard embedding projector (`tensorboard.plugins.projector`) for a validation subset.

`write_projector` writes image and caption embeddings as one tensor in a TF checkpoint, `metadata.tsv` (kind,
image, caption text) and `projector_config.pbtxt` into `<logs>/projector/`, a run directory of its own (a one-line
text summary makes TensorBoard list it), so no other run picks up the checkpoint. `ProjectorCallback` does it every
few epochs and at the end of training. Every file is written under a temporary name and renamed.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Sequence

import keras
import numpy as np
import tensorflow as tf

from kitm.files import write_text_atomically
from kitm.models.inference import paired_encoder

PROJECTOR_DIR = "projector"
PROJECTOR_TENSOR = "embedding/.ATTRIBUTES/VARIABLE_VALUE"  # the checkpoint key of tf.train.Checkpoint(embedding=v)


def _tsv_cell(text: str) -> str:
    # Tabs and newlines would shift the metadata's columns and rows.
    return " ".join(str(text).split())


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
    write_text_atomically(directory / "metadata.tsv", "\n".join(rows) + "\n")

    # TF's checkpoint writer stages the shards and renames them; the manager's state file is replaced
    # atomically and keeps only the newest checkpoint.
    checkpoint = tf.train.Checkpoint(embedding=tf.Variable(np.concatenate([images, texts]), trainable=False))
    manager = tf.train.CheckpointManager(checkpoint, str(directory), max_to_keep=1, checkpoint_name="embeddings")
    manager.save(checkpoint_number=int(step))

    config = projector.ProjectorConfig()
    embedding = config.embeddings.add()
    embedding.tensor_name = PROJECTOR_TENSOR
    embedding.metadata_path = "metadata.tsv"  # relative to the config file
    write_text_atomically(directory / "projector_config.pbtxt", text_format.MessageToString(config))

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
            batch = tf.nest.map_structure(lambda value: value[:keep], batch)  # tokens may be a dict
            seen += int(tf.shape(batch["image"])[0])
            encode = paired_encoder(self.model, batch["image"].shape.rank)
            image_embeddings, text_embeddings = encode(batch["image"], batch["tokens"])
            # The model's arrays are the backend's (a JAX array has no .numpy()).
            images.append(keras.ops.convert_to_numpy(image_embeddings))
            texts.append(keras.ops.convert_to_numpy(text_embeddings))
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
