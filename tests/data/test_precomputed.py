"""kitm.data.precomputed: VSE++ (one row per image or per caption) and SCAN (regions) precomputed features, bad
input named, and a shard never left half-written."""


import numpy as np
import pytest

import kitm  # noqa: F401
from kitm.data import schema
from kitm.data.build import main
from kitm.data.precomputed import build_precomputed, open_feature_splits
from kitm.errors import KitmDataError


def _precomputed(folder, split, features, captions):
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / f"{split}_ims.npy", features)
    (folder / f"{split}_caps.txt").write_text("".join(f"{c}\n" for c in captions), encoding="utf-8")


def _captions(split, images):
    return [f"{split} image {i} says {['one', 'two', 'three', 'four', 'five'][k]}" for i in range(images)
            for k in range(5)]


def test_vsepp_features_one_row_per_image_or_per_caption(tmp_path, split_records):
    rng = np.random.default_rng(1)
    folder = tmp_path / "data" / "f30k_precomp"
    train = rng.normal(size=(6, 8)).astype(np.float32)
    dev = rng.normal(size=(3, 8)).astype(np.float32)
    testall = rng.normal(size=(4, 8)).astype(np.float32)
    _precomputed(folder, "train", train, _captions("train", 6))
    _precomputed(folder, "dev", np.repeat(dev, 5, axis=0), _captions("dev", 3))  # VSE++'s repeated layout
    _precomputed(folder, "test", testall[:2], _captions("test", 2))
    _precomputed(folder, "testall", testall, _captions("testall", 4))
    opened = open_feature_splits(folder)
    assert isinstance(opened["train"].features, np.memmap)  # read lazily, not loaded whole
    assert (opened["val"].rows_per_image, opened["test"].file_split) == (5, "testall")
    assert main(["--dataset=precomputed", f"--features_dir={tmp_path / 'data'}", "--name=f30k_precomp",
                 f"--out={tmp_path / 'out'}", "--relevance=cider", "--num_shards=2", "--quiet"]) == 0
    info = schema.load_info(tmp_path / "out")
    assert (info.image_mode, info.feature_dim, info.name) == ("feature", 8, "f30k_precomp")
    for split, expected, file_split in [("train", train, "train"), ("val", dev, "dev"), ("test", testall, "testall")]:
        records = split_records(tmp_path / "out", split)
        np.testing.assert_array_equal(np.stack([r["image/feature"] for r in records]), expected)
        assert [c.decode() for r in records for c in r["captions"]] == _captions(file_split, len(expected))
        assert records[1]["image/key"].decode() == f"{file_split}/1"


def test_scan_region_features(tmp_path, split_records):
    rng = np.random.default_rng(2)
    regions = {split: rng.normal(size=(n, 3, 4)).astype(np.float32) for split, n in [("train", 4), ("dev", 2)]}
    for split, values in regions.items():
        _precomputed(tmp_path / "coco_precomp", split, values, _captions(split, len(values)))
    info = build_precomputed(tmp_path / "out", tmp_path, "coco_precomp", relevance=("cider",), limit=3,
                             progress=False)
    assert (info.image_mode, info.feature_dim) == ("regions", 4)
    assert {split: info.num_images(split) for split in info.splits} == {"train": 3, "val": 2}
    for split, file_split in [("train", "train"), ("val", "dev")]:
        for index, record in enumerate(split_records(tmp_path / "out", split)):
            np.testing.assert_array_equal(record["image/regions_shape"], [3, 4])
            np.testing.assert_array_equal(record["image/regions"].reshape(3, 4), regions[file_split][index])


def test_precomputed_bad_input_is_named(tmp_path):
    folder = tmp_path / "f"
    _precomputed(folder, "train", np.zeros((6, 4), np.float32), _captions("train", 5))
    with pytest.raises(KitmDataError, match=r"Feature and caption counts disagree: .*train_ims.npy holds 6 rows but "
                                            r".*train_caps.txt holds 25 captions"):
        build_precomputed(tmp_path / "out", folder, relevance=(), progress=False)
    _precomputed(folder, "train", np.zeros((5, 4), np.float32), _captions("train", 5)[:-1])
    with pytest.raises(KitmDataError, match=r"train_caps.txt holds 24 captions, not a multiple of 5"):
        build_precomputed(tmp_path / "out", folder, relevance=(), progress=False)
    captions = _captions("train", 5)
    captions[7] = " "
    _precomputed(folder, "train", np.zeros((5, 4), np.float32), captions)
    with pytest.raises(KitmDataError, match=r"train_caps.txt: image train/1, caption 2 \(line 8\) is empty"):
        build_precomputed(tmp_path / "out", folder, relevance=(), progress=False)
    with pytest.raises(KitmDataError, match=r"No precomputed features .* found in .*nothing"):
        build_precomputed(tmp_path / "out", tmp_path / "nothing", relevance=(), progress=False)


def test_unequal_repeats_stop_mid_shard_without_a_partial_shard(tmp_path):
    folder = tmp_path / "f"
    _precomputed(folder, "train", np.ones((3, 4), np.float32), _captions("train", 3))
    repeated = np.repeat(np.arange(4, dtype=np.float32)[:, None] * np.ones(4, np.float32), 5, axis=0)
    repeated[13] += 1  # image 2's fourth repeat differs: a one-feature-per-caption file, not VSE++'s repeats
    _precomputed(folder, "dev", repeated, _captions("dev", 4))
    with pytest.raises(KitmDataError, match=r"dev_ims.npy has one row per caption .* rows 10..14 \(image 2\) differ"):
        build_precomputed(tmp_path / "out", folder, num_shards=4, relevance=(), progress=False)
    out = tmp_path / "out"
    assert (out / "train-00000-of-00003.tfrecord").is_file()  # the finished train shards stay
    assert not (out / "val-00000-of-00001.tfrecord").exists()  # the failed one is only ever a .tmp
    assert not (out / schema.INFO_FILE).exists()

