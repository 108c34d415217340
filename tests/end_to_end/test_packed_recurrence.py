"""End to end: `text_recurrence="packed"` trains like the masked GRU (the same losses to float rounding, same seed)
and its SavedModel serves raw captions, empty batches included.

The learning rate is tiny on purpose: Adam divides each gradient by its own running scale, so a gradient that is
0 in one recurrence and 1e-12 (rounding) in the other becomes a full step of different sign; at a normal rate the
two runs' epoch losses drift apart by about 0.1% after six steps without either being wrong (the one-step
gradients agree to about 2e-6 in float32: tests/ops/test_packed_gru.py)."""

import json

import numpy as np
import pytest

MASKED_THEN_PACKED = """
import json
import sys

import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401 (the served tokenizer's ops)

from kitm.experiment import experiment_config, run

data_dir, run_root = sys.argv[1], sys.argv[2]
histories = {}
for recurrence in ("masked", "packed"):
    config = experiment_config("synthetic", data_dir=data_dir, run_dir=f"{run_root}/{recurrence}", epochs=1,
                               batch_size=16, image_size=32, embedding_dim=32, word_dim=16, text_units=16,
                               eval_every_epochs=0, export=recurrence == "packed", projector_samples=0,
                               progress=False, seed=5, text_recurrence=recurrence, learning_rate=1e-6)
    histories[recurrence] = run(config)["history"]
loaded = tf.saved_model.load(f"{run_root}/packed/export/1")
served = loaded.signatures["encode_text"](captions=tf.constant(["a red circle", "zebra", "a big blue square left of a"]))
empty = loaded.signatures["encode_text"](captions=tf.constant([], tf.string))
print(json.dumps({"histories": histories, "norms": np.linalg.norm(served["embeddings"].numpy(), axis=1).tolist(),
                  "empty": list(empty["embeddings"].shape)}))
"""


@pytest.mark.slow
def test_packed_trains_like_masked_and_serves(tiny_synthetic, tmp_path, repo_root, run_python):
    result = run_python(MASKED_THEN_PACKED, tiny_synthetic, tmp_path, cwd=repo_root, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    masked, packed = report["histories"]["masked"], report["histories"]["packed"]
    assert set(masked) == set(packed) and "loss" in masked
    for key, values in masked.items():
        np.testing.assert_allclose(packed[key], values, rtol=1e-5, err_msg=key)
    np.testing.assert_allclose(report["norms"], 1.0, atol=1e-5)
    assert report["empty"] == [0, 32]
