"""Record keys of the relevance slots: where each relevance source's per-record features live in a kitm TFRecord.

A slot is a named group of features (`tfrecords/README.md`); `dataset.json` lists the slots a dataset holds. The keys
are defined here, beside the code that fills them (`kitm.relevance.rows`, the synthetic world's facts), and the record
schema (`kitm.data.schema`) names them from here, so relevance needs nothing from kitm.data.
"""

from __future__ import annotations

__all__ = ["TRUTH_SCENE_FACTS", "TRUTH_CAPTION_FACTS", "CIDER_KEYS", "CIDER_HYPOTHESIS_WEIGHTS",
           "CIDER_REFERENCE_WEIGHTS", "CIDER_ENTRIES", "CIDER_LENGTHS", "SBERT_EMBEDDINGS", "NEIGHBOR_CAPTION_IDS",
           "NEIGHBOR_SCORES", "IMAGE_NEIGHBOR_CAPTION_IDS", "IMAGE_NEIGHBOR_SCORES", "NEIGHBOR_SLOTS"]

# Each key maps to (dtype, values per caption or per image) in dataset.json's slot metadata.
# "truth": the synthetic world's facts (exact relevance; kitm.relevance.scene_facts defines them).
TRUTH_SCENE_FACTS = "relevance/truth/scene_facts"      # int64 [MAX_OBJECTS * 7]
TRUTH_CAPTION_FACTS = "relevance/truth/caption_facts"  # int64 [C * CAPTION_FACT_WIDTH]
# "cider": each caption's CIDEr-D entries under the training idf (kitm.relevance.cider_features), caption-major.
CIDER_KEYS = "relevance/cider/keys"                                  # int64 [E] (n-gram, level) keys
CIDER_HYPOTHESIS_WEIGHTS = "relevance/cider/hypothesis_weights"      # float [E]
CIDER_REFERENCE_WEIGHTS = "relevance/cider/reference_weights"        # float [E]
CIDER_ENTRIES = "relevance/cider/entries"                            # int64 [C] entries per caption
CIDER_LENGTHS = "relevance/cider/lengths"                            # int64 [C] bigram counts
# "sbert": unit sentence embeddings; "neighbors": k nearest captions of other images (caption ids, cosines).
SBERT_EMBEDDINGS = "relevance/sbert/embeddings"                      # float [C * D]
NEIGHBOR_CAPTION_IDS = "relevance/neighbors/caption_ids"             # int64 [C * k]
NEIGHBOR_SCORES = "relevance/neighbors/scores"                       # float [C * k]
# "image_neighbors": the same layout, neighbours found in an image feature space (Thomas & Kovashka's "Img NNs" variant):
# caption c's list is caption c of each of the image's k nearest other images (kitm.relevance.rows).
IMAGE_NEIGHBOR_CAPTION_IDS = "relevance/image_neighbors/caption_ids"  # int64 [C * k]
IMAGE_NEIGHBOR_SCORES = "relevance/image_neighbors/scores"            # float [C * k]
# Neighbour space (NeighborhoodAngularLoss.neighbor_space) -> (its slot, the slot's caption-id key).
NEIGHBOR_SLOTS = {"text": ("neighbors", NEIGHBOR_CAPTION_IDS), "image": ("image_neighbors", IMAGE_NEIGHBOR_CAPTION_IDS)}
