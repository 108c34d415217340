"""A backend case: kitm's layers (projections, image encoders, text encoders, the packed GRU) on fixed float64
weights and inputs, their outputs and gradients with respect to their inputs (and the GRU's kernels).

Every weight is set from a numpy seed (the backends' initialisers draw differently), so the same file must give the
same arrays under TensorFlow, JAX and PyTorch.
"""

import numpy as np
from keras import layers, ops
from run import to_numpy, value_and_gradients

from kitm.layers.flat_projections import flatten_projections
from kitm.layers.image_encoders import FeatureMLP, SmallConvEncoder
from kitm.ops.packed_gru import masked_gru, packed_gru
from kitm.layers.text_encoders import GRUTextEncoder

# Trailing padding (id 0) as kitm's tokenizers write it; one caption of the full width, one without any word, and
# a last column that is padding in every row (trimmed on TensorFlow and PyTorch, kept on JAX: the same states).
TOKENS = np.array([[3, 5, 7, 2, 9, 0, 0],
                   [4, 0, 0, 0, 0, 0, 0],
                   [1, 2, 3, 4, 5, 6, 0],
                   [0, 0, 0, 0, 0, 0, 0],
                   [8, 8, 2, 0, 0, 0, 0]], dtype=np.int32)


def _fill(layer, seed):
    """Every float weight of `layer` from numpy (variances positive)."""
    rng = np.random.default_rng(seed)
    for weight in layer.weights:
        if "float" not in str(weight.dtype):
            continue
        value = rng.normal(scale=0.4, size=tuple(weight.shape))
        if "variance" in weight.path:
            value = np.abs(value) + 0.5
        weight.assign(value)


def _readout(shape, seed):
    """Fixed weights that turn a layer's output into a scalar (sum of output * readout)."""
    return ops.convert_to_tensor(np.random.default_rng(seed).normal(size=shape))


def _scalar_case(prefix, layer, inputs, seed):
    out = to_numpy(layer(ops.convert_to_tensor(inputs), training=False))
    readout = _readout(out.shape, seed)
    value, grads = value_and_gradients(lambda x: ops.sum(layer(x, training=False) * readout), {"x": inputs}, ("x",))
    return {f"{prefix}/out": out, f"{prefix}/value": value, f"{prefix}/d_x": grads["x"]}


def _projection_cases():
    results = {}
    rng = np.random.default_rng(1)
    for equation, x_shape, out_shape, bias in (("abc,cde->abde", (2, 3, 4), (None, 2, 5), "de"),
                                               ("abcd,cde->abe", (2, 3, 2, 5), (None, 4), "e"),
                                               ("ab,bc->ac", (3, 4), (6,), None)):
        x = rng.normal(size=x_shape)
        plain = layers.EinsumDense(equation, out_shape, bias_axes=bias, activation="tanh")
        plain.build(x_shape)
        _fill(plain, 2)
        flat = layers.EinsumDense(equation, out_shape, bias_axes=bias, activation="tanh")
        flat.build(x_shape)
        flat.set_weights(plain.get_weights())
        assert flatten_projections(flat) == 1
        for name, layer in (("einsum", plain), ("flat", flat)):
            results.update(_scalar_case(f"projection/{equation}/{name}", layer, x, 3))
    return results


def _image_cases():
    results = {}
    rng = np.random.default_rng(4)
    features = rng.normal(size=(4, 6))
    mlp = FeatureMLP(width=5, dropout=0.3)
    mlp.build(features.shape)
    _fill(mlp, 5)
    results.update(_scalar_case("features_mlp", mlp, features, 6))
    images = rng.random((3, 16, 16, 3))
    cnn = SmallConvEncoder(filters=(2, 3, 4, 4), width=5)
    cnn.build(images.shape)
    _fill(cnn, 7)
    results.update(_scalar_case("small_cnn", cnn, images, 8))
    # Training mode: batch normalisation over the batch's statistics (values only: it also updates its averages).
    results["small_cnn/train_out"] = to_numpy(cnn(ops.convert_to_tensor(images), training=True))
    results["small_cnn/moving_mean"] = to_numpy(cnn.blocks[1].moving_mean)
    return results


def _text_cases():
    results = {}
    for bidirectional in (True, False):
        for trim in (True, False):
            for recurrence in ("masked", "packed"):
                encoder = GRUTextEncoder(10, word_dim=4, units=3, bidirectional=bidirectional, trim_padding=trim,
                                         recurrence=recurrence)
                encoder.build(TOKENS.shape)
                _fill(encoder, 9)
                name = f"text/{'bi' if bidirectional else 'uni'}/{'trim' if trim else 'full'}/{recurrence}"
                results[name] = to_numpy(encoder(ops.convert_to_tensor(TOKENS), training=False))
    return results


def _gru_cases():
    results = {}
    rng = np.random.default_rng(10)
    inputs = {"inputs": rng.normal(size=(5, 7, 4)), "lengths": np.array([5, 1, 7, 0, 3], dtype=np.float64),
              "kernel": rng.normal(scale=0.5, size=(4, 9)), "recurrent_kernel": rng.normal(scale=0.5, size=(3, 9)),
              "bias": rng.normal(scale=0.5, size=(2, 9))}
    readout = _readout((5, 3), 11)
    for name, function in (("packed", packed_gru), ("masked", masked_gru)):
        for reverse in (False, True):
            def scalar(inputs, lengths, kernel, recurrent_kernel, bias, function=function, reverse=reverse):
                return ops.sum(function(inputs, lengths, kernel, recurrent_kernel, bias, reverse=reverse) * readout)

            value, grads = value_and_gradients(scalar, inputs, ("inputs", "kernel", "recurrent_kernel", "bias"))
            key = f"gru/{name}/{'reverse' if reverse else 'forward'}"
            results[f"{key}/value"] = value
            results.update({f"{key}/d_{wrt}": grad for wrt, grad in grads.items()})
    return results


def cases():
    return {**_projection_cases(), **_image_cases(), **_text_cases(), **_gru_cases()}
