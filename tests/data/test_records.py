"""TFRecord schema and IO: round trips, atomic and resumable writing, and every bad input named."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import kitm  # noqa: F401
from kitm.data import schema
from kitm.errors import KitmDataError
from kitm.data.records import (diagnose_shards, make_example, parse_record, read_records, shard_ranges,
                               write_shards)
from kitm.data.synthetic_records import encode_png


def _example(i, captions=None, image=None, version=None):
    image = np.full((8, 8, 3), i, np.uint8) if image is None else image
    return make_example(image_id=i, image_key=f"img{i}", split="train",
                        captions=captions or [f"caption {i} {k}" for k in range(2)],
                        caption_ids=[2 * i, 2 * i + 1], image_encoded=encode_png(image) if image is not False else None,
                        extra={"relevance/x/values": np.arange(3) + i})


def _info(names, sizes, n):
    return schema.DatasetInfo(name="t", captions_per_image=2, image_mode="encoded",
                              splits={"train": {"num_images": n, "shards": names, "bytes": sizes}},
                              relevance={"x": {"features": {"relevance/x/values": ["int64", 3]}}})


def _write(root, n=10, shards=3):
    names, sizes = write_shards(root, "train", n, shards, lambda r: (_example(i) for i in r))
    info = _info(names, sizes, n)
    schema.save_info(root, info)
    return info


def test_round_trip_values(tmp_path):
    info = _write(tmp_path)
    loaded = schema.load_info(tmp_path)
    assert loaded == info
    spec = schema.feature_spec(loaded)
    records = read_records(loaded.shard_paths(tmp_path, "train"), deterministic=True)
    parsed = [parse_record(p, r, spec) for p, r in records]
    assert sorted(int(x["image/id"]) for x in parsed) == list(range(10))
    for x in parsed:
        i = int(x["image/id"])
        assert x["image/key"].numpy() == f"img{i}".encode()
        assert [c.decode() for c in x["captions"].numpy()] == [f"caption {i} 0", f"caption {i} 1"]
        assert x["caption/ids"].numpy().tolist() == [2 * i, 2 * i + 1]
        assert x["relevance/x/values"].numpy().tolist() == [i, i + 1, i + 2]
        image = tf.io.decode_png(x["image/encoded"]).numpy()
        assert image.shape == (8, 8, 3) and np.all(image == i)


def test_shards_are_contiguous_and_cover_everything():
    ranges = shard_ranges(10, 3)
    assert [list(r) for r in ranges] == [[0, 1, 2], [3, 4, 5, 6], [7, 8, 9]]
    assert sum(len(r) for r in shard_ranges(7, 7)) == 7


def test_writing_is_atomic_and_resumes(tmp_path):
    calls = []

    def failing(index_range):
        calls.append(index_range.start)
        for i in index_range:
            if i == 5:
                raise RuntimeError("killed")
            yield _example(i)

    with pytest.raises(RuntimeError):
        write_shards(tmp_path, "train", 10, 3, failing)
    finals = sorted(p.name for p in tmp_path.glob("*.tfrecord"))
    assert finals == ["train-00000-of-00003.tfrecord"]  # the half-written shard is never renamed into place
    calls.clear()
    write_shards(tmp_path, "train", 10, 3, lambda r: (calls.append(r.start), *(_example(i) for i in r))[1:])
    assert calls == [3, 7]  # the finished shard was not redone
    assert len(list(tmp_path.glob("*.tfrecord"))) == 3


def test_missing_info_names_the_file(tmp_path):
    with pytest.raises(KitmDataError, match="dataset.json is missing"):
        schema.load_info(tmp_path)


def test_other_schema_version_in_info_is_refused(tmp_path):
    _write(tmp_path)
    raw = json.loads((tmp_path / "dataset.json").read_text())
    raw["schema_version"] = 99
    (tmp_path / "dataset.json").write_text(json.dumps(raw))
    with pytest.raises(KitmDataError, match="schema version 99"):
        schema.load_info(tmp_path)


def test_record_of_another_schema_version_names_the_shard(tmp_path):
    info = _write(tmp_path, n=2, shards=1)
    example = tf.train.Example.FromString(_example(0))
    example.features.feature["schema_version"].int64_list.value[:] = [0]
    path = tmp_path / info.splits["train"]["shards"][0]
    with tf.io.TFRecordWriter(str(path)) as writer:
        writer.write(example.SerializeToString())
    spec = schema.feature_spec(info)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"train-00000-of-00001.tfrecord.*schema version"):
        for p, r in read_records([str(path)]):
            parse_record(p, r, spec)
    assert "schema version 0" in diagnose_shards([str(path)], spec)


def test_truncated_shard_is_caught_at_open(tmp_path):
    info = _write(tmp_path)
    shard = tmp_path / info.splits["train"]["shards"][1]
    shard.write_bytes(shard.read_bytes()[:-7])
    with pytest.raises(KitmDataError, match=f"{shard.name}.*truncated"):
        schema.load_info(tmp_path)


def test_corrupt_shard_is_named_by_the_diagnosis(tmp_path):
    info = _write(tmp_path)
    shard = tmp_path / info.splits["train"]["shards"][2]
    data = bytearray(shard.read_bytes())
    data[40] ^= 0xFF  # flip bits inside the first record's payload: its CRC no longer matches
    shard.write_bytes(bytes(data))
    paths = info.shard_paths(tmp_path, "train")
    with pytest.raises(tf.errors.DataLossError):
        for _ in read_records(paths):
            pass
    message = diagnose_shards(paths, schema.feature_spec(info))
    assert message is not None and shard.name in message and "corrupt" in message


def test_unreadable_image_is_named_with_its_record(tmp_path):
    records = [_example(0), make_example(image_id=1, image_key="broken.jpg", split="train", captions=["a", "b"],
                                         caption_ids=[2, 3], image_encoded=b"not an image",
                                         extra={"relevance/x/values": np.arange(3)})]
    names, sizes = write_shards(tmp_path, "train", 2, 1, lambda r: (records[i] for i in r))
    info = _info(names, sizes, 2)
    message = diagnose_shards(info.shard_paths(tmp_path, "train"), schema.feature_spec(info))
    assert "record 1" in message and "broken.jpg" in message


def test_empty_caption_is_refused_with_image_and_index():
    with pytest.raises(KitmDataError, match=r"Image 'img3' \(id 3\): caption 1 is empty"):
        _example(3, captions=["a dog", "   "])


def test_missing_shard_is_named(tmp_path):
    info = _write(tmp_path)
    os.remove(tmp_path / info.splits["train"]["shards"][0])
    with pytest.raises(KitmDataError, match="train-00000-of-00003.tfrecord.*missing"):
        schema.load_info(tmp_path)
