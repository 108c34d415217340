"""The synthetic world: rendered shapes, their captions, and the exact relevance of any caption to any image.

kitm's embedded default dataset. Each scene holds 1 to ``MAX_OBJECTS`` flat-coloured shapes on a dim, noisy,
slightly tinted background; the generator keeps every scene's facts, so the relevance of *any* caption to *any*
image is known exactly ("Truth" in METHODS.md). It is small enough to train the whole pipeline on a laptop CPU and
is the yardstick the other relevance sources (CIDEr-D, SBERT) and the losses are judged against.

One job per module:

- `kitm.relevance.scene_facts`: the fact format (vocabularies, field layouts, the relation rule), shared with
- `kitm.relevance.truth`: the exact relevance of a caption to an image, from their facts;
- `scenes`: sampling scenes (object placement, near-duplicate derivation) and their fact rows;
- `rendering`: painting a scene's pixels;
- `captions`: caption texts and the facts each states;
- `world`: ``generate_world`` and ``SyntheticWorld``, the world as a dataset with splits;
- `kitm.data.synthetic_records`: writing the world as kitm TFRecords (`python -m kitm.data.build synthetic`).
"""

from kitm.data.synthetic.world import SyntheticWorld, generate_world

__all__ = ["SyntheticWorld", "generate_world"]
