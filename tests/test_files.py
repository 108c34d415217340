"""kitm.files.atomic_path(overwrite=False): written when absent, never replacing what appears meanwhile."""

import os

import pytest

from kitm.files import atomic_path, temporary_sibling


def test_a_file_is_written_when_absent_and_never_replaced(tmp_path):
    target = tmp_path / "sub" / "model.txt"
    with atomic_path(target, overwrite=False) as tmp:
        assert tmp == tmp_path / "sub" / f"model.txt.{os.getpid()}.tmp"
        tmp.write_text("first")
    assert target.read_text() == "first"

    with pytest.raises(FileExistsError, match="model.txt exists"):
        with atomic_path(target, overwrite=False) as tmp:
            tmp.write_text("second")
    assert target.read_text() == "first"
    assert sorted(p.name for p in target.parent.iterdir()) == ["model.txt"]  # the temporary is gone


def test_a_folder_that_appears_while_writing_is_left_as_it_was(tmp_path):
    target = tmp_path / "export" / "3"
    with pytest.raises(FileExistsError):
        with atomic_path(target, overwrite=False) as tmp:
            tmp.mkdir()
            (tmp / "saved_model.pb").write_text("new")
            target.mkdir()  # another writer claims version 3 first
            (target / "saved_model.pb").write_text("theirs")
    assert (target / "saved_model.pb").read_text() == "theirs"
    assert sorted(p.name for p in target.parent.iterdir()) == ["3"]


def test_the_default_still_replaces_and_unique_names_keep_the_suffix(tmp_path):
    target = tmp_path / "a.json"
    target.write_text("old")
    with atomic_path(target) as tmp:
        assert tmp.name == "a.json.tmp"
        tmp.write_text("new")
    assert target.read_text() == "new"
    assert temporary_sibling(tmp_path / "w.weights.h5", ".weights.h5", unique=True).name == \
        f"w.{os.getpid()}.partial.weights.h5"
