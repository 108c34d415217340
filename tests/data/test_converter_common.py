"""kitm.data.converter_common: the build parameters stored beside the output guard only folders that hold output."""

import json

import pytest

import kitm  # noqa: F401
from kitm.data.flickr8k import build_flickr8k
from kitm.errors import KitmDataError


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
    with pytest.raises(KitmDataError, match=r"old already holds shards but no readable dataset.json \(an unfinished "
                                            r"build by another tool or kitm version\), without the .cache/build.json"):
        build_flickr8k(tmp_path / "old", shared_dir / "data" / "flickr8k", limit=3, relevance=(), progress=False)



def test_a_caption_with_a_nul_byte_is_refused_naming_the_image_and_caption():
    from kitm.data.converter_common import CaptionRules, control_character

    assert control_character("a tab\tand\r\na line") is None and control_character("x\x7f") == "U+007F (DEL) at " \
                                                                                               "character 2"
    with pytest.raises(KitmDataError, match=r"captions.json: image 12, caption 2 holds control character U\+0000 "
                                            r"\(NUL\) at character 2 \('a\\x00b'\); remove it from the source"):
        CaptionRules(captions_per_image=2).select("captions.json", "12", [(1, "fine"), (2, "a\x00b")])


def test_file_problem_says_what_a_path_is(tmp_path):
    from kitm.data.converter_common import file_problem

    (tmp_path / "a.png").write_bytes(b"x")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    assert file_problem(tmp_path / "a.png") is None and file_problem(tmp_path / "b.png") == "does not exist"
    assert file_problem(tmp_path) == "is a folder, not an image file"
    assert file_problem(tmp_path / "loop").startswith("is a symbolic link loop")


def test_building_into_the_world_the_launcher_built_says_which_tool_built_it(tmp_path, capsys):
    """Building into the launcher-built world's folder was refused blaming "an older kitm"."""
    from kitm.data import schema
    from kitm.data.build import main
    from kitm.data.synthetic_records import build_synthetic

    world = tmp_path / "tfrecords" / "synthetic"
    build_synthetic(world, num_scenes=12, seed=3, image_size=32, relevance=(), progress=False, world="shapes")  # as the launcher
    before = {path.name: path.read_bytes() for path in world.iterdir() if path.is_file()}
    assert main(["--dataset=synthetic", f"--out={world}", "--num_scenes=20", "--relevance=none", "--quiet"]) == 2
    assert capsys.readouterr().err == (
        f"kitm.data.build: error: {world} already holds the synthetic world that python -m kitm.launch builds on "
        "demand for --dataset=synthetic (12 scenes, seed 3; or build_synthetic called from Python): the launcher "
        "reads it as it is, without the .cache/build.json a build by python -m kitm.data.build records, so this "
        "build cannot tell whether it would mix two datasets. Use a fresh --out, or delete the folder to rebuild it "
        "here.\n")
    assert {path.name: path.read_bytes() for path in world.iterdir() if path.is_file()} == before
    assert not (world / ".cache" / "build.json").exists()
    info = json.loads((world / schema.INFO_FILE).read_text())
    (world / schema.INFO_FILE).write_text(json.dumps({**info, "schema_version": 0}))
    assert main(["--dataset=synthetic", f"--out={world}", "--num_scenes=20", "--relevance=none", "--quiet"]) == 2
    assert "holds a dataset of schema version 0 (built by an older kitm)" in capsys.readouterr().err
