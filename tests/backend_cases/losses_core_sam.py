"""Backend case: kitm.losses.sam (sam_terms in both pairings, with dropped anchors; SAMLoss with the hardest and
easiest samplers, its warm-up switch, and random draws that must be valid negatives) from fixed float64 inputs."""

import keras
import numpy as np
from keras import ops
from run import value_and_gradients

from kitm.losses.sam import SAMLoss, sam_loss
from kitm.ops.similarity import cosine_similarity_matrix, negative_mask


def unit(rng, rows, dim=5):
    x = rng.normal(size=(rows, dim))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def inputs():
    """name -> (image, text, image_index, relevance, negative_captions, negative_images)."""
    rng = np.random.default_rng(5)
    out = {"random": (unit(rng, 6), unit(rng, 6), np.arange(6), rng.uniform(0, 4, size=(6, 6)),
                      np.array([3, 0, 5, 1, -1, 2]), np.array([2, -1, 0, 4, 1, 3]))}
    image, text = unit(rng, 6), unit(rng, 6)
    image[1] = image[0]
    text[4] = image[4]
    relevance = np.round(rng.uniform(0, 4, size=(6, 6)))  # ties, margins at the clip and negative margins
    out["ties"] = (image, text, np.array([0, 0, 1, 2, 3, 4]), relevance, np.array([2, 3, 0, 6, 1, 0]),
                   np.array([5, 4, 3, 2, 1, 0]))
    image = unit(rng, 4)
    text = np.concatenate([image[:1], -image[1:]])
    out["negative"] = (image, text, np.array([1, 1, 2, 3]), rng.uniform(0, 10, size=(4, 4)), np.array([2, 3, 0, 1]),
                       np.array([3, 2, 1, 0]))
    return out


def cases():
    out = {}
    for name, (image, text, image_index, relevance, captions, images) in inputs().items():
        data = {"image": image, "text": text}
        index = ops.convert_to_tensor(image_index.astype("int32"))
        relevance_t = ops.convert_to_tensor(relevance)
        for pairing in ("matched", "reference"):
            for max_margin in (1.0, None):
                def scalar(image, text):
                    return ops.sum(sam_loss(cosine_similarity_matrix(image, text), relevance_t, captions, images,
                                            tau=3.0, max_margin=max_margin, pairing=pairing))

                value, grads = value_and_gradients(scalar, data, ("image", "text"))
                key = f"{name}/{pairing}_{max_margin}"
                out[f"{key}/value"], out[f"{key}/d_image"], out[f"{key}/d_text"] = value, grads["image"], grads["text"]

        for sampling in ("hardest", "easiest"):
            for pairing in ("matched", "reference"):
                loss = SAMLoss(4.0, sampling=sampling, pairing=pairing, hardest_warmup_steps=3)
                step = keras.Variable(3, dtype="int64", trainable=False)  # past the warm-up: the hardest negatives
                loss.bind_training_step(step)

                def through_class(image, text, loss=loss):
                    return loss({"relevance": relevance_t, "image_index": index}, {"image": image, "text": text})

                value, grads = value_and_gradients(through_class, data, ("image", "text"))
                key = f"{name}/class_{sampling}_{pairing}"
                out[f"{key}/value"], out[f"{key}/d_image"], out[f"{key}/d_text"] = value, grads["image"], grads["text"]
                negative_captions, negative_images = loss.sample(cosine_similarity_matrix(image, text), index,
                                                                 loss.hardest_negatives_on())
                out[f"{key}/negative_captions"], out[f"{key}/negative_images"] = negative_captions, negative_images

        # Random draws (backends draw differently): every pick is one of its anchor's negatives.
        loss = SAMLoss(4.0, sampling="random", seed=3)
        mask = np.asarray(ops.convert_to_numpy(negative_mask(image @ text.T, index)))
        for draw in range(3):
            captions_drawn, images_drawn = (np.asarray(ops.convert_to_numpy(v))
                                            for v in loss.sample(ops.convert_to_tensor(image @ text.T), index))
            rows = np.arange(len(image))
            out[f"{name}/random_valid_{draw}"] = np.array(
                [mask[rows, captions_drawn].all(), mask[images_drawn, rows].all()], dtype=float)
    return out
