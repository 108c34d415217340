"""Monitoring (issue 6, item 5), read back from real event files: every loss term, the learning rate, the
relevance statistics, margins and ladder thresholds, validation figures, the hparams summary with the final test
figures, and the embedding projector as TensorBoard's own projector plugin reads it."""

import json

import numpy as np
import pytest
import tensorflow as tf

import kitm  # noqa: F401
from kitm.callbacks.projector import PROJECTOR_TENSOR


@pytest.fixture(scope="module")
def prod_run(production_run):
    return production_run


@pytest.mark.slow
def test_scalars_for_loss_terms_learning_rate_relevance_and_validation(prod_run, read_events):
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
def test_hparams_summary_holds_the_flags_and_the_final_test_figures(prod_run, read_events):
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
def test_projector_files_and_tensorboards_projector_plugin(prod_run, read_events, tiny_synthetic):
    from google.protobuf import text_format
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.projector import ProjectorConfig, projector_plugin

    from kitm.data.split_reading import read_split

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


