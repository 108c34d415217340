"""The q-batch callbacks (adaptive margins, ladder re-clustering) put their state in the epoch logs, where Keras'
TensorBoard callback writes it next to the loss terms (read back from the event files)."""

import numpy as np
import pytest
import tensorflow as tf

import keras
import kitm  # noqa: F401
from kitm.metrics import RelevanceStatistics


def test_margins_and_ladder_thresholds_reach_tensorboard(tmp_path, read_events):
    """The adaptive-margin and ladder re-clustering callbacks put their state in the epoch logs; placed before
    Keras' TensorBoard callback they become `epoch_<loss>/...` scalars next to the loss terms."""
    import warnings

    from kitm.callbacks import AdaptiveMarginCallback, LadderReclusterCallback
    from kitm.losses import ReclusterableLadderLoss
    from kitm.losses.adaptive_margin import AdaptiveMarginTripletLoss
    from kitm.models import DualEncoder

    b, d = 6, 4
    rng = np.random.default_rng(1)
    x = rng.normal(size=(b, d)).astype(np.float32)
    y = rng.normal(size=(b, d)).astype(np.float32)
    relevance = [rng.uniform(size=(b, b)).astype(np.float32) for _ in range(4)]
    data = tf.data.Dataset.from_tensor_slices(({"image": np.stack([x] * 4), "tokens": np.stack([y] * 4)},
                                               {"relevance": np.stack(relevance),
                                                "image_index": np.tile(np.arange(b, dtype=np.int32), (4, 1))}))
    # Embeddings = the inputs, normalised (identity towers and projections): the test chooses the geometry.
    model = DualEncoder(keras.layers.Identity(), keras.layers.Identity(), embedding_dim=d)
    model.build_from_inputs({"image": tf.TensorSpec([None, d]), "tokens": tf.TensorSpec([None, d])})
    for projection in (model.image_projection, model.text_projection):
        projection.kernel.assign(np.eye(d, dtype=np.float32))
        projection.bias.assign(np.zeros(d, np.float32))
    model.trainable = False
    model.compile(keras.optimizers.SGD(0.1),
                  losses={"amt": AdaptiveMarginTripletLoss(0.2, 0.2, sampling="all"),
                          "ladder": ReclusterableLadderLoss(thresholds=(0.6,), margins=(0.2, 0.01), betas=(1.0, 0.5))},
                  monitors=[RelevanceStatistics()])
    callbacks = [AdaptiveMarginCallback(every_batches=2), LadderReclusterCallback(every_batches=2, k_min=2),
                 keras.callbacks.TensorBoard(str(tmp_path / "logs"))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the frozen identity model has no trainable weights, by design
        model.fit(data, epochs=2, verbose=0, callbacks=callbacks, shuffle=False)
    tags = read_events(tmp_path / "logs" / "train")
    for tag in ("epoch_amt/i2t", "epoch_amt/margin_x", "epoch_amt/margin_y", "epoch_amt/share_x",
                "epoch_ladder/level_1", "epoch_ladder/level_2", "epoch_ladder/theta_1", "epoch_ladder/clusters",
                "epoch_ladder/level_1_count", "epoch_relevance/negative_mean", "epoch_learning_rate"):
        assert len(tags.get(tag, [])) == 2, tag
    assert float(tags["epoch_ladder/theta_1"][-1][1]) == pytest.approx(float(callbacks[1].updates[-1]["theta_1"]))
    assert float(tags["epoch_amt/margin_x"][-1][1]) == pytest.approx(callbacks[0].margins()["x"])
