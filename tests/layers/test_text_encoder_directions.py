"""GRUTextEncoder's unidirectional form (the VSE++ reference's text encoder) and the setting that selects it."""

import numpy as np

from kitm.layers import GRUTextEncoder


def test_unidirectional_gru_gives_the_final_forward_state_of_each_caption():
    import keras

    encoder = GRUTextEncoder(20, 4, 6, bidirectional=False)
    tokens = np.array([[3, 4, 5, 0, 0], [7, 0, 0, 0, 0]], np.int32)
    out = encoder(tokens).numpy()
    assert out.shape == (2, 6)
    # The final state of a caption is that of its last real word: padding changes nothing.
    trimmed = encoder(tokens[:, :3]).numpy()
    np.testing.assert_allclose(out, trimmed, atol=1e-6)
    restored = GRUTextEncoder.from_config(encoder.get_config())
    assert restored.bidirectional is False
    assert isinstance(encoder.gru, keras.layers.GRU)
    assert GRUTextEncoder(20, 4, 6)(tokens).shape == (2, 12)  # the default stays bidirectional


def test_text_bidirectional_setting_reaches_the_text_tower():
    from kitm.experiment import experiment_config
    from kitm.experiment.encoders import build_text_encoder

    assert experiment_config("synthetic").model.text_bidirectional is True
    encoder = build_text_encoder(experiment_config("synthetic", text_bidirectional=False, text_units=8), 30)
    assert encoder.bidirectional is False and encoder.units == 8
