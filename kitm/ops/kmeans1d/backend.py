"""The backend branches of 1-D k-means, all here: compilation, memory-bounded chunking, and run-time checks.

The clustering itself (the other modules) is keras.ops.  Three things differ by backend, for shapes and
speed only, never for the arithmetic:

- compilation: on TensorFlow one `tf.function` per setting, traced once for any [rows, cols] (unknown
  shapes, XLA compiles per shape); on JAX `jax.jit` (shapes are static; one compilation per shape);
  PyTorch runs eagerly.
- chunking (rows per block so that one [rows, n, n] table fits `max_table_elements`): TensorFlow's shapes
  may be unknown when traced, so its chunks go through `tf.map_fn`; elsewhere the sizes are Python ints and
  the chunks go through `keras.ops.map` (one chunk: a plain call).
- run-time checks (finite values, k_max <= cols, the mask's shape): TensorFlow asserts in the graph
  (`InvalidArgumentError`, also with unknown shapes); elsewhere shapes are static and values are checked
  where they are concrete (eager), with `ValueError`; inside `jax.jit` they are not checked.
- gathers (`take_last`, `pick_along`): on TensorFlow one `tf.gather` with batch dimensions, where
  `keras.ops.take_along_axis` builds about 70 ops for shapes unknown when traced (broadcasts, negative-index
  wrapping, transposes); the solver gathers some 30 times per trace, so that was two thirds of its graph and
  of its tracing and compile time.  Elsewhere `keras.ops.take_along_axis`.  The indices here are always in
  range and the leading dimensions equal, which is all the single op needs.

TensorFlow is imported only when it is the Keras backend.
"""

from __future__ import annotations

import numpy as np
from keras import ops

from kitm.distribute.backend import backend_name, on_tensorflow


def checked(x, valid, k_max: int, cols_known: bool, mask_given: bool):
    """x after the run-time checks: the values where clustered are finite, cols >= k_max, mask shape."""
    if on_tensorflow():
        import tensorflow as tf

        x = tf.ensure_shape(x, [None, None])  # checks the rank at run time when unknown now
        checks = []
        if not cols_known:
            checks.append(tf.debugging.assert_less_equal(
                tf.constant(k_max, tf.int32), tf.shape(x)[1],
                message=f"auto_kmeans_1d: k_max={k_max} exceeds cols, the number of values per row"))
        if mask_given:
            checks.append(tf.debugging.assert_equal(
                tf.shape(valid), tf.shape(x), message="auto_kmeans_1d: mask must have the shape of values"))
        checks.append(tf.debugging.assert_all_finite(
            tf.where(valid, x, tf.zeros_like(x)), "auto_kmeans_1d: values must be finite where clustered"))
        with tf.control_dependencies(checks):
            return tf.identity(x)
    try:
        concrete = ops.convert_to_numpy(ops.where(valid, x, 0.0))
    except Exception:  # a traced value (inside jax.jit): not checkable here
        return x
    if not np.all(np.isfinite(concrete)):
        raise ValueError("auto_kmeans_1d: values must be finite where clustered")
    return x


def compiled(run, jit_compile: bool):
    """`run(x float64 [rows, cols], valid bool [rows, cols], seed word int32 [])` compiled for the backend (module
    docstring)."""
    backend = backend_name()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(
            run,
            input_signature=[tf.TensorSpec([None, None], tf.float64), tf.TensorSpec([None, None], tf.bool),
                             tf.TensorSpec([], tf.int32)],
            jit_compile=jit_compile,
            autograph=False,
        )
    if backend == "jax" and jit_compile:
        import jax

        return jax.jit(run)
    return run


def take_last(table, index):
    """table [d_0..d_{L-1}, m] read along its last axis at index [d_0..d_{L-1}, ...], each leading cell b
    into its own row: `out[b, ...] = table[b, index[b, ...]]`, shape [d_0..d_{L-1}, ...] (indices in [0, m))."""
    leading = len(table.shape) - 1
    if on_tensorflow():
        import tensorflow as tf

        return tf.gather(table, index, batch_dims=leading)
    shape = ops.shape(index)
    flat = ops.reshape(index, tuple(shape[:leading]) + (-1,))
    return ops.reshape(ops.take_along_axis(table, flat, axis=-1), shape)


def pick_along(table, index, axis: int):
    """One entry along `axis` per leading cell: table [d_0..d_{a-1}, m, ...] at index [d_0..d_{a-1}] gives
    [d_0..d_{a-1}, ...] (`out[b, ...] = table[b, index[b], ...]`, indices in [0, m))."""
    if on_tensorflow():
        import tensorflow as tf

        return tf.gather(table, index, axis=axis, batch_dims=axis)
    for _ in range(len(table.shape) - axis):
        index = ops.expand_dims(index, -1)
    shape = ops.shape(table)
    index = ops.broadcast_to(index, tuple(shape[:axis]) + (1,) + tuple(shape[axis + 1:]))
    return ops.squeeze(ops.take_along_axis(table, index, axis=axis), axis)


def set_shape(tensor, shape) -> None:
    """Keep the static shape TensorFlow's shape-agnostic trace loses (no-op elsewhere: shapes are static)."""
    if on_tensorflow():
        tensor.set_shape(shape)


def map_chunks(fn, inputs, max_table_elements: int, out_dtypes, out_ranks):
    """`fn(x_chunk, valid_chunk, ...)` on row blocks small enough for one [rows, n, n] table, concatenated.

    `out_dtypes`/`out_ranks`: the dtypes and ranks of fn's outputs (TensorFlow's map_fn needs them up front).
    """
    if on_tensorflow():
        return _map_chunks_tf(fn, inputs, max_table_elements, out_dtypes, out_ranks)
    x = inputs[0]
    rows, cols = int(x.shape[0]), int(x.shape[1])
    rows_per_chunk = max(1, max_table_elements // max(cols * cols, 1))
    num_chunks = max(-(-rows // rows_per_chunk), 1)
    if num_chunks == 1:
        return tuple(fn(*inputs))
    # Even chunks, so that the padding (rows with nothing valid) is less than one row per chunk.
    chunk = -(-rows // num_chunks)
    pad = num_chunks * chunk - rows

    def chunked(t):
        t = ops.concatenate([t, ops.zeros((pad,) + tuple(t.shape[1:]), t.dtype)], axis=0) if pad else t
        return ops.reshape(t, (num_chunks, chunk) + tuple(t.shape[1:]))

    out = ops.map(lambda parts: tuple(fn(*parts)), tuple(chunked(t) for t in inputs))
    return tuple(ops.reshape(t, (num_chunks * chunk,) + tuple(t.shape[2:]))[:rows] for t in out)


def _map_chunks_tf(fn, inputs, max_table_elements, out_dtypes, out_ranks):
    import tensorflow as tf

    x = inputs[0]
    rows = tf.shape(x)[0]
    cols = tf.shape(x)[1]
    rows_per_chunk = tf.maximum(1, max_table_elements // tf.maximum(cols * cols, 1))
    # At least one chunk: map_fn cannot stack the outputs of zero iterations.
    num_chunks = tf.maximum((rows + rows_per_chunk - 1) // rows_per_chunk, 1)
    # Even chunks, so that the padding (rows with nothing valid) is less than one row per chunk.
    chunk = (rows + num_chunks - 1) // num_chunks
    pad = num_chunks * chunk - rows

    # Shapes are unknown when this is traced (one trace serves every shape), so even a single chunk
    # goes through map_fn: one iteration costs little, and a tf.cond around a direct call would
    # trace the whole solver twice.
    def chunked(t):
        t = tf.pad(t, tf.concat([[[0, pad]], tf.zeros([tf.rank(t) - 1, 2], tf.int32)], axis=0))
        return tf.reshape(t, tf.concat([[num_chunks, chunk], tf.shape(t)[1:]], axis=0))

    signature = tuple(tf.TensorSpec([None] * rank, dtype) for dtype, rank in zip(out_dtypes, out_ranks))
    out = tf.map_fn(lambda parts: tuple(fn(*parts)), tuple(chunked(t) for t in inputs),
                    fn_output_signature=signature)

    def unchunk(t):
        t = tf.reshape(t, tf.concat([[num_chunks * chunk], tf.shape(t)[2:]], axis=0))
        return t[:rows]

    return tuple(unchunk(t) for t in out)
