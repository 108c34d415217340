"""keras-hub presets of a model's towers (kitm.serving.hub_presets) on every backend that saves: built back, the model
gives the saved model's embeddings; keras-hub's own `Backbone.from_preset` loads the trained backbone
(tests/backend_cases/serving_hub_presets.py; each backend draws its own tiny preset's weights)."""

import numpy as np
import pytest

CASE = "serving_hub_presets.py"


@pytest.mark.parametrize("backend", ("tensorflow", "jax", "torch"))
def test_presets_give_back_the_model(backend_results, backend):
    # keras-hub's tokenizers (saved with the text tower) run on tensorflow-text: not in an environment without
    # TensorFlow (CI's second one), whatever the backend.
    pytest.importorskip("tensorflow_text")
    results = backend_results(CASE, backend)
    assert results["files"] == 1.0 and results["tokenizer"] == 1.0
    assert results["lora_saved"] == 1.0  # the adapters merged: the preset's backbone has none
    np.testing.assert_allclose(results["loaded_image"], results["image"], atol=1e-6)
    np.testing.assert_allclose(results["loaded_text"], results["text"], atol=1e-6)
    np.testing.assert_allclose(results["backbone_alone"], results["backbone"], atol=1e-6)
    # kitm's --image_preset / --text_preset take the saved towers (the text one with its tokenizer).
    assert results["tokenizer_again"] == 1.0
    np.testing.assert_allclose(results["tower_again"], results["tower"], atol=1e-6)
    np.testing.assert_allclose(results["text_tower_again"], results["text_tower"], atol=1e-6)
