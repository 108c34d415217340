"""Relevance matrices N [num_captions, num_images] of an evaluation set, from one relevance source.

N[c, i] is the relevance of caption c to image i (the NCS reference's orientation, the one
:func:`kitm.eval.evaluate` takes); image i owns captions i*cpi .. i*cpi + cpi - 1.

- ``cider``: CIDEr-D of caption c against all of image i's captions,
  ``kitm.relevance.cider_matrix(captions, groups)``, idf from the evaluated set (one document per
  image), as the NCS reference's ``custom_cider.py`` computes its matrices. Caption c is one of
  its own image's references, as there. How captions become tokens (``cider_normalization``):

  * ``"ncs"`` (default): the NCS reference's handling. ``custom_cider.py`` (furkanbiten/ncs_metric)
    lower-cases every caption (``[c.lower() for c in cap['refs']]``) and its ``precook`` splits on
    whitespace (``s.split()``); nothing else. Here: ``str.lower`` then
    ``cider_matrix(..., normalize=False)``. ``"A dog."`` and ``"a dog"`` are then different token
    strings (``dog.`` is not ``dog``), as in the published NCS matrices.
  * ``"ptb"``: pycocoevalcap's PTB normalisation first (``cider_matrix``'s own default,
    ``normalize=True``: lower case, punctuation split off and dropped; the clean-room Python tokenizer
    of :mod:`kitm.relevance.text_normalization`), as captioning evaluation scores CIDEr-D.

  On Flickr8K test (5,000 x 1,000) the two differ by up to 3.8x relative on single pairs; ``"ncs"``
  equals the reference's matrix to 8e-16. Training is a separate choice and stays PTB-normalised:
  the relevance rows the converters store (``kitm.relevance.rows``, ``cider_features``; SAM's
  relevance) use ``cider_matrix``'s default, as the SAM reference scores with pycocoevalcap's
  ``PTBTokenizer``.
- ``sbert``: the ladder paper casts image-sentence relevance as sentence-sentence relevance
  (cosine of Sentence-BERT embeddings, docs/methods.md#sbert). With cpi captions per image, kitm
  takes the mean over image i's captions: ``N[c, i] = mean_j cos(e_c, e_ij) = e_c . mean_j e_ij``
  for unit embeddings e (caption c again among its own image's captions, so N[c, own] includes
  cos(e_c, e_c) = 1, like CIDEr above).
- ``spice``: SPICE of caption c against image i's captions through
  ``kitm.relevance.spice_matrix`` (pycocoevalcap's Spice); a clear error when unavailable.
- ``truth``: the synthetic world's exact relevance, ``kitm.relevance.truth.truth_relevance`` of the
  images' scene facts and the captions' facts, transposed.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from kitm.errors import KitmError

RELEVANCE_SOURCES = ("none", "truth", "cider", "sbert", "spice")
CAPTION_SOURCES = ("cider", "sbert", "spice")
# How CIDEr-D relevance tokenizes captions (module docstring): the NCS reference's way first.
CIDER_NORMALIZATIONS = ("ncs", "ptb")

# Captions per truth_relevance call: bounds its [images, captions] temporaries.
_TRUTH_CHUNK = 4096


class RelevanceUnavailable(KitmError, RuntimeError):
    """A relevance source cannot run here (a missing optional component); the message says why."""


def caption_groups(captions: Sequence[str], captions_per_image: int) -> list[list[str]]:
    """[c_0 .. c_{I*cpi-1}] -> I groups of cpi captions (image i owns i*cpi .. i*cpi + cpi - 1)."""
    captions = list(captions)
    if captions_per_image < 1 or len(captions) % captions_per_image:
        raise ValueError(f"{len(captions)} captions cannot be grouped into images of captions_per_image="
                         f"{captions_per_image}.")
    return [captions[start:start + captions_per_image] for start in range(0, len(captions), captions_per_image)]


def cider_relevance(captions: Sequence[str], captions_per_image: int, *,
                    cider_normalization: str = "ncs") -> np.ndarray:
    """CIDEr-D of every caption against every image's captions: float64 [captions, images].

    Args:
      captions: all captions, image-major.
      captions_per_image: cpi.
      cider_normalization: ``"ncs"`` (default; lower case + whitespace split, as the NCS reference's
        ``custom_cider.py``) or ``"ptb"`` (pycocoevalcap's PTB normalisation); module docstring.
    """
    from kitm.relevance import cider_matrix

    if cider_normalization not in CIDER_NORMALIZATIONS:
        raise ValueError(f"`cider_normalization` must be one of {CIDER_NORMALIZATIONS}; got {cider_normalization!r}.")
    if cider_normalization == "ptb":
        captions = list(captions)
        return cider_matrix(captions, caption_groups(captions, captions_per_image))
    # The reference lower-cases its captions before scoring; precook then splits on whitespace,
    # which is what cider_matrix does with normalize=False.
    lowered = [caption.lower() for caption in captions]
    return cider_matrix(lowered, caption_groups(lowered, captions_per_image), normalize=False)


def sbert_relevance(captions: Sequence[str], captions_per_image: int, model: object = None, *,
                    progress: bool = False, cache_dir: object = None) -> np.ndarray:
    """Mean cosine of each caption to each image's captions (module docstring): float32 [captions, images].

    Args:
      captions: all captions, image-major.
      captions_per_image: cpi.
      model: passed to ``kitm.relevance.sentence_embeddings`` (None: the bundled all-MiniLM-L6-v2).
      progress: progress bar over embedding batches.
      cache_dir: the sentence embeddings' on-disk cache (``kitm.relevance.embedding_cache``; None: none).
    """
    sentence_embeddings = _optional("sentence_embeddings", "sentence", "--relevance=sbert")
    groups = caption_groups(captions, captions_per_image)
    embeddings = np.asarray(sentence_embeddings(list(captions), model=model, progress=progress,
                                                cache_dir=cache_dir), np.float32)
    # mean_j (e_c . e_ij) = e_c . (mean_j e_ij): one product instead of cpi.
    centroids = embeddings.reshape(len(groups), captions_per_image, -1).mean(axis=1)
    return embeddings @ centroids.T


def spice_relevance(captions: Sequence[str], captions_per_image: int) -> np.ndarray:
    """SPICE of every caption against every image's captions: [captions, images]."""
    spice_matrix = _optional("spice_matrix", "spice", "--relevance=spice")
    try:
        return np.asarray(spice_matrix(list(captions), caption_groups(captions, captions_per_image)), np.float64)
    except (OSError, RuntimeError) as error:  # missing Java, jar or Stanford models
        raise RelevanceUnavailable(f"SPICE is unavailable: {error}") from error


def truth_relevance_matrix(scene_facts: np.ndarray, caption_facts: np.ndarray, *, image_size: int,
                           world: str) -> np.ndarray:
    """The synthetic world's exact relevance, float64 [captions, images].

    Args:
      scene_facts: int [images, objects, 7] (or [images, objects * 7]).
      caption_facts: int [captions, the world's caption fact width].
      image_size: the stored world's image side (``DatasetInfo.image_size``), which sets the relation distances.
      world: "things" or "shapes" (``DatasetInfo.truth_world``): whose facts and truth these are.
    """
    from kitm.relevance.world_truth import world_relevance

    caption_facts = np.asarray(caption_facts)
    out = np.empty((caption_facts.shape[0], np.shape(scene_facts)[0]), dtype=np.float64)
    for start in range(0, caption_facts.shape[0], _TRUTH_CHUNK):
        block = caption_facts[start:start + _TRUTH_CHUNK]
        out[start:start + len(block)] = world_relevance(scene_facts, block, world=world, image_size=image_size).T
    return out


def caption_relevance(source: str, captions: Sequence[str], captions_per_image: int, *,
                      sbert_model: object = None, progress: bool = False,
                      cider_normalization: str = "ncs", cache_dir: object = None) -> np.ndarray:
    """N [captions, images] from the captions alone, for `source` in ("cider", "sbert", "spice").

    `cider_normalization` ("ncs" or "ptb") is used by "cider" only; see :func:`cider_relevance`; `cache_dir` (the
    sentence embeddings' cache) by "sbert" only.
    """
    if source == "cider":
        return cider_relevance(captions, captions_per_image, cider_normalization=cider_normalization)
    if source == "sbert":
        return sbert_relevance(captions, captions_per_image, sbert_model, progress=progress, cache_dir=cache_dir)
    if source == "spice":
        return spice_relevance(captions, captions_per_image)
    raise ValueError(f"`source` must be one of {CAPTION_SOURCES} to compute relevance from captions; "
                     f"got {source!r}.")


def _optional(name: str, module: str, what: str):
    """`kitm.relevance.<name>`, else `kitm.relevance.<module>.<name>`, else RelevanceUnavailable."""
    import importlib

    import kitm.relevance

    found = getattr(kitm.relevance, name, None)
    if found is None:
        try:
            found = getattr(importlib.import_module(f"kitm.relevance.{module}"), name)
        except (ImportError, AttributeError):
            raise RelevanceUnavailable(
                f"{what} needs kitm.relevance.{name}, which this installation of kitm "
                f"({os.path.dirname(kitm.relevance.__file__)}) does not provide.") from None
    return found
