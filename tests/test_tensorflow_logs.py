"""kitm.tensorflow_logs and kitm.progress, seen from a command's log file: no TensorFlow start-up notices (the
`failed call to cuInit` and oneDNN lines a CPU machine printed at error level), and progress bars as lines."""

import os
import subprocess
import sys

from kitm import tensorflow_logs
from kitm.tensorflow_logs import quiet_tensorflow_logs

NOISE = ("cuInit", "cuda drivers", "oneDNN", "cpu_feature_guard", "AVX-512", "rebuild TensorFlow")


def test_the_level_is_set_only_when_the_user_has_not_and_keeps_errors_where_a_gpu_driver_is(monkeypatch):
    environ = {"PYTHONWARNINGS": "always"}
    monkeypatch.setattr(tensorflow_logs, "has_nvidia_driver", lambda: False)
    assert quiet_tensorflow_logs(environ) == "3"
    assert environ == {"PYTHONWARNINGS": "always", "TF_CPP_MIN_LOG_LEVEL": "3"}  # Python's own settings untouched
    monkeypatch.setattr(tensorflow_logs, "has_nvidia_driver", lambda: True)
    assert quiet_tensorflow_logs({}) == "2"  # with a driver, a failed cuInit is a real problem: shown
    assert quiet_tensorflow_logs({"TF_CPP_MIN_LOG_LEVEL": "0"}) == "0"  # the user's choice stays


def test_a_command_writing_to_a_file_has_no_tensorflow_notices_and_its_bars_are_lines(tmp_path, repo_root):
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    env["PYTHONPATH"] = str(repo_root)
    log = tmp_path / "build.log"
    with open(log, "w") as output:
        result = subprocess.run([sys.executable, "-m", "kitm.data.build", "--dataset=synthetic", "--num_scenes=40",
                                 "--image_size=32", "--relevance=none", f"--out={tmp_path / 'world'}"],
                                stdout=output, stderr=subprocess.STDOUT, env=env, cwd=tmp_path, timeout=300)
    text = log.read_text()
    assert result.returncode == 0, text[-3000:]
    assert not [word for word in NOISE if word in text], text[-3000:]
    assert "\r" not in text and max(len(line) for line in text.splitlines()) < 300
    lines = text.splitlines()
    assert any(line.startswith("synthetic world (things): 100%") for line in lines), text  # the bars' final lines
    assert any(line.startswith(f"writing {tmp_path / 'world'}: 100%") for line in lines), text
    assert lines[-1].startswith(f"Wrote {tmp_path / 'world'}")


def test_progress_bars_are_live_on_a_terminal_and_lines_in_a_file(monkeypatch):
    import io

    from kitm.progress import keras_verbosity, progress_bar

    log = io.StringIO()
    for _ in progress_bar(range(5), desc="rows", file=log, mininterval=0, miniters=1):
        pass
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and lines[-1].startswith("rows: 100%|") and "5/5" in lines[-1]
    assert all(line.strip() for line in lines)

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal = Terminal()
    for _ in progress_bar(range(3), desc="rows", file=terminal):
        pass
    assert "\r" in terminal.getvalue()  # redrawn in place, as tqdm does
    assert progress_bar(range(3), disable=True).disable
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert (keras_verbosity(True), keras_verbosity(False)) == (2, 0)
    monkeypatch.setattr(sys, "stdout", Terminal())
    assert keras_verbosity(True) == 1
