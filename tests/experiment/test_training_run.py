"""kitm.experiment.training_run: a run whose training loss goes NaN or infinite stops at that batch, saying where
and why, without testing, exporting or summarising the broken model; the configuration is final before the model is
built."""

import dataclasses
import math
import pathlib
import types

import pytest

from kitm.errors import KitmConfigError
from kitm.experiment import experiment_config, objectives, register_objective, runner
from kitm.experiment.training_run import NonFiniteLossStop, _RunParts
from kitm.losses import TripletLoss


def test_the_stop_remembers_the_first_non_finite_batch_and_names_it():
    stop = NonFiniteLossStop()
    stop.set_model(types.SimpleNamespace(stop_training=False))
    stop.on_epoch_begin(1)
    stop.on_batch_end(4, {"loss": 0.7})
    assert stop.stopped_at is None and not stop.model.stop_training
    stop.on_batch_end(5, {"loss": math.inf})
    stop.on_batch_end(6, {"loss": math.nan})
    assert stop.stopped_at == (2, 6, math.inf) and stop.model.stop_training
    error = stop.error(experiment_config("synthetic", learning_rate=0.5), pathlib.Path("runs/x"))
    assert error.for_flags() == (
        "The training loss became inf at batch 6 of epoch 2: training stopped there, without a test, an export or a "
        "summary. The usual cause is a learning rate too large for the model (--learning_rate=0.5): lower it and "
        "give a new --run_dir (the weights of the last good epoch, if one finished, are in "
        "runs/x/checkpoints/last.weights.h5).")


def test_the_run_parts_are_named_typed_and_fixed():
    fields = {field.name: field.type for field in dataclasses.fields(_RunParts)}
    assert list(fields)[:6] == ["config", "info", "data_dir", "chief_dir", "run_dir", "strategy"]
    assert all(fields.values())
    parts = _RunParts(config=experiment_config("synthetic"), info=None, data_dir=None, chief_dir=None, run_dir=None,
                      strategy=None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        parts.config = None  # nothing changes the settings once the run's parts are made


class _NotANumber(TripletLoss):
    def compute_terms(self, y_true, y_pred):
        return {name: value * math.nan for name, value in super().compute_terms(y_true, y_pred).items()}


def test_a_run_whose_loss_goes_nan_stops_at_that_batch_without_a_summary(tiny_synthetic, tmp_path, capsys):
    register_objective("test_not_a_number", lambda config, warmup: _NotANumber(margin=0.2, name="triplet"),
                       loss_class=_NotANumber, key="triplet")
    run_dir = tmp_path / "run"
    try:
        config = experiment_config("synthetic", data_dir=str(tiny_synthetic), run_dir=str(run_dir), epochs=2,
                                   loss=["test_not_a_number"], image_size=32, embedding_dim=16, word_dim=8,
                                   text_units=8, batch_size=16, eval_every_epochs=0, projector_samples=0,
                                   progress=False, learning_rate=1e-3)
        with pytest.raises(KitmConfigError) as raised:
            runner.run(config)
    finally:
        objectives.OBJECTIVES.pop("test_not_a_number")
    assert raised.value.for_flags().startswith("The training loss became nan at batch 1 of epoch 1: training "
                                               "stopped there, without a test, an export or a summary.")
    assert "kitm: the training loss is nan at batch 1 of epoch 1: training stops here." in capsys.readouterr().err
    assert not (run_dir / "summary.json").exists() and not (run_dir / "export").exists()
    assert not (run_dir / "checkpoints" / "last.weights.h5").exists()  # no NaN weights kept as the last good ones
