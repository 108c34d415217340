"""Backend case: kitm.losses.contrastive (InfoNCE, graded InfoNCE, SigLIP: the plain functions, the classes with
their LogitScale variable read inside a traced step, the targets, the global-negatives blocks) from fixed float64
inputs. On JAX the class cases run under jax.jit (the GPU benchmark's use), on TensorFlow under tf.function."""

import math

import keras
import numpy as np
from keras import ops
from run import value_and_gradients

from kitm.losses.contrastive import (GradedInfoNCELoss, InfoNCELoss, SigLIPLoss, graded_info_nce_block_terms,
                                     graded_info_nce_loss, graded_info_nce_targets, info_nce_block_terms,
                                     info_nce_loss, siglip_block_terms, siglip_loss)
from kitm.ops.similarity import cosine_similarity_matrix


def traced(function):
    """`function` compiled the way each backend traces a training step (PyTorch: eager)."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return jax.jit(function)
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(function)
    return function


def unit(rng, rows, dim=5):
    x = rng.normal(size=(rows, dim))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def inputs():
    """name -> (image, text, image_index, relevance)."""
    rng = np.random.default_rng(11)
    out = {"random": (unit(rng, 6), unit(rng, 6), np.arange(6), rng.uniform(size=(6, 6)))}
    image, text = unit(rng, 6), unit(rng, 6)
    image[1] = image[0]
    text[3] = text[2]
    relevance = np.round(rng.uniform(size=(6, 6)) * 2) / 2  # tied relevance
    out["ties_repeated"] = (image, text, np.array([0, 0, 1, 2, 3, 3]), relevance)
    image = unit(rng, 4)
    text = np.concatenate([image[:1], -image[1:]])  # negative similarities off the diagonal
    out["negative"] = (image, text, np.array([5, 5, 5, 9]), rng.uniform(0, 10, size=(4, 4)))  # CIDEr-like scale
    out["single"] = (unit(rng, 1), unit(rng, 1), np.array([0]), np.ones((1, 1)))
    return out


def _step(loss, variables, index, relevance):
    """loss(y_true, y_pred) with the loss's variables (t, and b) read from the arguments."""

    def step(image, text, t, b):
        with keras.StatelessScope(state_mapping=list(zip(variables, (t, b)))):
            return loss({"image_index": index, "relevance": relevance}, {"image": image, "text": text})

    return step


def put(out, key, value, grads):
    out[f"{key}/value"] = value
    for name, gradient in grads.items():
        out[f"{key}/d_{name}"] = gradient


def cases():
    out = {}
    for name, (image, text, image_index, relevance) in inputs().items():
        index = ops.convert_to_tensor(image_index.astype("int32"))
        relevance_t = ops.convert_to_tensor(relevance)
        data = {"image": image, "text": text, "t": np.array(math.log(7.0))}
        wrt = ("image", "text", "t")
        for with_index in (False, True):
            idx = index if with_index else None
            tag = f"{name}{'_index' if with_index else ''}"

            def infonce(image, text, t):
                return ops.sum(info_nce_loss(cosine_similarity_matrix(image, text), ops.exp(t), image_index=idx))

            def graded(image, text, t):
                return ops.sum(graded_info_nce_loss(cosine_similarity_matrix(image, text), relevance_t, ops.exp(t),
                                                    tau_relevance=0.3, image_index=idx))

            def siglip(image, text, t):
                return ops.sum(siglip_loss(cosine_similarity_matrix(image, text), ops.exp(t), -2.0 * t,
                                           image_index=idx))

            for key, function in (("infonce", infonce), ("graded", graded), ("siglip", siglip)):
                put(out, f"{tag}/{key}", *value_and_gradients(function, data, wrt))
            rows, columns = graded_info_nce_targets(relevance_t, tau_relevance=0.3, image_index=idx)
            out[f"{tag}/targets_rows"], out[f"{tag}/targets_columns"] = rows, columns

        # The classes, their variables read in a traced step: t (and b) as inputs through a StatelessScope, as a
        # Keras trainer (or a user's jit step) feeds them.
        classes = {
            "InfoNCELoss": InfoNCELoss(logit_scale_init=7.0),
            "InfoNCELoss_clipped": InfoNCELoss(logit_scale_init=50.0, max_logit_scale=60.0),
            "GradedInfoNCELoss": GradedInfoNCELoss(0.3, logit_scale_init=7.0, reduction="sum_over_batch_size"),
            "SigLIPLoss": SigLIPLoss(logit_scale_init=7.0, bias_init=-3.0),
        }
        for key, loss in classes.items():
            variables = [loss.temperature.log_scale] + ([loss.temperature.bias] if loss.temperature.bias is not None
                                                        else [])
            start = {"t": np.array(math.log(70.0) if key.endswith("clipped") else math.log(7.0)), "b": np.array(-3.0)}

            names = ("image", "text", "t", "b") if len(variables) == 2 else ("image", "text", "t")
            put(out, f"{name}/{key}", *value_and_gradients(traced(_step(loss, variables, index, relevance_t)),
                                                           {**data, **start}, names))

        # Global negatives: two emulated replicas' blocks, put together (kitm.losses.global_batch).
        b = len(image)
        if b % 2 == 0:
            s = image @ text.T
            positives = (image_index[:, None] == image_index[None, :]) | np.eye(b, dtype=bool)
            for replica in range(2):
                mine = slice(replica * b // 2, (replica + 1) * b // 2)
                rows, columns = ops.convert_to_tensor(s[mine]), ops.convert_to_tensor(s[:, mine])
                row_pos, column_pos = (ops.convert_to_tensor(positives[mine]),
                                       ops.convert_to_tensor(positives[:, mine]))
                blocks = {
                    "infonce": info_nce_block_terms(rows, columns, 7.0, row_pos, column_pos),
                    "graded": graded_info_nce_block_terms(rows, columns, relevance[mine], relevance[:, mine], 7.0,
                                                          row_pos, column_pos, tau_relevance=0.3),
                    "siglip": siglip_block_terms(rows, columns, 7.0, -3.0, row_pos, column_pos),
                }
                for key, (i2t, t2i) in blocks.items():
                    out[f"{name}/block{replica}_{key}_i2t"], out[f"{name}/block{replica}_{key}_t2i"] = i2t, t2i
    return out
