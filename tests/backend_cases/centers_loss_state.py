"""Backend cases: `LossStateCheckpoint` saves and restores what the semantic-centre losses own (centre tables, the
quantizer, their optimizers' step counts and slots) on the active backend."""

import pathlib
import tempfile

import keras
import numpy as np

from kitm.callbacks.loss_state_checkpoint import LossStateCheckpoint
from kitm.losses.centers import QuantizedCenterLoss, SemanticCenterLoss


def _losses():
    return {"centers": SemanticCenterLoss(5, 3, centers_optimizer=keras.optimizers.SGD(0.5, momentum=0.9)),
            "quantized": QuantizedCenterLoss(2, 3)}


def _owned(losses):
    variables = []
    for loss in losses.values():
        for optimizer, group in loss.optimizer_groups():
            variables += list(group) + list(optimizer.variables)
    return variables


def cases():
    rng = np.random.default_rng(30)
    losses = _losses()
    for loss in losses.values():
        for optimizer, group in loss.optimizer_groups():
            for variable in group:
                variable.assign(rng.normal(size=variable.shape))
            # One step, so that the optimizers have a step count and slots (momentum) to save.
            optimizer.apply_gradients([(keras.ops.convert_to_tensor(rng.normal(size=v.shape), v.dtype), v)
                                       for v in group])
    saved = [keras.ops.convert_to_numpy(v) for v in _owned(losses)]
    with tempfile.TemporaryDirectory() as directory:
        LossStateCheckpoint(pathlib.Path(directory) / "state", losses, tags={"phase": 2}, verbose=0).save(3)
        fresh = _losses()  # new variables: other initial values, no optimizer step
        before = [keras.ops.convert_to_numpy(v) for v in _owned(fresh)]
        restorer = LossStateCheckpoint(pathlib.Path(directory) / "state", fresh, tags={"phase": 2}, verbose=0)
        payload = restorer.restore("all")
        restored = [keras.ops.convert_to_numpy(v) for v in _owned(fresh)]
    results = {f"restored/{k}": value for k, value in enumerate(restored)}
    results["epoch"] = float(payload["epoch"])
    results["equal"] = float(all(np.allclose(a, b, rtol=0, atol=0) for a, b in zip(saved, restored)))
    results["changed"] = float(any(not np.allclose(a, b) for a, b in zip(saved, before)))
    return results
