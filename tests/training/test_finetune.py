"""kitm.training.finetune: the image backbone frozen for the first epochs, then fine-tuned at the lower rate, and a
resume by BackupAndRestore inside the fine-tuning phase."""

import warnings

import numpy as np
import pytest
import tensorflow as tf

import keras
import kitm  # noqa: F401
from kitm.losses import TripletLoss
from kitm.models import DualEncoder
from kitm.training import schedules


@keras.saving.register_keras_serializable(package="kitm_tests")
class TinyBackboneEncoder(keras.layers.Layer):
    """The ResNetEncoder's shape in miniature: a `backbone` model and a `trainable_backbone` flag."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.trainable_backbone = False
        self.backbone = keras.Sequential([keras.layers.Conv2D(4, 3), keras.layers.BatchNormalization(),
                                          keras.layers.GlobalAveragePooling2D()])
        self.backbone.build((None, 16, 16, 3))
        self.head = keras.layers.Dense(8)

    def build(self, input_shape):
        self.head.build((None, 4))

    def call(self, images, training=False):
        return self.head(self.backbone(images, training=training and self.trainable_backbone))


def _finetune_model(encoder):
    from kitm.training.finetune import prepare_backbone_finetuning

    text = keras.Sequential([keras.layers.Embedding(12, 4), keras.layers.GlobalAveragePooling1D()])
    model = DualEncoder(encoder, text, embedding_dim=6)
    size = encoder.backbone.input_shape[1]
    model.build_from_inputs({"image": tf.TensorSpec([None, size, size, 3]), "tokens": tf.TensorSpec([None, 5], tf.int32)})
    schedule = schedules.PhaseSwitch(1e-2, boundary_step=2 * 2, then=1e-3)  # 2 frozen epochs of 2 steps
    model.compile(keras.optimizers.Adam(schedule), losses={"triplet": TripletLoss()})
    prepare_backbone_finetuning(model)
    return model


class _Snapshots(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.backbone, self.head, self.rates = [], [], []

    def on_epoch_end(self, epoch, logs=None):
        encoder = self.model.image_encoder
        self.backbone.append([w.numpy().copy() for w in encoder.backbone.weights])
        self.head.append(self.model.image_projection.kernel.numpy().copy())
        self.rates.append(float(self.model.optimizer.learning_rate))


def test_backbone_is_frozen_then_fine_tuned_at_the_lower_rate(tiny_batches):
    from kitm.training.finetune import BackboneFineTuning

    keras.utils.set_random_seed(0)
    model = _finetune_model(TinyBackboneEncoder())
    start = [w.numpy().copy() for w in model.image_encoder.backbone.weights]
    assert not model.image_encoder.backbone.trainable
    spy = _Snapshots()
    model.fit(tiny_batches(), epochs=4, verbose=0, callbacks=[BackboneFineTuning(2, verbose=0), spy])
    # Epochs 1-2: the backbone (weights and BatchNorm statistics) stays put while the projection learns.
    for epoch in (0, 1):
        assert all(np.array_equal(a, b) for a, b in zip(start, spy.backbone[epoch]))
    assert not np.array_equal(spy.head[0], spy.head[1])
    # Epochs 3-4: it trains, at the fine-tuning rate.
    assert not np.array_equal(spy.backbone[1][0], spy.backbone[2][0]) and model.image_encoder.backbone.trainable
    assert model.image_encoder.trainable_backbone is True
    assert spy.rates[2:] == pytest.approx([1e-3, 1e-3])


class _Interrupt(keras.callbacks.Callback):
    def __init__(self, epoch):
        super().__init__()
        self.epoch = epoch

    def on_epoch_begin(self, epoch, logs=None):
        self.current = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.current == self.epoch:
            raise RuntimeError("killed")


def test_backup_and_restore_resumes_inside_the_fine_tuning_phase(tmp_path, tiny_batches):
    from kitm.training.finetune import BackboneFineTuning

    tf.config.experimental.enable_op_determinism()
    try:
        def run(callbacks, epochs=4):
            keras.utils.set_random_seed(0)
            model = _finetune_model(TinyBackboneEncoder())
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model.fit(tiny_batches(), epochs=epochs, verbose=0,
                          callbacks=[BackboneFineTuning(2, verbose=0), *callbacks])
            return model

        reference = run([])
        backup = keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))
        with pytest.raises(RuntimeError, match="killed"):
            run([backup, _Interrupt(3)])  # killed in the second fine-tuning epoch; the backup is from epoch 3
        resumed = run([keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))])
    finally:
        # The public API can only enable it; leave the rest of the session as it was.
        from tensorflow.python.framework import config as tf_config

        tf_config.disable_op_determinism()
    assert resumed.image_encoder.backbone.trainable
    for a, b in zip(reference.weights, resumed.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6, err_msg=a.path)
    for a, b in zip(reference.optimizer.variables, resumed.optimizer.variables):
        np.testing.assert_allclose(np.asarray(a.numpy(), np.float64), np.asarray(b.numpy(), np.float64), rtol=1e-5,
                                   atol=1e-6, err_msg=a.path)


@pytest.mark.slow
def test_resnet50_backbone_frozen_then_fine_tuned():
    from kitm.layers import build_image_encoder
    from kitm.training.finetune import BackboneFineTuning

    keras.utils.set_random_seed(0)
    model = _finetune_model(build_image_encoder("resnet50", image_size=32, weights=None))
    backbone = model.image_encoder.backbone
    start = [w.numpy().copy() for w in backbone.weights]
    rng = np.random.default_rng(0)
    x = {"image": rng.uniform(size=(6, 32, 32, 3)).astype(np.float32),
         "tokens": rng.integers(1, 12, size=(6, 5)).astype(np.int32)}
    data = tf.data.Dataset.from_tensors((x, {"image_index": np.arange(6, dtype=np.int32)})).repeat(2)
    spy = _Snapshots()
    model.fit(data, epochs=3, verbose=0, callbacks=[BackboneFineTuning(2, verbose=0), spy])
    assert all(np.array_equal(a, b) for a, b in zip(start, spy.backbone[1]))  # frozen for 2 epochs, BN included
    changed = [not np.array_equal(a, b) for a, b in zip(spy.backbone[1], spy.backbone[2])]
    assert all(changed[i] for i, w in enumerate(backbone.weights) if w.trainable)  # every kernel moved in epoch 3
    assert model.image_encoder.trainable_backbone and spy.rates[-1] == pytest.approx(1e-3)

