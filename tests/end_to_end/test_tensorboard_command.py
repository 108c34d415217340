"""The `tensorboard --logdir <run>/logs` command every run prints works after `pip install -e .`.

TensorBoard 2.20 (the one TensorFlow 2.20 allows) imports pkg_resources, gone from setuptools 82; setup.cfg keeps
setuptools below 81. This starts the installed console script, which fails at import without pkg_resources.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys


def test_tensorboard_console_script_starts():
    # The same distribution may be listed twice (a path seen through two sys.path entries).
    targets = {entry.value for entry in importlib.metadata.entry_points(group="console_scripts", name="tensorboard")}
    assert targets == {"tensorboard.main:run_main"}
    # The script pip installed beside this interpreter (the venv's bin/), as a user's shell finds it.
    script = shutil.which("tensorboard", path=os.path.dirname(sys.executable))
    assert script, f"no tensorboard script beside {sys.executable}"
    result = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().startswith("2."), result.stdout
