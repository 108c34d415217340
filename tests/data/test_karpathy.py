"""The Karpathy-split converter: records round trip, restval joins train, bad input is named."""

import json

import numpy as np
import pytest
import tensorflow as tf

import kitm  # noqa: F401
from kitm.data import schema
from kitm.errors import KitmDataError
from kitm.data.karpathy import build_karpathy
from kitm.data.records import parse_record, read_records
from kitm.data.synthetic_records import encode_png
from kitm.relevance.rows import load_document_frequency


def _entry(name, split, n_captions=5, folder=""):
    return {"filename": name, "filepath": folder, "split": split,
            "sentences": [{"raw": f"A photo {name} number {k}."} for k in range(n_captions)]}


def _setup(tmp_path, entries, images=None):
    image_dir = tmp_path / "images"
    for name in images if images is not None else [e["filename"] for e in entries]:
        path = image_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode_png(np.full((6, 6, 3), len(name), np.uint8)))
    json_path = tmp_path / "dataset_test.json"
    json_path.write_text(json.dumps({"images": entries, "dataset": "test"}))
    return json_path, image_dir


def test_round_trip_with_restval_in_train_and_first_five_captions(tmp_path):
    entries = [_entry("a.png", "train"), _entry("b.png", "restval", n_captions=7), _entry("c.png", "val"),
               _entry("d.png", "test")]
    json_path, image_dir = _setup(tmp_path, entries)
    info = build_karpathy(tmp_path / "out", json_path, image_dir, num_shards=2, progress=False, relevance=())
    assert {split: entry["num_images"] for split, entry in info.splits.items()} == {"train": 2, "val": 1, "test": 1}
    loaded = schema.load_info(tmp_path / "out")
    spec = schema.feature_spec(loaded)
    records = [parse_record(p, r, spec) for p, r in read_records(loaded.shard_paths(tmp_path / "out", "train"))]
    keys = sorted(r["image/key"].numpy().decode() for r in records)
    assert keys == ["a.png", "b.png"]
    b = next(r for r in records if r["image/key"].numpy() == b"b.png")
    assert [c.decode() for c in b["captions"].numpy()] == [f"A photo b.png number {k}." for k in range(5)]
    assert tf.io.decode_png(b["image/encoded"]).numpy().shape == (6, 6, 3)


def test_missing_images_stop_or_are_skipped_and_counted(tmp_path):
    entries = [_entry("a.png", "train"), _entry("gone.png", "train"), _entry("c.png", "test")]
    json_path, image_dir = _setup(tmp_path, entries, images=["a.png", "c.png"])
    with pytest.raises(KitmDataError, match="1 image.*missing.*gone.png.*--missing_images=skip"):
        build_karpathy(tmp_path / "out", json_path, image_dir, progress=False, relevance=())
    info = build_karpathy(tmp_path / "out", json_path, image_dir, missing_images="skip", progress=False, relevance=())
    assert info.splits["train"]["num_images"] == 1 and info.source["skipped_missing"] == 1


def test_unreadable_image_is_named(tmp_path):
    entries = [_entry("a.png", "train"), _entry("bad.jpg", "train")]
    json_path, image_dir = _setup(tmp_path, entries, images=["a.png"])
    (image_dir / "bad.jpg").write_bytes(b"this is not a jpeg")
    with pytest.raises(KitmDataError, match=r"bad.jpg cannot be read as an image"):
        build_karpathy(tmp_path / "out", json_path, image_dir, progress=False, relevance=())
    assert not (tmp_path / "out" / "dataset.json").exists()  # no finished dataset is claimed


def test_malformed_json_entries_are_named(tmp_path):
    json_path, image_dir = _setup(tmp_path, [{"filename": "a.png", "split": "train"}], images=["a.png"])
    with pytest.raises(KitmDataError, match=r"image entry 0 lacks field\(s\) \['sentences'\]"):
        build_karpathy(tmp_path / "out", json_path, image_dir, progress=False, relevance=())
    json_path, image_dir = _setup(tmp_path, [_entry("a.png", "train", n_captions=3)])
    with pytest.raises(KitmDataError, match="image a.png has 3 captions; kitm needs 5"):
        build_karpathy(tmp_path / "out", json_path, image_dir, progress=False, relevance=())
    (tmp_path / "not_karpathy.json").write_text("[1, 2]")
    with pytest.raises(KitmDataError, match="not a Karpathy split file"):
        build_karpathy(tmp_path / "out", tmp_path / "not_karpathy.json", image_dir, progress=False, relevance=())


def test_build_command_line_reports_errors_in_one_line(tmp_path, capsys):
    from kitm.data.build import main

    assert main(["--dataset=karpathy", f"--out={tmp_path / 'out'}"]) == 2
    assert "needs --karpathy_json and --images" in capsys.readouterr().err
    synthetic = ["--dataset=synthetic", f"--out={tmp_path / 'syn'}", "--num_scenes=20", "--image_size=32", "--quiet",
                 "--relevance=cider"]
    assert main(synthetic) == 0
    info = schema.load_info(tmp_path / "syn")
    assert info.num_images("train") >= 1 and sorted(info.relevance) == ["cider", "truth"]
    capsys.readouterr()
    assert main([*synthetic, "--seed=1"]) == 2  # the same --out with another world: refused, not mixed
    assert "seed: before 0, now 1" in capsys.readouterr().err


def test_karpathy_json_with_missing_fields_is_named(tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    cases = [
        ([{"split": "train", "sentences": []}], r"image entry 0 lacks field\(s\) \['filename'\]"),
        ([{"filename": "a.jpg", "split": "train", "sentences": [{"raw": "x"}, {"tokens": ["y"]}]}],
         r"image a.jpg, sentence 1 lacks field 'raw'"),
        ([{"filename": "a.jpg", "split": "train", "sentences": [{"raw": "x"}] * 4 + [{"raw": ""}]}],
         r"image a.jpg, caption 4 is empty"),
        ([{"filename": "a.jpg", "split": "holdout", "sentences": []}], r"unknown split 'holdout'"),
        ({"dataset": "coco"}, r"not a Karpathy split file"),
    ]
    for content, message in cases:
        (tmp_path / "dataset_test.json").write_text(json.dumps(content if isinstance(content, dict)
                                                               else {"images": content}))
        with pytest.raises(KitmDataError, match=message):
            build_karpathy(tmp_path / "out", tmp_path / "dataset_test.json", images, relevance=(), progress=False)


def test_karpathy_converter_stores_relevance_rows(tmp_path, split_records):
    from kitm.relevance.cider_features import cider_features

    images = tmp_path / "images"
    images.mkdir()
    entries = []
    for index, split in enumerate(["train", "restval", "train", "val", "test"]):
        name = f"im{index}.png"
        (images / name).write_bytes(encode_png(np.full((4, 4, 3), index, np.uint8)))
        entries.append({"filename": name, "split": split,
                        "sentences": [{"raw": f"a {['red', 'blue', 'green'][k % 3]} thing number {index} {k}"}
                                      for k in range(5)]})
    (tmp_path / "dataset_x.json").write_text(json.dumps({"images": entries}))
    info = build_karpathy(tmp_path / "out", tmp_path / "dataset_x.json", images, relevance=("cider",),
                          progress=False)
    assert sorted(info.relevance) == ["cider"] and info.relevance["cider"]["num_documents"] == 3
    records = split_records(tmp_path / "out", "train")
    fresh = cider_features([c.decode() for r in records for c in r["captions"]],
                           load_document_frequency(tmp_path / "out", info))
    np.testing.assert_array_equal(np.concatenate([r[schema.CIDER_KEYS] for r in records]), fresh.keys)

