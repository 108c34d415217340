"""`python -m kitm.data.build --dataset=captions_table`: your own CSV (open_clip's layout) or JSON Lines of image
path + caption, with images generated here. Round trip through kitm.data.pipeline, the captions-per-image rule in
every branch, the column and the seeded random split, every bad input named by file, line and column, a killed
build resuming, and the relevance rows."""

import csv
import json

import numpy as np
import pytest

from kitm.data import schema
from kitm.data.build import main
from kitm.data.captions_table import (apply_caption_rule, auto_captions_per_image, build_captions_table,
                                      load_table_entries, random_split, split_sizes)
from kitm.data.synthetic_records import encode_png
from kitm.errors import KitmDataError

COLOURS = ["red", "blue", "green", "yellow", "black", "white", "pink", "brown"]


def _image(path, value):
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.zeros((6, 8, 3), np.uint8)
    pixels[..., 0], pixels[..., 1] = value % 256, (value * 37) % 256
    path.write_bytes(encode_png(pixels))


def _caption(image, k):
    return f"a {COLOURS[image % 8]} thing number {image} seen {['once', 'twice', 'again', 'later'][k % 4]} {k}"


def _rows(counts):
    """(image name, caption) rows for images with the given caption counts, interleaved: every image's first
    caption, then every image's second..., so grouping by path is exercised."""
    return [(f"photos/im{i}.png", _caption(i, k)) for k in range(max(counts)) for i, n in enumerate(counts) if k < n]


def _write_csv(path, rows, header=("filepath", "title"), delimiter="\t"):
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, delimiter=delimiter)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def _table(tmp_path, counts, name="table.csv", **kwargs):
    """A CSV under tmp_path with its images in tmp_path/photos/."""
    rows = _rows(counts)
    for i in range(len(counts)):
        _image(tmp_path / "photos" / f"im{i}.png", i)
    return _write_csv(tmp_path / name, rows, **kwargs)


# ---------------------------------------------------------------------------------------------------------------
# Round trip.

@pytest.mark.slow
def test_csv_round_trip_through_the_pipeline(tmp_path, capsys, split_records):
    table = _table(tmp_path, [3] * 12)
    out = tmp_path / "mine"
    assert main(["--dataset=captions_table", f"--captions={table}", f"--out={out}", "--relevance=cider",
                 "--num_shards=2", "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "Read 36 row(s)" in printed and "tab-separated" in printed and "Captions per image: 3" in printed
    info = schema.load_info(out)
    assert (info.name, info.captions_per_image, info.image_mode) == ("mine", 3, "encoded")
    assert {split: info.num_images(split) for split in info.splits} == {"train": 8, "val": 2, "test": 2}
    assert info.source["split"]["rule"] == "random" and info.source["csv_separator"] == "\t"
    seen = []
    for split in ("train", "val", "test"):
        for record in split_records(out, split):
            key = record["image/key"].decode()
            i = int(key.removeprefix("photos/im").removesuffix(".png"))
            seen.append((int(record["image/id"]), i))
            assert [c.decode() for c in record["captions"]] == [_caption(i, k) for k in range(3)]  # file order
            assert record["image/encoded"] == (tmp_path / key).read_bytes()  # bytes as on disk
            assert schema.CIDER_KEYS in record
    assert sorted(seen) == [(i, i) for i in range(12)]  # ids follow the table's order of first appearance

    from kitm.data.pipeline import PipelineConfig, evaluation_dataset, training_captions, training_dataset
    from kitm.layers import CaptionTokenizer, build_vocabulary

    tokenizer = CaptionTokenizer(build_vocabulary(training_captions(out)), max_length=12)
    batch = next(iter(evaluation_dataset(out, "val", tokenizer, PipelineConfig(batch_size=4, image_size=8))))
    assert batch["image"].shape == (2, 8, 8, 3) and batch["tokens"].shape[:2] == (2, 3)
    x, y = next(iter(training_dataset(out, "train", tokenizer,
                                      PipelineConfig(batch_size=4, image_size=8, relevance="cider"))))
    assert y["relevance"].shape == (4, 4)


def test_jsonl_with_a_split_column_absolute_paths_and_blank_lines(tmp_path, split_records):
    images = tmp_path / "pictures"
    lines = []
    for i, split in enumerate(["train", "train", "val", "train", "test", "val", "train"]):
        _image(images / f"p{i}.png", i)
        path = str(images / f"p{i}.png") if i % 2 else f"p{i}.png"  # absolute, or relative to --images
        lines += [json.dumps({"image": path, "text": _caption(i, k), "split": split, "extra": [1, 2]})
                  for k in range(2)] + [""]
    (tmp_path / "pairs.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    info = build_captions_table(tmp_path / "out", tmp_path / "pairs.jsonl", images, image_column="image",
                                caption_column="text", split_column="split", relevance=(), progress=False)
    assert info.source["format"] == "jsonl" and info.source["split"] == {
        "rule": "column", "column": "split", "images": {"train": 4, "val": 2, "test": 1}}
    assert [int(r["image/id"]) for r in split_records(tmp_path / "out", "val")] == [2, 5]
    assert [r["image/key"].decode() for r in split_records(tmp_path / "out", "test")] == ["p4.png"]
    assert split_records(tmp_path / "out", "train")[1]["image/key"].decode() == str(images / "p1.png")


def test_comma_separated_quoted_multiline_captions_and_relative_to_the_table(tmp_path):
    rows = [("photos/im0.png", 'a dog, "Rex", runs'), ("photos/im1.png", "two\nlines"),
            ("photos/im0.png", "a second caption"), ("photos/im1.png", "and another"),
            ("photos/im2.png", "third"), ("photos/im2.png", "third again")]
    for i in range(3):
        _image(tmp_path / "photos" / f"im{i}.png", i)
    table = _write_csv(tmp_path / "t.csv", rows, header=("filepath", "title"), delimiter=",")
    entries, report = load_table_entries(table, val_images=0, test_images=0)
    assert report["csv_separator"] == "," and report["images"] == str(tmp_path)
    assert [e.captions for e in entries] == [['a dog, "Rex", runs', "a second caption"], ["two\nlines", "and another"],
                                             ["third", "third again"]]
    assert [e.location[1] for e in entries] == [2, 3, 7]  # each image's first line; lines 3-4 are one record


# ---------------------------------------------------------------------------------------------------------------
# Captions per image.

def test_auto_captions_per_image_is_the_most_common_count_ties_to_the_smaller():
    assert auto_captions_per_image([5, 5, 6, 7, 5, 4]) == 5
    assert auto_captions_per_image([1, 1, 2, 2, 3]) == 1
    assert auto_captions_per_image([0, 0, 0, 2]) == 2  # images without captions do not vote


def test_caption_rule_more_fewer_skip_repeat_and_stop(tmp_path, capsys):
    table = _table(tmp_path, [3, 3, 5, 3, 1, 2, 3, 3])  # auto: 3; image 2 has more, images 4 and 5 fewer
    entries, report = load_table_entries(table, val_images=0, test_images=0)
    rule = report["caption_rule"]
    assert rule["captions_per_image"] == 3 and rule["images_by_caption_count"] == {"1": 1, "2": 1, "3": 5, "5": 1}
    assert (rule["images_with_extra_captions"], rule["extra_captions_dropped"]) == (1, 2)
    assert rule["images_left_out_with_fewer_captions"] == 2 and rule["images_with_repeated_captions"] == 0
    assert [e.key for e in entries] == [f"photos/im{i}.png" for i in (0, 1, 2, 3, 6, 7)]
    assert entries[2].captions == [_caption(2, k) for k in range(3)]  # the first three in file order

    entries, report = load_table_entries(table, val_images=0, test_images=0, few_captions="repeat")
    rule = report["caption_rule"]
    assert (rule["images_with_repeated_captions"], rule["repeated_captions"]) == (2, 3)
    by_key = {e.key: e.captions for e in entries}
    assert by_key["photos/im4.png"] == [_caption(4, 0)] * 3
    assert by_key["photos/im5.png"] == [_caption(5, 0), _caption(5, 1), _caption(5, 0)]  # cyclic

    entries, report = load_table_entries(table, val_images=0, test_images=0, captions_per_image=2)
    assert report["caption_rule"]["images_with_extra_captions"] == 6 and len(entries) == 7

    with pytest.raises(KitmDataError, match=r"table.csv, line 6, column 'filepath': image photos/im4.png has 1 "
                                            r"caption\(s\); this build keeps 3 per image. Pass few_captions=skip"):
        load_table_entries(table, val_images=0, test_images=0, few_captions="stop")

    # The command line prints each count and stores the rule in dataset.json.
    assert main(["--dataset=captions_table", f"--captions={table}", f"--out={tmp_path / 'out'}", "--relevance=none",
                 "--few_captions=repeat", "--val_images=2", "--test_images=0", "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "1 image(s) have more than 3: they keep their first 3 (2 caption(s) dropped)" in printed
    assert "2 image(s) have fewer than 3 caption(s): filled by repeating them (3 repeated caption(s)" in printed
    stored = schema.load_info(tmp_path / "out").source["caption_rule"]
    assert stored["few_captions"] == "repeat" and stored["repeated_captions"] == 3
    assert main(["--dataset=karpathy", "--karpathy_json=x", "--images=y", f"--out={tmp_path / 'k'}",
                 "--few_captions=repeat"]) == 2
    assert "--few_captions=repeat is for --dataset=captions_table" in capsys.readouterr().err


def test_apply_caption_rule_rejects_an_unknown_policy(tmp_path):
    with pytest.raises(KitmDataError, match="few_captions must be one of"):
        apply_caption_rule([], 3, "pad", None)


# ---------------------------------------------------------------------------------------------------------------
# Splits.

def test_random_split_is_seeded_and_sized_by_count_fraction_or_auto(tmp_path):
    assert split_sizes(100) == (5, 5) and split_sizes(10) == (2, 2) and split_sizes(100_000) == (1000, 1000)
    assert split_sizes(100, "10", "0.2") == (10, 20) and split_sizes(100, 0, 0.001) == (0, 1)
    first = random_split(50, 5, 7, seed=3)
    assert first == random_split(50, 5, 7, seed=3) and first != random_split(50, 5, 7, seed=4)
    assert (first.count("val"), first.count("test"), first.count("train")) == (5, 7, 38)
    table = _table(tmp_path, [2] * 20)
    keys = {seed: [(e.key, e.split) for e in load_table_entries(table, split_seed=seed)[0]] for seed in (0, 0, 1)}
    assert keys[0] == [(e.key, e.split) for e in load_table_entries(table, split_seed=0)[0]] != keys[1]
    assert [key for key, _ in keys[0]] == [f"photos/im{i}.png" for i in range(20)]  # table order in every split
    with pytest.raises(KitmDataError, match=r"Too few images for the split: 20 image\(s\) cannot give 10 validation "
                                            r"and 9 test image\(s\) and keep 2 for training. Lower val_images"):
        load_table_entries(table, val_images=10, test_images=9)
    with pytest.raises(KitmDataError, match=r"a fraction must be below 1"):
        load_table_entries(table, val_images="1.5")
    with pytest.raises(KitmDataError, match=r"val_images must be a count of images, a fraction below 1 or auto"):
        load_table_entries(table, val_images="many")


def test_split_column_values_and_sizes(tmp_path):
    for i in range(4):
        _image(tmp_path / "photos" / f"im{i}.png", i)
    rows = [("photos/im0.png", "a", "train"), ("photos/im1.png", "b", "train"), ("photos/im2.png", "c", "valid")]
    table = _write_csv(tmp_path / "s.csv", rows, header=("filepath", "title", "split"))
    with pytest.raises(KitmDataError, match=r"s.csv, line 4, column 'split': split 'valid' is not one of train, val, "
                                            r"test"):
        load_table_entries(table, split_column="split")
    rows[2] = ("photos/im0.png", "c", "test")
    _write_csv(table, rows, header=("filepath", "title", "split"))
    with pytest.raises(KitmDataError, match=r"line 4, column 'split': image photos/im0.png is in split 'test' here "
                                            r"but 'train' on line 2"):
        load_table_entries(table, split_column="split")
    rows[1] = ("photos/im1.png", "b", "val")
    rows[2] = ("photos/im2.png", "c", "val")
    _write_csv(table, rows, header=("filepath", "title", "split"))
    with pytest.raises(KitmDataError, match=r"Too few images for the split: column 'split' of .*s.csv puts 1 "
                                            r"image\(s\) in train"):
        load_table_entries(table, split_column="split")
    with pytest.raises(KitmDataError, match=r"split_column=split gives the splits; val_images"):
        load_table_entries(table, split_column="split", val_images=3)


# ---------------------------------------------------------------------------------------------------------------
# Bad input: every message names the file, the line and the column (or key).

def test_bad_csv_input_names_file_line_and_column(tmp_path, capsys):
    _table(tmp_path, [2, 2, 2, 2])
    good = _rows([2, 2, 2, 2])
    cases = [
        (dict(header=("path", "title")), r"t.csv, line 1, column 'filepath': no such column \(the image column\); the "
                                         r"header has \['path', 'title'\] when split at tab. Name the right one with "
                                         r"image_column=..."),
        (dict(header=("filepath", "title", "title"), rows=[r + ("x",) for r in good]),
         r"t.csv, line 1: the header names column 'title' twice \(columns 2 and 3\)"),
        (dict(rows=good[:3] + [(good[3][0], "   ")] + good[4:]),
         r"t.csv, line 5, column 'title': the caption of image photos/im3.png is empty \('   '\); pass "
         r"empty_captions=skip"),
        (dict(rows=good[:2] + [("photos/nowhere.png", "a caption")] + good[2:]),
         r"t.csv, line 4, column 'filepath': image .*nowhere.png does not exist \(1 of the table's images are "
         r"missing\); pass missing_images=skip"),
        (dict(rows=good[:1] + [("", "a caption")]), r"t.csv, line 3, column 'filepath': the image path is empty"),
        (dict(rows=good[:1] + [(good[1][0], "a", "b")]), r"t.csv, line 3: 3 field\(s\) where the header has 2 "
                                                         r"\(separator tab"),
    ]
    for case, message in cases:
        _write_csv(tmp_path / "t.csv", case.get("rows", good), header=case.get("header", ("filepath", "title")))
        with pytest.raises(KitmDataError, match=message):
            load_table_entries(tmp_path / "t.csv", val_images=0, test_images=0)
    (tmp_path / "t.csv").write_bytes(b"filepath\ttitle\nphotos/im0.png\tcaf\xe9\n")
    with pytest.raises(KitmDataError, match=r"t.csv, line 2 is not UTF-8"):
        load_table_entries(tmp_path / "t.csv", val_images=0, test_images=0)
    (tmp_path / "t.txt").write_text("x")
    with pytest.raises(KitmDataError, match=r"cannot tell the table's format .*captions_format=csv or jsonl"):
        load_table_entries(tmp_path / "t.txt")
    # Through the command line, options read as flags.
    _write_csv(tmp_path / "t.csv", good[:3] + [(good[3][0], "")] + good[4:])
    assert main(["--dataset=captions_table", f"--captions={tmp_path / 't.csv'}", f"--out={tmp_path / 'o'}",
                 "--quiet"]) == 2
    assert "line 5, column 'title': the caption of image photos/im3.png is empty ('')" in capsys.readouterr().err
    assert main(["--dataset=captions_table", f"--out={tmp_path / 'o'}"]) == 2
    assert "--dataset=captions_table needs --captions" in capsys.readouterr().err
    # Skipped, counted and reported instead when asked.
    _write_csv(tmp_path / "t.csv", good[:2] + [("photos/nowhere.png", "x"), ("photos/im0.png", " ")] + good[2:])
    entries, report = load_table_entries(tmp_path / "t.csv", val_images=0, test_images=0, missing_images="skip",
                                         empty_captions="skip")
    assert len(entries) == 4 and report["skipped_missing"] == 1 and report["empty_captions_dropped"] == 1


def test_bad_jsonl_input_names_file_line_and_key(tmp_path):
    _image(tmp_path / "a.png", 1)
    good = json.dumps({"filepath": "a.png", "title": "a caption"})
    cases = [
        ('{"filepath": "a.png", "title": "x"', r"j.jsonl, line 3: not valid JSON \(Expecting ',' delimiter at "
                                               r"character 35\)"),
        ('["a.png", "x"]', r"j.jsonl, line 3: expected a JSON object, got list"),
        ('{"filepath": "a.png", "caption": "x"}', r"j.jsonl, line 3, key 'title': no such key \(the caption key; "
                                                  r"the object has \['caption', 'filepath'\]\). Name the right one "
                                                  r"with caption_column"),
        ('{"filepath": "a.png", "title": 7}', r"j.jsonl, line 3, key 'title': expected text, got 7"),
        ('{"filepath": "a.png", "title": ""}', r"j.jsonl, line 3, key 'title': the caption of image a.png is empty"),
    ]
    for bad, message in cases:
        (tmp_path / "j.jsonl").write_text("\n".join([good, "", bad, good]) + "\n")
        with pytest.raises(KitmDataError, match=message):
            load_table_entries(tmp_path / "j.jsonl", val_images=0, test_images=0)
    (tmp_path / "j.jsonl").write_text("\n")
    with pytest.raises(KitmDataError, match=r"j.jsonl has no rows"):
        load_table_entries(tmp_path / "j.jsonl")


def test_an_image_that_does_not_decode_is_named_by_its_row(tmp_path):
    table = _table(tmp_path, [2] * 6)
    (tmp_path / "photos" / "im4.png").write_bytes(b"not a png at all")
    with pytest.raises(KitmDataError, match=r"table.csv, line 6, column 'filepath': image .*im4.png does not decode"):
        build_captions_table(tmp_path / "out", table, val_images=0, test_images=0, num_shards=3, relevance=(),
                             progress=False)
    assert not (tmp_path / "out").exists()  # every image is decoded before anything is written
    from PIL import Image

    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(tmp_path / "photos" / "im4.png", format="TIFF")
    with pytest.raises(KitmDataError, match=r"line 6, column 'filepath': image .*im4.png is TIFF; TensorFlow decodes "
                                            r"JPEG, PNG, GIF, BMP and WebP"):
        build_captions_table(tmp_path / "out2", table, val_images=0, test_images=0, relevance=(), progress=False)


def _truncated_jpeg(path, seed):
    """A JPEG cut in half: PIL's `verify` (headers only) passes it, TensorFlow's decoder fails on it."""
    from PIL import Image
    import io

    pixels = np.random.default_rng(seed).integers(0, 255, (32, 32, 3), dtype=np.uint8)
    data = io.BytesIO()
    Image.fromarray(pixels).save(data, format="JPEG")
    path.write_bytes(data.getvalue()[:len(data.getvalue()) // 2])


def test_a_truncated_jpeg_is_refused_before_anything_is_written_or_skipped_and_listed(tmp_path, capsys):
    """A truncated JPEG was accepted by the build (PIL's verify reads headers only) and killed training in epoch 2."""
    table = _table(tmp_path, [2] * 8)
    _truncated_jpeg(tmp_path / "photos" / "im3.png", 3)  # the name does not matter: the bytes are a JPEG
    _truncated_jpeg(tmp_path / "photos" / "im6.png", 6)
    flags = ["--dataset=captions_table", f"--captions={table}", f"--out={tmp_path / 'out'}", "--relevance=none",
             "--val_images=0", "--test_images=0", "--quiet"]
    assert main(flags) == 2
    error = capsys.readouterr().err
    assert (f"kitm.data.build: error: {table}, line 5, column 'filepath': image {tmp_path / 'photos' / 'im3.png'} "
            "does not decode: it is cut short (") in error
    assert ("; an interrupted copy or download?) (2 of the table's 8 images do not decode; rows 5, 8). Replace the "
            "file or remove its rows, or pass --missing_images=skip") in error
    assert not (tmp_path / "out").exists()
    assert main(flags + ["--missing_images=skip"]) == 0
    printed = capsys.readouterr().out
    assert "Left out 2 image(s) that do not decode (--missing_images=skip): line 5: " in printed
    source = schema.load_info(tmp_path / "out").source
    assert source["skipped_unreadable"] == 2 and [line.split(":")[0] for line in source["unreadable_images"]] == [
        "line 5", "line 8"]
    assert schema.load_info(tmp_path / "out").num_images("train") == 6


# ---------------------------------------------------------------------------------------------------------------
# Resuming, and the relevance rows.





@pytest.mark.slow
def test_killed_build_resumes_and_an_edited_table_is_refused(tmp_path, killed_in_third_shard, resumed_build,
                                                              same_build):
    table = _table(tmp_path, [2] * 14)
    flags = ["--dataset=captions_table", f"--captions={table}", "--val_images=1", "--test_images=1",
             "--num_shards=4", "--relevance=cider", "--quiet"]
    root = tmp_path / "killed" / "mine"
    # Train holds 12 images in 4 shards of 3: shards 0 and 1 were finished, shard 2 died at its second record.
    resumed_build(flags, root, killed_in_third_shard(flags, root))
    clean = tmp_path / "clean" / "mine"
    assert main([*flags, f"--out={clean}"]) == 0
    same_build(root, clean)

    (root / schema.INFO_FILE).unlink()
    with open(table, "a", encoding="utf-8") as handle:
        handle.write("photos/im0.png\tone more caption\n")
    with pytest.raises(KitmDataError, match=r"other parameters \(captions_sha256: before"):
        build_captions_table(root, table, val_images="1", test_images="1", num_shards=4, relevance=("cider",),
                             progress=False)


@pytest.mark.slow
def test_sentence_and_neighbour_rows(tmp_path, split_records):
    from kitm.relevance import sentence_embeddings

    table = _table(tmp_path, [2] * 10)
    info = build_captions_table(tmp_path / "out", table, val_images=3, test_images=0, neighbors_k=3,
                                relevance=("cider", "sbert", "neighbors"), progress=False)
    assert sorted(info.relevance) == ["cider", "neighbors", "sbert"] and info.relevance["neighbors"]["k"] == 3
    records = split_records(tmp_path / "out", "train")
    captions = [c.decode() for r in records for c in r["captions"]]
    stored = np.concatenate([r[schema.SBERT_EMBEDDINGS].reshape(2, -1) for r in records])
    np.testing.assert_allclose(stored, sentence_embeddings(captions), atol=1e-5)
    neighbours = np.concatenate([r[schema.NEIGHBOR_CAPTION_IDS].reshape(2, 3) for r in records])
    ids = np.concatenate([r["caption/ids"] for r in records])
    assert np.isin(neighbours, ids).all() and not np.any(neighbours // 2 == ids[:, None] // 2)


def test_a_folder_given_as_the_table_is_named_a_folder(tmp_path):
    """--captions=<a folder> said "Caption table ... does not exist"; it exists, it is a folder."""
    table = _table(tmp_path, [2, 2, 2])
    with pytest.raises(KitmDataError, match=r"is a folder, not a table: captions expects the table file itself "
                                            r"\(a .csv/.tsv .*; it holds table.csv: give one of them, e.g. "
                                            r"captions=.*table.csv\. The image folder goes to images"):
        load_table_entries(tmp_path)
    with pytest.raises(KitmDataError, match=r"photos is a folder, not a table.*holds no .csv, .tsv, .jsonl"):
        load_table_entries(tmp_path / "photos")
    assert table.is_file()


def test_duplicated_rows_are_reported_as_duplicates_with_counts_and_lines(tmp_path, capsys):
    """Copied rows were reported only as "images with more than 3 captions"."""
    rows = _rows([3] * 20)
    for i in range(20):
        _image(tmp_path / "photos" / f"im{i}.png", i)
    _write_csv(tmp_path / "t.csv", rows + rows[:8])  # 8 rows again: lines 62.. repeat lines 2..
    entries, report = load_table_entries(tmp_path / "t.csv", val_images=0, test_images=0)
    assert report["duplicates"] == {"rows": 8, "images": 8, "examples": ["line 62 repeats line 2",
                                                                         "line 63 repeats line 3",
                                                                         "line 64 repeats line 4"]}
    rule = report["caption_rule"]
    assert rule["captions_per_image"] == 3 and rule["images_with_extra_captions"] == 8
    assert rule["images_with_extra_captions_only_by_duplicates"] == 8
    assert all(len(set(entry.captions)) == 3 for entry in entries)
    from kitm.data.captions_table import print_report
    print_report(report)
    printed = capsys.readouterr().out
    assert ("8 duplicated row(s): they repeat an earlier row's image and caption exactly (8 image(s); line 62 "
            "repeats line 2; line 63 repeats line 3; line 64 repeats line 4; ...)") in printed
    assert ("8 image(s) have more than 3: they keep their first 3 (8 caption(s) dropped); 8 of them only through "
            "duplicated rows") in printed
    _write_csv(tmp_path / "t.csv", rows)
    assert load_table_entries(tmp_path / "t.csv", val_images=0, test_images=0)[1]["duplicates"]["rows"] == 0


def test_identical_images_across_splits_are_reported_as_test_leakage(tmp_path, capsys):
    """3 of 6 test images were byte-identical to training images under other names, without a word."""
    table = _table(tmp_path, [2] * 10)
    for i in (1, 2):  # the same bytes as im1, im2 under another name
        (tmp_path / "photos" / f"copy{i}.png").write_bytes((tmp_path / "photos" / f"im{i}.png").read_bytes())
    rows = ([(image, caption, "test" if image.endswith("im5.png") else "train") for image, caption in _rows([2] * 10)]
            + [(f"photos/copy{i}.png", f"a copy {i} {k}", "test") for k in range(2) for i in (1, 2)])
    _write_csv(table, rows, header=("filepath", "title", "split"))  # lines 22, 23: copy1, copy2
    flags = ["--dataset=captions_table", f"--captions={table}", "--split_column=split", "--relevance=none", "--quiet"]
    assert main(flags + [f"--out={tmp_path / 'out'}"]) == 0
    printed = capsys.readouterr().out
    digest = __import__("hashlib").sha256((tmp_path / "photos" / "im1.png").read_bytes()).hexdigest()
    assert ("Warning: identical images across splits (test leakage): 0 val and 2 test image(s) have byte-identical "
            "copies in another split, 2 group(s) of identical files (photos/im1.png (train, line 3) = "
            f"photos/copy1.png (test, line 22) [sha256 {digest[:12]}]; photos/im2.png (train, line 4) = ") in printed
    assert ("Note: the test split has 3 image(s): figures over so few vary by several points between splits, and "
            "NCS@K measures nothing where K reaches every image a caption query ranks (kitm.eval warns)") in printed
    leaks = schema.load_info(tmp_path / "out").source["identical_across_splits"]
    assert leaks["groups"] == 2 and leaks["images"] == {"val": 0, "test": 2}
    assert leaks["examples"][0] == {"sha256": digest, "images": ["photos/im1.png (train, line 3)",
                                                                 "photos/copy1.png (test, line 22)"]}
    # Identical files within one split are no leakage.
    _write_csv(table, [(image, caption, "train") for image, caption, _ in rows], header=("filepath", "title", "split"))
    assert load_table_entries(table, split_column="split")[1]["identical_across_splits"]["groups"] == 0


def test_control_characters_in_captions_and_paths_are_refused_naming_the_line(tmp_path, capsys):
    """NUL bytes in captions were stored silently."""
    _table(tmp_path, [2] * 4)
    good = _rows([2] * 4)
    _write_csv(tmp_path / "t.csv", good[:2] + [(good[2][0], "a red\x00thing")] + good[3:])
    assert main(["--dataset=captions_table", f"--captions={tmp_path / 't.csv'}", f"--out={tmp_path / 'o'}",
                 "--quiet"]) == 2
    assert (f"kitm.data.build: error: {tmp_path / 't.csv'}, line 4, column 'title': the caption holds control "
            "character U+0000 (NUL) at character 6 ('a red\\x00thing'); remove it from the table (a NUL often "
            "means a file saved as UTF-16, or binary data pasted into a cell).") in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    _write_csv(tmp_path / "t.csv", good[:1] + [("photos/im1\x1b.png", "x")] + good[1:])
    with pytest.raises(KitmDataError, match=r"t.csv, line 3, column 'filepath': the image path holds control "
                                            r"character U\+001B \(ESC\) at character 11"):
        load_table_entries(tmp_path / "t.csv", val_images=0, test_images=0)
    (tmp_path / "j.jsonl").write_text(json.dumps({"filepath": "photos/im0.png", "title": "ok"}) + "\n"
                                      + json.dumps({"filepath": "photos/im0.png", "title": "bad\u0007"}) + "\n")
    with pytest.raises(KitmDataError, match=r"j.jsonl, line 2, key 'title': the caption holds control character "
                                            r"U\+0007 at character 4"):
        load_table_entries(tmp_path / "j.jsonl", val_images=0, test_images=0)
    # Tabs and line breaks inside a quoted caption are text, not control characters.
    _write_csv(tmp_path / "t.csv", good[:2] + [(good[2][0], "two\nlines\tand a tab")] + good[3:])
    entries = load_table_entries(tmp_path / "t.csv", val_images=0, test_images=0)[0]
    assert "two\nlines\tand a tab" in [caption for entry in entries for caption in entry.captions]


def test_a_row_naming_a_folder_or_a_link_loop_says_what_it_is(tmp_path, capsys):
    """A row naming a folder or a symlink loop said "does not exist"."""
    _table(tmp_path, [2] * 4)
    good = _rows([2] * 4)
    (tmp_path / "photos" / "album").mkdir()
    (tmp_path / "photos" / "loop.png").symlink_to(tmp_path / "photos" / "loop.png")
    (tmp_path / "photos" / "dangling.png").symlink_to(tmp_path / "gone.png")
    cases = [("photos/album", r"line 3, column 'filepath': image .*album is a folder, not an image file \(1 of the "
                              r"table's images are missing or not image files\); pass missing_images=skip"),
             ("photos/loop.png", r"line 3, column 'filepath': image .*loop.png is a symbolic link loop \(following "
                                 r"its links leads back to a link already followed\)"),
             ("photos/dangling.png", r"image .*dangling.png is a symbolic link to .*gone.png, which does not exist")]
    for name, message in cases:
        _write_csv(tmp_path / "t.csv", good[:1] + [(name, "a caption")] + good[1:])
        with pytest.raises(KitmDataError, match=message):
            load_table_entries(tmp_path / "t.csv", val_images=0, test_images=0)
    assert main(["--dataset=captions_table", f"--captions={tmp_path / 't.csv'}", f"--out={tmp_path / 'o'}",
                 "--quiet"]) == 2
    assert "dangling.png is a symbolic link to" in capsys.readouterr().err and not (tmp_path / "o").exists()
    _write_csv(tmp_path / "t.csv", good + [("photos/album", "a"), ("photos/loop.png", "b")])
    entries, report = load_table_entries(tmp_path / "t.csv", val_images=0, test_images=0, missing_images="skip")
    assert len(entries) == 4 and report["skipped_missing"] == 2
