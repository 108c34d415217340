"""Take the small_cnn image tower out of a trained run's checkpoint, as the file `--weights` reads.

    python studies/things_tower/extract_tower.py <run_dir> kitm/layers/pretrained/things_small_cnn_48.npz

The run's `checkpoints/last.weights.h5` holds the whole dual encoder (Keras' weights file: its `image_encoder`
group is the small_cnn tower, conv and batch-norm layers in the order they were made, then the head); this copies
that group, in `SmallConvEncoder.get_weights()` order, into the tower file (`kitm.layers.save_image_backbone`), then
checks it: the tower's features through the run's own projection, normalised, must equal the run's exported
SavedModel's image embeddings (`encode_image`) on a few images of the run's world.
"""

from __future__ import annotations

import json
import pathlib
import sys

import h5py
import numpy as np


def tower_weights(checkpoint: pathlib.Path, blocks: int = 8) -> tuple[list[np.ndarray], tuple[np.ndarray, ...]]:
    """(the tower's weights in get_weights() order, the image projection's kernel and bias) from a run checkpoint."""
    with h5py.File(checkpoint, "r") as stored:
        group = stored["image_encoder"]
        weights = []
        for i in range(blocks):
            suffix = "" if i == 0 else f"_{i}"
            weights.append(group[f"blocks/conv2d{suffix}/vars/0"][()])
            weights += [group[f"blocks/batch_normalization{suffix}/vars/{k}"][()] for k in range(4)]
        weights += [group["head/vars/0"][()], group["head/vars/1"][()]]
        projection = (stored["image_projection/vars/0"][()], stored["image_projection/vars/1"][()])
    return weights, projection


def main(run_dir: str, out: str) -> None:
    import kitm  # noqa: F401  (the TensorFlow backend)
    from kitm.layers.image_encoders import SmallConvEncoder, save_image_backbone
    from kitm.serving.image_features import saved_model_image_features, small_cnn_image_features

    run = pathlib.Path(run_dir)
    settings = json.loads((run / "summary.json").read_text())["flags"]
    side, pooled = int(settings["image_size"]), bool(settings["small_cnn_pooled"])
    weights, (kernel, bias) = tower_weights(run / "checkpoints" / "last.weights.h5")
    encoder = SmallConvEncoder(pooled=pooled, name="image_backbone")
    encoder.build((None, side, side, 3))
    encoder.set_weights(weights)
    save_image_backbone(encoder, out, side)

    from kitm.data.synthetic import generate_world

    images = generate_world(16, seed=99, image_size=side).images
    features = small_cnn_image_features(out)[0](images)
    projected = features @ kernel + bias
    projected /= np.linalg.norm(projected, axis=1, keepdims=True)
    served = saved_model_image_features(run)[0](images)
    gap = float(np.abs(projected - served).max())
    print(f"wrote {out}: {len(weights)} arrays; tower + projection vs the SavedModel's embeddings: max gap {gap:.2e}")
    if gap > 1e-4:
        sys.exit("the extracted tower does not reproduce the run's image embeddings")


if __name__ == "__main__":
    main(*sys.argv[1:3])
