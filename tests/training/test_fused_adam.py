"""kitm.training.fused_adam: Adam / AdamW with the fused kernel per variable, against numpy written from the update's
equations, against Keras' own Adam and AdamW (float rounding apart), with per-tower rates, and in the launcher."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from kitm.training.fused_adam import FusedAdam
from kitm.training.tower_learning_rates import FusedTowerLearningRateAdam

SHAPES = [(7, 5), (5,), (3, 4, 2)]


def numpy_adamw(weights, gradients, lr, beta_1=0.9, beta_2=0.999, eps=1e-7, weight_decay=0.0, decayed=None):
    """Loshchilov & Hutter's decoupled decay, then Adam with Keras' bias correction folded into the rate."""
    weights = [w.astype(np.float64) for w in weights]
    m = [np.zeros_like(w) for w in weights]
    v = [np.zeros_like(w) for w in weights]
    for t, step in enumerate(gradients, start=1):
        alpha = lr * np.sqrt(1 - beta_2 ** t) / (1 - beta_1 ** t)
        for i, g in enumerate(step):
            if weight_decay and (decayed is None or decayed[i]):
                weights[i] = weights[i] - lr * weight_decay * weights[i]
            m[i] = m[i] + (g - m[i]) * (1 - beta_1)
            v[i] = v[i] + (g * g - v[i]) * (1 - beta_2)
            weights[i] = weights[i] - alpha * m[i] / (np.sqrt(v[i]) + eps)
    return weights


def _train(optimizer, weights, gradients, exclude=None):
    variables = [keras.Variable(w, name=f"w{i}") for i, w in enumerate(weights)]
    if exclude:
        optimizer.exclude_from_weight_decay(var_names=exclude)

    @tf.function
    def apply(grads):
        optimizer.apply(grads, variables)

    for step in gradients:
        apply([tf.constant(g) for g in step])
    return [v.numpy() for v in variables], variables, optimizer


def _data(steps=6, seed=0):
    rng = np.random.default_rng(seed)
    weights = [rng.normal(size=s).astype(np.float32) for s in SHAPES]
    gradients = [[rng.normal(size=s).astype(np.float32) for s in SHAPES] for _ in range(steps)]
    return weights, gradients


@pytest.mark.parametrize("weight_decay", [None, 0.1])
def test_matches_the_equations_and_keras(weight_decay):
    weights, gradients = _data()
    fused, _, _ = _train(FusedAdam(0.01, weight_decay=weight_decay), weights, gradients)
    expected = numpy_adamw(weights, gradients, 0.01, weight_decay=weight_decay or 0.0)
    keras_class = keras.optimizers.AdamW if weight_decay else keras.optimizers.Adam
    keras_result, _, _ = _train(keras_class(0.01, **({"weight_decay": weight_decay} if weight_decay else {})),
                                weights, gradients)
    for got, want, reference in zip(fused, expected, keras_result):
        np.testing.assert_allclose(got, want, atol=2e-6)
        np.testing.assert_allclose(got, reference, atol=2e-6)


def test_variables_excluded_from_weight_decay_stay_excluded():
    weights, gradients = _data(steps=3)
    fused, _, _ = _train(FusedAdam(0.01, weight_decay=0.5), weights, gradients, exclude=["w1"])
    expected = numpy_adamw(weights, gradients, 0.01, weight_decay=0.5, decayed=[True, False, True])
    for got, want in zip(fused, expected):
        np.testing.assert_allclose(got, want, atol=2e-6)


def test_per_tower_rates_over_the_fused_update():
    weights, gradients = _data(steps=3)
    optimizer = FusedTowerLearningRateAdam(0.01)
    variables = [keras.Variable(w, name=f"w{i}") for i, w in enumerate(weights)]
    optimizer.set_multiplier(variables[:1], 0.0)  # a frozen tower
    optimizer.set_multiplier(variables[1:2], 0.5)
    for step in gradients:
        optimizer.apply([tf.constant(g) for g in step], variables)
    np.testing.assert_array_equal(variables[0].numpy(), weights[0])
    half = numpy_adamw(weights[1:2], [step[1:2] for step in gradients], 0.005)
    np.testing.assert_allclose(variables[1].numpy(), half[0], atol=2e-6)
    full = numpy_adamw(weights[2:], [step[2:] for step in gradients], 0.01)
    np.testing.assert_allclose(variables[2].numpy(), full[0], atol=2e-6)


def test_refuses_amsgrad():
    with pytest.raises(ValueError, match="amsgrad"):
        FusedAdam(0.01, amsgrad=True)


def test_the_launcher_picks_it_by_default_on_tensorflow():
    from kitm.experiment import experiment_config
    from kitm.experiment.encoders import make_optimizer

    class Towers:  # make_optimizer only reads the towers' variables for per-tower rates
        image_encoder = text_encoder = keras.layers.Dense(2)

    papers = experiment_config("synthetic")  # auto: the fused kernel wherever it exists (the TensorFlow backend)
    assert type(make_optimizer(papers, Towers, 1e-3)) is FusedAdam
    papers_keras = experiment_config("synthetic", fused_update="false")
    assert type(make_optimizer(papers_keras, Towers, 1e-3)) is keras.optimizers.Adam
    assert type(make_optimizer(experiment_config("synthetic", fused_update="true"), Towers, 1e-3)) is FusedAdam
    hub = experiment_config("synthetic", joint_preset="/nowhere/clip")
    assert type(make_optimizer(hub, Towers, 1e-3)) is FusedAdam
    hub_keras = experiment_config("synthetic", joint_preset="/nowhere/clip", fused_update="false")
    assert type(make_optimizer(hub_keras, Towers, 1e-3)) is keras.optimizers.Adam


def test_sparse_gradients_with_repeated_rows_are_the_dense_gradient():
    """An embedding's gradient repeats a row once per token occurrence; it stands for the dense gradient, each row
    the sum of its slices (row 1 met twice: gradient 2, second moment 0.001 * 2^2 = 0.004, where Keras' sparse
    update would add 0.001 per slice, 0.002). The fused update follows the dense gradient, as JAX and PyTorch do,
    and equals Keras' AdamW given the dense tensor; numpy's Adam on the dense gradient is the oracle."""
    table = np.linspace(-1, 1, 12, dtype=np.float32).reshape(6, 2)
    slices = tf.IndexedSlices(tf.ones([3, 2]), tf.constant([1, 4, 1]), dense_shape=tf.constant([6, 2]))
    dense = np.zeros((6, 2), np.float32)
    dense[1], dense[4] = 2.0, 1.0
    fused, variable = FusedAdam(0.01), keras.Variable(table)
    keras_adam, reference = keras.optimizers.Adam(0.01), keras.Variable(table)
    weights, m, v = table.astype(np.float64), np.zeros((6, 2)), np.zeros((6, 2))
    for step in range(1, 4):
        fused.apply([slices], [variable])
        keras_adam.apply([tf.constant(dense)], [reference])
        m, v = 0.9 * m + 0.1 * dense, 0.999 * v + 0.001 * dense ** 2
        weights = weights - 0.01 * (m / (1 - 0.9 ** step)) / (np.sqrt(v / (1 - 0.999 ** step)) + 1e-7)
    # The kernel's 1 - beta in float32 (module docstring of kitm.training.fused_adam): 2.4e-7 here.
    np.testing.assert_allclose(variable.numpy(), reference.numpy(), atol=1e-6)
    np.testing.assert_allclose(variable.numpy(), weights, atol=2e-6)
    np.testing.assert_allclose(fused.variables[3].numpy()[1], 0.004 * (0.999 ** 2 + 0.999 + 1), rtol=1e-4)
