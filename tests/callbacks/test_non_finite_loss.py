"""kitm.callbacks.non_finite_loss: a run whose loss goes NaN stops at that step, naming it and the term."""

import keras
import numpy as np
import pytest

import kitm  # noqa: F401
from kitm.callbacks.non_finite_loss import NonFiniteLoss, NonFiniteLossStop, non_finite_terms


def test_non_finite_terms_names_each_nan_or_infinite_entry():
    bad = non_finite_terms({"loss": 1.0, "triplet": float("nan"), "infonce": np.float32(np.inf)})
    assert list(bad) == ["triplet", "infonce"] and np.isnan(bad["triplet"]) and bad["infonce"] == float("inf")
    assert non_finite_terms(None) == {} and non_finite_terms({"loss": 0.5, "vector": [1.0, 2.0]}) == {}


def test_a_loss_that_goes_nan_stops_the_run_at_that_step_naming_it():
    """A run with --learning_rate=1e30 trained on to NaN and failed later with "sims must be finite"."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(1e30), loss="mse")
    x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
    y = np.ones((64, 1), "float32")
    seen = []
    with pytest.raises(NonFiniteLoss) as error:
        model.fit(x, y, batch_size=8, epochs=3, verbose=0,
                  callbacks=[keras.callbacks.LambdaCallback(
                      on_train_batch_end=lambda batch, logs: seen.append(float(logs["loss"]))), NonFiniteLossStop()])
    step = int(model.optimizer.iterations.numpy())
    assert step == len(seen) and np.isfinite(seen[:-1]).all() and not np.isfinite(seen[-1])  # stopped at the first
    message = error.value.for_flags()
    assert message.startswith(f"Training stopped at step {step} (epoch 1, batch {step}): the loss is not finite "
                               "(loss = ")
    assert message.endswith("The backup and checkpoint keep the last finite state; lower --learning_rate or set "
                            "--grad_clip_norm; with --mixed_precision, try without it.")
