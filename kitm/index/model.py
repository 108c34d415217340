"""The SavedModel an index is built with, and the fingerprint that ties the index to it.

An index's vectors mean something only to the model that made them: a query embedded by another model lands in
another space and retrieves noise without any error. So the index records the SavedModel's fingerprint
(TensorFlow's ``fingerprint.pb``: a checksum of the graph and one of the variables) and the search app refuses a
SavedModel whose fingerprint differs, naming both.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pathlib

import numpy as np

from kitm.errors import KitmDataError


def resolve_export_dir(run: str | os.PathLike | None, export_dir: str | os.PathLike | None) -> pathlib.Path:
    """`export_dir` when given, else the run's newest SavedModel version (`<run>/export/<highest n>`)."""
    from kitm.eval.run_dir import default_export_dir

    if export_dir is not None:
        return pathlib.Path(export_dir)
    if run is None:
        raise KitmDataError("Name the model: --run=<run directory of python -m kitm.launch> or --export_dir=<a kitm "
                            "SavedModel>.")
    if not pathlib.Path(run).is_dir():
        raise KitmDataError(f"--run={run} is not a folder: give the run directory of python -m kitm.launch.")
    return default_export_dir(run)


def model_fingerprint(export_dir: str | os.PathLike) -> str:
    """The SavedModel's identity: its fingerprint.pb checksums, or a SHA-256 of its files where it has none."""
    import tensorflow as tf

    export_dir = pathlib.Path(export_dir)
    try:
        fingerprint = tf.saved_model.experimental.read_fingerprint(str(export_dir))
        return f"tf:{fingerprint.saved_model_checksum}:{fingerprint.checkpoint_hash}"
    except (FileNotFoundError, ValueError, tf.errors.OpError):
        digest = hashlib.sha256()
        for path in sorted(p for p in export_dir.rglob("*") if p.is_file()):
            digest.update(path.relative_to(export_dir).as_posix().encode() + b"\0")
            with open(path, "rb") as stream:
                for block in iter(lambda: stream.read(1 << 20), b""):
                    digest.update(block)
        return f"sha256:{digest.hexdigest()}"


def load_model(export_dir: str | os.PathLike):
    """(the loaded SavedModel, its image input name): kitm's SavedModel with an encode_image(images) signature."""
    from kitm.eval.run_dir import _signature_input, load_saved_model

    loaded = load_saved_model(export_dir)
    image_input = _signature_input(loaded.signatures["encode_image"])
    if image_input != "images":
        raise KitmDataError(f"The SavedModel at {export_dir} encodes precomputed image features "
                            f"(encode_image({image_input})), not pictures: an index of photos needs a model that "
                            "takes encoded images (a run on a dataset built with its images).")
    return loaded


def embed_images(loaded, images: list[bytes]):
    """float32 [len(images), D] through encode_image."""
    import tensorflow as tf

    return loaded.signatures["encode_image"](images=tf.constant(images))["embeddings"].numpy()


def embed_texts(loaded, texts: list[str]):
    """float32 [len(texts), D] through encode_text."""
    import tensorflow as tf

    return loaded.signatures["encode_text"](captions=tf.constant(texts))["embeddings"].numpy()


def model_vocabulary(loaded) -> frozenset[str] | None:
    """The words a kitm SavedModel's caption tokenizer knows (its lookup table: word -> ids 2, 3, ...; 0 is padding
    and 1 unknown, `kitm.layers.tokenizer`), or None where it has no such table (a subword tokenizer's model, as a
    fine-tuned CLIP, knows every word in pieces)."""
    import tensorflow as tf

    found = None
    for table in getattr(loaded, "_misc_assets", None) or ():  # the tracked tables of a Keras ExportArchive
        try:
            keys, values = tf.raw_ops.LookupTableExportV2(table_handle=table.resource_handle, Tkeys=tf.string,
                                                          Tvalues=tf.int64)
        except (AttributeError, TypeError, tf.errors.OpError):
            continue
        values = values.numpy()
        if len(values) and sorted(values.tolist()) == list(range(2, len(values) + 2)):
            if found is not None:
                return None  # two word tables: which one the text tower reads is unknown
            found = frozenset(word.decode("utf-8", "replace") for word in keys.numpy())
    return found


def query_words(text: str) -> list[str]:
    """The words of `text` as kitm's caption tokenizer sees them (case-folded, split by script, punctuation and
    symbols dropped)."""
    return queries_words([text])[0]


def queries_words(texts: list[str]) -> list[list[str]]:
    """`query_words` of each of `texts`, in one call of the tokenizer's splitter (traced once: run eagerly, its
    dozen ops cost about 11 ms a call, more than encoding the query)."""
    import tensorflow as tf

    values, lengths = _traced_split_words()(tf.constant(texts, tf.string))
    words = [word.decode("utf-8", "replace") for word in values.numpy()]
    ends = np.cumsum(lengths.numpy())
    return [words[end - length:end] for end, length in zip(ends, lengths.numpy())]


@functools.lru_cache(maxsize=1)
def _traced_split_words():
    import tensorflow as tf

    from kitm.layers.tokenizer import split_words

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def split(texts):
        words = split_words(texts)
        return words.flat_values, words.row_lengths()

    return split
