"""kitm.data.flickr8k: the real Flickr8K token files (in ../shared) as captions-only records with all three relevance
sources, a killed build resuming, and Flickr8K-format files written here for every bad input."""


import numpy as np
import pytest
import tensorflow as tf

import kitm  # noqa: F401
from kitm.data import schema
from kitm.data.build import main
from kitm.data.flickr8k import build_flickr8k
from kitm.data.synthetic_records import encode_png
from kitm.errors import KitmDataError
from kitm.relevance.rows import load_document_frequency


def _token_file_captions(folder):
    captions = {}
    for line in (folder / "Flickr8k.token.txt").read_text().splitlines():
        name, caption = line.split("\t")
        captions.setdefault(name.rsplit("#", 1)[0], []).append(caption.strip())
    return captions


@pytest.fixture(scope="module")
def flickr8k_captions(tmp_path_factory, shared_dir):
    root = tmp_path_factory.mktemp("f8k") / "f8k"
    assert main(["--dataset=flickr8k", f"--flickr8k_dir={shared_dir / 'data' / 'flickr8k'}", f"--out={root}",
                 "--limit=30", "--num_shards=2", "--neighbors_k=20", "--quiet"]) == 0
    return root


def test_flickr8k_captions_only_records_follow_the_split_lists(flickr8k_captions, shared_dir, split_records):
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
        records = split_records(flickr8k_captions, split)
        assert [r["image/key"].decode() for r in records] == names
        for record, name in zip(records, names):
            assert "image/encoded" not in record
            assert [c.decode() for c in record["captions"]] == token_captions[name]
            np.testing.assert_array_equal(record["caption/ids"], image_id * 5 + np.arange(5))
            image_id += 1


def test_flickr8k_cider_rows_equal_fresh_features_under_the_stored_idf(flickr8k_captions, split_records):
    from kitm.relevance.cider_features import cider_features

    info = schema.load_info(flickr8k_captions)
    document_frequency = load_document_frequency(flickr8k_captions, info)
    assert document_frequency.num_documents == 30  # one document per training image of this (limited) build
    for split in ("train", "test"):
        records = split_records(flickr8k_captions, split)
        fresh = cider_features([c.decode() for r in records for c in r["captions"]], document_frequency)
        np.testing.assert_array_equal(np.concatenate([r[schema.CIDER_ENTRIES] for r in records]), fresh.entries)
        np.testing.assert_array_equal(np.concatenate([r[schema.CIDER_LENGTHS] for r in records]), fresh.lengths)
        np.testing.assert_array_equal(np.concatenate([r[schema.CIDER_KEYS] for r in records]), fresh.keys)
        np.testing.assert_allclose(np.concatenate([r[schema.CIDER_HYPOTHESIS_WEIGHTS] for r in records]),
                                   fresh.hypothesis_weights, rtol=1e-6)
        np.testing.assert_allclose(np.concatenate([r[schema.CIDER_REFERENCE_WEIGHTS] for r in records]),
                                   fresh.reference_weights, rtol=1e-6)


def test_flickr8k_sbert_and_neighbor_rows(flickr8k_captions, split_records):
    from kitm.relevance import sentence_embeddings

    info = schema.load_info(flickr8k_captions)
    assert info.relevance["neighbors"]["k"] == 20
    for split in ("train", "val"):
        records = split_records(flickr8k_captions, split)
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
    from kitm.data.split_reading import read_split
    from kitm.layers import CaptionTokenizer, build_vocabulary

    captions = training_captions(flickr8k_captions)
    assert len(captions) == 150
    data = read_split(flickr8k_captions, "test", with_images=False)
    assert data.num_images == 30 and len(data.captions) == 150 and data.images is None
    tokenizer = CaptionTokenizer(build_vocabulary(captions), max_length=12)
    with pytest.raises(KitmDataError, match="'flickr8k' is captions-only"):
        training_dataset(flickr8k_captions, "train", tokenizer, PipelineConfig(batch_size=8, relevance="cider"))


def test_killed_build_resumes_without_rewriting_finished_shards(tmp_path, shared_dir, shard_state,
                                                               killed_in_third_shard, resumed_build, same_build):
    flags = ["--dataset=flickr8k", f"--flickr8k_dir={shared_dir / 'data' / 'flickr8k'}", "--limit=12",
             "--num_shards=4", "--relevance=cider", "--quiet"]
    root = tmp_path / "killed" / "f8k"
    # Train holds 12 images in 4 shards of 3: shards 0 and 1 were finished, shard 2 died at its second record.
    before = killed_in_third_shard(flags, root)

    with pytest.raises(KitmDataError, match=r"other parameters \(limit: before 12, now 11\).*fresh --out.*same "
                                            r"flags"):
        build_flickr8k(root, shared_dir / "data" / "flickr8k", limit=11, num_shards=4, relevance=("cider",),
                       progress=False)
    after = resumed_build(flags, root, before)

    clean = tmp_path / "clean" / "f8k"
    assert main([*flags, f"--out={clean}"]) == 0
    same_build(root, clean)

    # A finished build that loses dataset.json and a shard: only that shard is written again.
    (root / schema.INFO_FILE).unlink()
    (root / "val-00000-of-00001.tfrecord").unlink()
    assert main([*flags, f"--out={root}"]) == 0
    again = shard_state(root)
    assert all(again[name] == state for name, state in after.items() if name != "val-00000-of-00001.tfrecord")
    same_build(root, clean)


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


def test_non_ascii_captions_round_trip_as_utf8(tmp_path, split_records):
    unicode = ["Un garçon saute dans l'eau — été", "Ein Mädchen läuft über die Straße",
               "一只狗在草地上奔跑",
               "Ребёнок играет с мячом 🙂", "Niño con sombrero"]
    folder = _flickr_folder(tmp_path, {"train": ["a.jpg", "b.jpg"], "dev": ["c.jpg"]},
                            captions={"b.jpg": unicode})
    build_flickr8k(tmp_path / "out", folder, relevance=("cider",), progress=False)
    record = split_records(tmp_path / "out", "train")[1]
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


def test_missing_images_stop_or_are_skipped_and_counted(tmp_path, split_records):
    folder = _flickr_folder(tmp_path, {"train": ["a.png", "gone.png", "b.png"], "dev": ["c.png"]})
    images = tmp_path / "Flicker8k_Dataset"
    images.mkdir()
    for name in ["a.png", "b.png", "c.png"]:
        (images / name).write_bytes(encode_png(np.full((5, 7, 3), ord(name[0]), np.uint8)))
    with pytest.raises(KitmDataError, match=r"1 image\(s\) named in .*Flickr8k.token.txt are missing under .*"
                                            r"gone.png, which does not exist; pass --missing_images=skip"):
        build_flickr8k(tmp_path / "out", folder, images, relevance=(), progress=False)
    info = build_flickr8k(tmp_path / "out", folder, images, missing_images="skip", relevance=(), progress=False)
    assert info.image_mode == "encoded" and info.source["skipped_missing"] == 1
    records = split_records(tmp_path / "out", "train")
    assert [r["image/key"].decode() for r in records] == ["a.png", "b.png"]
    assert tf.io.decode_png(records[1]["image/encoded"]).numpy()[0, 0, 0] == ord("b")

