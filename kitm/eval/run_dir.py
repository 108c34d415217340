"""Scoring a run directory of ``python -m kitm.launch``: its data, its SavedModel, its similarity matrix.

A run directory holds ``summary.json`` (its "flags" name the ``data_dir``) and the SavedModel versions
``export/<n>`` (the highest is used) with the signatures ``encode_text(captions)`` and ``encode_image(images)`` (encoded
bytes; preprocessing inside the graph) or ``encode_image(features)``. Embedding goes through those
signatures, so what is scored is exactly what is served.
"""

from __future__ import annotations

import json
import os
import pathlib

import numpy as np
from kitm.progress import progress_bar as tqdm

from kitm.errors import KitmDataError

SUMMARY_FILE = "summary.json"
EXPORT_SUBDIR = pathlib.Path("export") / "1"


def default_export_dir(run_dir: str | os.PathLike) -> pathlib.Path:
    """The run's newest SavedModel version, `<run_dir>/export/<highest n>` (`<run_dir>/export/1` if none)."""
    from kitm.serving.versions import latest_version_dir

    return latest_version_dir(pathlib.Path(run_dir) / "export") or pathlib.Path(run_dir) / EXPORT_SUBDIR


def read_summary(run_dir: str | os.PathLike) -> dict:
    """The run's summary.json (KitmDataError when missing or unreadable)."""
    path = pathlib.Path(run_dir) / SUMMARY_FILE
    if not path.is_file():
        raise KitmDataError(f"{path} is missing: {run_dir} is not a finished kitm run directory "
                            "(python -m kitm.launch writes summary.json at the end).")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise KitmDataError(f"{path} is not valid JSON ({error}).") from None


def run_data_dir(run_dir: str | os.PathLike, summary: dict, override: str | os.PathLike | None = None) -> pathlib.Path:
    """The dataset folder a run trained on: `override`, else summary["flags"]["data_dir"] (or
    summary["dataset"]["dir"]); a relative path is tried from the working directory, then from the
    run directory's parent."""
    if override is not None:
        candidates = [pathlib.Path(override)]
    else:
        recorded = (summary.get("flags") or {}).get("data_dir") or (summary.get("dataset") or {}).get("dir")
        if not recorded:
            raise KitmDataError(f"{pathlib.Path(run_dir) / SUMMARY_FILE} names no data_dir; pass --data_dir.")
        recorded = pathlib.Path(recorded)
        candidates = [recorded] if recorded.is_absolute() else [recorded, pathlib.Path(run_dir).parent / recorded]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    raise KitmDataError(f"The run's dataset folder {candidates[0]} does not exist (tried "
                        f"{', '.join(str(c) for c in candidates)}); pass --data_dir.")


def load_saved_model(export_dir: str | os.PathLike):
    """Load a kitm SavedModel (registering tensorflow-text's ops first)."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the tokenizer's ops)

    export_dir = pathlib.Path(export_dir)
    if not (export_dir / "saved_model.pb").is_file():
        raise KitmDataError(f"No SavedModel at {export_dir} (saved_model.pb missing): was the run launched with "
                            "--export=false? Export one with kitm.serving.export_saved_model.")
    loaded = tf.saved_model.load(str(export_dir))
    missing = {"encode_text", "encode_image"} - set(loaded.signatures)
    if missing:
        raise KitmDataError(f"The SavedModel at {export_dir} lacks the signature(s) {sorted(missing)}; it has "
                            f"{sorted(loaded.signatures)}.")
    return loaded


def _signature_input(signature) -> str:
    _, keywords = signature.structured_input_signature
    (name,) = keywords  # kitm's encode_* signatures take exactly one input
    return name


def embed_with_saved_model(loaded, captions: list[str], images, *, batch_size: int = 128,
                           progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(image embeddings [images, D], caption embeddings [captions, D]) through the signatures.

    Args:
      loaded: a loaded kitm SavedModel.
      captions: caption strings, image-major.
      images: encoded image bytes (list) or float32 features [images, F], matching the
        ``encode_image`` signature's input.
      batch_size: inputs per signature call.
      progress: tqdm bars.
    """
    import tensorflow as tf

    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"`batch_size` must be a positive integer; got {batch_size!r}.")
    encode_image = loaded.signatures["encode_image"]
    encode_text = loaded.signatures["encode_text"]
    image_key, text_key = _signature_input(encode_image), _signature_input(encode_text)
    if image_key == "features" and isinstance(images, list):
        raise KitmDataError("The SavedModel encodes image features, but the dataset holds encoded images.")
    if image_key == "images" and not isinstance(images, list):
        raise KitmDataError("The SavedModel encodes images, but the dataset holds precomputed features.")

    def run(signature, key, values, total, desc):
        chunks = []
        with tqdm(total=total, desc=desc, unit=desc.split()[-1], disable=not progress, leave=False) as bar:
            for start in range(0, total, batch_size):
                batch = values[start:start + batch_size]
                chunks.append(signature(**{key: tf.constant(batch)})["embeddings"].numpy())
                bar.update(len(batch))
        return np.concatenate(chunks).astype(np.float32, copy=False)

    image_embeddings = run(encode_image, image_key, images, len(images), "embedding image")
    text_embeddings = run(encode_text, text_key, list(captions), len(captions), "embedding caption")
    return image_embeddings, text_embeddings
