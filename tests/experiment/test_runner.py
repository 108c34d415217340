"""kitm.experiment.runner: a write that fails for lack of room (full disk, quota, file-size limit) anywhere in a run
stops it with kitm's message naming the file, and the run folder is released."""

import errno

import pytest

from kitm.errors import KitmWriteError
from kitm.experiment import experiment_config, runner


def test_a_full_disk_during_a_run_is_named_with_its_file(tiny_synthetic, tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    (run_dir / "backup").mkdir(parents=True)
    (run_dir / "backup" / "latest.weights.h5").write_bytes(b"the last good backup")

    def full_disk(config, run_dir, strategy, started):
        raise OSError(errno.ENOSPC, "No space left on device", str(run_dir / "backup" / "latest.partial.weights.h5"))

    monkeypatch.setattr(runner, "_run_in", full_disk)
    config = experiment_config("synthetic", data_dir=str(tiny_synthetic), run_dir=str(run_dir), epochs=1)
    with pytest.raises(KitmWriteError, match=rf"Writing {run_dir}/backup/latest.partial.weights.h5 failed: No space "
                                             rf"left on device\. The disk is full.* {run_dir}/backup/latest.weights.h5 "
                                             r"keeps its previous version"):
        runner.run(config)
    assert sorted(path.name for path in run_dir.iterdir()) == ["backup"]  # the lock went with the run
