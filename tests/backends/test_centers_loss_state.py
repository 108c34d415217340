"""LossStateCheckpoint on every backend: the semantic-centre losses' tables, quantizer and optimizer states come
back exactly after a save and a restore into fresh losses (TensorFlow: tf.train.Checkpoint; JAX and PyTorch: the
numpy archive, since tf.train.Checkpoint silently saves nothing of their Keras variables)."""

import pytest


@pytest.mark.parametrize("backend", ("tensorflow", "jax", "torch"))
def test_save_and_restore_round_trip(backend_results, backend):
    results = backend_results("centers_loss_state.py", backend)
    assert results["changed"] == 1  # the fresh losses differed before the restore
    assert results["equal"] == 1  # and equal the saved ones after it
    assert results["epoch"] == 3


@pytest.mark.parametrize("backend", ("jax", "torch"))
def test_backend_equals_tensorflow(assert_matches_tensorflow, backend):
    assert_matches_tensorflow("centers_loss_state.py", backend, rtol=1e-6, atol=1e-12)
