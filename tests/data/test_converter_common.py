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

