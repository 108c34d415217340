"""kitm.ops.packed_gru against a numpy GRU written from the cell's equations, and against Keras' masked GRU on
the same weights (GRUTextEncoder's two recurrences)."""

import numpy as np
import pytest
import tensorflow as tf

from kitm.layers import GRUTextEncoder
from kitm.ops.packed_gru import packed_gru


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def numpy_gru_final_state(inputs, lengths, kernel, recurrent_kernel, bias, reverse=False):
    """Row by row, step by step: z, r, candidate as Keras' GRU cell with reset_after=True (gates z, r, g)."""
    units = recurrent_kernel.shape[0]
    states = np.zeros((inputs.shape[0], units))
    for row, length in enumerate(lengths):
        h = np.zeros(units)
        steps = range(length - 1, -1, -1) if reverse else range(length)
        for t in steps:
            x = inputs[row, t] @ kernel + bias[0]
            inner = h @ recurrent_kernel + bias[1]
            z = _sigmoid(x[:units] + inner[:units])
            r = _sigmoid(x[units:2 * units] + inner[units:2 * units])
            g = np.tanh(x[2 * units:] + r * inner[2 * units:])
            h = z * h + (1 - z) * g
        states[row] = h
    return states


@pytest.fixture
def weights():
    rng = np.random.default_rng(3)
    embed, units = 5, 4
    return (rng.normal(size=(embed, 3 * units)) * 0.5, rng.normal(size=(units, 3 * units)) * 0.5,
            rng.normal(size=(2, 3 * units)) * 0.3)


@pytest.mark.parametrize("reverse", [False, True])
def test_final_states_match_the_equations(weights, reverse):
    rng = np.random.default_rng(0)
    lengths = np.array([3, 7, 0, 1, 7, 2, 5])  # ties (two 7s), an empty row, a row of one token
    inputs = rng.normal(size=(len(lengths), 7, 5))
    got = packed_gru(tf.constant(inputs, tf.float64), tf.constant(lengths), *(tf.constant(w) for w in weights),
                     reverse=reverse).numpy()
    expected = numpy_gru_final_state(inputs, lengths, *weights, reverse=reverse)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(got[2], 0.0)  # no token: the zero state


def test_padding_values_are_never_read(weights):
    rng = np.random.default_rng(1)
    lengths = np.array([2, 4, 1])
    inputs = rng.normal(size=(3, 4, 5))
    noisy = inputs.copy()
    for row, length in enumerate(lengths):
        noisy[row, length:] = 1e6
    run = lambda x: packed_gru(tf.constant(x), tf.constant(lengths), *(tf.constant(w) for w in weights)).numpy()
    np.testing.assert_array_equal(run(inputs), run(noisy))


def test_empty_batch_and_all_empty_rows(weights):
    args = [tf.constant(w, tf.float32) for w in weights]
    assert packed_gru(tf.zeros([0, 3, 5]), tf.zeros([0], tf.int32), *args).shape == (0, 4)
    out = packed_gru(tf.ones([2, 3, 5]), tf.zeros([2], tf.int32), *args)
    np.testing.assert_array_equal(out.numpy(), np.zeros((2, 4)))


def _tokens():
    rng = np.random.default_rng(0)
    lengths = [5, 12, 0, 1, 7, 7, 3, 12, 2]
    tokens = np.zeros((len(lengths), 14), np.int32)  # two columns of padding in every row: trimmed
    for row, length in enumerate(lengths):
        tokens[row, :length] = rng.integers(1, 50, length)
    return tf.constant(tokens)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_encoder_packed_equals_masked_with_gradients(bidirectional):
    tokens = _tokens()
    masked = GRUTextEncoder(50, 8, 6, bidirectional=bidirectional)
    packed = GRUTextEncoder(50, 8, 6, bidirectional=bidirectional, recurrence="packed")
    masked.build((None, 14))
    packed.build((None, 14))
    packed.set_weights(masked.get_weights())  # the same variables: checkpoints move between the two
    with tf.GradientTape(persistent=True) as tape:
        out_masked, out_packed = masked(tokens), packed(tokens)
        loss_masked = tf.reduce_sum(tf.sin(out_masked))
        loss_packed = tf.reduce_sum(tf.sin(out_packed))
    np.testing.assert_allclose(out_packed.numpy(), out_masked.numpy(), atol=1e-6)
    for a, b in zip(tape.gradient(loss_masked, masked.trainable_weights),
                    tape.gradient(loss_packed, packed.trainable_weights)):
        np.testing.assert_allclose(tf.convert_to_tensor(b).numpy(), tf.convert_to_tensor(a).numpy(), atol=1e-5)


def test_encoder_packed_inside_a_tf_function_and_its_config():
    encoder = GRUTextEncoder(50, 8, 6, recurrence="packed")
    traced = tf.function(lambda tokens: encoder(tokens), input_signature=[tf.TensorSpec([None, None], tf.int32)])
    assert traced(_tokens()).shape == (9, 12)
    assert not encoder.supports_jit
    assert GRUTextEncoder.from_config(encoder.get_config()).recurrence == "packed"
    with pytest.raises(ValueError, match="recurrence must be 'auto', 'masked' or 'packed'"):
        GRUTextEncoder(50, recurrence="ragged")
