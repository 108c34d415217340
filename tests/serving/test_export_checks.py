"""`--export_onnx` and `--export_presets` are refused before training when they cannot be written
(kitm.experiment.runner): without the SavedModel they pair with, without the backend's ONNX converter, or (presets)
without keras-hub towers."""

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


def test_presets_need_the_saved_model_and_keras_hub_towers():
    from kitm.errors import KitmConfigError
    from kitm.experiment import runner
    from kitm.experiment.config import ExperimentConfig

    with pytest.raises(KitmConfigError, match="export_presets writes the towers beside the SavedModel.*export=true"):
        runner._check_export_backend(ExperimentConfig().fill(export=False, export_presets=True))
    with pytest.raises(KitmConfigError, match="export_presets saves keras-hub towers as keras-hub presets; this run's "
                                              "towers are image_encoder="):
        runner._check_export_backend(ExperimentConfig().fill(export_presets=True))
    runner._check_export_backend(ExperimentConfig().fill(export_presets=True, joint_preset="/some/clip"))
