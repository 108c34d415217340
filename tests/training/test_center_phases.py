"""The semantic centers' three training phases (Malali & Keller; kitm.training.center_phases) and the checkpoint of
loss-owned state (kitm.callbacks.loss_state_checkpoint, tested here with the phases that use it): image ids mapped to
training positions, the flags, a state written atomically and restored exactly, frozen layers staying frozen. The
launcher's run of launch/centers.flags, killed and resumed: tests/end_to_end/test_center_phases.py."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf
from absl import flags

import keras
import kitm  # noqa: F401
from kitm import launch
from kitm.experiment import objectives
from kitm.callbacks.adaptive_margin import AdaptiveMarginCallback
from kitm.callbacks.loss_state_checkpoint import (AdaptiveMarginState, LossStateCheckpoint, latest_state,
                                                  read_state_json)
from kitm.losses import AdaptiveMarginTripletLoss, ImageIndexCrossEntropy, SemanticCenterLoss
from kitm.models import DualEncoder
from kitm.training.center_phases import (CenterPhaseConfig, CenterPhaseTrainer, ImageIndexMap, read_image_ids,
                                         training_image_index)

FLAGS = flags.FLAGS


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from kitm.data.synthetic_records import build_synthetic

    root = tmp_path_factory.mktemp("centers") / "synthetic"
    build_synthetic(root, num_scenes=60, seed=3, image_size=32, num_shards=2, progress=False, relevance=("cider",), world="shapes")
    return root


def tiny_model(d=6, frozen_sublayer=False):
    image = keras.Sequential([keras.layers.Dense(10, name="image_a"), keras.layers.Dense(10, name="image_b")])
    if frozen_sublayer:
        image.layers[0].trainable = False  # as a ResNet backbone under --finetune_backbone=false
    model = DualEncoder(image, keras.layers.Dense(10), embedding_dim=d)
    model.build_from_inputs({"image": tf.TensorSpec([None, 5]), "tokens": tf.TensorSpec([None, 7])})
    return model


def tiny_data(ids, seed=0, batch=8):
    rng = np.random.default_rng(seed)
    n = len(ids)
    x = {"image": rng.normal(size=(n, 5)).astype(np.float32), "tokens": rng.normal(size=(n, 7)).astype(np.float32)}
    return tf.data.Dataset.from_tensor_slices((x, {"image_index": np.asarray(ids, np.int32)})).batch(
        batch, drop_remainder=True)


# --------------------------------------------------------------------------------------------------
# Image ids -> positions
# --------------------------------------------------------------------------------------------------

def test_image_index_map_ranks_dataset_wide_ids_and_names_an_unknown_one():
    mapping = ImageIndexMap([40, 7, 12, 3], source="split X")
    assert not mapping.identity and mapping.num_images == 4
    np.testing.assert_array_equal(mapping.positions(tf.constant([12, 3, 40, 7, 12])).numpy(), [2, 0, 3, 1, 2])
    with pytest.raises(tf.errors.InvalidArgumentError, match="not among the 4 ids of split X"):
        mapping.positions(tf.constant([3, 5]))
    assert ImageIndexMap([2, 0, 1]).identity
    with pytest.raises(ValueError, match="image/id 7 occurs more than once"):
        ImageIndexMap([7, 1, 7])


def test_synthetic_training_ids_are_dataset_wide_so_they_are_mapped(world, tmp_path):
    from kitm.data import schema

    info = schema.load_info(world)
    ids = read_image_ids(world, "train")
    others = np.concatenate([read_image_ids(world, split) for split in ("val", "test")])
    # Ids number the whole world (splits drawn at random), so the training ids are not 0..N_train-1.
    assert ids.size == info.num_images("train") == 48
    assert sorted(np.concatenate([ids, others]).tolist()) == list(range(60))
    mapping = training_image_index(world, tmp_path)
    assert not mapping.identity
    np.testing.assert_array_equal(np.load(tmp_path / "phases" / "image_ids.npy"), np.sort(ids))
    positions = mapping.positions(tf.constant(ids)).numpy()
    assert sorted(positions.tolist()) == list(range(48))


# --------------------------------------------------------------------------------------------------
# Flags -> configuration
# --------------------------------------------------------------------------------------------------

@pytest.fixture
def parse():
    def parse_flags(*args, train_images=100):
        FLAGS.unparse_flags()
        FLAGS(["kitm.launch", *args])
        with launch.flag_errors():
            config = launch.experiment_config()
            objectives.check_objective(config)
            parse_flags.epochs = objectives.total_epochs(config)
            return objectives.center_phase_config(config, train_images)

    yield parse_flags
    FLAGS.unparse_flags()


def test_flagfile_gives_the_papers_configuration(parse, repo_root):
    config = parse(f"--flagfile={repo_root / 'launch' / 'centers.flags'}", train_images=113287)
    assert config.phase_epochs == (30, 15, 10) and parse.epochs == 55
    assert config.learning_rates == (2e-4, 2e-5, 2e-5) and config.centers_learning_rate == 0.5
    assert (config.lr_decay_epochs, config.lr_decay_factor) == (15, 0.1)
    assert (config.num_quantized_centers, config.margin, config.margin_update_every) == (1000, 0.2, 500)
    assert (config.margin_share_threshold, config.margin_multiplier, config.delta) == (0.8, 1.03, 0.1)
    assert FLAGS.batch_size == 128 and FLAGS.dataset == "coco"
    assert config.triplet_sampling == "random"  # the paper's one random negative


def test_triplet_sampling_flag_reaches_the_objective(parse):
    config = parse("--loss=centers", "--center_triplet_sampling=all", "--num_quantized_centers=10")
    assert config.triplet_sampling == "all"
    from kitm.training.center_phases import CenterObjective

    assert CenterObjective(config, 100, 8).triplet.sampling == "all"
    with pytest.raises(ValueError, match="triplet_sampling"):
        dataclasses.replace(config, triplet_sampling="semi-hard")


def test_term_weights_flag_weights_each_phase_s_terms(parse):
    config = parse("--loss=centers", "--center_term_weights=1,0,2", "--loss_weights=0.5", "--num_quantized_centers=10")
    assert config.term_weights == (1.0, 0.0, 2.0) and config.loss_weight == 0.5
    from kitm.training.center_phases import CenterObjective

    objective = CenterObjective(config, 100, 8)
    assert objective.phase_weights(1) == {"triplet": 0.5, "centers": 0.0, "index_ce": 1.0}
    for phase in (2, 3):
        assert objective.phase_weights(phase) == {"triplet": 0.5, "quantized": 0.0, "index_ce": 1.0}
        assert set(objective.phase_weights(phase)) == set(objective.phase_losses(phase))
    assert parse("--loss=centers", "--num_quantized_centers=10").term_weights == (1.0, 1.0, 1.0)  # the paper's
    for bad, shown in (("1,1", "1.0,1.0"), ("0,0,0", "0.0,0.0,0.0"), ("1,-1,1", "1.0,-1.0,1.0")):
        with pytest.raises(launch.LaunchError, match=f"--center_term_weights={shown}: give three weights"):
            parse("--loss=centers", f"--center_term_weights={bad}")


def test_bad_center_flags_are_named(parse):
    with pytest.raises(launch.LaunchError, match="centers is a whole objective"):
        parse("--loss=centers,triplet")
    with pytest.raises(launch.LaunchError, match="--center_phase_epochs=1,2: give three"):
        parse("--loss=centers", "--center_phase_epochs=1,2")
    with pytest.raises(launch.LaunchError, match="--center_phase_epochs=0,0,0"):
        parse("--loss=centers", "--center_phase_epochs=0,0,0")
    with pytest.raises(launch.LaunchError, match="--epochs=3 with --loss=centers"):
        parse("--loss=centers", "--epochs=3")
    # (the photo datasets' preset: the paper's 1000 quantized centres)
    with pytest.raises(launch.LaunchError, match="--num_quantized_centers=1000 is more than the 100 training"):
        parse("--loss=centers", "--dataset=coco")
    with pytest.raises(launch.LaunchError, match="margin_max"):
        parse("--loss=centers", "--num_quantized_centers=10", "--margin=0.5", "--margin_max=0.3")
    with pytest.raises(ValueError, match="phase_epochs"):
        CenterPhaseConfig(phase_epochs=(1, -1, 1))


# --------------------------------------------------------------------------------------------------
# LossStateCheckpoint
# --------------------------------------------------------------------------------------------------

def _objective(n, d):
    return {"triplet": AdaptiveMarginTripletLoss(0.2, 0.2, sampling="all"),
            "centers": SemanticCenterLoss(n, d, centers_initializer="random_normal"),
            "ce": ImageIndexCrossEntropy(n, d)}


def test_state_is_written_atomically_and_restored_exactly(tmp_path):
    keras.utils.set_random_seed(1)
    n, d = 16, 6
    model, losses = tiny_model(d), _objective(n, d)
    model.compile(keras.optimizers.Adam(1e-2), losses=losses)
    margins = AdaptiveMarginCallback(losses["triplet"], every_batches=1, share_threshold=0.0, multiplier=1.5)
    saver = LossStateCheckpoint(tmp_path / "state", losses, include_model=True, tags={"phase": 1},
                                stateful={"margins": AdaptiveMarginState(margins)}, verbose=0)
    model.fit(tiny_data(np.arange(n)).repeat(2), epochs=2, verbose=0, shuffle=False, callbacks=[margins, saver])
    # A state per epoch, each renamed into place; only the newest is kept.
    assert [p.name for p in (tmp_path / "state").iterdir()] == ["state-000001"]
    state = read_state_json(tmp_path / "state")
    assert state["epoch"] == 2 and state["tags"] == {"phase": 1}
    assert state["stateful"]["margins"]["total"] == 8  # 4 batches per epoch
    # Counters accumulated after the last margin update are saved as their sum.
    losses["triplet"].satisfied_counts.assign([3, 4])
    losses["triplet"].used_counts.assign([10, 11])
    saver.save(2)
    expected = {"centers": losses["centers"].centers.numpy(), "margin_x": losses["triplet"].margin_x.numpy(),
                "head": losses["ce"].heads.image_head.kernel.numpy(),
                "ce_steps": int(losses["ce"].optimizer.iterations),
                "model": [w.numpy() for w in model.weights]}
    assert expected["margin_x"] > 0.2  # share_threshold 0: every update raised it
    # A write killed half-way leaves a .partial directory, which readers ignore.
    (tmp_path / "state" / "state-000099.partial-123").mkdir()
    assert latest_state(tmp_path / "state").name == "state-000002"

    # A new process: new model and losses, restored at train begin because the tags match.
    keras.utils.set_random_seed(2)
    fresh_model, fresh = tiny_model(d), _objective(n, d)
    fresh_model.compile(keras.optimizers.Adam(1e-2), losses=fresh)
    fresh_margins = AdaptiveMarginCallback(fresh["triplet"], every_batches=1000)
    restorer = LossStateCheckpoint(tmp_path / "state", fresh, include_model=True, tags={"phase": 1},
                                   stateful={"margins": AdaptiveMarginState(fresh_margins)}, verbose=0)
    restorer.set_model(fresh_model)
    fresh_margins.set_model(fresh_model)
    fresh_margins.on_train_begin()  # resets the counters; the restore after it brings them back
    restorer.on_train_begin()
    assert restorer.restored["epoch"] == 2 and fresh_model._initial_epoch == 2
    assert not (tmp_path / "state" / "state-000099.partial-123").exists()
    np.testing.assert_array_equal(fresh["centers"].centers.numpy(), expected["centers"])
    np.testing.assert_array_equal(fresh["triplet"].margin_x.numpy(), expected["margin_x"])
    np.testing.assert_array_equal(fresh["ce"].heads.image_head.kernel.numpy(), expected["head"])
    assert int(fresh["ce"].optimizer.iterations) == expected["ce_steps"] == 8
    for restored, saved in zip(fresh_model.weights, expected["model"]):
        np.testing.assert_array_equal(restored.numpy(), saved)
    assert fresh["triplet"].statistics() == {"satisfied_x": 3, "used_x": 10, "satisfied_y": 4, "used_y": 11}
    assert (fresh_margins.counter.total, fresh_margins.counter.since_update) == (8, 0)

    # Other tags (another phase) are left alone at train begin.
    other = LossStateCheckpoint(tmp_path / "state", _objective(n, d), tags={"phase": 2}, verbose=0)
    other.set_model(fresh_model)
    other.on_train_begin()
    assert other.restored is None
    # A state of another objective is refused by name, not half-restored.
    wrong = LossStateCheckpoint(tmp_path / "state", _objective(n + 1, d), verbose=0)
    with pytest.raises(ValueError, match=r"losses/ce/heads has variables of shapes .* \(2 group"):
        wrong.restore("parameters")


def test_a_non_finite_loss_is_not_saved(tmp_path):
    saver = LossStateCheckpoint(tmp_path / "state", _objective(4, 3), verbose=0)
    saver.set_model(tiny_model(3))
    with pytest.warns(UserWarning, match="last good state"):
        saver.on_epoch_end(0, {"loss": float("nan")})
    assert latest_state(tmp_path / "state") is None
    saver.on_epoch_end(0, {"loss": 1.0})
    assert read_state_json(tmp_path / "state")["epoch"] == 1


# --------------------------------------------------------------------------------------------------
# The trainer in process: freezing, phase 2, the k-means start
# --------------------------------------------------------------------------------------------------

def test_phases_freeze_what_the_paper_freezes_and_restore_the_trainable_flags(tmp_path, checkpoint_tensors, quantizer_centers):
    keras.utils.set_random_seed(3)
    ids = np.array([5, 17, 2, 40, 9, 33, 21, 8, 11, 30, 1, 26, 14, 38, 6, 19])  # dataset-wide, not 0..15
    mapping = ImageIndexMap(ids)
    model = tiny_model(6, frozen_sublayer=True)
    trainable_before = [id(v) for v in model.trainable_weights]
    config = CenterPhaseConfig(phase_epochs=(2, 1, 1), learning_rates=(1e-2, 1e-2, 1e-2), num_quantized_centers=4,
                               margin_update_every=1, lr_decay_epochs=0)
    trainer = CenterPhaseTrainer(config, tmp_path, mapping, verbose=0)
    trainer.build(model)
    history = trainer.fit(model, mapping.apply(tiny_data(ids).repeat(2)),
                          [keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))], verbose=0)
    assert history.epoch == [0, 1, 2, 3] and np.all(np.isfinite(history.history["loss"]))
    # The frozen sublayer is still frozen after phase 2 froze (and phase 3 unfroze) the whole model.
    assert not model.image_encoder.layers[0].trainable and model.image_encoder.layers[1].trainable
    assert [id(v) for v in model.trainable_weights] == trainable_before
    phases = {record["phase"]: record for record in trainer.summary()["phases"]}
    assert [phases[k]["first_epoch"] for k in (1, 2, 3)] == [0, 2, 3]
    assert phases[2]["trainable"] == {"model_weights": 0, "centers": False, "quantizer": True,
                                      "index_ce_heads": False, "adaptive_margins": False}
    # Phase 2 trained the quantizer only: model and heads as phase 1 left them.
    one, two, three = (checkpoint_tensors(tmp_path / "phases" / f"phase_{k}", "") for k in (1, 2, 3))
    for key in one:
        if key.startswith(("model/", "losses/index_ce/", "losses/centers/")):
            np.testing.assert_array_equal(one[key], two[key], err_msg=key)
    assert any(not np.array_equal(two[k], three[k]) for k in two if k.startswith("model/"))
    init = np.load(tmp_path / "phases" / "quantizer_init.npz")
    assert not np.allclose(quantizer_centers(two, 4, 6), init["centroids"])
    # The centres and heads have one row per training image (16), addressed through the id map.
    assert one["losses/centers/table/0/.ATTRIBUTES/VARIABLE_VALUE"].shape == (16, 6)

    # Started again once every phase is done: nothing to train, the final state comes back into a new model.
    again = tiny_model(6, frozen_sublayer=True)
    trainer = CenterPhaseTrainer(config, tmp_path, mapping, verbose=0)
    trainer.build(again)
    assert trainer.fit(again, mapping.apply(tiny_data(ids)), verbose=0).history == {}
    assert trainer.summary()["resumed"] == {"phase": 3, "epoch": 4, "batch": None}
    for restored, final in zip(again.weights, model.weights):
        np.testing.assert_array_equal(restored.numpy(), final.numpy())
    # Other phase epochs do not fit the saved state: a clear error, not a silently different schedule.
    other = CenterPhaseTrainer(dataclasses.replace(config, phase_epochs=(1, 1, 1)), tmp_path, mapping, verbose=0)
    other.build(tiny_model(6))
    with pytest.raises(ValueError, match=r"at epoch 4 of phase 3, outside that phase's epochs 2\.\.3"):
        other.fit(tiny_model(6), mapping.apply(tiny_data(ids)), verbose=0)


def test_each_phase_decays_its_rates_at_the_first_step_of_the_decay_epoch(tmp_path):
    """The phases use kitm.training.schedules.step_decay: the first step of epoch `lr_decay_epochs` (0-based step
    decay_epochs * steps_per_epoch, the optimizer's count of steps taken) already sees the decayed rate."""
    ids = np.arange(16)
    config = CenterPhaseConfig(phase_epochs=(4, 1, 1), learning_rates=(1e-2, 1e-3, 1e-3), num_quantized_centers=4,
                               centers_learning_rate=0.5, lr_decay_epochs=2, lr_decay_factor=0.1)
    trainer = CenterPhaseTrainer(config, tmp_path, ImageIndexMap(ids), verbose=0)
    trainer.build(tiny_model(6))
    adam, owned = trainer._optimizers(1, steps_per_epoch=5)
    (sgd, _), = [value for (loss, attribute), value in owned.items() if attribute == "centers_optimizer"]
    for optimizer, rate in ((adam, 1e-2), (sgd, 0.5)):
        schedule = optimizer._learning_rate
        np.testing.assert_allclose([float(schedule(step)) for step in (0, 9, 10, 19)],
                                   [rate, rate, rate * 0.1, rate * 0.1], rtol=1e-6)
