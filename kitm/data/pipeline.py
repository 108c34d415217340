"""The tf.data input pipeline: records -> decoded, augmented images + tokenized captions + batch relevance.

Training batches are `(x, y)` with
    x = {"image": float32 [B, H, W, 3] in [0, 1] (or features [B, F]), "tokens": int32 [B, T]}
    y = {"image_index": int32 [B], "caption_index": int32 [B], and, with a relevance source,
         "relevance": float32 [B, b]}
where `relevance[p, q]` is the relevance of caption q to image p. Under a distribution strategy with R
replicas each replica trains on b = B / R rows and sees only its own negatives, so the pipeline builds
the R diagonal [b, b] blocks (rows of replica r against the captions of replica r) and stacks them
to [B, b]; Keras splits the batch along its first axis and every replica receives exactly its block.
On one device, b = B. The launcher's multi-replica strategies take the other road that gives the same
blocks: each input pipeline builds per-replica batches (`batch_size` = b, `num_replicas` = 1, its
`shard` of the records), so a replica's [b, b] relevance is computed from exactly the captions it
trains on (`kitm.training.distribution`).

With global negatives (`kitm.losses.global_batch`) a replica's losses compare its rows with every row of the global
batch, so its relevance must be its rows of the global batch's relevance, [b, B]: `kitm.data.own_rows.replica_rows`
cuts batches of the global B rows, whose relevance the pipeline computed over all of them ([B, B]), into per-replica
elements of b rows each with its relevance rows (the launcher does so under `negatives="global"`).

The training crop and flip are the stateless forms of Model Garden's ops below, and so is the caption
draw: every sample carries its own seed pair from `tf.data.Dataset.random(seed)` (a new sequence each
epoch), so a parallel `map` gives the same crops and flips whatever the thread timing (stateful random
ops in a parallel map hand out their numbers in whatever order the threads run, which made two runs
with the same seed differ), and `config.seed` alone fixes them, not the order in which ops were built.

Augmentation uses TF Model Garden's vision ops (`official.vision.ops.preprocess_ops`): a random crop
covering 80-100% of the area, resized back, and an optional horizontal flip (off for the synthetic
world, whose captions say "left" and "right"). Evaluation crops the centre deterministically, or, with
`test_crops=N > 1`, takes N crops of the same size at random positions (`eval_crops`; the model averages
their embeddings, `kitm.models.inference`). Decoding and the evaluation views live in `kitm.ops.images`, shared
with the serving signatures, so a served model sees exactly the images evaluation saw.
"""

from __future__ import annotations

import dataclasses
import functools
import os

import tensorflow as tf

from kitm.data import schema
from kitm.data.records import parse_record, read_records
from kitm.distribute.replicas import per_replica_batch_size
from kitm.errors import KitmDataError
from kitm.ops.images import decode_pixels, eval_crops, eval_image, to_unit_float
from kitm.relevance.batch import batch_cider, batch_sentence_relevance
from kitm.relevance.world_truth import world_relevance_tf

# tf.data converts each map function, and all it calls, with autograph unless it is marked; kitm's hold no Python
# control flow on tensors (their conditions are settings), and the conversions cost about 2 s of the 20 s of CPU of
# a tiny launcher run (docs/performance.md). So every map function of kitm's data side is `_plain`.
_plain = tf.autograph.experimental.do_not_convert

CAPTION_MODES = ("sample", "all")
# none; truth (the synthetic world's exact relevance); cider (CIDEr-D with the training idf); sbert (cosine of
# sentence embeddings). Each needs its slot in the records (dataset.json lists them).
RELEVANCE_SOURCES = ("none", "truth", "cider", "sbert")


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    """How records become batches.

    Attributes:
        batch_size: global batch size B (split across replicas).
        image_size: side of the square images fed to the model.
        captions: "sample" draws one caption per image per epoch; "all" makes every caption its own sample.
        relevance: "none", "truth" (synthetic world), "cider" or "sbert" (relevance rows stored in the records).
        crop_area: area range of the training random crop.
        flip: random horizontal flips in training.
        eval_crop_fraction: side of the evaluation centre crop relative to the shorter side (0.875 = 224/256).
        num_replicas: replicas the batch is split over (relevance blocks per replica).
        shuffle_buffer: records held for shuffling in training.
        deterministic: keep element order under parallelism (reproducible runs).
        seed: seed for file and record shuffling and caption sampling.
        cache: keep decoded records in memory after the first epoch (small datasets).
        neighbor_batching: build batches from semantic-neighbour pairs and add y["neighbor_position"]
            (`kitm.data.neighbor_batching`; needs the records' neighbors slot; holds the split's records in memory).
        neighbor_draw: "mutual" (a seed's partner is drawn among its mutual neighbours when it has any) or
            "uniform" (among all its k neighbours).
        neighbor_space: where the neighbours of neighbour-aware batching were found: "text" (the records'
            neighbors slot) or "image" (the image_neighbors slot, Thomas & Kovashka's Img NNs variant).
        test_crops: N; evaluation images become N random crops [N, H, W, 3] (1: the centre crop [H, W, 3]).
        train_subset: the sorted `image/id`s training reads (a fixed subset of the split, e.g. the launcher's
            --train_fraction and --train_subset_seed); None: all.
    """

    batch_size: int = 128
    image_size: int = 64
    captions: str = "sample"
    relevance: str = "none"
    crop_area: tuple[float, float] = (0.8, 1.0)
    flip: bool = True
    eval_crop_fraction: float = 0.875
    num_replicas: int = 1
    shuffle_buffer: int = 4096
    deterministic: bool = True
    seed: int | None = 0
    cache: bool = False
    neighbor_batching: bool = False
    neighbor_draw: str = "mutual"
    neighbor_space: str = "text"
    test_crops: int = 1
    train_subset: tuple[int, ...] | None = None

    def __post_init__(self):
        if self.captions not in CAPTION_MODES:
            raise ValueError(f"captions must be one of {CAPTION_MODES}; got {self.captions!r}.")
        if self.relevance not in RELEVANCE_SOURCES:
            raise ValueError(f"relevance must be one of {RELEVANCE_SOURCES}; got {self.relevance!r}.")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be positive; got {self.batch_size}.")
        per_replica_batch_size(self.batch_size, self.num_replicas)
        if not 0 < self.crop_area[0] <= self.crop_area[1] <= 1:
            raise ValueError(f"crop_area must satisfy 0 < low <= high <= 1; got {self.crop_area}.")
        if self.neighbor_draw not in ("mutual", "uniform"):
            raise ValueError(f"neighbor_draw must be 'mutual' or 'uniform'; got {self.neighbor_draw!r}.")
        if self.neighbor_space not in schema.NEIGHBOR_SLOTS:
            raise ValueError(f"neighbor_space must be one of {tuple(schema.NEIGHBOR_SLOTS)}; got "
                             f"{self.neighbor_space!r}.")
        if not 0 < self.eval_crop_fraction <= 1:
            raise ValueError(f"eval_crop_fraction must be in (0, 1]; got {self.eval_crop_fraction}.")
        if isinstance(self.test_crops, bool) or int(self.test_crops) != self.test_crops or self.test_crops < 1:
            raise ValueError(f"test_crops must be a positive integer; got {self.test_crops!r}.")


def train_image(image: tf.Tensor, config: PipelineConfig, seed: tf.Tensor) -> tf.Tensor:
    """Random crop (area in `crop_area`, aspect 3/4..4/3), resize, optional horizontal flip.

    `seed`: int [2], the sample's stateless seed (the same seed gives the same crop and flip).
    """
    if config.crop_area != (1.0, 1.0):
        # Model Garden's random_crop_image, made stateless: the same box sampler, seeded per sample.
        offset, size, _ = tf.image.stateless_sample_distorted_bounding_box(
            tf.shape(image), tf.constant([0.0, 0.0, 1.0, 1.0], shape=[1, 1, 4]), seed=seed,
            min_object_covered=config.crop_area[0], aspect_ratio_range=(3 / 4, 4 / 3),
            area_range=config.crop_area, max_attempts=10)
        image = tf.slice(image, offset, size)
    image = tf.image.resize(to_unit_float(image), [config.image_size, config.image_size], antialias=True)
    if config.flip:
        image = tf.image.stateless_random_flip_left_right(image, seed=tf.random.experimental.stateless_fold_in(
            seed, 1))
    return tf.ensure_shape(tf.clip_by_value(image, 0.0, 1.0), [config.image_size, config.image_size, 3])


def check_image_input(info: schema.DatasetInfo) -> None:
    """Refuse a captions-only dataset (image_mode "none"), before tf.data traces anything (autograph would turn
    the error into a StagingError)."""
    if info.image_mode == "none":
        raise KitmDataError(f"Dataset '{info.name}' is captions-only (image_mode 'none': its records hold no images); "
                            "it serves relevance and caption work, not image input. Rebuild it with images "
                            "(python -m kitm.data.build ... --images=<folder>).")


def _with_pixels(parsed: dict) -> dict:
    """A parsed record with its image decoded ("image/pixels", uint8) in place of the encoded bytes."""
    return {**{key: value for key, value in parsed.items() if key != "image/encoded"},
            "image/pixels": decode_pixels(parsed["image/encoded"])}


def image_input(parsed: dict, info: schema.DatasetInfo) -> tf.Tensor:
    """The model's image input from a parsed record: pixels, a feature vector, or mean-pooled regions.

    Captions-only datasets never get here: `_records` refuses them before tracing (`check_image_input`)."""
    if "image/pixels" in parsed:  # decoded already (`_with_pixels`)
        return parsed["image/pixels"]
    if info.image_mode == "encoded":
        return decode_pixels(parsed["image/encoded"])  # uint8: the views convert after cropping
    if info.image_mode == "feature":
        return parsed["image/feature"]
    regions = tf.reshape(parsed["image/regions"], tf.cast(parsed["image/regions_shape"], tf.int32))
    return tf.reduce_mean(regions, axis=0)


def relevance_features(parsed: dict, info: schema.DatasetInfo, source: str) -> tuple[dict, dict]:
    """A record's relevance features for `source`: (image side, caption side with one row per caption [C, ...]).

    The image side travels with every sample of the image; the caption side with the sample's caption.
    """
    captions = info.captions_per_image
    if source == "truth":
        return ({"scene_facts": parsed[schema.TRUTH_SCENE_FACTS]},
                {"caption_facts": tf.reshape(parsed[schema.TRUTH_CAPTION_FACTS], [captions, -1])})
    if source == "cider":
        entries = parsed[schema.CIDER_ENTRIES]
        keys = tf.RaggedTensor.from_row_lengths(parsed[schema.CIDER_KEYS], entries)
        lengths = parsed[schema.CIDER_LENGTHS]
        reference_weights = tf.RaggedTensor.from_row_lengths(parsed[schema.CIDER_REFERENCE_WEIGHTS], entries)
        hypothesis_weights = tf.RaggedTensor.from_row_lengths(parsed[schema.CIDER_HYPOTHESIS_WEIGHTS], entries)
        # A caption's own entries are held as [1, None]: a rank-1 ragged slice would turn dense in the
        # pipeline's later maps and could no longer be batched.
        return ({"cider_reference_keys": keys, "cider_reference_weights": reference_weights,
                 "cider_reference_lengths": lengths},
                {"cider_keys": tf.expand_dims(keys, 1), "cider_weights": tf.expand_dims(hypothesis_weights, 1),
                 "cider_lengths": lengths})
    if source == "sbert":
        return {}, {"sbert_embedding": tf.reshape(parsed[schema.SBERT_EMBEDDINGS], [captions, -1])}
    return {}, {}


def batch_relevance_matrix(batch: dict, source: str, info: schema.DatasetInfo, num_replicas: int) -> tf.Tensor:
    """The batch's [B, B / R] relevance blocks from the features `relevance_features` put in each sample."""
    if source == "truth":
        # Relations are judged in the stored scene's pixel coordinates, so the world's own image size.
        relevance_fn = functools.partial(world_relevance_tf, world=info.truth_world, image_size=info.image_size)
        return block_diagonal_relevance(relevance_fn, batch["scene_facts"], batch["caption_facts"], num_replicas)
    if source == "cider":
        meta = info.relevance["cider"]
        references = {"keys": batch["cider_reference_keys"], "weights": batch["cider_reference_weights"],
                      "lengths": batch["cider_reference_lengths"]}
        hypotheses = {"keys": batch["cider_keys"].merge_dims(1, 2), "weights": batch["cider_weights"].merge_dims(1, 2),
                      "lengths": batch["cider_lengths"]}
        relevance_fn = functools.partial(_cider_images_by_captions, n=int(meta["n"]), sigma=float(meta["sigma"]))
        return block_diagonal_relevance(relevance_fn, references, hypotheses, num_replicas)
    # sbert: the relevance of caption q to image p is the cosine of q with p's own caption (the sample's caption).
    embeddings = batch["sbert_embedding"]
    return block_diagonal_relevance(batch_sentence_relevance, embeddings, embeddings, num_replicas)


def _cider_images_by_captions(references, hypotheses, *, n, sigma):
    return batch_cider(hypotheses, references, n=n, sigma=sigma)


def block_diagonal_relevance(relevance_fn, images_side, captions_side, num_replicas: int) -> tf.Tensor:
    """Relevance of each replica's captions to that replica's images: [B, B/R] stacked diagonal blocks."""
    full = relevance_fn(images_side, captions_side)  # [B, B]
    if num_replicas == 1:
        return full
    b = tf.shape(full)[0] // num_replicas
    blocks = tf.reshape(full, [num_replicas, b, num_replicas, b])
    blocks = tf.gather_nd(tf.transpose(blocks, [0, 2, 1, 3]), tf.stack([tf.range(num_replicas)] * 2, axis=1))
    return tf.reshape(blocks, [num_replicas * b, b])


_SLOT_BUILD_HINT = {
    "truth": "a synthetic dataset",
    "cider": "a dataset built with --relevance including cider",
    "sbert": "a dataset built with --relevance including sbert",
}


def _check_relevance_available(info: schema.DatasetInfo, config: PipelineConfig, root) -> None:
    if config.relevance != "none" and config.relevance not in info.relevance:
        raise KitmDataError(
            f"relevance={config.relevance!r} needs the records' '{config.relevance}' slot, but the dataset at {root} "
            f"has relevance slots {sorted(info.relevance) or 'none'}; use relevance='none' or "
            f"{_SLOT_BUILD_HINT[config.relevance]} (python -m kitm.data.build).")


def _records(root, split: str, config: PipelineConfig, training: bool, shard: tuple[int, int] | None = None):
    info = schema.load_info(root)
    check_image_input(info)
    _check_relevance_available(info, config, root)
    spec = schema.feature_spec(info)
    paths = info.shard_paths(root, split)
    if shard is None:
        records = read_records(paths, shuffle_files=training, deterministic=config.deterministic, seed=config.seed)
    else:
        # Every pipeline must read the same record order for the shards to be complementary: the same file
        # shuffle (same seed), a deterministic interleave of a fixed width (AUTOTUNE would follow each
        # machine's core count). Sharded before parsing: a pipeline decodes only its own records.
        records = read_records(paths, shuffle_files=training, deterministic=True, seed=config.seed,
                               cycle_length=min(len(paths), 16)).shard(*shard)
    records = records.map(_plain(lambda path, record: parse_record(path, record, spec)),
                          num_parallel_calls=tf.data.AUTOTUNE, deterministic=config.deterministic)
    if training and config.train_subset is not None:
        # Membership by binary search in the sorted kept ids: O(log n) a record, whatever the subset's size.
        kept = tf.constant(config.train_subset, tf.int64)

        def is_kept(parsed):
            image_id = tf.reshape(tf.cast(parsed["image/id"], tf.int64), [1])
            position = tf.minimum(tf.searchsorted(kept, image_id, side="left")[0], tf.size(kept) - 1)
            return tf.equal(tf.gather(kept, position), image_id[0])

        records = records.filter(_plain(is_kept))
    return info, records


def training_dataset(root: str | os.PathLike, split: str, tokenizer, config: PipelineConfig,
                     shard: tuple[int, int] | None = None) -> tf.data.Dataset:
    """Shuffled, augmented, batched (x, y) pairs for `model.fit`; one pass over the split per epoch.

    `shard=(count, index)` keeps every count-th record from the index-th (`tf.data.Dataset.shard`), for
    one of `count` input pipelines; its batches are `config.batch_size` (per replica, there). Pipelines
    given the same `config.seed` read complementary shards of every pass.
    """
    info, dataset = batched_samples(root, split, config, shard=shard)
    return dataset.map(_to_model_inputs(tokenizer, config, info), num_parallel_calls=tf.data.AUTOTUNE,
                       deterministic=config.deterministic).prefetch(tf.data.AUTOTUNE)


def _check_shard(config: PipelineConfig, shard: tuple[int, int] | None) -> None:
    """A shard is (count, index); neighbour-aware batching needs the whole split, neither a shard nor a subset."""
    if shard is not None and not 0 <= shard[1] < shard[0]:
        raise ValueError(f"shard must be (count, index) with 0 <= index < count; got {shard}.")
    if shard is not None and config.neighbor_batching:
        raise KitmDataError("Neighbour-aware batching pairs captions across the whole split; it does not run on a "
                            "shard of it (one pipeline per worker under MultiWorkerMirroredStrategy).")
    if config.train_subset is not None and config.neighbor_batching:
        raise KitmDataError("Neighbour-aware batching draws partners from the whole split; it does not run on a "
                            "subset of it (--train_fraction).")


def batched_samples(root: str | os.PathLike, split: str, config: PipelineConfig,
                    shard: tuple[int, int] | None = None, defer_images: bool = False):
    """(info, batches of raw samples): images augmented, captions as strings, each source's relevance features.

    `defer_images`: encoded images stay encoded ("image": the bytes) and each sample carries its augmentation seed
    ("image_seed"), for a pipeline that decodes only some rows of each batch (`kitm.data.own_rows`)."""
    _check_shard(config, shard)
    info, records = _records(root, split, config, training=True, shard=shard)
    defer_images = defer_images and info.image_mode == "encoded"
    num_images = info.num_images(split) if config.train_subset is None else len(config.train_subset)
    if shard is not None:
        num_images = len(range(shard[1], num_images, shard[0]))
    samples = num_images * (info.captions_per_image if config.captions == "all" else 1)
    if config.batch_size > samples:
        raise KitmDataError(
            f"batch_size {config.batch_size} is larger than the {samples} training samples of split '{split}' "
            f"in {root}; lower --batch_size.")
    source = config.relevance

    def sides(parsed):
        """(what every sample of the image carries, what each caption carries [C, ...])."""
        image_side, caption_side = relevance_features(parsed, info, source)
        image = parsed["image/encoded"] if defer_images else image_input(parsed, info)
        image_side = {"image": image, "image_index": tf.cast(parsed["image/id"], tf.int32),
                      **image_side}
        per_caption = {"caption": parsed["captions"], "caption_index": tf.cast(parsed["caption/ids"], tf.int32),
                       **caption_side}
        return image_side, per_caption

    def to_samples(parsed, seed):
        # Every caption of the image becomes a candidate sample (image side repeated, caption side sliced);
        # "sample" then keeps one at random per epoch, "all" keeps them all.
        image_side, per_caption = sides(parsed)
        same_image = tf.zeros([info.captions_per_image], tf.int32)
        repeated = {key: tf.gather(tf.expand_dims(value, 0), same_image) for key, value in image_side.items()}
        candidates = tf.data.Dataset.from_tensor_slices({**repeated, **per_caption})
        if config.captions == "all":
            return candidates
        k = tf.random.stateless_uniform([], seed, 0, info.captions_per_image, dtype=tf.int64)
        return candidates.skip(k).take(1)

    def sample_of(parsed, k):
        image_side, per_caption = sides(parsed)
        return {**image_side, **{key: value[k] for key, value in per_caption.items()}}

    if config.neighbor_batching:
        from kitm.data.neighbor_batching import paired_samples

        dataset, neighbor_table = paired_samples(root, split, info, config, samples, sample_of)
    else:
        neighbor_table = None
        if config.cache:
            records = records.cache()
        dataset = records.shuffle(min(config.shuffle_buffer, num_images), seed=config.seed,
                                  reshuffle_each_iteration=True)
        if info.image_mode == "encoded" and not defer_images:
            # Decode here, in parallel: flat_map below runs its function on one thread, where the decode was the
            # pipeline's serial bottleneck on many cores. After the shuffle, so its buffer holds compressed bytes.
            dataset = dataset.map(_plain(_with_pixels), num_parallel_calls=tf.data.AUTOTUNE,
                                  deterministic=config.deterministic)
        # The caption drawn for each image: stateless, from its own seed pair (a stream apart from augment's).
        caption_seeds = tf.data.Dataset.random(seed=config.seed, rerandomize_each_iteration=True).batch(2).map(
            _plain(lambda pair: tf.random.experimental.stateless_fold_in(pair, 1)))
        dataset = tf.data.Dataset.zip(dataset, caption_seeds).flat_map(_plain(to_samples))
        if config.captions == "all":
            dataset = dataset.shuffle(min(config.shuffle_buffer, samples), seed=config.seed,
                                      reshuffle_each_iteration=True)
    return info, _augmented_batches(dataset, info, config, samples, defer_images, neighbor_table)


def _augmented_batches(dataset, info: schema.DatasetInfo, config: PipelineConfig, samples: int, defer_images: bool,
                       neighbor_table) -> tf.data.Dataset:
    """The samples augmented (or, deferred, given their seeds), batched, with their neighbours' positions."""

    def augment(sample, seed):
        if defer_images:
            sample["image_seed"] = seed
        elif info.image_mode == "encoded":
            sample["image"] = train_image(sample["image"], config, seed)
        return sample

    # One stateless seed pair per sample; rerandomised each epoch, the same sequence in every run.
    seeds = tf.data.Dataset.random(seed=config.seed, rerandomize_each_iteration=True).batch(2)
    dataset = tf.data.Dataset.zip(dataset, seeds)
    dataset = dataset.map(_plain(augment), num_parallel_calls=tf.data.AUTOTUNE, deterministic=config.deterministic)
    dataset = dataset.batch(config.batch_size, drop_remainder=True)
    # flat_map hides the length from tf.data; stating it lets Keras size epochs and progress bars.
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(samples // config.batch_size))
    if neighbor_table is not None:
        batch_seeds = tf.data.Dataset.random(seed=config.seed, rerandomize_each_iteration=True).batch(2)
        dataset = tf.data.Dataset.zip(dataset, batch_seeds).map(
            _with_neighbor_positions(neighbor_table, config.num_replicas), num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=config.deterministic)
    return dataset


def _with_neighbor_positions(table, num_replicas: int):
    """Add `neighbor_position` [B]: each replica's rows point into that replica's own block (-1: none)."""
    from kitm.data.neighbor_batching import neighbor_positions

    def add(batch, seed):
        positions = batch.pop("caption_position")
        blocks = tf.split(positions, num_replicas)
        batch["neighbor_position"] = tf.concat(
            [neighbor_positions(block, table, tf.random.experimental.stateless_fold_in(seed, replica))
             for replica, block in enumerate(blocks)], axis=0)
        return batch

    return _plain(add)


def tf_tokenize(tokenizer, texts):
    """Token ids of `texts` inside a tf.data map: kitm's tokenizers' TensorFlow path (`tf_tokenize`), which holds on
    every Keras backend; any other callable is called as it is."""
    return getattr(tokenizer, "tf_tokenize", tokenizer)(texts)


def _to_model_inputs(tokenizer, config: PipelineConfig, info: schema.DatasetInfo):
    def convert(batch):
        x = {"image": batch["image"], "tokens": tf_tokenize(tokenizer, batch["caption"])}
        y = {"image_index": batch["image_index"], "caption_index": batch["caption_index"]}
        if config.neighbor_batching:
            y["neighbor_position"] = batch["neighbor_position"]
        if config.relevance != "none":
            y["relevance"] = batch_relevance_matrix(batch, config.relevance, info, config.num_replicas)
        return x, y

    return _plain(convert)


def evaluation_dataset(root: str | os.PathLike, split: str, tokenizer, config: PipelineConfig,
                       limit: int | None = None) -> tf.data.Dataset:
    """Every image of a split once, in record order, with all its captions: for retrieval evaluation.

    Elements: {"image": [B, ...], "tokens": int32 [B, C, T], "captions": string [B, C], "image_index": [B],
    "caption_index": [B, C]}. Images are centre-cropped, never augmented; the last batch may be short.
    With `config.test_crops = N > 1`, "image" is [B, N, H, W, 3] (`eval_crops`, seeded by `config.seed` and
    the image id) and B is batch_size // N, so that a batch holds about batch_size crops.
    """
    info, records = _records(root, split, dataclasses.replace(config, deterministic=True), training=False)
    if limit is not None:
        records = records.take(limit)

    def prepare(parsed):
        image = image_input(parsed, info)
        if info.image_mode == "encoded" and config.test_crops > 1:
            seed = tf.stack([tf.constant(config.seed or 0, tf.int64), tf.cast(parsed["image/id"], tf.int64)])
            image = eval_crops(image, config.image_size, config.eval_crop_fraction, config.test_crops, seed)
        elif info.image_mode == "encoded":
            image = eval_image(image, config.image_size, config.eval_crop_fraction)
        return {"image": image, "captions": parsed["captions"], "image_index": tf.cast(parsed["image/id"], tf.int32),
                "caption_index": tf.cast(parsed["caption/ids"], tf.int32)}

    def tokenize(batch):
        captions = batch["captions"]
        shape = tf.shape(captions)
        # a tensor, or a dict of them (keras-hub text towers)
        tokens = tf_tokenize(tokenizer, tf.reshape(captions, [-1]))
        batch["tokens"] = tf.nest.map_structure(lambda ids: tf.reshape(ids, [shape[0], shape[1], -1]), tokens)
        return batch

    dataset = records.map(_plain(prepare), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    batch_size = max(1, config.batch_size // config.test_crops) if info.image_mode == "encoded" else config.batch_size
    return dataset.batch(batch_size).map(_plain(tokenize)).prefetch(tf.data.AUTOTUNE)


def training_captions(root: str | os.PathLike, split: str = "train") -> list[str]:
    """All captions of a split, for building the vocabulary."""
    info = schema.load_info(root)
    spec = {"captions": tf.io.FixedLenFeature([info.captions_per_image], tf.string)}
    dataset = read_records(info.shard_paths(root, split)).map(
        _plain(lambda path, record: tf.io.parse_single_example(record, spec)["captions"]),
        num_parallel_calls=tf.data.AUTOTUNE)
    captions: list[str] = []
    for batch in dataset.batch(4096):
        captions.extend(c.decode("utf-8") for c in batch.numpy().ravel())
    return captions
