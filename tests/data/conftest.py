"""Shared by the converter tests: a `python -m kitm.data.build` killed with SIGKILL at a given record, the identity
of the shards on disk (to see which ones a resumed build rewrote), and a built split's records read back."""

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
