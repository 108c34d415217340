"""The dataset converters of `python -m kitm.data.build`: Flickr8K token files (the real ones in /work/shared),
COCO caption files, VSE++ / SCAN precomputed features; relevance rows, resuming a killed build, and bad input."""

import json
import pathlib

import numpy as np
import pytest
import tensorflow as tf

from kitm.data import schema
from kitm.data.build import main
from kitm.data.coco_captions import build_coco_captions
from kitm.errors import KitmDataError
from kitm.data.flickr8k import build_flickr8k
from kitm.data.karpathy import build_karpathy
from kitm.data.precomputed import build_precomputed, open_feature_splits
from kitm.data.records import parse_record, read_records
from kitm.data.synthetic_records import encode_png
from kitm.relevance.rows import load_document_frequency



def _records(root, split):
    """The parsed records of a split in the order they were written (shard after shard), as numpy values."""
    info = schema.load_info(root)
    spec = schema.feature_spec(info)
    return [{key: value.numpy() for key, value in parse_record(path, record, spec).items()}
            for path, record in read_records(info.shard_paths(root, split), cycle_length=1)]


def _examples(root):
    """Every shard's records as tf.train.Example protos (compared field by field, not byte by byte)."""
    return {path.name: [tf.train.Example.FromString(record.numpy()) for record in tf.data.TFRecordDataset(str(path))]
            for path in sorted(pathlib.Path(root).glob("*.tfrecord"))}


def _token_file_captions(folder):
    captions = {}
    for line in (folder / "Flickr8k.token.txt").read_text().splitlines():
        name, caption = line.split("\t")
        captions.setdefault(name.rsplit("#", 1)[0], []).append(caption.strip())
    return captions


# ---------------------------------------------------------------------------------------------------------------
# Flickr8K token files (the real distribution files), captions-only, all three relevance sources.

@pytest.fixture(scope="module")
def flickr8k_captions(tmp_path_factory, shared_dir):
    root = tmp_path_factory.mktemp("f8k") / "f8k"
    assert main(["--dataset=flickr8k", f"--flickr8k_dir={shared_dir / 'data' / 'flickr8k'}", f"--out={root}",
                 "--limit=30", "--num_shards=2", "--neighbors_k=20", "--quiet"]) == 0
    return root


def test_flickr8k_captions_only_records_follow_the_split_lists(flickr8k_captions, shared_dir):
    folder = shared_dir / "data" / "flickr8k"
    info = schema.load_info(flickr8k_captions)
    assert info.image_mode == "none" and info.name == "flickr8k"
    assert {split: info.num_images(split) for split in info.splits} == {"train": 30, "val": 30, "test": 30}
    assert info.source["left_out_in_no_split"] == 93  # e.g. the stray 2258277193_586949ec62.jpg.1
    assert sorted(info.relevance) == ["cider", "neighbors", "sbert"]
    token_captions = _token_file_captions(folder)
    image_id = 0
    for split, list_file in [("train", "trainImages"), ("val", "devImages"), ("test", "testImages")]:
        names = (folder / f"Flickr_8k.{list_file}.txt").read_text().split()[:30]
        records = _records(flickr8k_captions, split)
        assert [r["image/key"].decode() for r in records] == names
        for record, name in zip(records, names):
            assert "image/encoded" not in record
            assert [c.decode() for c in record["captions"]] == token_captions[name]
            np.testing.assert_array_equal(record["caption/ids"], image_id * 5 + np.arange(5))
            image_id += 1


def test_flickr8k_cider_rows_equal_fresh_features_under_the_stored_idf(flickr8k_captions):
    from kitm.relevance.cider_features import cider_features

    info = schema.load_info(flickr8k_captions)
    document_frequency = load_document_frequency(flickr8k_captions, info)
    assert document_frequency.num_documents == 30  # one document per training image of this (limited) build
    for split in ("train", "test"):
        records = _records(flickr8k_captions, split)
        fresh = cider_features([c.decode() for r in records for c in r["captions"]], document_frequency)
        np.testing.assert_array_equal(np.concatenate([r[schema.CIDER_ENTRIES] for r in records]), fresh.entries)
        np.testing.assert_array_equal(np.concatenate([r[schema.CIDER_LENGTHS] for r in records]), fresh.lengths)
        np.testing.assert_array_equal(np.concatenate([r[schema.CIDER_KEYS] for r in records]), fresh.keys)
        np.testing.assert_allclose(np.concatenate([r[schema.CIDER_HYPOTHESIS_WEIGHTS] for r in records]),
                                   fresh.hypothesis_weights, rtol=1e-6)
        np.testing.assert_allclose(np.concatenate([r[schema.CIDER_REFERENCE_WEIGHTS] for r in records]),
                                   fresh.reference_weights, rtol=1e-6)


def test_flickr8k_sbert_and_neighbor_rows(flickr8k_captions):
    from kitm.relevance import sentence_embeddings

    info = schema.load_info(flickr8k_captions)
    assert info.relevance["neighbors"]["k"] == 20
    for split in ("train", "val"):
        records = _records(flickr8k_captions, split)
        captions = [c.decode() for r in records for c in r["captions"]]
        stored = np.concatenate([r[schema.SBERT_EMBEDDINGS].reshape(5, -1) for r in records])
        np.testing.assert_allclose(stored, sentence_embeddings(captions), atol=1e-5)
        ids = np.concatenate([r["caption/ids"] for r in records])
        neighbors = np.concatenate([r[schema.NEIGHBOR_CAPTION_IDS].reshape(5, 20) for r in records])
        scores = np.concatenate([r[schema.NEIGHBOR_SCORES].reshape(5, 20) for r in records])
        assert np.isin(neighbors, ids).all()  # captions of the same split
        assert not np.any(neighbors // 5 == ids[:, None] // 5)  # of other images
        assert np.all(np.diff(scores, axis=1) <= 1e-6)  # most similar first
        rows = np.searchsorted(ids, neighbors)  # ids are sorted: image ids grow along the split
        np.testing.assert_allclose(scores, np.einsum("cd,ckd->ck", stored, stored[rows]), atol=1e-5)


def test_captions_only_dataset_serves_evaluation_but_not_training(flickr8k_captions):
    from kitm.data.pipeline import PipelineConfig, training_captions, training_dataset
    from kitm.eval.split_data import read_split
    from kitm.layers import CaptionTokenizer, build_vocabulary

    captions = training_captions(flickr8k_captions)
    assert len(captions) == 150
    data = read_split(flickr8k_captions, "test", with_images=False)
    assert data.num_images == 30 and len(data.captions) == 150 and data.images is None
    tokenizer = CaptionTokenizer(build_vocabulary(captions), max_length=12)
    with pytest.raises(KitmDataError, match="'flickr8k' is captions-only"):
        training_dataset(flickr8k_captions, "train", tokenizer, PipelineConfig(batch_size=8, relevance="cider"))


# ---------------------------------------------------------------------------------------------------------------
# Resuming: a build killed mid-shard (a real SIGKILL in a subprocess), then a deleted shard.





def test_killed_build_resumes_without_rewriting_finished_shards(tmp_path, shared_dir, killed_build, shard_state):
    flags = ["--dataset=flickr8k", f"--flickr8k_dir={shared_dir / 'data' / 'flickr8k'}", "--limit=12",
             "--num_shards=4", "--relevance=cider", "--quiet"]
    root = tmp_path / "killed" / "f8k"
    result = killed_build([*flags, f"--out={root}"], kill_at=8)
    assert result.returncode == -9, result.stderr[-2000:]
    # Train holds 12 images in 4 shards of 3: shards 0 and 1 were finished, shard 2 died at its second record.
    assert not (root / schema.INFO_FILE).exists()
    assert sorted(shard_state(root)) == ["train-00000-of-00004.tfrecord", "train-00001-of-00004.tfrecord"]
    assert (root / "train-00002-of-00004.tfrecord.tmp").exists()
    for name in shard_state(root):
        assert sum(1 for _ in tf.data.TFRecordDataset(str(root / name))) == 3  # whole shards only
    before = shard_state(root)

    with pytest.raises(KitmDataError, match=r"other parameters \(limit: before 12, now 11\).*fresh --out.*same "
                                            r"flags"):
        build_flickr8k(root, shared_dir / "data" / "flickr8k", limit=11, num_shards=4, relevance=("cider",),
                       progress=False)
    assert main([*flags, f"--out={root}"]) == 0
    after = shard_state(root)
    assert all(after[name] == state for name, state in before.items())  # finished shards were not rewritten
    assert not list(root.glob("*.tmp"))

    clean = tmp_path / "clean" / "f8k"
    assert main([*flags, f"--out={clean}"]) == 0
    assert _examples(root) == _examples(clean)
    assert (root / schema.INFO_FILE).read_text() == (clean / schema.INFO_FILE).read_text()

    # A finished build that loses dataset.json and a shard: only that shard is written again.
    (root / schema.INFO_FILE).unlink()
    (root / "val-00000-of-00001.tfrecord").unlink()
    assert main([*flags, f"--out={root}"]) == 0
    again = shard_state(root)
    assert all(again[name] == state for name, state in after.items() if name != "val-00000-of-00001.tfrecord")
    assert _examples(root) == _examples(clean)
    assert (root / schema.INFO_FILE).read_text() == (clean / schema.INFO_FILE).read_text()


def test_build_parameters_guard_only_folders_with_output(tmp_path, shared_dir):
    from kitm.data.converter_common import claim_output

    claim_output(tmp_path / "new", {"limit": 3})
    claim_output(tmp_path / "new", {"limit": 4})  # nothing was written under the first parameters: replaced
    assert json.loads((tmp_path / "new" / ".cache" / "build.json").read_text()) == {"limit": 4}
    (tmp_path / "new" / ".cache" / "sbert-train.npz").write_bytes(b"")
    with pytest.raises(KitmDataError, match=r"other parameters \(limit: before 4, now 3\)"):
        claim_output(tmp_path / "new", {"limit": 3})
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "train-00000-of-00001.tfrecord").write_bytes(b"")
    with pytest.raises(KitmDataError, match="no .cache/build.json"):
        build_flickr8k(tmp_path / "old", shared_dir / "data" / "flickr8k", limit=3, relevance=(), progress=False)


def test_relevance_flag_takes_a_list_or_none(capsys):
    from kitm.data.build import build_parser

    parse = build_parser().parse_args
    assert parse(["--dataset=flickr8k", "--out=x"]).relevance == ("cider", "sbert", "neighbors")
    assert parse(["--dataset=flickr8k", "--out=x", "--relevance=neighbors, cider"]).relevance == ("cider", "neighbors")
    assert parse(["--dataset=flickr8k", "--out=x", "--relevance=none"]).relevance == ()
    with pytest.raises(SystemExit) as exit_info:
        parse(["--dataset=flickr8k", "--out=x", "--relevance=cider,bleu"])
    assert exit_info.value.code == 2 and "Unknown relevance source(s) ['bleu']" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------------
# Flickr8K-format files written here, for the bad inputs.

def _flickr_folder(tmp_path, splits, captions=None, token_lines=None):
    """A Flickr8k_text-like folder: `splits` maps list name (train/dev/test) to image names."""
    folder = tmp_path / "f8k_text"
    folder.mkdir(exist_ok=True)
    if token_lines is None:
        captions = captions or {}
        token_lines = [f"{name}#{k}\t{caption}" for names in splits.values() for name in names
                       for k, caption in enumerate(captions.get(name, [f"caption {k} of {name} ."
                                                                       for k in range(5)]))]
    (folder / "Flickr8k.token.txt").write_text("\n".join(token_lines) + "\n", encoding="utf-8")
    for split, list_name in [("train", "trainImages"), ("dev", "devImages"), ("test", "testImages")]:
        (folder / f"Flickr_8k.{list_name}.txt").write_text("".join(f"{n}\n" for n in splits.get(split, [])))
    return folder


def test_non_ascii_captions_round_trip_as_utf8(tmp_path):
    unicode = ["Un garçon saute dans l'eau — été", "Ein Mädchen läuft über die Straße",
               "一只狗在草地上奔跑",
               "Ребёнок играет с мячом 🙂", "Niño con sombrero"]
    folder = _flickr_folder(tmp_path, {"train": ["a.jpg", "b.jpg"], "dev": ["c.jpg"]},
                            captions={"b.jpg": unicode})
    build_flickr8k(tmp_path / "out", folder, relevance=("cider",), progress=False)
    record = _records(tmp_path / "out", "train")[1]
    assert [c.decode("utf-8") for c in record["captions"]] == unicode
    assert record[schema.CIDER_ENTRIES].min() > 0  # the CIDEr-D n-grams of non-ASCII words are kept


def test_token_lines_that_do_not_parse_name_file_and_line(tmp_path):
    good = [f"a.jpg#{k}\tA dog runs ." for k in range(5)]
    for bad in ["a.jpg 5\tno hash sign", "a.jpg#x\tcaption number is no number", "a.jpg#5 no tab at all"]:
        folder = _flickr_folder(tmp_path, {"train": ["a.jpg"]}, token_lines=good[:2] + [bad] + good[2:])
        with pytest.raises(KitmDataError, match=r"Flickr8k.token.txt line 3 is not '<image>#<k><TAB><caption>'"):
            build_flickr8k(tmp_path / "out", folder, relevance=(), progress=False)
    folder = _flickr_folder(tmp_path, {"train": ["a.jpg"]}, token_lines=good + ["a.jpg#1\tagain"])
    with pytest.raises(KitmDataError, match=r"line 6: caption a.jpg#1 was already given on line 2"):
        build_flickr8k(tmp_path / "out", folder, relevance=(), progress=False)
    folder = _flickr_folder(tmp_path, {"train": ["a.jpg", "nowhere.jpg"]}, token_lines=good)
    with pytest.raises(KitmDataError, match=r"trainImages.txt line 2: image nowhere.jpg has no captions"):
        build_flickr8k(tmp_path / "out", folder, relevance=(), progress=False)


def test_images_in_no_split_list_are_counted_and_reported(tmp_path, capsys):
    folder = _flickr_folder(tmp_path, {"train": ["a.jpg", "b.jpg"], "test": ["c.jpg"]})
    with open(folder / "Flickr8k.token.txt", "a") as token_file:
        token_file.write("".join(f"stray.jpg#{k}\tA stray caption .\n" for k in range(5)))
    info = build_flickr8k(tmp_path / "out", folder, relevance=(), progress=False)
    assert info.source["left_out_in_no_split"] == 1 and info.num_images("train") == 2
    assert "Left out 1 image(s)" in capsys.readouterr().out


def test_empty_captions_stop_naming_image_and_caption_or_are_skipped_by_flag(tmp_path, capsys):
    folder = _flickr_folder(tmp_path, {"train": ["a.jpg", "b.jpg", "c.jpg"]},
                            captions={"b.jpg": ["A cat .", "A cat sits .", "   ", "A cat on a mat .", "Cat ."]})
    with pytest.raises(KitmDataError, match=r"Flickr8k.token.txt: image b.jpg, caption 2 is empty.*"
                                            r"--empty_captions=skip"):
        build_flickr8k(tmp_path / "out", folder, relevance=(), progress=False)
    # Dropping the empty caption leaves b.jpg four: that is the next rule's to settle.
    with pytest.raises(KitmDataError, match=r"image b.jpg has 4 captions \(1 empty one\(s\) dropped\); kitm needs 5"):
        build_flickr8k(tmp_path / "out", folder, empty_captions="skip", relevance=(), progress=False)
    info = build_flickr8k(tmp_path / "out", folder, empty_captions="skip", few_captions="skip", relevance=(),
                          progress=False)
    assert info.num_images("train") == 2
    assert info.source["empty_captions_dropped"] == 1 and info.source["images_with_too_few_captions"] == 1
    out = capsys.readouterr().out
    assert "Dropped 1 empty caption(s)" in out and "Left out 1 image(s) with fewer than 5 captions" in out
    # The command line says the same in one line and exits with 2.
    assert main(["--dataset=flickr8k", f"--flickr8k_dir={folder}", f"--out={tmp_path / 'cli'}", "--quiet",
                 "--relevance=none"]) == 2
    assert "caption 2 is empty" in capsys.readouterr().err


def test_missing_images_stop_or_are_skipped_and_counted(tmp_path):
    folder = _flickr_folder(tmp_path, {"train": ["a.png", "gone.png", "b.png"], "dev": ["c.png"]})
    images = tmp_path / "Flicker8k_Dataset"
    images.mkdir()
    for name in ["a.png", "b.png", "c.png"]:
        (images / name).write_bytes(encode_png(np.full((5, 7, 3), ord(name[0]), np.uint8)))
    with pytest.raises(KitmDataError, match=r"1 image\(s\) named in .*Flickr8k.token.txt are missing under .*"
                                            r"gone.png; pass --missing_images=skip"):
        build_flickr8k(tmp_path / "out", folder, images, relevance=(), progress=False)
    info = build_flickr8k(tmp_path / "out", folder, images, missing_images="skip", relevance=(), progress=False)
    assert info.image_mode == "encoded" and info.source["skipped_missing"] == 1
    records = _records(tmp_path / "out", "train")
    assert [r["image/key"].decode() for r in records] == ["a.png", "b.png"]
    assert tf.io.decode_png(records[1]["image/encoded"]).numpy()[0, 0, 0] == ord("b")


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


def test_karpathy_converter_stores_relevance_rows(tmp_path):
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
    records = _records(tmp_path / "out", "train")
    fresh = cider_features([c.decode() for r in records for c in r["captions"]],
                           load_document_frequency(tmp_path / "out", info))
    np.testing.assert_array_equal(np.concatenate([r[schema.CIDER_KEYS] for r in records]), fresh.keys)


# ---------------------------------------------------------------------------------------------------------------
# COCO caption files + Karpathy split.

def _coco(tmp_path, captions_per_image, splits):
    """captions_train2014.json / captions_val2014.json, dataset_coco.json and tiny PNGs (named .jpg as in COCO)."""
    images_dir = tmp_path / "coco"
    files = {"train2014": {"images": [], "annotations": []}, "val2014": {"images": [], "annotations": []}}
    karpathy = []
    rng = np.random.default_rng(0)
    annotation_id = 1000
    for image_id, (count, split) in enumerate(zip(captions_per_image, splits), start=1):
        folder = "train2014" if image_id % 2 else "val2014"
        name = f"COCO_{folder}_{image_id:012d}.jpg"
        (images_dir / folder).mkdir(parents=True, exist_ok=True)
        (images_dir / folder / name).write_bytes(encode_png(np.full((6, 8, 3), image_id, np.uint8)))
        files[folder]["images"].append({"id": image_id, "file_name": name, "width": 8, "height": 6})
        ids = annotation_id + rng.permutation(count) * 7  # annotation ids out of file order
        annotation_id += 100
        for k, identifier in enumerate(ids):
            files[folder]["annotations"].append(
                {"id": int(identifier), "image_id": image_id, "caption": f"a photo {image_id} with id {identifier}"})
        if split is not None:
            karpathy.append({"filename": name, "filepath": folder, "split": split, "imgid": image_id})
    paths = []
    for folder, content in files.items():
        paths.append(tmp_path / f"captions_{folder}.json")
        paths[-1].write_text(json.dumps(content))
    (tmp_path / "dataset_coco.json").write_text(json.dumps({"images": karpathy, "dataset": "coco"}))
    return paths, tmp_path / "dataset_coco.json", images_dir


def test_coco_captions_keep_the_first_five_by_annotation_id_in_karpathy_order(tmp_path, capsys):
    paths, karpathy, images = _coco(tmp_path, [5, 7, 5, 6, 5, 5, 5], ["train", "restval", "train", "val", "test",
                                                                      "train", None])
    info = build_coco_captions(tmp_path / "out", paths, karpathy, images, num_shards=2, relevance=("cider",),
                               progress=False)
    assert {split: info.num_images(split) for split in info.splits} == {"train": 4, "val": 1, "test": 1}
    assert info.source["not_in_karpathy_split"] == 1 and info.source["images_with_extra_captions"] == 2
    assert "Left out 1 image(s) of the caption file(s)" in capsys.readouterr().out
    records = _records(tmp_path / "out", "train")
    assert [r["image/key"].decode() for r in records] == [
        "COCO_train2014_000000000001.jpg", "COCO_val2014_000000000002.jpg", "COCO_train2014_000000000003.jpg",
        "COCO_val2014_000000000006.jpg"]
    assert [int(r["image/id"]) for r in records] == [0, 1, 2, 5]  # Karpathy order, as --dataset=karpathy gives
    seven = [c.decode() for c in records[1]["captions"]]
    assert seven == [f"a photo 2 with id {1100 + 7 * k}" for k in range(5)]  # smallest annotation ids first
    assert tf.io.decode_png(records[1]["image/encoded"]).numpy().shape == (6, 8, 3)
    assert schema.CIDER_KEYS in records[0]


def test_coco_bad_input_is_named(tmp_path):
    paths, karpathy, images = _coco(tmp_path, [5, 4, 5], ["train", "train", "val"])
    with pytest.raises(KitmDataError, match=r"image COCO_val2014_000000000002.jpg has 4 captions; kitm needs 5"):
        build_coco_captions(tmp_path / "out", paths, karpathy, images, relevance=(), progress=False)
    info = build_coco_captions(tmp_path / "out", paths, karpathy, None, few_captions="skip", relevance=(),
                               progress=False)
    assert info.image_mode == "none" and info.num_images("train") == 1
    assert info.source["images_with_too_few_captions"] == 1

    content = json.loads(paths[0].read_text())
    content["annotations"][3]["caption"] = ""
    paths[0].write_text(json.dumps(content))
    with pytest.raises(KitmDataError, match=r"image COCO_train2014_000000000001.jpg, caption \d \(annotation id "
                                            r"\d+\) is empty"):
        build_coco_captions(tmp_path / "out2", paths, karpathy, None, relevance=(), progress=False)
    del content["annotations"][3]["caption"]
    paths[0].write_text(json.dumps(content))
    with pytest.raises(KitmDataError, match=r"captions_train2014.json: annotation 3 lacks field 'caption'"):
        build_coco_captions(tmp_path / "out2", paths, karpathy, None, relevance=(), progress=False)
    assert main(["--dataset=coco_captions", f"--out={tmp_path / 'out3'}", f"--karpathy_json={karpathy}"]) == 2


# ---------------------------------------------------------------------------------------------------------------
# VSE++ and SCAN precomputed features.

def _precomputed(folder, split, features, captions):
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / f"{split}_ims.npy", features)
    (folder / f"{split}_caps.txt").write_text("".join(f"{c}\n" for c in captions), encoding="utf-8")


def _captions(split, images):
    return [f"{split} image {i} says {['one', 'two', 'three', 'four', 'five'][k]}" for i in range(images)
            for k in range(5)]


def test_vsepp_features_one_row_per_image_or_per_caption(tmp_path):
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
        records = _records(tmp_path / "out", split)
        np.testing.assert_array_equal(np.stack([r["image/feature"] for r in records]), expected)
        assert [c.decode() for r in records for c in r["captions"]] == _captions(file_split, len(expected))
        assert records[1]["image/key"].decode() == f"{file_split}/1"


def test_scan_region_features(tmp_path):
    rng = np.random.default_rng(2)
    regions = {split: rng.normal(size=(n, 3, 4)).astype(np.float32) for split, n in [("train", 4), ("dev", 2)]}
    for split, values in regions.items():
        _precomputed(tmp_path / "coco_precomp", split, values, _captions(split, len(values)))
    info = build_precomputed(tmp_path / "out", tmp_path, "coco_precomp", relevance=("cider",), limit=3,
                             progress=False)
    assert (info.image_mode, info.feature_dim) == ("regions", 4)
    assert {split: info.num_images(split) for split in info.splits} == {"train": 3, "val": 2}
    for split, file_split in [("train", "train"), ("val", "dev")]:
        for index, record in enumerate(_records(tmp_path / "out", split)):
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
