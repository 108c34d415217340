"""The synthetic world as a dataset: ``generate_world`` draws scenes, renders them, captions them and splits them.

``SyntheticWorld`` holds the result, scene n's image, captions and facts at index n, and gives its exact relevance
(`kitm.relevance.world_truth`). Two worlds share this machinery (`kitm.data.synthetic.generators`): ``things``, the
default (everyday objects in settings, captions like people's: `kitm.data.synthetic.things`), and ``shapes`` (the
coloured shapes of kitm's first claims studies). Splits are drawn independently of near-duplicate derivation, so
near-duplicates straddle splits, as similar photographs do in COCO.

Determinism
-----------
Every random draw comes from ``np.random.default_rng`` streams spawned from ``SeedSequence(seed)`` (scenes,
captions, rendering, splits), never from global state: equal arguments give byte-identical worlds.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from kitm.data.synthetic.complementary import CAPTION_STYLES
from kitm.data.synthetic.generators import Generator, generator
from kitm.relevance.world_truth import (DEFAULT_WORLD, caption_fact_width, check_world, max_objects,
                                        scene_fact_width, world_relevance)

_MIN_IMAGE_SIZE = 32


@dataclasses.dataclass(frozen=True, eq=False)
class SyntheticWorld:
    """A generated world (see the module docstring). Scene n's image, captions and facts share index n.

    ``derived_from[n]`` is the scene that scene n was derived from as a near-duplicate, -1 for a fresh scene.
    """

    images: np.ndarray  # uint8 [N, image_size, image_size, 3]
    captions: list[list[str]]  # N lists of captions_per_image strings
    scene_facts: np.ndarray  # int32 [N, objects, 7] (the world's fact format: kitm.relevance.world_truth)
    caption_facts: np.ndarray  # int32 [N, captions_per_image, the world's caption fact width]
    splits: np.ndarray  # '<U5' [N]: "train" / "val" / "test"
    seed: int
    derived_from: np.ndarray | None = None  # int32 [N]
    caption_style: str = "literal"  # "complementary": captions that add to the scene (kitm.data.synthetic.complementary)
    topics: np.ndarray | None = None  # int32 [N], each scene's story (complementary worlds only)
    world: str = DEFAULT_WORLD  # "things" or "shapes"

    @property
    def num_scenes(self) -> int:
        return int(self.images.shape[0])

    @property
    def image_size(self) -> int:
        return int(self.images.shape[1])

    @property
    def captions_per_image(self) -> int:
        return int(self.caption_facts.shape[1])

    def split_indices(self, split: str) -> np.ndarray:
        """Indices of the scenes in ``split`` ("train", "val" or "test"), ascending."""
        if split not in ("train", "val", "test"):
            raise ValueError(f"`split` must be 'train', 'val' or 'test'; got {split!r}.")
        return np.flatnonzero(self.splits == split)

    def relevance(self, indices: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
        """Truth relevance [n, n * captions_per_image] among the scenes ``indices`` (default all).

        Captions are flattened scene-major: caption c of the i-th selected scene is column
        ``i * captions_per_image + c``, as in the usual 5-captions-per-image evaluation layout. Images are rows;
        ``kitm.eval.evaluate`` takes the transpose (captions by images).
        """
        selected = np.arange(self.num_scenes) if indices is None else np.asarray(indices)
        return world_relevance(self.scene_facts[selected],
                               self.caption_facts[selected].reshape(-1, self.caption_facts.shape[-1]),
                               world=self.world, image_size=self.image_size)


def _split_counts(num_scenes: int, fractions: Sequence[float]) -> np.ndarray:
    """Scenes per split (train, val, test) from fractions: rounded, every nonzero split at least one."""
    fractions = np.asarray(fractions, dtype=np.float64)
    if fractions.shape != (3,) or (fractions < 0).any() or not np.isclose(fractions.sum(), 1.0):
        raise ValueError(
            f"`split_fractions` must be three non-negative numbers summing to 1; got {fractions.tolist()}."
        )
    nonzero = fractions > 0
    if num_scenes < nonzero.sum():
        raise ValueError(
            f"`num_scenes`={num_scenes} cannot give a scene to each of the {int(nonzero.sum())} nonzero splits."
        )
    counts = np.floor(fractions * num_scenes + 0.5).astype(np.int64)
    counts[nonzero & (counts == 0)] = 1
    # Settle rounding on the largest split, which can best absorb it.
    largest = int(np.argmax(fractions))
    counts[largest] += num_scenes - counts.sum()
    while counts[largest] < 1:  # tiny worlds: take back from the others
        donor = int(np.argmax(np.where(np.arange(3) == largest, -1, counts)))
        counts[donor] -= 1
        counts[largest] += 1
    return counts


def _checked_counts(num_scenes: int, counts: Sequence[int]) -> np.ndarray:
    """`split_counts` as given: three non-negative integers summing to `num_scenes`, at least one training scene."""
    values = np.asarray(counts)
    if (values.shape != (3,) or not np.issubdtype(values.dtype, np.integer) or (values < 0).any()
            or int(values.sum()) != num_scenes or values[0] < 1):
        raise ValueError(f"`split_counts` must be three non-negative integers (train, val, test) summing to "
                         f"`num_scenes`={num_scenes}, with at least one training scene; got {list(counts)!r}.")
    return values.astype(np.int64)


def _split_labels(counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each scene's split: `counts` labels per split in a seeded random order."""
    labels = np.repeat(np.array(("train", "val", "test"), dtype="<U5"), counts)
    return labels[rng.permutation(int(counts.sum()))]


def _check_arguments(num_scenes, seed, image_size, captions_per_image, near_duplicate_rate,
                     caption_style="literal", world=DEFAULT_WORLD) -> None:
    """generate_world's arguments, each refused with its name and the value given."""
    if isinstance(num_scenes, bool) or not isinstance(num_scenes, (int, np.integer)) or num_scenes < 1:
        raise ValueError(f"`num_scenes` must be a positive integer; got {num_scenes!r}.")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"`seed` must be a non-negative integer; got {seed!r}.")
    if not isinstance(image_size, (int, np.integer)) or image_size < _MIN_IMAGE_SIZE:
        raise ValueError(f"`image_size` must be an integer >= {_MIN_IMAGE_SIZE}; got {image_size!r}.")
    if not isinstance(captions_per_image, (int, np.integer)) or captions_per_image < 1:
        raise ValueError(f"`captions_per_image` must be a positive integer; got {captions_per_image!r}.")
    if near_duplicate_rate is not None and not 0.0 <= float(near_duplicate_rate) <= 1.0:
        raise ValueError(f"`near_duplicate_rate` must be in [0, 1]; got {near_duplicate_rate!r}.")
    if caption_style not in CAPTION_STYLES:
        raise ValueError(f"`caption_style` must be one of {', '.join(CAPTION_STYLES)}; got {caption_style!r}.")
    try:
        check_world(world)
    except ValueError as error:
        raise ValueError(f"`world`: {error}") from None


def _draw_scene(world: Generator, scene_rng, scenes: list, near_duplicate_rate: float, image_size: int):
    """(scene, parent) of the next scene: with probability `near_duplicate_rate` an earlier scene with one change
    (its index the parent), else a fresh one (parent -1)."""
    n = len(scenes)
    if n > 0 and scene_rng.random() < near_duplicate_rate:
        parent = int(scene_rng.integers(n))
        scene = world.derive(scene_rng, scenes[parent], image_size)
        if scene is not None:
            return scene, parent
    return world.fresh(scene_rng, image_size), -1


def _captions(world: Generator, caption_rng, story_rng, scene, image_size: int, count: int):
    """(texts, facts, story) of one scene: literal captions without a story generator, complementary with one (the
    story and the materials from `story_rng`, the texts from `caption_rng`, as the literal ones)."""
    if story_rng is None:
        return (*world.captions(caption_rng, scene, image_size, count), -1)
    return world.complementary(caption_rng, story_rng, scene, image_size, count)


def _draw_world(drawer: Generator, world: str, streams, num_scenes: int, image_size: int, captions_per_image: int,
                near_duplicate_rate: float, render: bool, progress: bool, topics: np.ndarray | None):
    """Every scene in turn: drawn (or derived), its facts, its pixels (when `render`), its captions; each from its own
    stream of `streams` (scenes, captions, rendering, stories), so one changes without moving the others. Fills
    `topics` for a complementary world."""
    scene_rng, caption_rng, render_rng, story_rng = streams
    images = np.zeros((num_scenes, image_size, image_size, 3), dtype=np.uint8)
    scene_facts = np.empty((num_scenes, max_objects(world), scene_fact_width(world)), dtype=np.int32)
    caption_facts = np.empty((num_scenes, captions_per_image, caption_fact_width(world)), dtype=np.int32)
    derived_from = np.full(num_scenes, -1, dtype=np.int32)
    captions: list[list[str]] = []
    scenes: list = []

    indices = range(num_scenes)
    if progress:
        from kitm.progress import progress_bar as tqdm

        indices = tqdm(indices, desc=f"synthetic world ({world})", unit="scene")
    for n in indices:
        scene, derived_from[n] = _draw_scene(drawer, scene_rng, scenes, near_duplicate_rate, image_size)
        scenes.append(scene)
        scene_facts[n] = drawer.facts(scene, image_size)
        if render:
            images[n] = drawer.render(scene, image_size, render_rng)
        texts, facts, topic = _captions(drawer, caption_rng, story_rng, scene, image_size, captions_per_image)
        if topics is not None:
            topics[n] = topic
        captions.append(texts)
        caption_facts[n] = facts

    return images, scene_facts, caption_facts, derived_from, captions


def generate_world(
    num_scenes: int = 3000,
    *,
    seed: int = 0,
    image_size: int = 64,
    captions_per_image: int = 5,
    near_duplicate_rate: float | None = None,
    split_fractions: Sequence[float] = (0.8, 0.1, 0.1),
    split_counts: Sequence[int] | None = None,
    caption_style: str = "literal",
    world: str = DEFAULT_WORLD,
    render: bool = True,
    progress: bool = False,
) -> SyntheticWorld:
    """Generate a deterministic synthetic world (module docstring): scenes, images, captions, facts and splits.

    Args:
        num_scenes: number of scenes (images), >= 1.
        seed: non-negative integer; equal arguments give byte-identical worlds.
        image_size: side of the square RGB images, >= 32; object sizes scale with it.
        captions_per_image: captions per scene, >= 1.
        near_duplicate_rate: probability that a scene (after the first) is an earlier scene with one change; default
            the world's (things 0.05, like bursts of similar photographs; shapes 0.35).
        split_fractions: fractions of train / val / test scenes; every nonzero split gets at least one scene.
        split_counts: scenes of train / val / test instead of fractions (they sum to `num_scenes`), e.g. a test
            split of 1,000 images whatever the world's size; the same counts in the same world give the same
            splits as the fractions that round to them.
        caption_style: "literal" (captions describe what is drawn, as COCO's) or "complementary" (captions name a
            story and materials that are not drawn and mention one object vaguely, as news captions:
            `kitm.data.synthetic.complementary`). The scenes, images and splits are the same for both.
        world: "things" (everyday objects in settings: the default) or "shapes" (coloured shapes, the world of the
            first claims studies; `kitm.data.synthetic.generators`).
        render: False leaves every image black (the facts, captions and splits are the same): for a look at the
            captions alone (`python -m kitm.data.world_stats`), ten times faster.
        progress: show a tqdm progress bar.
    """
    _check_arguments(num_scenes, seed, image_size, captions_per_image, near_duplicate_rate, caption_style, world)
    num_scenes, image_size, captions_per_image = int(num_scenes), int(image_size), int(captions_per_image)
    drawer = generator(world)
    if near_duplicate_rate is None:
        near_duplicate_rate = drawer.near_duplicate_rate

    # Independent streams: changing the caption templates, say, leaves the scenes and images unchanged.
    scene_rng, caption_rng, render_rng, split_rng = (
        np.random.default_rng(s) for s in np.random.SeedSequence(int(seed)).spawn(4)
    )
    counts = (_split_counts(num_scenes, split_fractions) if split_counts is None
              else _checked_counts(num_scenes, split_counts))
    splits = _split_labels(counts, split_rng)
    complementary = caption_style == "complementary"
    # The stories and materials draw from a fifth stream, so that a literal world stays byte-identical to before.
    story_rng = np.random.default_rng(np.random.SeedSequence(int(seed)).spawn(5)[4]) if complementary else None
    topics = np.full(num_scenes, -1, dtype=np.int32) if complementary else None

    images, scene_facts, caption_facts, derived_from, captions = _draw_world(
        drawer, world, (scene_rng, caption_rng, render_rng, story_rng), num_scenes, image_size, captions_per_image,
        near_duplicate_rate, render, progress, topics)

    return SyntheticWorld(
        images=images,
        captions=captions,
        scene_facts=scene_facts,
        caption_facts=caption_facts,
        splits=splits,
        seed=int(seed),
        derived_from=derived_from,
        caption_style=caption_style,
        topics=topics,
        world=world,
    )
