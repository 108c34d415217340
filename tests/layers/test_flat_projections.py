"""kitm.layers.flat_projections: the one-product `EinsumDense` call against numpy's einsum and Keras' own call."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from kitm.layers.flat_projections import flat_equation, flatten_projections


@pytest.mark.parametrize("equation, expected", [
    ("abc,cde->abde", (2, 1)),  # attention query / key / value
    ("abcd,cde->abe", (2, 2)),  # attention output
    ("abc,cd->abd", (2, 1)),
    ("abcd,de->abce", (3, 1)),
    ("ab,bc->ac", (1, 1)),
    (" abc , cde -> abde ", (2, 1)),
    ("abc,dce->abde", None),  # the contracted axis is not the kernel's first
    ("abc,dec->abde", None),
    ("abcd,dce->abe", None),  # contracted axes in another order
    ("abc,cde->abed", None),  # output axes permuted
    ("abc,acd->abd", None),  # an axis shared by both operands and the output (a batch axis)
    ("abc,de->abcde", None),  # nothing contracted (an outer product)
    ("c,cd->d", None),  # no free input axis
    ("aac,cd->aad", None),  # a repeated label
    ("...c,cd->...d", None),
    ("abc,cd", None),
    ("abc->ab", None),
])
def test_flat_equation_recognises_exactly_free_contracted_kept(equation, expected):
    assert flat_equation(equation) == expected


_LAYERS = [  # equation, output_shape, bias_axes, input shape
    ("abc,cde->abde", (None, 3, 4), "de", (2, 5, 6)),
    ("abcd,cde->abe", (None, 6), "e", (2, 5, 3, 4)),
    ("abc,cd->abd", (None, 7), None, (2, 5, 6)),
    ("abcd,de->abce", (None, None, 7), "e", (2, 3, 5, 6)),
]


def _pair(equation, output_shape, bias_axes, activation=None):
    """Two layers of one configuration (the caller copies the weights and flattens the second)."""
    return [keras.layers.EinsumDense(equation, output_shape, bias_axes=bias_axes, activation=activation,
                                     bias_initializer="random_normal") for _ in range(2)]


@pytest.mark.parametrize("equation, output_shape, bias_axes, shape", _LAYERS)
def test_a_flattened_layer_gives_the_einsum_and_its_gradients(equation, output_shape, bias_axes, shape):
    keras_layer, flat_layer = _pair(equation, output_shape, bias_axes, activation="gelu")
    rng = np.random.default_rng(0)
    x = rng.normal(size=shape).astype(np.float32)
    keras_layer.build(shape)
    flat_layer.build(shape)
    flat_layer.set_weights(keras_layer.get_weights())
    assert flatten_projections(flat_layer) == 1
    assert type(flat_layer) is keras.layers.EinsumDense  # the class and its config stay Keras'
    assert {**flat_layer.get_config(), "name": ""} == {**keras_layer.get_config(), "name": ""}

    # numpy's einsum, the definition, as the oracle
    kernel = keras_layer.kernel.numpy()
    pre = np.einsum(equation.replace(" ", ""), x.astype(np.float64), kernel.astype(np.float64))
    if bias_axes:
        pre = pre + keras_layer.bias.numpy()
    expected = keras.activations.gelu(tf.constant(pre, tf.float32)).numpy()

    def value_and_gradients(layer):
        xs = tf.constant(x)
        with tf.GradientTape() as tape:
            tape.watch(xs)
            y = layer(xs)
            loss = tf.reduce_sum(y * tf.cos(y))  # not linear in y: the gradient depends on every output
        return y, tape.gradient(loss, [xs, *layer.trainable_variables])

    y_flat, grads_flat = value_and_gradients(flat_layer)
    y_keras, grads_keras = value_and_gradients(keras_layer)
    np.testing.assert_allclose(y_flat.numpy(), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y_flat.numpy(), y_keras.numpy(), rtol=1e-5, atol=1e-6)
    assert len(grads_flat) == (3 if bias_axes else 2)
    for flat, ours in zip(grads_flat, grads_keras):
        np.testing.assert_allclose(flat.numpy(), ours.numpy(), rtol=1e-4, atol=1e-5)


def test_a_flattened_layer_takes_unknown_leading_sizes_in_a_graph():
    layer = keras.layers.EinsumDense("abc,cde->abde", (None, 2, 3), bias_axes="de")
    layer.build((None, None, 4))
    flatten_projections(layer)
    traced = tf.function(layer, input_signature=[tf.TensorSpec([None, None, 4], tf.float32)])
    concrete = traced.get_concrete_function()
    assert concrete.structured_outputs.shape.as_list() == [None, None, 2, 3]
    for shape in [(1, 1, 4), (3, 7, 4), (0, 5, 4)]:
        x = tf.random.normal(shape, seed=1)
        expected = np.einsum("abc,cde->abde", x.numpy(), layer.kernel.numpy()) + layer.bias.numpy()
        np.testing.assert_allclose(traced(x).numpy(), expected, rtol=1e-5, atol=1e-5)


def test_other_equations_keep_keras_call_and_flattening_twice_is_harmless():
    other = keras.layers.EinsumDense("abc,dce->abde", (None, 2, 3))
    other.build((2, 5, 4))
    assert flatten_projections(other) == 0
    assert "call" not in vars(other)
    inner = keras.layers.EinsumDense("abc,cd->abd", (None, 3), bias_axes="d")
    model = keras.Sequential([keras.Input((5, 4)), inner, keras.layers.Dense(2)])
    assert flatten_projections(model) == 1
    assert flatten_projections(model) == 1
    np.testing.assert_allclose(model(tf.ones([2, 5, 4])).numpy(),
                               (np.ones([2, 5, 4]) @ inner.kernel.numpy() + inner.bias.numpy())
                               @ model.layers[1].kernel.numpy() + model.layers[1].bias.numpy(), rtol=1e-5)


def test_a_subclass_with_its_own_call_keeps_it():
    class Doubled(keras.layers.EinsumDense):
        def call(self, inputs, training=None):
            return 2.0 * super().call(inputs, training=training)

    class Plain(keras.layers.EinsumDense):  # inherits EinsumDense.call: flattened
        pass

    doubled, plain = Doubled("abc,cd->abd", (None, 3)), Plain("abc,cd->abd", (None, 3))
    for layer in (doubled, plain):
        layer.build((2, 5, 4))
    assert flatten_projections(doubled) == 0 and "call" not in vars(doubled)
    assert flatten_projections(plain) == 1
    x = tf.ones([2, 5, 4])
    np.testing.assert_allclose(doubled(x).numpy(), 2.0 * np.einsum("abc,cd->abd", x.numpy(), doubled.kernel.numpy()),
                               rtol=1e-5)


def test_a_quantized_layer_keeps_keras_quantized_path():
    keras_layer, flat_layer = _pair("abc,cde->abde", (None, 3, 4), "de")
    for layer in (keras_layer, flat_layer):
        layer.build((2, 5, 6))
    flat_layer.set_weights(keras_layer.get_weights())
    flatten_projections(flat_layer)
    for layer in (keras_layer, flat_layer):
        layer.quantize("int8")
    x = tf.random.normal([2, 5, 6], seed=2)
    np.testing.assert_array_equal(flat_layer(x).numpy(), keras_layer(x).numpy())


def test_mixed_precision_computes_in_the_layers_compute_dtype():
    keras_layer, flat_layer = [keras.layers.EinsumDense("abc,cde->abde", (None, 3, 4), bias_axes="de",
                                                        dtype="mixed_bfloat16") for _ in range(2)]
    for layer in (keras_layer, flat_layer):
        layer.build((2, 5, 6))
    flat_layer.set_weights(keras_layer.get_weights())
    flatten_projections(flat_layer)
    x = tf.random.normal([2, 5, 6], seed=3)
    y_flat, y_keras = flat_layer(x), keras_layer(x)
    assert y_flat.dtype == y_keras.dtype == tf.bfloat16
    np.testing.assert_allclose(tf.cast(y_flat, tf.float32).numpy(), tf.cast(y_keras, tf.float32).numpy(),
                               rtol=2e-2, atol=2e-2)


def test_the_hub_towers_flatten_attention_projections_and_keep_them_after_loading():
    import keras_hub

    from kitm.layers.hub_towers import HubImageTower

    def encoder():
        return keras_hub.models.CLIPVisionEncoder(patch_size=8, hidden_dim=16, num_layers=2, num_heads=2,
                                                  intermediate_dim=32, image_shape=(16, 16, 3))

    keras.utils.set_random_seed(4)
    plain = encoder()
    flat = encoder()
    flat.set_weights(plain.get_weights())
    tower = HubImageTower(flat, "clip")
    flattened = [layer for layer in flat._flatten_layers() if "call" in vars(layer)]
    assert len(flattened) == 2 * 4  # query, key, value and output of each of the two attention layers
    images = tf.random.uniform([3, 16, 16, 3], seed=5)

    def value_and_gradients(model):
        with tf.GradientTape() as tape:
            features = model(images, training=True)[:, 0, :]
            loss = tf.reduce_sum(tf.square(features))
        return features, tape.gradient(loss, model.trainable_variables)

    features_flat, grads_flat = value_and_gradients(flat)
    features_plain, grads_plain = value_and_gradients(plain)
    np.testing.assert_allclose(tower(images).numpy(), features_plain.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(features_flat.numpy(), features_plain.numpy(), rtol=1e-5, atol=1e-5)
    for a, b in zip(grads_flat, grads_plain):  # (the patch embedding's gradient comes as IndexedSlices)
        np.testing.assert_allclose(tf.convert_to_tensor(a).numpy(), tf.convert_to_tensor(b).numpy(), rtol=1e-4,
                                   atol=1e-5)

    loaded = HubImageTower.from_config(tower.get_config())
    assert sum("call" in vars(layer) for layer in loaded.backbone._flatten_layers()) == 8
