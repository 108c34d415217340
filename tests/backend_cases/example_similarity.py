"""A backend case: the cosine similarity matrix and a triplet-like scalar of it (a smoke case for the harness)."""

import numpy as np
from keras import ops
from run import value_and_gradients


def cases():
    rng = np.random.default_rng(0)
    inputs = {"image": rng.normal(size=(4, 3)), "text": rng.normal(size=(4, 3))}

    def scalar(image, text):
        image = image / ops.norm(image, axis=1, keepdims=True)
        text = text / ops.norm(text, axis=1, keepdims=True)
        similarity = ops.matmul(image, ops.transpose(text))
        return ops.sum(ops.relu(0.2 + similarity - ops.expand_dims(ops.diagonal(similarity), 1)))

    value, grads = value_and_gradients(scalar, inputs, ("image", "text"))
    return {"value": value, "d_image": grads["image"], "d_text": grads["text"]}
