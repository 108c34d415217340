"""`python -m kitm.data.build` on a dataset too small for neighbour rows: the message names the setting to change.

Neighbour rows list captions of *other* images of the same split, so a split of one image cannot have them. The
refusal comes before any slow work (CIDEr-D, sentence embeddings) and names the exact value to build with instead:
as a flag through the command line, as the builder's argument from Python.
"""

import re

import numpy as np
import pytest

from kitm.data import schema
from kitm.data.build import main
from kitm.data.flickr8k import build_flickr8k
from kitm.data.synthetic_records import encode_png
from kitm.errors import KitmDataError


def _three_images(tmp_path, *, with_images=False):
    """A Flickr8k_text-like folder of three images, one per split (and their pixels with `with_images`)."""
    folder = tmp_path / "f8k_text"
    folder.mkdir()
    splits = {"trainImages": "a.jpg", "devImages": "b.jpg", "testImages": "c.jpg"}
    lines = [f"{name}#{k}\tcaption {k} of {name} ." for name in splits.values() for k in range(5)]
    (folder / "Flickr8k.token.txt").write_text("\n".join(lines) + "\n")
    for list_name, name in splits.items():
        (folder / f"Flickr_8k.{list_name}.txt").write_text(name + "\n")
    images = tmp_path / "images"
    if with_images:
        images.mkdir()
        for value, name in enumerate(splits.values()):
            (images / name).write_bytes(encode_png(np.full((8, 8, 3), 40 * value, np.uint8)))
    return folder, images


def test_default_relevance_on_a_three_image_dataset_names_the_flag_value_to_drop(tmp_path, capsys):
    folder, _ = _three_images(tmp_path)
    status = main(["--dataset=flickr8k", f"--flickr8k_dir={folder}", f"--out={tmp_path / 'out'}", "--quiet"])
    assert status == 2
    error = capsys.readouterr().err
    assert ("kitm.data.build: error: Split 'train' has one image: no neighbours of other images to store. "
            "Drop 'neighbors' from --relevance (--relevance=cider,sbert), or give every split at least two "
            "images.") in error


def test_the_suggested_value_keeps_the_other_entries_and_python_callers_see_argument_names(tmp_path):
    folder, _ = _three_images(tmp_path)
    with pytest.raises(KitmDataError, match=r"Drop 'neighbors' from relevance \(relevance=none\)"):
        build_flickr8k(tmp_path / "out", folder, relevance=("neighbors",), progress=False)


def test_image_space_neighbors_name_their_flag(tmp_path, capsys):
    folder, images = _three_images(tmp_path, with_images=True)
    status = main(["--dataset=flickr8k", f"--flickr8k_dir={folder}", f"--images={images}", "--relevance=cider",
                   "--image_neighbors=pixels", f"--out={tmp_path / 'out'}", "--quiet"])
    assert status == 2
    assert ("no image-space neighbours of other images to store. Leave out the image-space neighbour rows "
            "(--image_neighbors=none)") in capsys.readouterr().err


def test_relevance_flag_takes_a_list_or_none(capsys):
    from kitm.data.build import build_parser

    parse = build_parser().parse_args
    assert parse(["--dataset=flickr8k", "--out=x"]).relevance == ("cider", "sbert", "neighbors")
    assert parse(["--dataset=flickr8k", "--out=x", "--relevance=neighbors, cider"]).relevance == ("cider", "neighbors")
    assert parse(["--dataset=flickr8k", "--out=x", "--relevance=none"]).relevance == ()
    with pytest.raises(SystemExit) as exit_info:
        parse(["--dataset=flickr8k", "--out=x", "--relevance=cider,bleu"])
    assert exit_info.value.code == 2 and "Unknown relevance source(s) ['bleu']" in capsys.readouterr().err



def test_synthetic_split_sizes_are_counts_or_fractions(tmp_path, capsys):
    out = tmp_path / "world"
    assert main(["--dataset=synthetic", f"--out={out}", "--num_scenes=40", "--val_images=5", "--test_images=0.25",
                 "--relevance=none", "--quiet"]) == 0
    info = schema.load_info(out)
    assert {split: info.num_images(split) for split in info.splits} == {"train": 25, "val": 5, "test": 10}
    assert info.source["split_counts"] == [25, 5, 10]
    assert "test: 10 images" in capsys.readouterr().out


def test_synthetic_caption_style_is_built_and_recorded(tmp_path):
    from kitm.data.pipeline import training_captions

    literal, complementary = tmp_path / "literal", tmp_path / "complementary"
    for out, style in ((literal, "literal"), (complementary, "complementary")):
        assert main(["--dataset=synthetic", f"--out={out}", "--num_scenes=40", "--relevance=none", "--quiet",
                     f"--caption_style={style}"]) == 0
    assert "caption_style" not in schema.load_info(literal).source  # a literal world's dataset.json as before
    assert schema.load_info(complementary).source["caption_style"] == "complementary"
    assert training_captions(literal) != training_captions(complementary)


def test_synthetic_split_sizes_default_to_the_world_s_own_split(tmp_path):
    from kitm.data.build import synthetic_split_counts

    assert synthetic_split_counts(100) is None  # the generator's 80/10/10, bit for bit
    assert synthetic_split_counts(100, test_images="30") == [60, 10, 30]  # the other split keeps its 10%


@pytest.mark.parametrize("flags, message", [
    (["--val_images=30", "--test_images=10"], "Too few images for the split"),
    (["--test_images=1.5"], "fraction must be below 1"),
    (["--near_duplicate_rate=1.5"], "--near_duplicate_rate must be in"),
    (["--image_features_run=/nonexistent/run"], "--image_features_run=/nonexistent/run: .* holds no SavedModel"),
])
def test_synthetic_build_refuses_bad_split_and_world_settings(tmp_path, capsys, flags, message):
    code = main(["--dataset=synthetic", f"--out={tmp_path / 'w'}", "--num_scenes=40", "--relevance=none", "--quiet",
                 *flags])
    assert code == 2
    assert re.search(message, capsys.readouterr().err)


def test_ctrl_c_during_a_build_is_one_line_and_leaves_only_whole_shards(tmp_path, capsys, monkeypatch):
    """Ctrl-C during a build printed a torch (or TensorFlow) traceback."""
    import kitm.data.synthetic_records as synthetic_records

    out = tmp_path / "world"
    flags = ["--dataset=synthetic", f"--out={out}", "--num_scenes=20", "--image_size=32", "--relevance=none",
             "--num_shards=4", "--quiet"]
    calls, real = [0], synthetic_records.make_example

    def interrupted(**kwargs):  # Ctrl-C at the 7th record: the first of 4 training shards (4 records each) is whole
        calls[0] += 1
        if calls[0] == 7:
            raise KeyboardInterrupt
        return real(**kwargs)

    monkeypatch.setattr(synthetic_records, "make_example", interrupted)
    assert main(flags) == 130
    captured = capsys.readouterr()
    assert captured.err == (f"kitm.data.build: interrupted (Ctrl-C). Nothing half-written is left under a final name "
                            f"in {out}; its finished shards and relevance caches are kept, and the same command "
                            "resumes from them.\n")
    assert not (out / schema.INFO_FILE).exists() and not list(out.glob("*.tmp"))
    assert sorted(path.name for path in out.glob("*.tfrecord")) == ["train-00000-of-00004.tfrecord"]
    monkeypatch.undo()
    assert main(flags) == 0 and schema.load_info(out).num_images("train") == 16
