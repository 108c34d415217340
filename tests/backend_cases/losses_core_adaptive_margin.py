"""Backend case: kitm.losses.adaptive_margin (Eq. 10's hinges on L2 distances with given, dropped and all
negatives, the satisfied/used counts of Eq. 11, and AdaptiveMarginTripletLoss with its margin variables and
counters) from fixed float64 inputs."""

import keras
import numpy as np
from keras import ops
from run import value_and_gradients

from kitm.losses.adaptive_margin import (AdaptiveMarginTripletLoss, adaptive_margin_triplet_terms,
                                         pairwise_l2_distances)


def unit(rng, rows, dim=5):
    x = rng.normal(size=(rows, dim))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def inputs():
    """name -> (image, text, image_index, negative_captions, negative_images)."""
    rng = np.random.default_rng(3)
    out = {"random": (unit(rng, 6), unit(rng, 6), np.arange(6), np.array([3, 0, 5, 1, -1, 2]),
                      np.array([2, -1, 0, 4, 1, 3]))}
    image, text = unit(rng, 6), unit(rng, 6)
    image[1] = image[0]
    text[4] = text[5] = image[4]  # a pair at distance 0 and a negative at distance 0
    out["ties"] = (image, text, np.array([0, 0, 1, 2, 3, 4]), np.array([2, 3, 0, 5, 5, 0]),
                   np.array([5, 4, 3, 2, 1, 0]))
    return out


def cases():
    out = {}
    for name, (image, text, image_index, captions, images) in inputs().items():
        data = {"image": image, "text": text}
        index = ops.convert_to_tensor(image_index.astype("int32"))
        for squared in (False, True):
            for mode in ("given", "all"):
                def terms(image, text):
                    if mode == "given":
                        return adaptive_margin_triplet_terms(image, text, captions, images, margin_x=0.3,
                                                             margin_y=0.6, squared=squared)
                    return adaptive_margin_triplet_terms(image, text, margin_x=0.3, margin_y=0.6,
                                                         image_index=index, squared=squared)

                def scalar(image, text):
                    result = terms(image, text)
                    return ops.sum(result.i2t) + 2.0 * ops.sum(result.t2i)

                key = f"{name}/{mode}_{'squared' if squared else 'l2'}"
                value, grads = value_and_gradients(scalar, data, ("image", "text"))
                out[f"{key}/value"], out[f"{key}/d_image"], out[f"{key}/d_text"] = value, grads["image"], grads["text"]
                result = terms(ops.convert_to_tensor(image), ops.convert_to_tensor(text))
                out[f"{key}/counts"] = ops.stack([result.satisfied_x, result.used_x, result.satisfied_y,
                                                  result.used_y])
        # Squared: the root of a Gram-matrix distance that should be 0 is the root of rounding noise (1e-8).
        out[f"{name}/pairwise_squared"] = pairwise_l2_distances(image, text, squared=True)

        for sampling in ("hardest", "easiest", "all"):
            loss = AdaptiveMarginTripletLoss(0.3, 0.25, sampling=sampling)
            loss.margin_x.assign(0.45)  # what the callback does between steps

            def through_class(image, text, loss=loss):
                # The counters' updates stay in the scope: the gradient pass must not write traced values.
                with keras.StatelessScope():
                    return loss({"image_index": index}, {"image": image, "text": text})

            value, grads = value_and_gradients(through_class, data, ("image", "text"))
            key = f"{name}/class_{sampling}"
            out[f"{key}/value"], out[f"{key}/d_image"], out[f"{key}/d_text"] = value, grads["image"], grads["text"]
            loss.reset_statistics()  # TensorFlow's counters are tf.Variables, which a StatelessScope does not hold
            loss({"image_index": index}, data)
            loss({"image_index": index}, data)
            statistics = loss.statistics()
            out[f"{key}/statistics"] = np.array([statistics[k] for k in ("satisfied_x", "used_x", "satisfied_y",
                                                                          "used_y")], dtype=float)
            loss.reset_statistics()
            out[f"{key}/reset"] = np.array(list(loss.statistics().values()), dtype=float)
    return out
