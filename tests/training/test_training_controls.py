"""Training controls (issue 6, item 6): learning-rate schedules (step decay, warm-up + cosine, the fine-tuning
switch), mixed precision and XLA training a few real steps on CPU, test-time crop averaging, and fine-tuning the
image backbone after a frozen phase, including a resume by BackupAndRestore across the phases."""

import warnings

import numpy as np
import pytest
import tensorflow as tf

import keras
import kitm  # noqa: F401
from kitm.losses import TripletLoss
from kitm.models import DualEncoder
from kitm.training import schedules

# ---- schedules ------------------------------------------------------------------------------------------------


def test_step_decay_is_the_launchers_former_schedule():
    schedule = schedules.step_decay(2e-4, steps_per_epoch=10, epochs=30, decay_epochs=15, decay_factor=0.1)
    rates = [float(schedule(step)) for step in (0, 149, 150, 299)]
    np.testing.assert_allclose(rates, [2e-4, 2e-4, 2e-5, 2e-5], rtol=1e-6)
    three = schedules.step_decay(1.0, steps_per_epoch=2, epochs=7, decay_epochs=3, decay_factor=0.5)
    np.testing.assert_allclose([float(three(s)) for s in (5, 6, 12, 13)], [1.0, 0.5, 0.25, 0.25])
    assert schedules.step_decay(1e-3, steps_per_epoch=5, epochs=4, decay_epochs=0, decay_factor=0.1) == 1e-3
    assert schedules.step_decay(1e-3, steps_per_epoch=5, epochs=4, decay_epochs=4, decay_factor=0.1) == 1e-3


def test_warmup_cosine_follows_the_formula():
    lr, warmup, total = 1e-3, 10, 50
    schedule = schedules.warmup_cosine(lr, total_steps=total, warmup_steps=warmup)
    steps = np.array([0, 5, 10, 20, 30, 50, 60])
    expected = np.where(steps < warmup, lr * steps / warmup,
                        lr * (1 + np.cos(np.pi * np.minimum(steps - warmup, total - warmup) / (total - warmup))) / 2)
    np.testing.assert_allclose([float(schedule(int(s))) for s in steps], expected, rtol=1e-5, atol=1e-12)
    plain = schedules.warmup_cosine(lr, total_steps=total)
    assert float(plain(0)) == pytest.approx(lr) and float(plain(total)) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="shorter than training"):
        schedules.warmup_cosine(lr, total_steps=10, warmup_steps=10)


def test_fine_tuning_switch_and_its_serialisation():
    schedule = schedules.build_schedule("cosine", 1e-3, steps_per_epoch=4, epochs=10, warmup_steps=2,
                                        finetune_after_epochs=5, finetune_learning_rate=1e-5)
    assert isinstance(schedule, schedules.PhaseSwitch) and schedule.boundary_step == 20
    # The cosine spans the frozen phase (20 steps), then the fine-tuning rate holds.
    assert float(schedule(2)) == pytest.approx(1e-3) and float(schedule(19)) < 1e-4
    assert [float(schedule(s)) for s in (20, 39)] == pytest.approx([1e-5, 1e-5])
    restored = keras.optimizers.schedules.deserialize(keras.optimizers.schedules.serialize(schedule))
    np.testing.assert_allclose([float(restored(s)) for s in (0, 1, 10, 25)], [float(schedule(s)) for s in (0, 1, 10, 25)])
    with pytest.raises(ValueError, match="warm-up is part of the cosine"):
        schedules.build_schedule("step", 1e-3, steps_per_epoch=4, epochs=10, warmup_steps=3)
    with pytest.raises(ValueError, match="unknown schedule"):
        schedules.build_schedule("linear", 1e-3, steps_per_epoch=4, epochs=10)


# ---- mixed precision and XLA --------------------------------------------------------------------------------


def _tiny_model(gru=True):
    from kitm.layers import GRUTextEncoder, SmallConvEncoder

    text = GRUTextEncoder(12, 4, 4) if gru else keras.Sequential([keras.layers.Embedding(12, 4),
                                                                  keras.layers.GlobalAveragePooling1D()])
    model = DualEncoder(SmallConvEncoder(filters=(4, 4, 4, 4), width=8), text, embedding_dim=6)
    model.build_from_inputs({"image": tf.TensorSpec([None, 16, 16, 3]), "tokens": tf.TensorSpec([None, 5], tf.int32)})
    return model


def _tiny_data(steps=2, batch=6):
    rng = np.random.default_rng(0)
    x = {"image": rng.uniform(size=(steps * batch, 16, 16, 3)).astype(np.float32),
         "tokens": rng.integers(1, 12, size=(steps * batch, 5)).astype(np.int32)}
    y = {"image_index": np.arange(steps * batch, dtype=np.int32)}
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch)


@pytest.fixture
def restore_policy():
    yield
    keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_trains_with_float32_embeddings_and_losses(policy, restore_policy):
    keras.utils.set_random_seed(0)
    keras.mixed_precision.set_global_policy(policy)
    model = _tiny_model()
    model.compile(keras.optimizers.Adam(1e-2, global_clipnorm=2.0), losses={"triplet": TripletLoss()})
    assert model.image_encoder.compute_dtype == policy.split("_")[1]
    assert all(v.dtype == "float32" for v in model.trainable_variables)  # float32 master weights
    if policy == "mixed_float16":  # Keras wraps the optimizer; the step scales the loss through it
        assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    before = [v.numpy().copy() for v in model.trainable_variables]
    # 8 steps: float16's dynamic loss scale starts at 2^15, where these gradients overflow; the optimizer skips
    # those steps and halves the scale until they are finite, then trains.
    history = model.fit(_tiny_data(steps=8), epochs=1, verbose=0)
    assert np.all(np.isfinite(history.history["loss"])) and history.history["loss"][0] > 0
    assert any(not np.array_equal(b, v.numpy()) for b, v in zip(before, model.trainable_variables))
    if policy == "mixed_float16":
        assert float(model.optimizer.dynamic_scale) < 2.0 ** 15 and int(model.optimizer.iterations) >= 1
    out = model({"image": tf.zeros([2, 16, 16, 3]), "tokens": tf.ones([2, 5], tf.int32)})
    assert out["image"].dtype == tf.float32 and out["text"].dtype == tf.float32
    np.testing.assert_allclose(np.linalg.norm(out["text"].numpy(), axis=1), 1.0, atol=1e-5)


def test_loss_owned_parameters_take_unscaled_gradients_under_float16_loss_scaling(restore_policy):
    """Semantic centres (a loss's own float32 parameters, their own SGD) move as in float32 while the model's
    LossScaleOptimizer works on the scaled loss (skipping its first step, which overflows at the 2^15 scale)."""
    from kitm.losses import SemanticCenterLoss

    rng = np.random.default_rng(4)
    x = {"image": rng.normal(size=(6, 5)).astype(np.float32), "tokens": rng.normal(size=(6, 7)).astype(np.float32)}
    # One step: the model's float16 step overflows and is skipped, so later embeddings would differ from float32's.
    data = tf.data.Dataset.from_tensors((x, {"image_index": np.arange(6, dtype=np.int32)}))
    centers = {}
    for policy in ("float32", "mixed_float16"):
        keras.mixed_precision.set_global_policy(policy)
        keras.utils.set_random_seed(0)
        model = DualEncoder(keras.layers.Dense(12), keras.layers.Dense(12), embedding_dim=4)
        loss = SemanticCenterLoss(6, 4, centers_initializer="random_normal")
        model.compile(keras.optimizers.Adam(1e-2), losses={"triplet": TripletLoss(), "centers": loss})
        start = loss.centers.numpy().copy()
        model.fit(data, epochs=1, verbose=0)
        centers[policy] = (start, loss.centers.numpy())
        if policy == "mixed_float16":
            assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
            assert float(model.optimizer.dynamic_scale) == 2.0 ** 14  # the overflowing step was skipped
    np.testing.assert_array_equal(centers["float32"][0], centers["mixed_float16"][0])
    moved = centers["float32"][1] - centers["float32"][0]
    assert np.abs(moved).max() > 1e-3
    # The same SGD steps up to float16 rounding of the embeddings (unscaled: a 2^15 scale would explode them).
    np.testing.assert_allclose(centers["mixed_float16"][1] - centers["mixed_float16"][0], moved, rtol=0.05,
                               atol=2e-3)


def test_precision_helper_picks_bfloat16_on_cpu(restore_policy):
    from kitm.training.precision import set_mixed_precision

    assert set_mixed_precision(True) == "mixed_bfloat16"  # no GPU on the test machines
    assert keras.mixed_precision.global_policy().name == "mixed_bfloat16"
    assert set_mixed_precision(False) == "float32"


def test_jit_compiled_training_matches_the_plain_step():
    losses = {}
    for jit in (False, True):
        keras.utils.set_random_seed(0)
        model = _tiny_model(gru=False)  # XLA-compiling the GRU's loop costs 20 s on 2 cores, and adds nothing here
        model.compile(keras.optimizers.Adam(1e-3), losses={"triplet": TripletLoss()}, jit_compile=jit)
        assert model.jit_compile is jit
        losses[jit] = model.fit(_tiny_data(), epochs=2, verbose=0).history["loss"]
    assert np.all(np.isfinite(losses[True]))
    np.testing.assert_allclose(losses[True], losses[False], rtol=1e-3)  # XLA fuses differently, same maths


# ---- test-time crops ------------------------------------------------------------------------------------------


def test_eval_crops_are_windows_of_the_evaluation_size_at_random_places():
    from kitm.ops.images import eval_crops, eval_image

    image = tf.reshape(tf.range(20 * 24 * 3, dtype=tf.float32) / (20 * 24 * 3), [20, 24, 3])
    crops = eval_crops(image, 10, 0.5, 6, tf.constant([1, 2], tf.int64)).numpy()  # side 10, resized to 10
    assert crops.shape == (6, 10, 10, 3)
    windows = {(i, j): image.numpy()[i:i + 10, j:j + 10] for i in range(11) for j in range(15)}
    found = [next(k for k, w in windows.items() if np.allclose(w, crop, atol=1e-6)) for crop in crops]
    assert len(set(found)) > 1  # random places (6 draws from 165)
    np.testing.assert_array_equal(crops, eval_crops(image, 10, 0.5, 6, tf.constant([1, 2], tf.int64)).numpy())
    # Crops of the whole square image are all the evaluation image.
    square = tf.random.stateless_uniform([32, 32, 3], seed=[0, 1])
    whole = eval_crops(square, 16, 1.0, 3, tf.constant([0, 0], tf.int64)).numpy()
    for crop in whole:
        np.testing.assert_allclose(crop, eval_image(square, 16, 1.0).numpy(), atol=1e-6)


def test_test_crop_embeddings_are_the_normalised_mean_and_one_crop_is_todays(tiny_synthetic):
    from kitm.data.pipeline import PipelineConfig, evaluation_dataset, training_captions
    from kitm.ops.images import decode_image, eval_image
    from kitm.eval.split_data import read_split
    from kitm.layers import CaptionTokenizer, SmallConvEncoder, build_vocabulary
    from kitm.models.inference import embed_dataset, encode_images

    keras.utils.set_random_seed(3)
    tokenizer = CaptionTokenizer(build_vocabulary(training_captions(tiny_synthetic)), 8)
    text = keras.Sequential([keras.layers.Embedding(tokenizer.vocabulary_size, 4), keras.layers.GlobalAveragePooling1D()])
    model = DualEncoder(SmallConvEncoder(filters=(4, 4, 4, 4), width=8), text, embedding_dim=6)
    model.build_from_inputs({"image": tf.TensorSpec([None, 32, 32, 3]), "tokens": tf.TensorSpec([None, 8], tf.int32)})

    def config(crops):
        return PipelineConfig(batch_size=8, image_size=32, flip=False, eval_crop_fraction=0.75, seed=5,
                              test_crops=crops)

    # N = 1: the centre crop, exactly as before test-time crops existed.
    one, _, one_index = embed_dataset(model, evaluation_dataset(tiny_synthetic, "val", tokenizer, config(1)))
    split = read_split(tiny_synthetic, "val")
    center = tf.stack([eval_image(decode_image(encoded), 32, 0.75) for encoded in split.images])
    np.testing.assert_allclose(one, model.encode_image(center).numpy(), atol=1e-6)

    # N = 4: each image's embedding is the normalised mean of its crops' embeddings.
    dataset = evaluation_dataset(tiny_synthetic, "val", tokenizer, config(4))
    batch = next(iter(dataset))
    assert batch["image"].shape == (2, 4, 32, 32, 3)  # 8 // 4 images a batch, 4 crops each
    crops = np.concatenate([b["image"].numpy() for b in dataset])  # [12, 4, 32, 32, 3]
    four, _, index = embed_dataset(model, dataset)
    per_crop = model.encode_image(tf.reshape(crops, [-1, 32, 32, 3])).numpy().reshape(12, 4, -1)
    mean = per_crop.mean(axis=1)
    np.testing.assert_allclose(four, mean / np.linalg.norm(mean, axis=1, keepdims=True), atol=1e-6)
    np.testing.assert_array_equal(index, one_index)
    assert np.abs(four - one).max() > 1e-3  # the crops differ from the centre crop
    np.testing.assert_array_equal(crops, np.concatenate([b["image"].numpy() for b in dataset]))  # same crops each time
    np.testing.assert_allclose(encode_images(model, tf.constant(crops[:3])).numpy(), four[:3], atol=1e-6)
    with pytest.raises(ValueError, match="test_crops must be a positive integer"):
        config(0)


# ---- fine-tuning after a frozen phase ---------------------------------------------------------------------------


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


def test_backbone_is_frozen_then_fine_tuned_at_the_lower_rate():
    from kitm.training.finetune import BackboneFineTuning

    keras.utils.set_random_seed(0)
    model = _finetune_model(TinyBackboneEncoder())
    start = [w.numpy().copy() for w in model.image_encoder.backbone.weights]
    assert not model.image_encoder.backbone.trainable
    spy = _Snapshots()
    model.fit(_tiny_data(), epochs=4, verbose=0, callbacks=[BackboneFineTuning(2, verbose=0), spy])
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


def test_backup_and_restore_resumes_inside_the_fine_tuning_phase(tmp_path):
    from kitm.training.finetune import BackboneFineTuning

    tf.config.experimental.enable_op_determinism()
    try:
        def run(callbacks, epochs=4):
            keras.utils.set_random_seed(0)
            model = _finetune_model(TinyBackboneEncoder())
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model.fit(_tiny_data(), epochs=epochs, verbose=0,
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


# ---- launcher flags -----------------------------------------------------------------------------------------


def test_launcher_refuses_contradictory_training_controls(tiny_synthetic, tmp_path, launch):
    base = ["--dataset=synthetic", "--image_size=32", f"--data_dir={tiny_synthetic}", f"--run_dir={tmp_path}",
            "--batch_size=16", "--progress=false", "--epochs=2"]
    result = launch([*base, "--finetune_after_epochs=1"])
    assert result.returncode == 2
    assert "--finetune_after_epochs needs a pretrained backbone" in result.stderr and "small_cnn" in result.stderr
    result = launch([*base, "--warmup_epochs=1"])
    assert result.returncode == 2 and "the warm-up is part of the cosine schedule" in result.stderr
    assert "--lr_schedule=cosine" in result.stderr
