"""The relevance matrix of one split read by :func:`kitm.data.split_reading.read_split`, from any source
evaluation grades with (:mod:`kitm.eval.relevance_sources`)."""

from __future__ import annotations

import numpy as np

from kitm.data.split_reading import SplitData


def split_relevance(data: SplitData, source: str, *, sbert_model: object = None, progress: bool = False,
                    cider_normalization: str = "ncs", cache_dir: object = None) -> np.ndarray | None:
    """N [captions, images] of a split for `source` ("none" gives None); see
    :mod:`kitm.eval.relevance_sources` (`cider_normalization`: "ncs" or "ptb", for "cider" only; `cache_dir`: the
    sentence embeddings' cache, for "sbert" only).

    Raises ValueError for ``truth`` on a dataset without the synthetic world's facts.
    """
    from kitm.eval.relevance_sources import RELEVANCE_SOURCES, caption_relevance, truth_relevance_matrix

    if source not in RELEVANCE_SOURCES:
        raise ValueError(f"relevance source must be one of {RELEVANCE_SOURCES}; got {source!r}.")
    if source == "none":
        return None
    if source == "truth":
        if data.scene_facts is None:
            raise ValueError(f"relevance 'truth' needs the synthetic world's facts; dataset "
                             f"'{data.info.name}' has relevance slots {sorted(data.info.relevance) or 'none'}.")
        return truth_relevance_matrix(data.scene_facts, data.caption_facts, image_size=data.info.image_size,
                                      world=data.info.truth_world)
    return caption_relevance(source, data.captions, data.captions_per_image, sbert_model=sbert_model,
                             progress=progress, cider_normalization=cider_normalization, cache_dir=cache_dir)
