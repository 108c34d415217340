"""Reading an index: a damaged one (a truncated file) is refused when it is opened, naming the file and giving the
command that rebuilds it, not served with empty thumbnails or a 500 at the first image search."""

import shutil

import numpy as np
import pytest

from kitm.errors import KitmDataError
from kitm.index import load_index


def _truncate(path, keep):
    data = path.read_bytes()
    path.write_bytes(data[:keep if keep >= 0 else len(data) + keep])


@pytest.mark.parametrize("name, keep, what", [
    ("thumbnails.bin", 100, "100 bytes where thumbnail_offsets.npy ends at"),
    ("thumbnails.bin", 0, "0 bytes where thumbnail_offsets.npy ends at"),
    ("image_embeddings.npy", -40, "unreadable: mmap length is greater than file size"),
    ("thumbnail_offsets.npy", 20, "unreadable:"),
    ("caption_embeddings.npy", 200, "unreadable:"),
    ("captions.faiss", 100, "not a readable faiss index"),
    ("images.json", 50, "unreadable:"),
    ("truth.npz", 300, "unreadable:"),
])
def test_a_truncated_file_is_refused_at_start_naming_it_and_the_rebuild_command(tiny_search_index, tiny_synthetic,
                                                                               tmp_path, name, keep, what, capsys):
    from kitm.search.cli import main

    index = tmp_path / "index"
    shutil.copytree(tiny_search_index, index)
    _truncate(index / name, keep)
    with pytest.raises(KitmDataError) as caught:
        load_index(index)
    message = str(caught.value)
    assert message.startswith(f"{index / name} is damaged ({what}")
    model = load_index(tiny_search_index).manifest["model"]["export_dir"]
    assert message.endswith(f"the index at {index} cannot be served. Rebuild it: python -m kitm.index "
                            f"--export_dir={model} --images={tiny_synthetic.resolve()} --split=test --out={index} "
                            "--overwrite")
    # The server refuses to start, in one line, before it says "serving".
    assert main([f"--index={index}"]) == 2
    captured = capsys.readouterr()
    assert "serving" not in captured.out
    (line,) = captured.err.strip().splitlines()
    assert line == f"kitm.search: error: {message}"


def test_the_embeddings_of_another_shape_are_refused(tiny_search_index, tmp_path):
    index = tmp_path / "index"
    shutil.copytree(tiny_search_index, index)
    np.save(index / "image_embeddings.npy", np.zeros([11, 8], np.float32))
    with pytest.raises(KitmDataError, match=r"image_embeddings.npy is damaged \(shape \(11, 8\) where \(12, 8\) was"):
        load_index(index)
