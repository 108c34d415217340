"""A backend case: false-negative filtering (kitm.losses.false_negatives) in every in-batch objective: InfoNCE,
graded InfoNCE, SigLIP, the triplet (hardest and sum) and SAM (matched, hardest), each with "mask" and "positive"
under the threshold rule, and with "mask" under GISTEmbed's rule (above the positive's relevance, margin 0.05).
Per-anchor terms and the gradients of each loss's sum with respect to both embeddings, float64, from fixed numpy
inputs: a batch of 6 with two samples of one image (rows 0 and 1), negative similarities, and a relevance matrix
whose flags differ between the rows and the columns under GISTEmbed's rule
(tests/backends/test_losses_false_negatives.py compares them with numpy oracles of the module's equations)."""

import keras
import numpy as np

from kitm.losses import GradedInfoNCELoss, InfoNCELoss, SAMLoss, SigLIPLoss, TripletLoss

ROWS, DIM = 6, 4
IMAGE_INDEX = np.array([0, 0, 1, 2, 3, 4], np.int32)
RULES = {"threshold": {"false_negative_rule": "threshold", "false_negative_threshold": 0.7},
         "gist": {"false_negative_rule": "above_positive", "false_negative_margin": 0.05}}
SETTINGS = [("mask", "threshold"), ("positive", "threshold"), ("mask", "gist")]


def inputs():
    rng = np.random.default_rng(7)
    image, text = rng.normal(size=(ROWS, DIM)), rng.normal(size=(ROWS, DIM))
    image /= np.linalg.norm(image, axis=1, keepdims=True)
    text /= np.linalg.norm(text, axis=1, keepdims=True)
    relevance = rng.uniform(0.0, 0.6, size=(ROWS, ROWS))
    np.fill_diagonal(relevance, [0.8, 0.75, 0.8, 0.65, 0.7, 0.9])  # each caption's relevance to its own image
    relevance[2, 4] = relevance[4, 2] = 0.85  # flagged both ways by the threshold; above both positives' (GIST)
    relevance[3, 5] = 0.75  # flagged by the threshold; GIST: above row 3's positive, not column 5's
    relevance[0, 2] = 0.7  # exactly the threshold: flagged (>=)
    return image, text, relevance


def losses(mode, rule):
    settings = {"false_negatives": mode, **RULES[rule]}
    return {"infonce": InfoNCELoss(logit_scale_init=5.0, **settings),
            "graded": GradedInfoNCELoss(0.2, logit_scale_init=5.0, **settings),
            "siglip": SigLIPLoss(logit_scale_init=4.0, bias_init=-1.0, **settings),
            "triplet_hardest": TripletLoss(0.2, max_violation=True, **settings),
            "triplet_sum": TripletLoss(0.2, max_violation=False, **settings),
            "sam": SAMLoss(3.0, sampling="hardest", pairing="matched", **settings)}


def cases():
    from run import to_numpy, value_and_gradients

    image, text, relevance = inputs()
    results = {}
    for mode, rule in SETTINGS:
        for name, loss in losses(mode, rule).items():
            def total(image, text, loss=loss):
                y_true = {"relevance": keras.ops.convert_to_tensor(relevance), "image_index": IMAGE_INDEX}
                return loss(y_true, {"image": image, "text": text})

            value, grads = value_and_gradients(total, {"image": image, "text": text}, ("image", "text"))
            key = f"{name}/{mode}/{rule}"
            results[f"{key}/value"] = value
            results[f"{key}/d_image"], results[f"{key}/d_text"] = grads["image"], grads["text"]
            y_true = {"relevance": keras.ops.convert_to_tensor(relevance), "image_index": IMAGE_INDEX}
            terms = loss.compute_terms(y_true, {"image": keras.ops.convert_to_tensor(image),
                                                "text": keras.ops.convert_to_tensor(text)})
            for term, values in terms.items():
                results[f"{key}/{term}"] = to_numpy(values)
    return results
