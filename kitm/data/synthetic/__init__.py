"""The synthetic world: rendered shapes, their captions, and the exact relevance of any caption to any image.

kitm's embedded default dataset. Each scene holds 1 to ``MAX_OBJECTS`` flat-coloured shapes on a dim, noisy,
slightly tinted background; the generator keeps every scene's facts, so the relevance of *any* caption to *any*
image is known exactly (docs/methods.md#truth). It is small enough to train the whole pipeline on a laptop CPU and
is the yardstick the other relevance sources (CIDEr-D, SBERT) and the losses are judged against.

One job per module:

- `scenes`: sampling scenes (object placement, near-duplicate derivation) and their fact rows;
- `rendering`: painting a scene's pixels;
- `captions`: caption texts and the facts each states (the literal world, COCO-like);
- `complementary`: captions that add to the scene (a story, materials not drawn, one object vaguely), the
  non-literal world, news-like;
- `world`: ``generate_world`` and ``SyntheticWorld``, the world as a dataset with splits;
- `kitm.data.synthetic_records`: writing the world as kitm TFRecords (`python -m kitm.data.build synthetic`).

The fact format (vocabularies, field layouts, the relation rule) is `kitm.relevance.scene_facts`, and the exact
relevance computed from facts is `kitm.relevance.truth`: the world writes facts, relevance reads them, so they live
in kitm.relevance, which imports nothing from kitm.data.
"""

from kitm.data.synthetic.world import SyntheticWorld, generate_world

__all__ = ["SyntheticWorld", "generate_world"]
