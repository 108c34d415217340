"""LoRA adapters through a backup and its restore.

Keras saves a LoRA-enabled layer (`enable_lora`, kitm.layers.hub_towers.enable_lora) with its merged kernel
`W + (alpha / r) A B` and, loading it back, puts that into `W` and sets both adapters to zero. The layer then
computes what it computed before, but A = B = 0 is a stationary point of the adapters' training (the gradient
of `x (W + A B)` is `x^T g B^T` for A and `A^T x^T g` for B, both zero), so a resumed run would never train its
adapters again, and its Adam slots would belong to adapters that no longer exist. A backup therefore also keeps
every adapted layer's own `W`, A and B (`save_adapters`, beside the weights file), and a restore puts them back
after Keras' load (`restore_adapters`): the resumed run continues exactly where the killed one stood.

A backup whose adapters file is missing or from another step (a run killed between the two renames) is restored
as Keras leaves it, merged, with A drawn afresh (He-uniform, Keras' LoRA default) and B = 0: the layers compute
the same function and the adapters can train again; `restore_adapters` says so.
"""

from __future__ import annotations

import os

import keras
import numpy as np

from kitm.files import atomic_path

ADAPTERS = "lora_adapters.npz"


def adapted_layers(model) -> list:
    """The layers of `model` with LoRA enabled, in a stable order."""
    return [layer for layer in model._flatten_layers(include_self=False, recursive=True)
            if getattr(layer, "lora_enabled", False)]


def _parts(layer) -> dict:
    """An adapted layer's variables as a backup keeps them: its own kernel W and the adapters A, B."""
    return {"kernel": layer._kernel, "a": layer.lora_kernel_a, "b": layer.lora_kernel_b}


def _step_word(step: int | None) -> int:
    return -1 if step is None else int(step)


def save_adapters(model, path: str | os.PathLike, step: int | None) -> bool:
    """Write each adapted layer's kernel and adapters, and the optimizer step, to `path` (atomically); False (and
    nothing written) when no layer is adapted."""
    layers = adapted_layers(model)
    if not layers:
        return False
    arrays = {"step": np.asarray(_step_word(step), np.int64)}
    for layer in layers:
        for name, variable in _parts(layer).items():
            arrays[f"{layer.path}/{name}"] = keras.ops.convert_to_numpy(variable)
    with atomic_path(path, keep_suffix=".npz") as partial:
        with open(partial, "wb") as file:  # a file object: np.savez would append .npz to a name
            np.savez(file, **arrays)
    return True


def restore_adapters(model, path: str | os.PathLike, step: int | None) -> bool:
    """After Keras restored `model`'s weights at optimizer step `step`: put back the adapted layers' kernels and
    adapters saved at that step; True when done. Where `path` is missing or from another step, the merged weights
    stay and A is drawn afresh (module docstring); False."""
    layers = adapted_layers(model)
    if not layers:
        return False
    saved = None
    if os.path.exists(path):
        with np.load(path) as file:
            saved = dict(file) if int(file["step"]) == _step_word(step) else None
    if saved is None or any(f"{layer.path}/{name}" not in saved for layer in layers for name in _parts(layer)):
        print(f"kitm: the backup's LoRA adapters ({path}) are missing or from another step: resuming from the merged "
              "weights with fresh adapters.", flush=True)
        initializer = keras.initializers.HeUniform()
        for layer in layers:
            layer.lora_kernel_a.assign(initializer(layer.lora_kernel_a.shape, "float32"))
        return False
    for layer in layers:
        for name, variable in _parts(layer).items():
            variable.assign(saved[f"{layer.path}/{name}"])
    return True
