"""Run a backend case file under the Keras backend of this process and save what it computes.

    KERAS_BACKEND=jax python tests/backend_cases/run.py tests/backend_cases/losses_core.py out.npz
    KERAS_BACKEND=jax python tests/backend_cases/run.py --serve

With ``--serve`` it runs case files one after another as they are asked for, one JSON line on stdin each
(``{"case": ..., "out": ...}``), answering one line (``ANSWER`` and ``{"ok": true}`` or ``{"ok": false, "error":
...}``) each:
the cross-backend tests keep one such interpreter per backend instead of starting one per case file (each start
imports Keras and the backend again). Each case starts from a cleared Keras session, as in a fresh interpreter.

A case file defines ``cases() -> dict[str, numpy array]``: each entry a value or gradient computed with
``keras.ops`` on the active backend from fixed float64 inputs (numpy seeds, never the backend's RNG), so that the
same file run under TensorFlow, JAX and PyTorch must give the same arrays. ``value_and_gradients`` below is the one
backend branch the cases need: the gradient of a scalar function with respect to some of its inputs. The
cross-backend tests (the ``backend_results`` fixture of tests/conftest.py) compare the files of the backends.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import sys

# This checkout's kitm, not another one installed in the environment (a script's own folder is sys.path[0]).
sys.path.insert(1, str(pathlib.Path(__file__).resolve().parents[2]))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import keras  # noqa: E402
import numpy as np  # noqa: E402


def to_numpy(value) -> np.ndarray:
    """A backend tensor (or a Python number) as a float64 numpy array."""
    return np.asarray(keras.ops.convert_to_numpy(value), dtype=np.float64)


def value_and_gradients(function, inputs: dict[str, np.ndarray], wrt: tuple[str, ...]):
    """(value, {name: d value / d input}) of a scalar ``function(**tensors)`` on the active backend, float64."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        tensors = {name: tf.constant(value, dtype=tf.float64) for name, value in inputs.items()}
        with tf.GradientTape() as tape:
            for name in wrt:
                tape.watch(tensors[name])
            value = function(**tensors)
        grads = tape.gradient(value, [tensors[name] for name in wrt])
        return to_numpy(value), {name: to_numpy(g) for name, g in zip(wrt, grads)}
    if backend == "jax":
        import jax
        import jax.numpy as jnp

        jax.config.update("jax_enable_x64", True)
        fixed = {name: jnp.asarray(value, dtype=jnp.float64) for name, value in inputs.items() if name not in wrt}

        def scalar(*wrt_values):
            return function(**fixed, **dict(zip(wrt, wrt_values)))

        value, grads = jax.value_and_grad(scalar, argnums=tuple(range(len(wrt))))(
            *[jnp.asarray(inputs[name], dtype=jnp.float64) for name in wrt])
        return to_numpy(value), {name: to_numpy(g) for name, g in zip(wrt, grads)}
    if backend == "torch":
        import torch

        tensors = {name: torch.tensor(value, dtype=torch.float64, requires_grad=name in wrt)
                   for name, value in inputs.items()}
        value = function(**tensors)
        grads = torch.autograd.grad(value, [tensors[name] for name in wrt], allow_unused=True)
        return (to_numpy(value.detach()),
                {name: np.zeros_like(inputs[name]) if g is None else to_numpy(g) for name, g in zip(wrt, grads)})
    raise ValueError(f"no gradient helper for the Keras backend {backend!r}")


def main(case_file: str, out: str) -> None:
    keras.backend.clear_session()  # layer names and Keras' global state as in a fresh interpreter
    if keras.backend.backend() == "jax":
        import jax

        jax.config.update("jax_enable_x64", True)
    keras.config.set_floatx("float64")
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    spec = importlib.util.spec_from_file_location("backend_case", case_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    results = {name: to_numpy(value) for name, value in module.cases().items()}
    tmp = out + ".tmp.npz"
    np.savez(tmp, **results)
    os.replace(tmp, out)


ANSWER = "kitm-case-answer: "  # what starts the answer's line (a case or a library may print lines of its own)


def serve() -> None:
    """Run the case files asked for on stdin, one JSON line each, until stdin closes (module docstring)."""
    import json
    import traceback

    for line in sys.stdin:
        request = json.loads(line)
        try:
            main(request["case"], request["out"])
            answer = {"ok": True}
        except BaseException:  # noqa: BLE001 - reported to the test, which fails with it
            answer = {"ok": False, "error": traceback.format_exc()}
        print(ANSWER + json.dumps(answer), flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve()
    else:
        main(sys.argv[1], sys.argv[2])
