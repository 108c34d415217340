"""Quiet TensorFlow's C++ start-up lines in kitm's commands, before TensorFlow is imported.

On a machine without a GPU every command printed lines such as `E ... failed call to cuInit: ... (303)`, `E ...
oneDNN supports DT_INT64 only on platforms with AVX-512` and the `I ...` notices about CUDA drivers, oneDNN and CPU
instructions: TensorFlow's C++ log, error-level for the first two, which a newcomer reads as failures although
nothing failed. `quiet_tensorflow_logs()` sets `TF_CPP_MIN_LOG_LEVEL` (read once, when TensorFlow first logs) unless
the user has set it: 2 (warnings and errors only) where an NVIDIA driver is present, since there a failed cuInit is
a real problem worth seeing; 3 (fatal only) where none is, since there the C++ errors are these notices. Python's
warnings and exceptions (kitm's messages, TensorFlow's Python errors, Keras' warnings) are not the C++ log and stay
as they are. Set `TF_CPP_MIN_LOG_LEVEL=0` to see everything.
"""

from __future__ import annotations

import glob
import os
from collections.abc import MutableMapping


def has_nvidia_driver() -> bool:
    """Whether this machine has an NVIDIA kernel driver loaded (its /proc entry or a /dev/nvidia<N> device)."""
    return os.path.exists("/proc/driver/nvidia/version") or bool(glob.glob("/dev/nvidia[0-9]*"))


def quiet_tensorflow_logs(environ: MutableMapping[str, str] | None = None) -> str:
    """Set TF_CPP_MIN_LOG_LEVEL in `environ` (default os.environ) unless it is set; returns the level in force.

    Call it before TensorFlow is imported (kitm's command-line entry points do, first thing)."""
    environ = os.environ if environ is None else environ
    return environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2" if has_nvidia_driver() else "3")
