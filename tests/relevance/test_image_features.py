"""Image-space neighbour rows (Thomas & Kovashka's "Img NNs" variant): the rows against a brute-force oracle, the feature
spaces (stored features, SCAN region means, box-averaged pixels, a frozen ResNet), the converters writing the
`image_neighbors` slot, resumable feature caches, neighbour-aware batching on those rows, and the launcher.

Oracle: float64 numpy, one image at a time: every other image's cosine, ordered by (decreasing score, increasing
record position) with ``np.lexsort``; caption c of image i then lists caption c of each of the k images. Exact
ties come from +-1/4 vectors in 16 dimensions (every product exact in float32), many of them duplicates.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
from PIL import Image

from kitm.data import schema
from kitm.data.build import main
from kitm.errors import KitmDataError
from kitm.data.records import parse_record, read_records
from kitm.relevance.image_features import (ImageFeatureExtractor, ImageFiles, ImageNeighborOptions, PixelArrays,
                                           StoredFeatures, neighbor_space_embeddings, split_image_features)
from kitm.relevance.rows import compute_image_neighbor_rows

C = 3


def oracle_rows(features: np.ndarray, caption_ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """[N, C * k] caption ids and scores of the image-space neighbour rows, by brute force."""
    unit = np.asarray(features, np.float64)
    unit = unit / np.linalg.norm(unit, axis=1, keepdims=True)
    ids, scores = [], []
    for i in range(len(unit)):
        others = np.array([j for j in range(len(unit)) if j != i])
        similarity = unit[others] @ unit[i]
        order = np.lexsort((others, -similarity))[:k]
        nearest = others[order]
        ids.append(np.concatenate([caption_ids[nearest, c] for c in range(caption_ids.shape[1])]))
        scores.append(np.tile(similarity[order], caption_ids.shape[1]))
    return np.array(ids), np.array(scores)


def quarter_vectors(num_rows: int, num_patterns: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    patterns = rng.choice([-0.25, 0.25], size=(num_patterns, 16))
    return patterns[rng.integers(num_patterns, size=num_rows)].astype(np.float32)


def _caption_ids(first_image: int, num_images: int) -> np.ndarray:
    return (first_image + np.arange(num_images))[:, None] * C + np.arange(C)


def test_rows_equal_the_oracle_with_ties_duplicates_and_k_beyond_the_smallest_split(tmp_path):
    features = {"train": quarter_vectors(40, 6, seed=1), "val": quarter_vectors(9, 3, seed=2)}
    ids = {"train": _caption_ids(0, 40), "val": _caption_ids(40, 9)}
    images = {split: StoredFeatures(values, np.arange(len(values)), f"{split}.npy")
              for split, values in features.items()}
    # 50 asked; the val split has 8 other images, so every split keeps 8 (as the text rows keep the smallest k).
    meta, per_split = compute_image_neighbor_rows(tmp_path, images, ids, ImageNeighborOptions("features"),
                                                  neighbors_k=50, progress=False)
    assert meta["k"] == 8 and meta["space"] == "features" and meta["feature_dim"] == 16
    assert meta["features"][schema.IMAGE_NEIGHBOR_CAPTION_IDS] == ["int64", C * 8]
    for split in features:
        expected_ids, expected_scores = oracle_rows(features[split], ids[split], 8)
        found_ids = np.stack(per_split[split][schema.IMAGE_NEIGHBOR_CAPTION_IDS])
        found_scores = np.stack(per_split[split][schema.IMAGE_NEIGHBOR_SCORES])
        np.testing.assert_array_equal(found_ids, expected_ids)
        np.testing.assert_allclose(found_scores, expected_scores, atol=1e-6)
        assert found_scores.dtype == np.float32
        # Neighbours are other images: no caption of the image itself.
        assert not np.any(found_ids // C == ids[split][:, :1] // C)


def test_scan_regions_are_averaged_and_vsepp_repeats_read_once(tmp_path):
    rng = np.random.default_rng(3)
    regions = rng.standard_normal((12, 4, 8)).astype(np.float32)  # [images, R, F]
    repeated = np.repeat(rng.standard_normal((12, 8)).astype(np.float32), 5, axis=0)  # VSE++: a row per caption
    ids = {"train": _caption_ids(0, 12)}
    options = ImageNeighborOptions("features")
    _, scan = compute_image_neighbor_rows(tmp_path / "scan", {"train": StoredFeatures(regions, np.arange(12), "r")},
                                          ids, options, neighbors_k=4, progress=False)
    np.testing.assert_array_equal(np.stack(scan["train"][schema.IMAGE_NEIGHBOR_CAPTION_IDS]),
                                  oracle_rows(regions.mean(axis=1), ids["train"], 4)[0])
    _, vsepp = compute_image_neighbor_rows(tmp_path / "vsepp",
                                           {"train": StoredFeatures(repeated, np.arange(12) * 5, "v")}, ids, options,
                                           neighbors_k=4, progress=False)
    np.testing.assert_array_equal(np.stack(vsepp["train"][schema.IMAGE_NEIGHBOR_CAPTION_IDS]),
                                  oracle_rows(repeated[::5], ids["train"], 4)[0])


def test_a_split_of_one_image_and_mismatched_inputs_are_refused(tmp_path):
    options = ImageNeighborOptions("features")
    one = {"train": StoredFeatures(np.ones((1, 4), np.float32), np.arange(1), "x")}
    with pytest.raises(KitmDataError, match="one image"):
        compute_image_neighbor_rows(tmp_path, one, {"train": _caption_ids(0, 1)}, options, progress=False)
    with pytest.raises(KitmDataError, match="3 images but 4 records"):
        compute_image_neighbor_rows(tmp_path, {"train": StoredFeatures(np.ones((3, 4)), np.arange(3), "x")},
                                    {"train": _caption_ids(0, 4)}, options, progress=False)
    with pytest.raises(KitmDataError, match="--image_neighbors=pixels works on images"):
        split_image_features(tmp_path, "train", one["train"], ImageFeatureExtractor(ImageNeighborOptions("pixels")))
    with pytest.raises(KitmDataError, match="--image_neighbors=features takes the stored features"):
        ImageFeatureExtractor(options).check(PixelArrays(np.zeros((2, 8, 8, 3), np.uint8)), "train")
    with pytest.raises(KitmDataError, match="--image_neighbors='bogus'"):
        ImageNeighborOptions("bogus")
    with pytest.raises(KitmDataError, match="--image_neighbors_weights=/nowhere.h5"):
        ImageNeighborOptions("backbone", weights="/nowhere.h5")


def _block_images(count: int, seed: int, side: int = 16, block: int = 4) -> np.ndarray:
    """uint8 [count, side, side, 3] images made of constant block x block squares (area resizing is exact)."""
    rng = np.random.default_rng(seed)
    cells = rng.integers(0, 256, size=(count, side // block, side // block, 3), dtype=np.uint8)
    return np.repeat(np.repeat(cells, block, axis=1), block, axis=2)


def test_pixel_features_are_box_averages_from_arrays_and_files_and_are_centered(tmp_path):
    images = _block_images(5, seed=4)
    expected = (images[:, ::4, ::4, :].astype(np.float64) / 255).reshape(5, -1)
    paths = []
    for index, image in enumerate(images):
        paths.append(str(tmp_path / f"{index}.png"))
        Image.fromarray(image).save(paths[-1])
    options = ImageNeighborOptions("pixels", pixel_side=4)
    extractor = ImageFeatureExtractor(options)
    from_arrays = extractor(PixelArrays(images), 0, 5)
    from_files = extractor(ImageFiles(paths), 1, 4)
    assert from_arrays.shape == (5, 48) and from_arrays.dtype == np.float32
    np.testing.assert_allclose(from_arrays, expected, atol=1e-6)
    np.testing.assert_allclose(from_files, expected[1:4], atol=1e-6)
    centered = neighbor_space_embeddings(from_arrays, options, "train", PixelArrays(images))
    np.testing.assert_allclose(centered, expected - expected.mean(axis=0), atol=1e-6)
    # Two identical images are both the split's mean: no cosine; the error names one.
    twins = PixelArrays(np.stack([images[0], images[0]]), keys=["scene_a", "scene_b"])
    with pytest.raises(KitmDataError, match="scene_a equals the split's mean image"):
        neighbor_space_embeddings(extractor(twins, 0, 2), options, "train", twins)
    (tmp_path / "bad.png").write_bytes(b"not a png")
    with pytest.raises(KitmDataError, match="bad.png cannot be decoded"):
        extractor(ImageFiles([paths[0], str(tmp_path / "bad.png")]), 0, 2)


def test_synthetic_scenes_near_in_pixel_space_have_relevant_captions():
    from kitm.data import synthetic
    from kitm.relevance.scene_facts import CAPTION_FACT_WIDTH
    from kitm.relevance.truth import truth_relevance
    from kitm.relevance.neighbors import nearest_neighbors

    world = synthetic.generate_world(300, seed=2, image_size=32, progress=False, world="shapes")
    train = np.flatnonzero(world.splits == "train")
    relevance = truth_relevance(world.scene_facts[train],
                                world.caption_facts[train].reshape(-1, CAPTION_FACT_WIDTH),
                                image_size=32).reshape(len(train), len(train), -1).mean(axis=2)
    options, images = ImageNeighborOptions("pixels"), PixelArrays(world.images[train])
    embeddings = neighbor_space_embeddings(ImageFeatureExtractor(options)(images, 0, len(train)), options, "train",
                                           images)
    found, _ = nearest_neighbors(embeddings, 5)
    near = relevance[np.arange(len(train))[:, None], found].mean()
    anyone = relevance[~np.eye(len(train), dtype=bool)].mean()
    assert near > anyone + 0.1, (near, anyone)  # measured: 0.53 against 0.37


class _Counting(ImageFeatureExtractor):
    def __init__(self, options):
        super().__init__(options)
        self.calls = []

    def __call__(self, image_input, start, stop, bar=None):
        self.calls.append((start, stop))
        return super().__call__(image_input, start, stop, bar)


def test_features_are_cached_per_chunk_and_a_resumed_build_computes_only_missing_chunks(tmp_path):
    values = np.random.default_rng(5).standard_normal((7, 6)).astype(np.float32)
    images = StoredFeatures(values, np.arange(7), "f.npy")
    options = ImageNeighborOptions("features", chunk_images=3)
    first = _Counting(options)
    np.testing.assert_array_equal(split_image_features(tmp_path, "train", images, first, progress=False), values)
    assert first.calls == [(0, 3), (3, 6), (6, 7)]
    folder = tmp_path / f"image-{options.tag()}-train"
    (folder / "000000003-000000006.npy").unlink()  # killed while writing this chunk: only a .tmp was left
    (folder / "000000003-000000006.npy.tmp").write_bytes(b"partial")
    again = _Counting(options)
    np.testing.assert_array_equal(split_image_features(tmp_path, "train", images, again, progress=False), values)
    assert again.calls == [(3, 6)]


def _karpathy_folder(tmp_path: pathlib.Path, images: np.ndarray, splits: list[str]) -> pathlib.Path:
    (tmp_path / "images").mkdir()
    entries = []
    for index, (image, split) in enumerate(zip(images, splits)):
        Image.fromarray(image).save(tmp_path / "images" / f"{index}.png")
        entries.append({"filename": f"{index}.png", "split": split,
                        "sentences": [{"raw": f"picture {index} caption {k}"} for k in range(5)]})
    (tmp_path / "karpathy.json").write_text(json.dumps({"images": entries}))
    return tmp_path


def _slot(root: pathlib.Path, split: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(caption ids [N, C], neighbour caption ids [N, C * k], scores) of a split, in record order."""
    info = schema.load_info(root)
    spec = schema.feature_spec(info)
    parsed = [parse_record(path, record, spec) for path, record in read_records(info.shard_paths(root, split))]
    parsed.sort(key=lambda p: int(p["image/id"]))  # the reader interleaves shards
    return tuple(np.stack([p[key].numpy() for p in parsed])
                 for key in ("caption/ids", schema.IMAGE_NEIGHBOR_CAPTION_IDS, schema.IMAGE_NEIGHBOR_SCORES))


def test_karpathy_converter_writes_pixel_neighbor_rows(tmp_path):
    images = _block_images(14, seed=6)
    folder = _karpathy_folder(tmp_path, images, ["train"] * 10 + ["val"] * 4)
    out = tmp_path / "out"
    assert main(["--dataset=karpathy", f"--karpathy_json={folder / 'karpathy.json'}", f"--images={folder / 'images'}",
                 f"--out={out}", "--relevance=none", "--image_neighbors=pixels", "--image_neighbors_pixels=4",
                 "--neighbors_k=5", "--num_shards=2", "--quiet"]) == 0
    info = schema.load_info(out)
    assert sorted(info.relevance) == ["image_neighbors"]
    assert info.relevance["image_neighbors"]["k"] == 3  # val has 4 images
    parameters = json.loads((out / ".cache" / "build.json").read_text())
    assert parameters["image_neighbors"] == {"space": "pixels", "pixel_side": 4}
    pixels = (images[:, ::4, ::4, :].astype(np.float64) / 255).reshape(len(images), -1)
    for split, members in (("train", slice(0, 10)), ("val", slice(10, 14))):
        caption_ids, found, scores = _slot(out, split)
        centered = pixels[members] - pixels[members].mean(axis=0)
        expected_ids, expected_scores = oracle_rows(centered, caption_ids, 3)
        np.testing.assert_array_equal(found, expected_ids)
        np.testing.assert_allclose(scores, expected_scores, atol=1e-5)


def test_backbone_space_and_bad_combinations_through_the_build_command(tmp_path, capsys):
    folder = _karpathy_folder(tmp_path, _block_images(6, seed=7, side=32, block=8), ["train"] * 4 + ["test"] * 2)
    common = [f"--karpathy_json={folder / 'karpathy.json'}", "--relevance=none", "--num_shards=1", "--quiet"]
    out = tmp_path / "backbone"
    # weights=none: a random ResNet-50 (nothing is downloaded); the real use is --image_neighbors_weights=imagenet.
    assert main(["--dataset=karpathy", *common, f"--images={folder / 'images'}", f"--out={out}",
                 "--image_neighbors=backbone", "--image_neighbors_weights=none", "--image_neighbors_size=32"]) == 0
    meta = schema.load_info(out).relevance["image_neighbors"]
    assert (meta["space"], meta["backbone"], meta["weights"], meta["feature_dim"], meta["k"]) == (
        "backbone", "resnet50", "none", 2048, 1)
    # The rows are the cosine neighbours of the cached pooled features.
    options = ImageNeighborOptions("backbone", weights=None, image_size=32)
    cached = np.load(out / ".cache" / f"image-{options.tag()}-train" / "000000000-000000004.npy")
    caption_ids, found, _ = _slot(out, "train")
    np.testing.assert_array_equal(found, oracle_rows(cached, caption_ids, 1)[0])
    (tmp_path / "junk.weights.h5").write_bytes(b"not weights")
    junk = ImageFeatureExtractor(ImageNeighborOptions("backbone", weights=str(tmp_path / "junk.weights.h5"),
                                                      image_size=32))
    with pytest.raises(KitmDataError, match="junk.weights.h5' could not be loaded.*--image_neighbors_weights"):
        junk(PixelArrays(np.zeros((1, 32, 32, 3), np.uint8)), 0, 1)

    assert main(["--dataset=karpathy", *common, f"--images={folder / 'images'}", f"--out={tmp_path / 'f'}",
                 "--image_neighbors=features"]) == 2
    assert "--image_neighbors=features takes the stored features" in capsys.readouterr().err
    (tmp_path / "vsepp").mkdir()
    np.save(tmp_path / "vsepp" / "train_ims.npy", np.eye(3, 4, dtype=np.float32))
    (tmp_path / "vsepp" / "train_caps.txt").write_text("".join(f"caption {i}\n" for i in range(15)))
    assert main(["--dataset=precomputed", f"--features_dir={tmp_path / 'vsepp'}", f"--out={tmp_path / 'p'}",
                 "--relevance=none", "--image_neighbors=pixels", "--quiet"]) == 2
    assert "use --image_neighbors=features" in capsys.readouterr().err


def test_captions_only_builds_cannot_have_image_neighbors(tmp_path, shared_dir, capsys):
    assert main(["--dataset=flickr8k", f"--flickr8k_dir={shared_dir / 'data' / 'flickr8k'}", f"--out={tmp_path}",
                 "--limit=3", "--relevance=none", "--image_neighbors=pixels", "--quiet"]) == 2
    assert "captions only" in capsys.readouterr().err


@pytest.fixture(scope="module")
def image_neighbor_world(tmp_path_factory):
    """A small synthetic world with pixel-space image neighbours and no text neighbours."""
    from kitm.data.synthetic_records import build_synthetic

    root = tmp_path_factory.mktemp("image_neighbors") / "synthetic"
    build_synthetic(root, num_scenes=80, seed=5, image_size=32, num_shards=2, progress=False, relevance=("cider",),
                    neighbors_k=10, image_neighbors=ImageNeighborOptions("pixels"), world="shapes")
    return root


def test_paired_batches_from_image_neighbor_rows(image_neighbor_world):
    from kitm.data.neighbor_batching import neighbor_table, plan_coverage
    from kitm.data.pipeline import PipelineConfig, training_captions, training_dataset
    from kitm.layers import CaptionTokenizer, build_vocabulary

    root = image_neighbor_world
    info = schema.load_info(root)
    assert "image_neighbors" in info.relevance and "neighbors" not in info.relevance
    _, caption_ids, positions = neighbor_table(info, root, "train", "image")
    flat_ids = caption_ids.reshape(-1)
    listed = {int(flat_ids[row]): set(flat_ids[positions[row]].tolist()) for row in range(len(flat_ids))}
    tokenizer = CaptionTokenizer(build_vocabulary(training_captions(root)), max_length=16)
    config = PipelineConfig(batch_size=16, image_size=32, flip=False, captions="all", neighbor_batching=True,
                            neighbor_space="image", seed=4)
    covered = []
    for _, y in training_dataset(root, "train", tokenizer, config).take(6):
        ids, where = y["caption_index"].numpy(), y["neighbor_position"].numpy()
        for row in np.flatnonzero(where >= 0):
            assert ids[where[row]] in listed[int(ids[row])]
            assert ids[where[row]] // 5 != ids[row] // 5  # a neighbour is another image
        covered.append(np.mean(where >= 0))
    assert np.mean(covered) >= 0.9
    assert plan_coverage(positions, 16, "mutual", batches=10) >= 0.9
    with pytest.raises(KitmDataError, match="neighbor_space='text'.*'neighbors' slot"):
        training_dataset(root, "train", tokenizer, PipelineConfig(batch_size=16, image_size=32,
                                                                  neighbor_batching=True))


def test_text_only_records_refuse_image_space_batching_naming_the_build_flag(tiny_synthetic):
    from kitm.data.neighbor_batching import neighbor_table

    with pytest.raises(KitmDataError, match=r"--neighbor_space=image\) needs the records' 'image_neighbors' slot.*"
                                            r"--image_neighbors=backbone"):
        neighbor_table(schema.load_info(tiny_synthetic), tiny_synthetic, "train", "image")


def test_launcher_names_flag_slot_and_build_command_when_image_rows_are_missing(tiny_synthetic):
    from absl import flags

    from kitm import launch
    from kitm.experiment import datasets, objectives

    flags.FLAGS.unparse_flags()
    try:
        flags.FLAGS(["kitm.launch", "--loss=neighborhood", "--neighbor_space=image", "--batch_size=16",
                     f"--data_dir={tiny_synthetic}"])
        config = launch.experiment_config()
        assert objectives.required_relevance_slots(config) == ["image_neighbors"]
        assert datasets.synthetic_relevance_rows(config) == ["cider"]
        assert datasets.synthetic_image_neighbors(config) == "pixels"
        assert datasets.default_data_dir(config) == "tfrecords/synthetic_image_neighbors"
        with pytest.raises(launch.LaunchError) as raised, launch.flag_errors():
            datasets.check_against_data(config, schema.load_info(tiny_synthetic))
        message = str(raised.value)
        for part in ("--neighbor_space=image", "'image_neighbors' relevance rows",
                     "python -m kitm.data.build --dataset=synthetic", "--image_neighbors=pixels"):
            assert part in message, message
        flags.FLAGS.unparse_flags()
        flags.FLAGS(["kitm.launch", "--loss=neighborhood", "--neighbor_space=image", "--dataset=f30k_precomp"])
        assert "--name=f30k_precomp --out=x --image_neighbors=features" in datasets.build_command(
            launch.experiment_config(), "x")
    finally:
        flags.FLAGS.unparse_flags()


