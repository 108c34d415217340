"""Shared by the converter tests: a `python -m kitm.data.build` killed with SIGKILL at a given record, the identity
of the shards on disk (to see which ones a resumed build rewrote), the checks of the kill-and-resume scenario every
converter goes through, and a built split's records read back."""

import os
import subprocess
import sys

import pytest

# The build, with kitm.data.converter_common.make_example wrapped to SIGKILL the process at record KILL_AT_RECORD.
_KILLING_BUILD = """
import os, signal, sys
import kitm.data.converter_common as common
real, calls = common.make_example, [0]
def make_example(**kwargs):
    calls[0] += 1
    if calls[0] == int(os.environ["KILL_AT_RECORD"]):
        os.kill(os.getpid(), signal.SIGKILL)  # no cleanup, no exception handlers: as a killed job
    return real(**kwargs)
common.make_example = make_example
from kitm.data.build import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture
def killed_build(repo_root):
    """`killed_build(flags, kill_at)`: run the build with `flags` in a subprocess killed at record `kill_at`;
    returns the CompletedProcess (returncode -9 when the kill happened)."""

    def run(flags, kill_at):
        env = {**os.environ, "PYTHONPATH": str(repo_root), "KILL_AT_RECORD": str(kill_at),
               "TF_CPP_MIN_LOG_LEVEL": "2"}
        return subprocess.run([sys.executable, "-c", _KILLING_BUILD, *flags], env=env, capture_output=True,
                              text=True, timeout=300)

    return run


@pytest.fixture
def shard_state():
    """`shard_state(root)`: {shard name: (inode, mtime)}, which changes when a shard is rewritten."""

    def state(root):
        return {path.name: (path.stat().st_ino, path.stat().st_mtime_ns) for path in root.glob("*.tfrecord")}

    return state


@pytest.fixture(scope="session")
def split_records():
    """`split_records(root, split)`: the parsed records of a built split in the order they were written (shard after
    shard), as numpy values."""
    from kitm.data import schema
    from kitm.data.records import parse_record, read_records

    def read(root, split):
        info = schema.load_info(root)
        spec = schema.feature_spec(info)
        return [{key: value.numpy() for key, value in parse_record(path, record, spec).items()}
                for path, record in read_records(info.shard_paths(root, split), cycle_length=1)]

    return read


@pytest.fixture
def killed_in_third_shard(killed_build, shard_state):
    """`killed_in_third_shard(flags, root)`: the build of a 12-image training split in 4 shards (`flags`, without
    --out) killed at its 8th record into `root`: no dataset.json, shards 0 and 1 finished and whole, the third left
    as its temporary file. Returns those shards' `shard_state`."""
    import tensorflow as tf

    from kitm.data import schema

    def run(flags, root):
        result = killed_build([*flags, f"--out={root}"], kill_at=8)
        assert result.returncode == -9, result.stderr[-2000:]
        assert not (root / schema.INFO_FILE).exists()
        assert sorted(shard_state(root)) == ["train-00000-of-00004.tfrecord", "train-00001-of-00004.tfrecord"]
        assert (root / "train-00002-of-00004.tfrecord.tmp").exists()
        for name in shard_state(root):
            assert sum(1 for _ in tf.data.TFRecordDataset(str(root / name))) == 3  # whole shards only
        return shard_state(root)

    return run


@pytest.fixture
def resumed_build(shard_state):
    """`resumed_build(flags, root, before)`: the same build run again into `root` finishes without rewriting the
    shards of `before` (their `shard_state`) and leaves no temporary file. Returns the new `shard_state`."""
    from kitm.data.build import main

    def run(flags, root, before):
        assert main([*flags, f"--out={root}"]) == 0
        after = shard_state(root)
        assert all(after[name] == state for name, state in before.items())  # finished shards were not rewritten
        assert not list(root.glob("*.tmp"))
        return after

    return run


@pytest.fixture(scope="session")
def same_build():
    """`same_build(root, other)`: asserts that two built datasets hold the same records (every shard's
    tf.train.Example protos, compared field by field, not byte by byte) and the same dataset.json."""
    import pathlib

    import tensorflow as tf

    from kitm.data import schema

    def examples(root):
        return {path.name: [tf.train.Example.FromString(record.numpy())
                            for record in tf.data.TFRecordDataset(str(path))]
                for path in sorted(pathlib.Path(root).glob("*.tfrecord"))}

    def check(root, other):
        assert examples(root) == examples(other)
        assert (root / schema.INFO_FILE).read_text() == (other / schema.INFO_FILE).read_text()

    return check
