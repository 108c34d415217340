"""Gradient caching for DualEncoder's TensorFlow step (Gao et al. 2021, "Scaling Deep Contrastive Learning Batch Size
under Memory Limited Setup"; `DualEncoder.compile(grad_cache_chunk=N)`).

The step embeds the per-replica batch of b rows in chunks of N without a tape (no activations kept), computes the
loss over the whole batch (global negatives included) and its gradient g with respect to the embeddings, then embeds
each chunk again under a tape and takes the gradient of <embeddings, g>, summed over the chunks: by the chain rule
the gradient of the loss, with one chunk's activations held. Layer state a forward pass changes (random seeds,
batch-norm statistics) is put back before the second pass, so it recomputes exactly the first's embeddings.
TensorFlow only (the other backends refuse it: kitm.distribute.steps.keras_trainers). docs/scale.md, "Gradient caching".
"""

from __future__ import annotations


def _add_gradients(a, b):
    """a + b for gradients that may be None or IndexedSlices (an embedding table's rows stay sparse)."""
    import tensorflow as tf

    if a is None or b is None:
        return b if a is None else a
    if isinstance(a, tf.IndexedSlices) and isinstance(b, tf.IndexedSlices):
        return tf.IndexedSlices(tf.concat([a.values, b.values], axis=0), tf.concat([a.indices, b.indices], axis=0),
                                a.dense_shape)
    return tf.convert_to_tensor(a) + tf.convert_to_tensor(b)


def cached_gradients(model, x, y, sample_weight):
    """`model`'s (optimizer groups, gradients, loss, predictions) for one step with gradient caching: two passes
    over chunks of `model.grad_cache_chunk` rows around one loss over the whole batch (module docstring)."""
    import tensorflow as tf

    chunk = model.grad_cache_chunk
    rows = tf.nest.flatten(x)[0].shape[0]
    if rows is None:
        raise ValueError(f"grad_cache_chunk={chunk} needs a static per-replica batch size (batch with "
                         "drop_remainder=True).")
    if rows % chunk:
        raise ValueError(f"grad_cache_chunk={chunk} must divide the per-replica batch of {rows} rows (the global "
                         "batch divided by the replicas).")
    pieces = rows // chunk

    def piece(index, after):
        # The control dependency chains the chunks: one chunk's activations at a time.
        with tf.control_dependencies(after):
            return tf.nest.map_structure(lambda t: tf.identity(t[index * chunk:(index + 1) * chunk]), x)

    # Layer state a forward pass changes (random seeds, batch-norm statistics), put back before the second pass.
    state = model._forward_state()
    saved = [tf.identity(variable) for variable in state]
    # Pass 1: the embeddings without activations.
    embedded, after = [], list(saved)
    for index in range(pieces):
        out = model(piece(index, after), training=True)
        out = {key: tf.stop_gradient(value) for key, value in out.items()}
        embedded.append(out)
        after = [out["image"], out["text"]]
    y_pred = {key: tf.concat([out[key] for out in embedded], axis=0) for key in ("image", "text")}
    with tf.control_dependencies(after):
        for variable, value in zip(state, saved):
            variable.assign(value)
    # The loss over the whole batch and its gradient with respect to the embeddings (and the losses' variables,
    # and the model's weights through layer regularisers).
    loss_variables = model.loss_variables_for_model_optimizer()
    weights = list(model.trainable_variables)
    with tf.GradientTape() as tape:
        tape.watch(y_pred["image"])
        tape.watch(y_pred["text"])
        total = model.compute_loss(x, y, y_pred, sample_weight, training=True)
        scaled = model.optimizer.scale_loss(total) if model._loss_scaling() else total
    grads = tape.gradient(scaled, [y_pred["image"], y_pred["text"]] + loss_variables + weights)
    image_grad, text_grad = grads[0], grads[1]
    loss_grads = grads[2:2 + len(loss_variables)]
    accumulated = grads[2 + len(loss_variables):]
    # Pass 2: each chunk again, with a tape, chained to the embeddings' gradient.
    after = [tf.convert_to_tensor(g.values) if isinstance(g, tf.IndexedSlices) else g
             for g in accumulated if g is not None] + [image_grad, text_grad]
    for index in range(pieces):
        with tf.GradientTape() as tape:
            out = model(piece(index, after), training=True)
            rows_of = slice(index * chunk, (index + 1) * chunk)
            surrogate = (tf.reduce_sum(out["image"] * image_grad[rows_of])
                         + tf.reduce_sum(out["text"] * text_grad[rows_of]))
        chunk_grads = tape.gradient(surrogate, weights)
        accumulated = [_add_gradients(a, g) for a, g in zip(accumulated, chunk_grads)]
        after = [tf.convert_to_tensor(g.values) if isinstance(g, tf.IndexedSlices) else g
                 for g in accumulated if g is not None]
    gradients = list(accumulated) + list(loss_grads)
    return [(model.optimizer, weights + loss_variables)], [gradients], total, y_pred

