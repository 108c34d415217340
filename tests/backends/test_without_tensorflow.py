"""kitm's model side imports and computes without TensorFlow (issue 33; docs/backends.md).

In a fresh interpreter whose import system refuses ``tensorflow`` (and tensorflow_text, tf_keras), with
``KERAS_BACKEND=jax``: ``import kitm.losses, kitm.layers, kitm.models, kitm.metrics`` works, TensorFlow is never
imported, and a loss computes on JAX arrays. CI also runs the backend-neutral tests in an environment where
TensorFlow is not installed at all (.ci/run); this test says the same in the main environment.
"""

import os
import subprocess
import sys

import pytest

pytest.importorskip("jax")

BLOCK_TENSORFLOW = r'''
import importlib.abc, sys
class _NoTensorFlow(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tensorflow", "tensorflow_text", "tf_keras", "tensorflow_hub"):
            raise ImportError(f"TensorFlow is not installed here (refused: {name})")
        return None
sys.meta_path.insert(0, _NoTensorFlow())
'''

PROGRAM = BLOCK_TENSORFLOW + r'''
import numpy as np
import kitm.losses, kitm.layers, kitm.models, kitm.metrics
import keras
assert keras.backend.backend() == "jax", keras.backend.backend()
assert not any(name.split(".")[0] == "tensorflow" for name in sys.modules), "TensorFlow was imported"
rng = np.random.default_rng(0)
image = rng.normal(size=(6, 8)).astype("float32")
text = rng.normal(size=(6, 8)).astype("float32")
image /= np.linalg.norm(image, axis=1, keepdims=True)
text /= np.linalg.norm(text, axis=1, keepdims=True)
value = kitm.losses.TripletLoss(max_violation=False)(None, {"image": image, "text": text})
similarity = image @ text.T
oracle = (np.maximum(0, 0.2 + similarity - np.diag(similarity)[:, None]) * (1 - np.eye(6))).sum() + \
         (np.maximum(0, 0.2 + similarity - np.diag(similarity)[None, :]) * (1 - np.eye(6))).sum()
np.testing.assert_allclose(float(value), oracle, rtol=1e-5)
print("ok")
'''


def test_model_side_imports_and_computes_without_tensorflow(repo_root):
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(repo_root)}
    done = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=300,
                          cwd=repo_root)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stdout + done.stderr
