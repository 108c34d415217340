"""Transformer projections as one 2-D matrix product: the same numbers as Keras' `EinsumDense`, a cheaper gradient.

Keras' multi-head attention projects with `EinsumDense` layers whose equations put every input axis but the last ones
in front of a kernel that starts with the contracted axes: `abc,cde->abde` (query, key, value: [B, T, W] x
[W, H, D]) and `abcd,cde->abe` (the output: [B, T, H, D] x [H, D, W]). On TensorFlow, Keras computes them as
`tf.matmul` of a 3-D input with a 2-D kernel, a broadcast `BatchMatMulV2`, and its gradient with respect to the
kernel is then a batch of B per-example [W, H*D] products that a `Sum` adds up afterwards: B times the output
memory and a reduction, where one [B*T, W]^T [B*T, H*D] product would do.

`flatten_projections(layer)` gives every such `EinsumDense` inside `layer` a `call` that folds the free input axes
into one and multiplies once,

    y = reshape(reshape(x, [prod(F), prod(K)]) @ reshape(W, [prod(K), prod(G)]), F + G) + b

for an equation `F K, K G -> F G` (F: the input's free axes, K: the contracted ones, G: the kernel's free ones),
which is the einsum's own definition; bias and activation follow as in `EinsumDense.call`. Only those equations are
touched, only layers that run `EinsumDense.call` itself (not a subclass's own `call`), and a quantized layer
(`quantization_mode` set) keeps Keras' own path. The weights, the configuration and
serialisation are unchanged (Keras' attention layer creates its projections when it is built, so kitm's hub towers
flatten them again after loading).

Measured (2026-11-24, 2 cores, TF 2.20, `benchmarks/bench_clip_step.py --phases`): the gradient of a ViT-B/32
query projection (batch 32 x 50 tokens x 768 -> 12 x 64) 34 -> 20 ms; of a 768 -> 3072 projection 158 -> 74 ms.
"""

from __future__ import annotations

import math
import types

import keras
from keras import ops


def flat_equation(equation: str) -> tuple[int, int] | None:
    """(number of the input's free axes, number of contracted axes) when `equation` is `F K, K G -> F G`, else None.

    F must be non-empty and every axis label distinct; any other equation (a kernel whose contracted axes are not
    leading, a batch axis shared by both operands, repeated labels, ellipses) gives None.
    """
    try:
        inputs, output = equation.replace(" ", "").split("->")
        lhs, rhs = inputs.split(",")
    except ValueError:
        return None
    labels = lhs + rhs + output
    if "." in labels or not labels.isalpha() or len(set(lhs)) < len(lhs) or len(set(rhs)) < len(rhs):
        return None
    contracted = [c for c in lhs if c in rhs]
    k = len(contracted)
    free, kept = lhs[:len(lhs) - k], rhs[k:]
    if (k == 0 or not free or lhs[len(lhs) - k:] != rhs[:k] or output != free + kept
            or set(free) & set(rhs) or set(kept) & set(lhs)):
        return None
    return len(free), k


def _flat_call(layer, inputs, training=None):
    """`EinsumDense.call` for an equation `F K, K G -> F G` (module docstring)."""
    if getattr(layer, "quantization_mode", None):
        return type(layer).call(layer, inputs, training=training)
    free_axes, contracted_axes = layer._kitm_flat_axes
    kernel = ops.convert_to_tensor(layer.kernel)
    contracted = math.prod(kernel.shape[:contracted_axes])
    kept = tuple(kernel.shape[contracted_axes:])
    x = ops.convert_to_tensor(inputs)
    y = ops.matmul(ops.reshape(x, (-1, contracted)), ops.reshape(kernel, (contracted, math.prod(kept))))
    # ops.shape gives the static sizes where known (a dynamic one as a scalar tensor), so the result keeps them.
    y = ops.reshape(y, tuple(ops.shape(x)[:free_axes]) + kept)
    if layer.bias is not None:
        y = keras.ops.add(y, layer.bias)
    if layer.activation is not None:
        y = layer.activation(y)
    return y


EINSUM_DENSE_CALL = keras.layers.EinsumDense.call


def flatten_projections(layer) -> int:
    """Gives every `EinsumDense` in `layer` (itself included) whose equation is `F K, K G -> F G` the one-product
    `call` (module docstring); returns how many layers have it. Safe to call again."""
    count = 0
    for sublayer in layer._flatten_layers(include_self=True, recursive=True):
        # A subclass with its own call keeps it: replacing that would drop what the subclass adds.
        if not isinstance(sublayer, keras.layers.EinsumDense) or type(sublayer).call is not EINSUM_DENSE_CALL:
            continue
        axes = flat_equation(sublayer.equation)
        if axes is None:
            continue
        # Set on the instance, past Layer.__setattr__'s tracking: the class, its config and its weights stay Keras'.
        object.__setattr__(sublayer, "_kitm_flat_axes", axes)
        object.__setattr__(sublayer, "call", types.MethodType(_flat_call, sublayer))
        count += 1
    return count
