"""Neighbour-aware batching for the neighbourhood loss (Thomas & Kovashka; docs/methods.md#neighbourhood-terms).

The loss needs, for each pair i of a batch, a semantic neighbour i' (drawn from the k nearest captions of text i,
stored in the records' `neighbors` slot) *in the same batch*. Random batches almost never hold one (about
k B / N neighbours expected per anchor: 0.05 on COCO at B = 128). So batches are built from pairs:

1. the training split's serialised records are held in memory (one string per image; the size of the split's
   shards) so that any caption's sample can be fetched by position (random access, which TFRecord files lack);
2. each epoch draws B/2 seed captions per batch at random, and for each seed i a partner i' from its k stored
   neighbours, uniformly among its *mutual* neighbours (i' lists i among its own k) when it has any, else
   among all k. Each batch is the B/2 pairs (seed, partner), so every seed has its neighbour, and so does
   every partner drawn from the mutual neighbours;
3. `neighbor_position[r]` is the in-batch row of a neighbour of row r: its pair partner when that partner is one
   of r's k neighbours, else a random one of r's k neighbours that the batch happens to hold, else -1.

The neighbours come from the records' `neighbors` slot (text space, Thomas & Kovashka's main method) or, with
`neighbor_space="image"` (Thomas & Kovashka's "Img NNs" variant), from the `image_neighbors` slot, which has the same layout
(`kitm.relevance.rows`); everything below is the same for both. The share of rows with a neighbour is logged
(`neighbor_coverage`); `plan_coverage` measures it for a dataset without touching images. Draws conditioned on
mutuality are the one departure from a uniform draw over the k (documented in docs/flagfiles.md); without it, only the
seeds (half the batch) are sure to have their neighbour.
Memory: the split's records stay in RAM (Flickr30K images: ~4 GB; COCO: ~20 GB; precomputed features are far
smaller), the price of random access.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from kitm.data import schema
from kitm.errors import KitmDataError
from kitm.data.records import parse_record, read_records

NEIGHBOR_DRAWS = ("mutual", "uniform")
NEIGHBOR_SPACES = tuple(schema.NEIGHBOR_SLOTS)
# How to build each space's slot (named in the error when the records lack it).
_SLOT_BUILD_HINT = {
    "text": "python -m kitm.data.build ... with --relevance including neighbors (the default)",
    "image": "python -m kitm.data.build ... --image_neighbors=backbone (images; a frozen ImageNet ResNet), "
             "--image_neighbors=pixels (images, no weights: the synthetic world) or --image_neighbors=features "
             "(--dataset=precomputed)",
}


def neighbor_table(info: schema.DatasetInfo, root, split: str,
                   space: str = "text") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(serialised records [N], caption ids [N, C], neighbour flat positions [N * C, k] (-1: not in the split)).

    `space`: "text" reads the `neighbors` slot, "image" the `image_neighbors` slot (schema.NEIGHBOR_SLOTS).
    """
    if space not in schema.NEIGHBOR_SLOTS:
        raise ValueError(f"neighbor_space must be one of {NEIGHBOR_SPACES}; got {space!r}.")
    slot, key = schema.NEIGHBOR_SLOTS[space]
    if slot not in info.relevance:
        raise KitmDataError(f"Neighbour-aware batching with neighbor_space='{space}' (the launcher's "
                            f"--neighbor_space={space}) needs the records' '{slot}' slot; the dataset at {root} has "
                            f"relevance slots {sorted(info.relevance) or 'none'}. Build it with "
                            f"{_SLOT_BUILD_HINT[space]}.")
    spec = {"caption/ids": tf.io.FixedLenFeature([info.captions_per_image], tf.int64),
            key: tf.io.FixedLenFeature([int(info.relevance[slot]["features"][key][1])], tf.int64)}
    records, caption_ids, neighbor_ids = [], [], []
    for path, record in read_records(info.shard_paths(root, split)).batch(1024):
        parsed = tf.io.parse_example(record, spec)
        records.append(record.numpy())
        caption_ids.append(parsed["caption/ids"].numpy())
        neighbor_ids.append(parsed[key].numpy())
    records = np.concatenate(records)
    caption_ids = np.concatenate(caption_ids)
    flat_ids = caption_ids.reshape(-1)
    neighbor_ids = np.concatenate(neighbor_ids).reshape(len(flat_ids), -1)
    order = np.argsort(flat_ids)
    found = np.clip(np.searchsorted(flat_ids, neighbor_ids, sorter=order), 0, len(flat_ids) - 1)
    positions = order[found]
    positions = np.where(flat_ids[positions] == neighbor_ids, positions, -1)
    return records, caption_ids, positions


def mutual_mask(positions: np.ndarray) -> np.ndarray:
    """[M, k] bool: neighbour j of caption a lists a among its own neighbours."""
    rows = np.repeat(np.arange(len(positions)), positions.shape[1])
    valid = positions.reshape(-1) >= 0
    forward = rows[valid] * len(positions) + positions.reshape(-1)[valid]
    backward = np.sort(positions.reshape(-1)[valid] * len(positions) + rows[valid])
    mutual = np.zeros(positions.size, dtype=bool)
    mutual[np.flatnonzero(valid)] = np.isin(forward, backward, assume_unique=False)
    return mutual.reshape(positions.shape)


def draw_partners(seeds: tf.Tensor, positions: tf.Tensor, mutual: tf.Tensor, draw: str, seed) -> tf.Tensor:
    """For each seed caption, a partner from its neighbours (uniform among mutual ones if `draw == "mutual"`).

    `seed` is a stateless seed pair (int [2]): the same seed gives the same partners whatever the threads do.
    """
    candidates = tf.gather(positions, seeds) >= 0
    if draw == "mutual":
        preferred = tf.logical_and(candidates, tf.gather(mutual, seeds))
        has_preferred = tf.reduce_any(preferred, axis=1, keepdims=True)
        candidates = tf.where(has_preferred, preferred, candidates)
    noise = tf.random.stateless_uniform(tf.shape(candidates), seed)
    choice = tf.argmax(tf.where(candidates, noise, -1.0), axis=1, output_type=tf.int32)
    partners = tf.gather(tf.gather(positions, seeds), choice, batch_dims=1)
    # A caption none of whose neighbours is in the split (not written by kitm's builders) pairs with a random one.
    anyone = tf.random.stateless_uniform(tf.shape(seeds), tf.random.experimental.stateless_fold_in(seed, 1), 0,
                                         tf.shape(positions, out_type=positions.dtype)[0], dtype=positions.dtype)
    return tf.where(partners >= 0, partners, anyone)


def neighbor_positions(batch_positions: tf.Tensor, positions: tf.Tensor, seed=(0, 0)) -> tf.Tensor:
    """In-batch row of a neighbour of each row of a paired batch (rows 2j and 2j+1 are pair partners), -1 if none.

    `batch_positions` [B] are the rows' flat caption positions; `positions` [M, k] every caption's neighbours;
    `seed` (stateless, int [2]) picks among several present neighbours.
    """
    size = tf.shape(batch_positions)[0]
    lists = tf.gather(positions, batch_positions)                                          # [B, k]
    in_lists = tf.reduce_any(lists[:, :, None] == batch_positions[None, None, :], axis=1)  # [B, B]
    in_lists = tf.logical_and(in_lists, tf.logical_not(tf.eye(size, dtype=tf.bool)))
    rows = tf.range(size)
    partner = tf.bitwise.bitwise_xor(rows, 1)
    partner_ok = tf.gather(in_lists, partner, batch_dims=1)
    noise = tf.random.stateless_uniform([size, size], seed)
    other = tf.argmax(tf.where(in_lists, noise, -1.0), axis=1, output_type=tf.int32)
    has_any = tf.reduce_any(in_lists, axis=1)
    return tf.where(partner_ok, partner, tf.where(has_any, other, -1))


def plan_coverage(positions: np.ndarray, batch_size: int, draw: str = "mutual", batches: int = 200,
                  seed: int = 0) -> float:
    """Share of rows of paired batches that have an in-batch neighbour (no images read)."""
    mutual = tf.constant(mutual_mask(positions))
    table = tf.constant(positions.astype(np.int32))
    generator = np.random.default_rng(seed)
    covered = []
    for index in range(batches):
        seeds = tf.constant(generator.choice(len(positions), batch_size // 2, replace=False), tf.int32)
        partners = draw_partners(seeds, table, mutual, draw, seed=tf.constant([seed, index]))
        rows = tf.reshape(tf.stack([seeds, partners], axis=1), [-1])
        covered.append(float(tf.reduce_mean(tf.cast(neighbor_positions(rows, table) >= 0, tf.float32))))
    return float(np.mean(covered))


def paired_samples(root, split: str, info: schema.DatasetInfo, config, num_samples: int,
                   sample_from_record) -> tf.data.Dataset:
    """Batches of B samples in B/2 neighbour pairs, with `neighbor_position` [B] per batch.

    `sample_from_record(parsed, k)` turns a parsed record and a caption index into one sample dict (the
    pipeline's own function, so paired batches hold exactly what ordinary ones do).
    """
    if config.batch_size % 2:
        raise KitmDataError(f"Neighbour-aware batching pairs samples: batch_size {config.batch_size} must be even.")
    if config.batch_size // config.num_replicas % 2:
        raise KitmDataError(f"Neighbour-aware batching keeps pairs within a replica: the per-replica batch "
                            f"{config.batch_size // config.num_replicas} must be even.")
    records, _, positions = neighbor_table(info, root, split, config.neighbor_space)
    captions = info.captions_per_image
    store = tf.constant(records)
    table = tf.constant(positions.astype(np.int32))
    mutual = tf.constant(mutual_mask(positions))
    spec = schema.feature_spec(info)
    pairs_per_epoch = num_samples // 2
    total = len(positions)
    seeds = tf.data.Dataset.range(total).shuffle(total, seed=config.seed, reshuffle_each_iteration=True)
    seeds = seeds.repeat().take(pairs_per_epoch) if pairs_per_epoch > total else seeds.take(pairs_per_epoch)
    seeds = seeds.map(tf.autograph.experimental.do_not_convert(lambda s: tf.cast(s, tf.int32)))
    # Stateless draws keyed by config.seed (a new sequence each epoch): reproducible whatever the threads do.
    draw_seeds = tf.data.Dataset.random(seed=config.seed, rerandomize_each_iteration=True).batch(2)
    pairs = tf.data.Dataset.zip(seeds.batch(256), draw_seeds).map(tf.autograph.experimental.do_not_convert(
        lambda s, seed: tf.stack([s, draw_partners(s, table, mutual, config.neighbor_draw, seed)], axis=1))).unbatch()
    rows = pairs.flat_map(tf.data.Dataset.from_tensor_slices)

    @tf.autograph.experimental.do_not_convert  # as kitm.data.pipeline's map functions
    def load(position):
        parsed = parse_record(tf.constant("(in-memory training records)"), store[position // captions], spec)
        sample = sample_from_record(parsed, position % captions)
        sample["caption_position"] = position
        return sample

    return rows.map(load, num_parallel_calls=tf.data.AUTOTUNE, deterministic=config.deterministic), table
