"""`--export_onnx` is refused before training when it cannot be written (kitm.experiment.runner): without the
SavedModel it pairs with, or without the backend's converter."""

import importlib.util

import pytest


def test_onnx_towers_need_the_saved_model_and_the_converter(monkeypatch):
    from kitm.errors import KitmConfigError
    from kitm.experiment import runner
    from kitm.experiment.config import ExperimentConfig

    with pytest.raises(KitmConfigError, match="export_onnx writes the towers beside the SavedModel.*export=true"):
        runner._check_export_backend(ExperimentConfig().fill(export=False, export_onnx=True))
    runner._check_export_backend(ExperimentConfig().fill(export_onnx=True))  # tf2onnx and onnx are installed

    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tf2onnx" else found(name, *a))
    with pytest.raises(KitmConfigError, match=r"export_onnx on tensorflow needs tf2onnx \(pip install tf2onnx\)"):
        runner._check_export_backend(ExperimentConfig().fill(export_onnx=True))
