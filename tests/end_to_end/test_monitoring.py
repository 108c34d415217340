"""Monitoring (issue 6, item 5), read back from real event files: every loss term, the learning rate, the
relevance statistics, margins and ladder thresholds, validation figures, the hparams summary with the final test
figures, and the embedding projector as TensorBoard's own projector plugin reads it."""

import json

import numpy as np
import pytest
import tensorflow as tf

import keras
import kitm  # noqa: F401
from kitm.callbacks.projector import PROJECTOR_TENSOR
from kitm.metrics import RelevanceStatistics
from kitm.training.summaries import hparam_value
from shared_runs import production_run  # tests/ is on sys.path under pytest


@pytest.fixture(scope="module")
def prod_run(tiny_synthetic, tmp_path_factory):
    return production_run(tiny_synthetic, tmp_path_factory)


def read_events(directory):
    """{tag: [(step, value or plugin content)]} of every event file directly in `directory`."""
    tags = {}
    for event_file in sorted(directory.glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(event_file)):
            for value in event.summary.value:
                plugin = value.metadata.plugin_data
                if plugin.plugin_name == "hparams":
                    content = plugin.content
                elif value.HasField("tensor"):
                    content = tf.make_ndarray(value.tensor)
                else:
                    content = value.simple_value
                tags.setdefault(value.tag, []).append((event.step, content))
    return tags


@pytest.mark.slow
def test_scalars_for_loss_terms_learning_rate_relevance_and_validation(prod_run):
    run_dir, _ = prod_run
    train = read_events(run_dir / "logs" / "train")
    for tag in ("epoch_loss", "epoch_triplet/i2t", "epoch_triplet/t2i", "epoch_learning_rate",
                "epoch_relevance/negative_mean", "epoch_relevance/negative_std", "epoch_relevance/positive_mean"):
        assert [step for step, _ in train[tag]] == [0, 1], tag
    # Warm-up over 3 of the 12 steps, then a cosine to 0: Keras logs the rate after each epoch's 6 steps.
    rates = [float(value) for _, value in train["epoch_learning_rate"]]
    np.testing.assert_allclose(rates, [1e-3 * (1 + np.cos(np.pi * 3 / 9)) / 2, 0.0], atol=1e-9)
    # The synthetic world's truth: every caption fits its own image, other pairs are graded.
    assert all(float(v) == pytest.approx(1.0) for _, v in train["epoch_relevance/positive_mean"])
    mean, std = float(train["epoch_relevance/negative_mean"][0][1]), float(train["epoch_relevance/negative_std"][0][1])
    assert 0.0 < mean < 1.0 and 0.0 < std < 0.5
    validation = read_events(run_dir / "logs" / "validation")
    assert {"epoch_i2t_R@1", "epoch_t2i_R@10", "epoch_rsum", "epoch_i2t_NCS@1"} <= set(validation)


@pytest.mark.slow
def test_hparams_summary_holds_the_flags_and_the_final_test_figures(prod_run):
    from tensorboard.plugins.hparams import plugin_data_pb2

    run_dir, _ = prod_run
    summary = json.loads((run_dir / "summary.json").read_text())
    root = read_events(run_dir / "logs")
    experiment = plugin_data_pb2.HParamsPluginData.FromString(root["_hparams_/experiment"][0][1]).experiment
    names = {h.name for h in experiment.hparam_infos}
    assert {"lr_schedule", "test_crops", "learning_rate", "loss", "mixed_precision", "finetune_after_epochs"} <= names
    assert set(summary["flags"]) <= names  # every kitm flag
    metrics = {(m.name.group, m.name.tag) for m in experiment.metric_infos}
    assert {("test", "i2t_R@1"), ("test", "rsum"), ("validation", "epoch_rsum"), ("train", "epoch_loss")} <= metrics
    session = plugin_data_pb2.HParamsPluginData.FromString(root["_hparams_/session_start_info"][0][1])
    values = session.session_start_info.hparams
    assert values["lr_schedule"].string_value == "cosine" and values["test_crops"].number_value == 2
    assert values["mixed_precision"].bool_value is False and values["eval_crop_fraction"].number_value == 0.875
    assert values["ladder_margins"].string_value == "0.2,0.01"  # list flags joined
    # The metrics the experiment names exist as scalars in their runs; the test figures are the summary's.
    test = read_events(run_dir / "logs" / "test")
    for name in ("i2t_R@1", "t2i_R@10", "i2t_NCS@1"):
        (step, value), = test[name]
        assert step == 2 and float(value) == pytest.approx(summary["test"][name], rel=1e-6)
    assert "rsum" in test


@pytest.mark.slow
def test_projector_files_and_tensorboards_projector_plugin(prod_run, tiny_synthetic):
    from google.protobuf import text_format
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.projector import ProjectorConfig, projector_plugin

    from kitm.eval.split_data import read_split

    run_dir, _ = prod_run
    directory = run_dir / "logs" / "projector"
    config = text_format.Parse((directory / "projector_config.pbtxt").read_text(), ProjectorConfig())
    (embedding,) = config.embeddings
    assert embedding.tensor_name == PROJECTOR_TENSOR and embedding.metadata_path == "metadata.tsv"
    rows = (directory / "metadata.tsv").read_text().splitlines()
    captions = read_split(tiny_synthetic, "val", limit=6, with_images=False).captions
    assert rows[0] == "kind\timage\tcaption" and len(rows) == 1 + 6 + 6 * 5
    assert rows[1] == f"image\t0\t{captions[0]}" and rows[7] == f"caption\t0\t{captions[0]}"
    assert rows[-1] == f"caption\t5\t{captions[-1]}"
    checkpoint = tf.train.latest_checkpoint(str(directory))
    assert checkpoint.endswith("embeddings-2")  # rewritten at each evaluation; only the newest is kept
    assert not list(directory.glob("embeddings-1*")) and not list(directory.glob("*.tmp"))
    vectors = tf.train.load_checkpoint(checkpoint).get_tensor(PROJECTOR_TENSOR)
    assert vectors.shape == (36, 32)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)

    # TensorBoard's projector plugin finds exactly this run, tensor and shape.
    logdir = str(run_dir / "logs")
    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(logdir)
    multiplexer.Reload()
    context = base_plugin.TBContext(logdir=logdir, multiplexer=multiplexer,
                                    data_provider=data_provider.MultiplexerDataProvider(multiplexer, logdir))
    plugin = projector_plugin.ProjectorPlugin(context)
    plugin._update_configs()  # what the plugin does on its first request
    assert list(plugin._configs) == ["projector"]
    (found,) = plugin._configs["projector"].embeddings
    assert found.tensor_name == PROJECTOR_TENSOR and list(found.tensor_shape) == [36, 32]


def test_relevance_statistics_pool_negatives_over_batches_like_numpy():
    rng = np.random.default_rng(0)
    metric = RelevanceStatistics()
    batches = []
    for _ in range(3):
        relevance = rng.uniform(size=(6, 6)).astype(np.float32)
        image_index = np.array([0, 0, 1, 2, 3, 3], np.int32)  # two captions of image 0 and of image 3
        metric.update_state({"relevance": relevance, "image_index": image_index})
        batches.append((relevance, image_index))
    negatives = np.concatenate([r[(i[:, None] != i[None, :])] for r, i in batches]).astype(np.float64)
    positives = np.concatenate([np.diag(r) for r, _ in batches])
    result = {key: float(value) for key, value in metric.result().items()}
    assert result["relevance/negative_mean"] == pytest.approx(negatives.mean(), rel=1e-6)
    assert result["relevance/negative_std"] == pytest.approx(negatives.std(), rel=1e-5)
    assert result["relevance/positive_mean"] == pytest.approx(positives.mean(), rel=1e-6)
    metric.update_state({"image_index": np.arange(6)})  # no relevance: nothing to pool
    assert float(metric.result()["relevance/negative_mean"]) == pytest.approx(negatives.mean(), rel=1e-6)
    metric.reset_state()
    assert float(metric.result()["relevance/negative_mean"]) == 0.0


def test_margins_and_ladder_thresholds_reach_tensorboard(tmp_path):
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


def test_hparam_values_become_plugin_types():
    assert hparam_value(["0.2", "0.01"]) == "0.2,0.01" and hparam_value(None) == ""
    assert hparam_value(True) is True and hparam_value(3) == 3 and hparam_value(float("inf")) == "inf"
