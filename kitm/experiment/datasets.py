"""The datasets an experiment can name: their presets, where their records live, and how to build them.

- the presets live in `kitm.experiment.presets` (re-exported here as `DATASET_PRESETS`).
- `ensure_dataset`: the dataset's info; the synthetic world is built on demand, any other dataset stops with the
  exact build command (`BUILD_COMMANDS`).
- `check_against_data`: settings that contradict the records (missing relevance rows, images vs features, too few
  training samples for the batch).
"""

from __future__ import annotations

import pathlib

from kitm.errors import KitmConfigError, KitmDataError, option
from kitm.experiment.config import ExperimentConfig
from kitm.experiment.objectives import required_relevance_slots, uses_center_phases, \
    uses_neighbor_batching
from kitm.experiment.presets import DATASET_PRESETS, preset_settings  # noqa: F401  (re-exported)

# Named datasets and how to build them; the message a user sees when one is missing.
BUILD_COMMANDS = {
    "coco": "python -m kitm.data.build --dataset=karpathy --karpathy_json=<dir>/dataset_coco.json "
            "--images=<dir with train2014/ and val2014/> --out={data_dir}",
    "f30k": "python -m kitm.data.build --dataset=karpathy --karpathy_json=<dir>/dataset_flickr30k.json "
            "--images=<dir>/flickr30k-images --out={data_dir}",
    "f8k": "python -m kitm.data.build --dataset=karpathy --karpathy_json=<dir>/dataset_flickr8k.json "
           "--images=<dir>/Flicker8k_Dataset --out={data_dir}",
    "f8k_text": "python -m kitm.data.build --dataset=flickr8k --flickr8k_dir=<dir>/Flickr8k_text "
                "--images=<dir>/Flicker8k_Dataset --out={data_dir}",
    "coco_captions": "python -m kitm.data.build --dataset=coco_captions --coco_captions=<dir>/annotations/"
                     "captions_train2014.json,<dir>/annotations/captions_val2014.json --karpathy_json=<dir>/"
                     "dataset_coco.json --images=<dir with train2014/ and val2014/> --out={data_dir}",
    "f30k_precomp": "python -m kitm.data.build --dataset=precomputed --features_dir=<dir> --name=f30k_precomp "
                    "--out={data_dir}",
    "coco_precomp": "python -m kitm.data.build --dataset=precomputed --features_dir=<dir> --name=coco_precomp "
                    "--out={data_dir}",
}
# Any other name is taken for the user's own data: a table of image path + caption (kitm.data.captions_table), or a
# Karpathy split JSON.
OWN_DATA_BUILD_COMMAND = ("python -m kitm.data.build --dataset=captions_table --captions=<your .csv or .jsonl of "
                          "image path + caption> --images=<image folder> --out={data_dir}\n  (or, for a Karpathy split "
                          "JSON: python -m kitm.data.build --dataset=karpathy --karpathy_json=<split json> "
                          "--images=<image folder> --out={data_dir})")

def synthetic_relevance_rows(config: ExperimentConfig) -> list[str]:
    """The caption relevance rows a synthetic world built for `config` carries (CIDEr-D always: it is cheap)."""
    rows = {"cider", *required_relevance_slots(config)} - {"truth", "image_neighbors"}
    if "neighbors" in rows:
        rows.add("sbert")  # the neighbours are found in that space; keep it for relevance="sbert" too
    return sorted(rows)


# The image space of the image_neighbors rows of a synthetic world built on demand: its scenes are flat shapes,
# near in pixel space exactly when alike (kitm.relevance.image_features), and it needs no weights.
SYNTHETIC_IMAGE_NEIGHBORS = "pixels"


def synthetic_image_neighbors(config: ExperimentConfig) -> str:
    """The image_neighbors space of a synthetic world built for `config` ("none" without the Img NNs)."""
    return SYNTHETIC_IMAGE_NEIGHBORS if "image_neighbors" in required_relevance_slots(config) else "none"


def default_data_dir(config: ExperimentConfig) -> str:
    """tfrecords/<dataset>; a synthetic world with sentence-embedding or image-neighbour rows gets its own folder,
    so the quick default world (CIDEr-D rows only) is never rebuilt in place, and so does the shapes world."""
    if config.data.dataset != "synthetic":
        return f"tfrecords/{config.data.dataset}"
    parts = [row for row in synthetic_relevance_rows(config) if row != "cider"]
    if synthetic_image_neighbors(config) != "none":
        parts.append("image_neighbors")
    if config.data.synthetic_world != "things":
        parts.insert(0, config.data.synthetic_world)
    return "_".join(["tfrecords/synthetic", *parts])


def data_dir(config: ExperimentConfig) -> pathlib.Path:
    """The records' folder: `data_dir`, else the dataset's default."""
    return pathlib.Path(config.data.data_dir or default_data_dir(config))


def build_command(config: ExperimentConfig, directory, image_mode: str | None = None) -> str:
    """The command that builds the dataset into `directory` with the rows `config` needs; `image_mode` (of the
    records there, when known) picks the image space of neighbor_space="image"."""
    data = config.data
    if data.dataset == "synthetic":
        command = (f"python -m kitm.data.build --dataset=synthetic --out={{data_dir}} "
                   f"--world={data.synthetic_world} --num_scenes={data.synthetic_num_scenes} "
                   f"--seed={config.training.seed} "
                   f"--image_size={data.image_size} --relevance={','.join(synthetic_relevance_rows(config))}")
    else:
        command = BUILD_COMMANDS.get(data.dataset, OWN_DATA_BUILD_COMMAND)
    if "image_neighbors" in required_relevance_slots(config):
        if image_mode in ("feature", "regions") or (image_mode is None and data.dataset.endswith("_precomp")):
            space = "features"  # the stored vectors
        elif data.dataset == "synthetic":
            space = SYNTHETIC_IMAGE_NEIGHBORS
        else:
            space = "backbone --image_neighbors_weights=imagenet"
        command += f" --image_neighbors={space}"
    return command.format(data_dir=directory)


def ensure_dataset(config: ExperimentConfig):
    """The dataset's info (`kitm.data.schema.DatasetInfo`); the synthetic world is built when absent, other datasets
    stop with the command that builds them."""
    from kitm.data import schema

    directory = data_dir(config)
    data = config.data
    if schema.file_given_as_dataset(directory) is not None:  # the table itself, say: the build command for it
        raise KitmConfigError(f"{option('data_dir')}={directory}: {schema.file_given_as_dataset(directory)}")
    if not (directory / schema.INFO_FILE).is_file():
        if data.dataset == "synthetic" and config.training.strategy == "multi_worker":
            raise KitmConfigError(
                f"{option('strategy')}=multi_worker reads a built dataset ({directory / schema.INFO_FILE} is "
                "missing): build the synthetic world first, once, e.g. with the same settings and "
                f"{option('strategy')}=default {option('epochs')}=1, so that the workers do not all write it at once.")
        if data.dataset != "synthetic":
            raise KitmConfigError(
                f"Dataset '{data.dataset}' is not built: {directory / schema.INFO_FILE} and its shards are missing.\n"
                f"Build it with:\n  {build_command(config, directory)}")
        from kitm.data.synthetic_records import build_synthetic
        from kitm.relevance.image_features import ImageNeighborOptions

        print(f"Building the synthetic world ({data.synthetic_world}) into {directory} "
              f"({data.synthetic_num_scenes} scenes).")
        build_synthetic(directory, num_scenes=data.synthetic_num_scenes, seed=config.training.seed,
                        image_size=data.image_size, progress=config.training.progress,
                        relevance=synthetic_relevance_rows(config), world=data.synthetic_world,
                        image_neighbors=ImageNeighborOptions(synthetic_image_neighbors(config)))
    info = schema.load_info(directory)
    _check_world(config, directory, info)
    return info


def _check_world(config: ExperimentConfig, directory, info) -> None:
    """A synthetic world built on demand earlier, at the default folder, must be the world asked for: a shapes world
    left in tfrecords/synthetic by a kitm of before 2026-11-28 would otherwise be trained on in silence."""
    if config.data.dataset != "synthetic" or config.data.data_dir is not None or info.truth_world is None:
        return
    if info.truth_world != config.data.synthetic_world:
        raise KitmConfigError(
            f"{directory} holds the {info.truth_world} world, built by an earlier run, but "
            f"{option('synthetic_world')}={config.data.synthetic_world}: delete {directory} to build the "
            f"{config.data.synthetic_world} world there, or pass {option('synthetic_world')}={info.truth_world} "
            f"(or {option('data_dir')}={directory}) to train on what is there.")


def training_subset(config: ExperimentConfig, info) -> tuple[int, ...] | None:
    """train_fraction and train_subset_seed as PipelineConfig.train_subset: the sorted image ids kept; None for all.

    Subset seed 0 keeps the images with the smallest ids (the first claims study's subset); seed s > 0 a uniformly
    random subset of the same size, drawn by numpy's ``default_rng(s)`` from the sorted ids, so that the same seed
    picks the same images on every machine (SAM's limited-data claim on several subsets)."""
    if config.data.train_fraction >= 1.0:
        return None
    import numpy as np

    from kitm.data.image_index import read_image_ids

    ids = np.sort(read_image_ids(data_dir(config), "train"))
    count = max(1, round(config.data.train_fraction * ids.size))
    if config.data.train_subset_seed == 0:
        kept = ids[:count]
    else:
        kept = np.sort(np.random.default_rng(config.data.train_subset_seed).choice(ids, size=count, replace=False))
    return tuple(int(i) for i in kept)


def training_images(config: ExperimentConfig, info) -> int:
    """The training images a run reads (all, or train_fraction of them)."""
    total = info.num_images("train")
    return max(1, round(config.data.train_fraction * total)) if config.data.train_fraction < 1.0 else total


def check_against_data(config: ExperimentConfig, info) -> None:
    """Settings that the records at data_dir cannot serve, each named with the fix."""
    from kitm.experiment.objectives import center_phase_config

    directory = data_dir(config)
    data, model = config.data, config.model
    if "train" not in info.splits:
        raise KitmDataError(f"The dataset at {directory} has no train split.")
    samples = training_images(config, info) * (info.captions_per_image if data.captions_per_step == "all" else 1)
    if config.training.batch_size > samples:
        raise KitmConfigError(f"{option('batch_size')}={config.training.batch_size} is larger than the {samples} "
                              f"training samples of {directory}; lower {option('batch_size')}.")
    if data.train_fraction < 1.0 and (uses_neighbor_batching(config) or uses_center_phases(config)):
        raise KitmConfigError(f"{option('train_fraction')}={data.train_fraction} is not supported with "
                              f"{option('loss')}=neighborhood or {option('loss')}=centers (their batches and centres "
                              "cover the whole training split).")
    if uses_center_phases(config):
        center_phase_config(config, info.num_images("train"), data_dir=directory)
    if config.evaluation.eval_relevance == "truth" and "truth" not in info.relevance:
        raise KitmConfigError(f"{option('eval_relevance')}=truth needs the synthetic world's facts; {directory} has "
                              f"relevance slots {sorted(info.relevance) or 'none'}.")
    for slot in required_relevance_slots(config):
        if slot not in info.relevance:
            raise KitmConfigError(_missing_rows_message(config, info, slot, directory))
    if info.image_mode == "none":
        raise KitmDataError(f"{directory} holds captions only (built without images, e.g. from the Flickr8K token "
                            "files without --images); rebuild it with --images to train on it.")
    if model.image_encoder == "features_mlp" and info.image_mode == "encoded":
        raise KitmConfigError(f"{option('image_encoder')}=features_mlp needs a dataset of precomputed features; "
                              f"{directory} holds encoded images.")
    if model.image_encoder != "features_mlp" and info.image_mode != "encoded":
        raise KitmConfigError(f"{option('image_encoder')}={model.image_encoder} needs images; {directory} holds "
                              f"{info.image_mode} features: use {option('image_encoder')}=features_mlp.")


def _missing_rows_message(config: ExperimentConfig, info, slot: str, directory: pathlib.Path) -> str:
    needed_by = {"neighbors": f"{option('loss')}=neighborhood (neighbour rows)",
                 "image_neighbors": f"{option('loss')}=neighborhood {option('neighbor_space')}=image "
                                    "(the neighbourhood paper's Img NNs)"}.get(slot, f"{option('relevance')}={slot}")
    if slot == "truth":
        hint = "the synthetic world's facts exist only in synthetic datasets"
    elif slot == "image_neighbors":
        hint = (f"rebuild it with the image-space neighbour rows (after deleting {directory}, or into a new folder "
                f"given as --out and {option('data_dir')}):\n  {build_command(config, directory, info.image_mode)}\n"
                "(--image_neighbors=backbone: a frozen ImageNet ResNet-50 on the images; pixels: downsampled pixels, "
                "no weights; features: a precomputed-feature dataset's own vectors)")
    else:
        hint = f"rebuild it with python -m kitm.data.build ... --relevance={slot} (or include {slot} in the list)"
    if slot != "truth" and config.data.dataset == "synthetic":
        hint += "; a synthetic world built on demand is rebuilt if you delete its folder"
    return (f"{needed_by} needs the '{slot}' relevance rows; {directory} has relevance slots "
            f"{sorted(info.relevance) or 'none'}: {hint}.")
