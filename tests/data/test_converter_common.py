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
    with pytest.raises(KitmDataError, match="no .cache/build.json"):
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
