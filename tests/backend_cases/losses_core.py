"""Backend case: kitm.ops.similarity, kitm.losses.samplers, kitm.losses.triplet and the RetrievalLoss contract
(reductions, sample weights, the hardest-negative warm-up switch) from fixed float64 inputs."""

import keras
import numpy as np
from keras import ops
from run import value_and_gradients

from kitm.losses import samplers
from kitm.losses.base import reduce_per_row, scale_for_replicas
from kitm.losses.triplet import TripletLoss, triplet_loss, triplet_terms
from kitm.ops.similarity import cosine_similarity_matrix, negative_mask, same_image_mask


def unit(rng, rows, dim=5):
    x = rng.normal(size=(rows, dim))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def inputs():
    """name -> (image, text, image_index): random, ties (equal rows, a collapsed pair), repeated images, B = 1."""
    rng = np.random.default_rng(7)
    random = (unit(rng, 6), unit(rng, 6), np.arange(6))
    image, text = unit(rng, 6), unit(rng, 6)
    image[1] = image[0]
    text[3] = text[2]
    text[4] = image[4]
    ties = (image, text, np.array([0, 0, 1, 2, 3, 3]))
    # Negative similarities everywhere off the diagonal (anti-aligned captions) and one image three times.
    image, text = unit(rng, 5), unit(rng, 5)
    text = np.concatenate([image[:1], -image[1:]])
    repeated = (image, text, np.array([4, 4, 4, 7, 8]))
    single = (unit(rng, 1), unit(rng, 1), np.array([0]))
    return {"random": random, "ties": ties, "repeated": repeated, "single": single}


def cases():
    out = {}
    for name, (image, text, image_index) in inputs().items():
        data = {"image": image, "text": text}
        index = ops.convert_to_tensor(image_index.astype("int32"))
        out[f"{name}/negative_mask"] = ops.cast(negative_mask(cosine_similarity_matrix(image, text), index), "float64")
        out[f"{name}/same_image_mask"] = ops.cast(same_image_mask(index), "float64")

        for hardest in (True, False):
            for with_index in (True, False):
                def scalar(image, text):
                    s = cosine_similarity_matrix(image, text)
                    return ops.sum(triplet_loss(s, 0.2, hardest, index if with_index else None))

                key = f"{name}/triplet_{'hardest' if hardest else 'sum'}{'_index' if with_index else ''}"
                value, grads = value_and_gradients(scalar, data, ("image", "text"))
                out[f"{key}/value"], out[f"{key}/d_image"], out[f"{key}/d_text"] = value, grads["image"], grads["text"]

        # The warm-up switch as a bool tensor (what hardest_negatives_on returns), both ways.
        for on in (True, False):
            def switched(image, text):
                i2t, t2i = triplet_terms(cosine_similarity_matrix(image, text), 0.3, ops.convert_to_tensor(on), index)
                return ops.sum(i2t) + 2.0 * ops.sum(t2i)

            value, grads = value_and_gradients(switched, data, ("image", "text"))
            key = f"{name}/triplet_switch_{on}"
            out[f"{key}/value"], out[f"{key}/d_image"], out[f"{key}/d_text"] = value, grads["image"], grads["text"]

        # The class: reductions, sample weights, the bound warm-up step before and after the switch.
        for reduction in ("sum", "sum_over_batch_size", "none"):
            loss = TripletLoss(0.2, reduction=reduction)

            def through_class(image, text):
                return ops.sum(loss({"image_index": index}, {"image": image, "text": text}))

            value, grads = value_and_gradients(through_class, data, ("image", "text"))
            out[f"{name}/class_{reduction}/value"] = value
            out[f"{name}/class_{reduction}/d_image"] = grads["image"]
        weights = np.linspace(0.5, 1.5, len(image))
        loss = TripletLoss(0.2, max_violation=False)
        out[f"{name}/class_weighted"] = loss({"image_index": index}, data, sample_weight=weights)
        step = keras.Variable(0, dtype="int64", trainable=False)
        warm = TripletLoss(0.2, hardest_warmup_steps=2)
        warm.bind_training_step(step)
        for value in (0, 1, 2, 5):
            step.assign(value)

            def warm_loss(image, text):
                return warm(None, {"image": image, "text": text})

            loss_value, grads = value_and_gradients(warm_loss, data, ("image", "text"))
            out[f"{name}/warmup_step{value}/value"] = loss_value
            out[f"{name}/warmup_step{value}/d_text"] = grads["text"]
            out[f"{name}/warmup_step{value}/on"] = ops.cast(warm.hardest_negatives_on(), "float64")

        # Samplers: indices (ties to the smallest index, -1 without a negative) and masked extremes with gradients.
        s = np.round(image @ text.T * 2) / 2  # few distinct values (and both -0.0 and 0.0): many ties
        s_tensor = ops.convert_to_tensor(s)
        for with_index in (False, True):
            mask = negative_mask(s_tensor, index if with_index else None)
            for axis in (0, 1):
                tag = f"{name}/sampler_axis{axis}{'_index' if with_index else ''}"
                hard = samplers.hardest_negatives(s_tensor, mask, axis)
                easy = samplers.easiest_negatives(s_tensor, mask, axis)
                out[f"{tag}/hardest"] = hard.indices
                out[f"{tag}/hardest_valid"] = ops.cast(hard.valid, "float64")
                out[f"{tag}/easiest"] = easy.indices
                switched = samplers.sample_negatives(s_tensor, mask, "hardest", axis, seed=np.array([1, 2]),
                                                     hardest_on=ops.convert_to_tensor(True))
                out[f"{tag}/switched_on"] = switched.indices

        closer = np.asarray(ops.convert_to_numpy(same_image_mask(index)))
        farther = ~closer
        farther[0] = False  # an empty set
        for axis in (0, 1):
            def extremes(image, text):
                values = cosine_similarity_matrix(image, text) - 0.5  # mostly negative values: no 0 fill may win
                high, _ = samplers.masked_max(values, ops.convert_to_tensor(farther), axis)
                low, high2, valid = samplers.hard_contrastive(values, ops.convert_to_tensor(closer),
                                                              ops.convert_to_tensor(farther), axis)
                return ops.sum(high) + ops.sum(ops.where(valid, 0.1 + high2 - low, ops.zeros_like(low)))

            value, grads = value_and_gradients(extremes, data, ("image", "text"))
            key = f"{name}/masked_axis{axis}"
            out[f"{key}/value"], out[f"{key}/d_image"], out[f"{key}/d_text"] = value, grads["image"], grads["text"]

    per_row = ops.convert_to_tensor(np.array([0.5, 1.5, 2.0]))
    for reduction in ("sum", "sum_over_batch_size", "none"):
        out[f"reduce/{reduction}"] = reduce_per_row(per_row, reduction)
        out[f"scale_for_replicas/{reduction}"] = scale_for_replicas(reduce_per_row(per_row, reduction), reduction)
    return out
