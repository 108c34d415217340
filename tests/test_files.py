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



# In a child process: save good weights, then limit its files to 20,000 bytes (RLIMIT_FSIZE, as `ulimit -f`, with
# SIGXFSZ ignored so that a write past it fails with EFBIG, "File too large", as on a full disk, instead of killing
# the process), then write the weights again (h5py) and build a synthetic world (TensorFlow's TFRecordWriter).
PAST_THE_LIMIT = """
import resource, signal, sys
import keras
from kitm.data.build import main
from kitm.files import atomic_path, no_room_error
model = keras.Sequential([keras.layers.Dense(400)])
model.build((None, 100))
target = sys.argv[1]
with atomic_path(target, ".weights.h5") as tmp:
    model.save_weights(str(tmp))  # the previous good version: 160 kB, written before the limit
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (20000, resource.RLIM_INFINITY))
try:
    with atomic_path(target, ".weights.h5") as tmp:
        model.save_weights(str(tmp))
except OSError as error:  # h5py's, errno 27, the file named only in its message
    print(no_room_error(error))
sys.exit(main(["--dataset=synthetic", "--out=" + sys.argv[2], "--num_scenes=40", "--image_size=32",
               "--relevance=none", "--quiet"]))  # shards of ~26 kB
"""


def test_writes_past_the_file_size_limit_name_the_file_and_keep_the_previous_version(tmp_path, kitm_python):
    """A full disk gave raw tracebacks: h5py's `OSError: Can't synchronously write data (... File too large ...)` in
    training, `OutOfRangeError: ....tfrecord.tmp; File too large` in the build. Now one message names the file and
    the cause; the temporary is removed, the previous weights are kept, no shard is half-written."""

    import h5py

    target, out = tmp_path / "checkpoints" / "last.weights.h5", tmp_path / "world"
    result = kitm_python(["-c", PAST_THE_LIMIT, str(target), str(out)], timeout=300)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1].startswith(
        f"Writing {tmp_path}/checkpoints/last.partial.weights.h5 failed: File too large. The disk is full, or a disk "
        f"quota or the file-size limit (ulimit -f) was reached. It was a temporary name: {target} keeps its previous "
        "version. Free space (or raise the limit) and run the same command again"), result.stdout[-2000:]
    assert sorted(path.name for path in target.parent.iterdir()) == ["last.weights.h5"]
    with h5py.File(target, "r") as weights:  # whole
        assert weights.keys()
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert (f"kitm.data.build: error: Writing {out}/train-00000-of-00004.tfrecord.tmp failed: File too large. The "
            "disk is full") in result.stderr
    assert f"{out}/train-00000-of-00004.tfrecord was not created (nothing half-written is left)" in result.stderr
    assert not list(out.glob("*.tfrecord*"))


def test_no_room_errors_are_recognised_by_errno_or_tensorflows_words_and_others_are_not(tmp_path):
    import errno

    from kitm.errors import KitmWriteError
    from kitm.files import no_room_error

    (tmp_path / "summary.json").write_text("{}")
    full = no_room_error(OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "summary.json.tmp")))
    assert isinstance(full, KitmWriteError) and isinstance(full, OSError)
    assert str(full).startswith(f"Writing {tmp_path}/summary.json.tmp failed: No space left on device.")
    assert f"{tmp_path}/summary.json keeps its previous version" in str(full)

    class OutOfRangeError(Exception):  # TensorFlow's OpError names the file only in its message
        pass

    try:
        try:
            raise OutOfRangeError(f"{tmp_path}/train-00000-of-00004.tfrecord.tmp; File too large")
        except OutOfRangeError as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        wrapped = outer
    assert f"Writing {tmp_path}/train-00000-of-00004.tfrecord.tmp failed: File too large" in str(no_room_error(wrapped))
    assert "train-00000-of-00004.tfrecord was not created" in str(no_room_error(wrapped))
    assert no_room_error(OSError(errno.ENOENT, "No such file", "x")) is None and no_room_error(ValueError("x")) is None
