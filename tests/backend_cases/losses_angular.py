"""A backend case: the angular losses (kitm.losses.angular) and the neighbourhood loss, values and gradients with
respect to both embeddings, on small float64 inputs with a repeated image, anchors without a neighbour and an
anchor whose only candidates are masked."""

import numpy as np
from keras import ops
from run import value_and_gradients

from kitm.losses.angular import (AngularLoss, NeighborhoodAngularLoss, angular_loss, neighbor_coverage,
                                 squared_distance_triplet_loss)


def _unit(rows):
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def cases():
    rng = np.random.default_rng(4)
    inputs = {"image": _unit(rng.normal(size=(6, 5))), "text": _unit(rng.normal(size=(6, 5)))}
    image_index = np.array([0, 1, 1, 2, 3, 4])
    positions = np.array([2, -1, 0, 5, -1, 3])
    lonely = np.zeros((6, 6), dtype=bool)
    lonely[1:, :] = ~np.eye(6, dtype=bool)[1:, :]  # anchor 0 has no negative
    out = {}
    for form in ("npair", "hinge"):
        for angle in (45.0, 30.0):
            value, grads = value_and_gradients(
                lambda image, text: ops.sum(angular_loss(image, text, angle_degrees=angle, form=form,
                                                         negative_mask=ops.convert_to_tensor(lonely))),
                inputs, ("image", "text"))
            out[f"angular_{form}_{int(angle)}"] = value
            out[f"angular_{form}_{int(angle)}_d_image"] = grads["image"]
            out[f"angular_{form}_{int(angle)}_d_text"] = grads["text"]
    value, grads = value_and_gradients(
        lambda image, text: ops.sum(squared_distance_triplet_loss(image, text, text, margin=0.3)), inputs,
        ("image", "text"))
    out.update(triplet=value, triplet_d_image=grads["image"], triplet_d_text=grads["text"])
    for name, loss in (("symmetric", AngularLoss()), ("symmetric_hinge", AngularLoss(form="hinge")),
                       ("neighborhood", NeighborhoodAngularLoss()),
                       ("neighborhood_triplet", NeighborhoodAngularLoss(base="triplet", alpha=0.5, beta=0.25))):
        y_true = {"image_index": image_index, "neighbor_position": positions}
        value, grads = value_and_gradients(lambda image, text: loss({**y_true}, {"image": image, "text": text}),
                                           inputs, ("image", "text"))
        out.update({name: value, f"{name}_d_image": grads["image"], f"{name}_d_text": grads["text"]})
    out["coverage"] = neighbor_coverage({"neighbor_position": positions})
    return out
