"""A GRU over variable-length captions that skips finished rows (what PyTorch's packed sequences do).

A masked GRU (Keras' `GRU(..., mask=...)`) computes every row at every time step and keeps the old state where
the mask is off, so a batch costs B x T row-steps, T the batch's longest caption. A packed recurrence sorts the
rows by length, longest first; at step t only the first n_t rows (those longer than t) are still running, so the
batch costs sum(lengths) row-steps: for COCO-like captions (mean 14.5 tokens, longest 20) about 0.72 of the masked
cost. The input projection `x_t W` of every real token is one matrix product before the loop.

The cell is Keras' GRU cell with `reset_after=True` (Keras' default, the cuDNN-compatible form), gates in Keras'
order (update z, reset r, candidate), and it reads the weights of an existing `keras.layers.GRU`, so the two
recurrences are interchangeable on the same checkpoint (docs/performance.md, "Faster steps"):

    z = sigmoid(x W_z + b_z + h U_z + c_z)
    r = sigmoid(x W_r + b_r + h U_r + c_r)
    g = tanh(x W_g + b_g + r * (h U_g + c_g))
    h' = z * h + (1 - z) * g

A row's final state is its state after its last real token; a row without tokens keeps the zero state, as a fully
masked row of Keras' GRU does. The two recurrences agree to float rounding (tests/ops/test_packed_gru.py; in
float32 outputs to about 1e-8, gradients to about 2e-6): the products see the same operands in other groupings,
so the last bits may differ.

The shrinking state (the first n_t rows at step t) is a data-dependent shape, which TensorFlow's while loop runs
and JAX's compiled loops cannot; on the other Keras backends `packed_gru` computes the same final states with a
masked recurrence over every row (`masked_gru`, keras.ops), equal to float rounding, B x T row-steps.
"""

from __future__ import annotations

from keras import ops

from kitm.distribute.backend import tensorflow_module


def packed_gru(inputs, lengths, kernel, recurrent_kernel, bias, reverse: bool = False):
    """Final GRU states [B, H] of `inputs` [B, T, E], row b read over its first `lengths[b]` steps.

    kernel [E, 3H], recurrent_kernel [H, 3H], bias [2, 3H] (input bias, recurrent bias) as a Keras GRU cell with
    `reset_after=True` holds them. `reverse`: each row read from its last real token back to its first (the backward
    half of a bidirectional GRU).
    """
    tf = tensorflow_module()  # the packed loop itself is TensorFlow's (module docstring)
    if tf is None:
        return masked_gru(inputs, lengths, kernel, recurrent_kernel, bias, reverse=reverse)

    inputs = tf.convert_to_tensor(inputs)
    lengths = tf.cast(lengths, tf.int32)
    if reverse:
        inputs = tf.reverse_sequence(inputs, lengths, seq_axis=1, batch_axis=0)
    steps = tf.shape(inputs)[1]
    units = tf.shape(recurrent_kernel)[0]
    order = tf.argsort(lengths, direction="DESCENDING", stable=True)
    sorted_lengths = tf.gather(lengths, order)
    # Rows still running at each step: with the rows sorted longest first, they are the first running[t].
    running = tf.reduce_sum(tf.cast(sorted_lengths[None, :] > tf.range(steps)[:, None], tf.int32), axis=1)
    time_major = tf.transpose(tf.gather(inputs, order), [1, 0, 2])  # [T, B, E]
    # One product for every step's input projection (padding included: it is never read).
    projected = tf.matmul(tf.reshape(time_major, [-1, tf.shape(inputs)[2]]), kernel) + bias[0]
    # Read per step from a TensorArray: slicing the [T, B, 3H] tensor inside the loop would make every backward
    # step add a gradient of the whole tensor (quadratic in T).
    projected = tf.TensorArray(projected.dtype, size=steps, clear_after_read=False).unstack(
        tf.reshape(projected, [steps, -1, 3 * units]))
    recurrent_bias = bias[1]

    def step(t, state):
        active = running[t]
        h = state[:active]
        x_z, x_r, x_g = tf.split(projected.read(t)[:active], 3, axis=1)
        h_z, h_r, h_g = tf.split(tf.matmul(h, recurrent_kernel) + recurrent_bias, 3, axis=1)
        z = tf.sigmoid(x_z + h_z)
        r = tf.sigmoid(x_r + h_r)
        candidate = tf.tanh(x_g + r * h_g)
        updated = z * h + (1.0 - z) * candidate
        return t + 1, tf.concat([updated, state[active:]], axis=0)

    initial = tf.zeros([tf.shape(inputs)[0], units], dtype=inputs.dtype)
    last_step = tf.reduce_max(tf.concat([sorted_lengths[:1], [0]], axis=0))  # 0 for an empty batch
    _, final = tf.while_loop(lambda t, _: t < last_step, step, (tf.constant(0), initial),
                             shape_invariants=(tf.TensorShape([]), tf.TensorShape([None, recurrent_kernel.shape[0]])))
    return tf.gather(final, tf.math.invert_permutation(order))


def masked_gru(inputs, lengths, kernel, recurrent_kernel, bias, reverse: bool = False):
    """`packed_gru`'s final states by a masked recurrence in keras.ops: every row runs at every step and keeps
    its state where the step is past its length, as Keras' masked GRU does. With the padding trailing each row,
    `reverse` scans from the last step back: a row's state stays zero until its last real token, then reads it
    back to its first, which is what `packed_gru` reads from the reversed sequence."""
    inputs = ops.convert_to_tensor(inputs)
    units = recurrent_kernel.shape[0]
    steps = inputs.shape[1]
    lengths = ops.cast(lengths, "int32")
    # One product for every step's input projection, as in packed_gru.
    projected = ops.matmul(inputs, kernel) + bias[0]  # [B, T, 3H]
    # [B, T]; arange with its start given: jax2onnx's translation of arange takes no stop of None (the ONNX towers)
    running = ops.arange(0, steps, dtype="int32")[None, :] < lengths[:, None]
    recurrent_bias = bias[1]

    def step(state, step_inputs):
        x, keep = step_inputs
        x_z, x_r, x_g = ops.split(x, 3, axis=-1)
        h_z, h_r, h_g = ops.split(ops.matmul(state, recurrent_kernel) + recurrent_bias, 3, axis=-1)
        z = ops.sigmoid(x_z + h_z)
        r = ops.sigmoid(x_r + h_r)
        candidate = ops.tanh(x_g + r * h_g)
        updated = ops.where(keep[:, None], z * state + (1.0 - z) * candidate, state)
        return updated, updated

    initial = ops.zeros((ops.shape(inputs)[0], units), dtype=inputs.dtype)
    sequences = (ops.moveaxis(projected, 1, 0), ops.moveaxis(running, 1, 0))  # time-major
    if reverse:  # the steps flipped and scanned forward: the same recurrence as a reversed scan, which ONNX's
        # converters (jax2onnx) cannot translate
        sequences = tuple(ops.flip(sequence, axis=0) for sequence in sequences)
    final, _ = ops.scan(step, initial, sequences)
    return final
