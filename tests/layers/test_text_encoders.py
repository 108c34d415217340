"""GRUTextEncoder: its unidirectional form (the VSE++ reference's text encoder) and the setting that selects it; trimming
each batch's padding columns."""

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


def _captions(rng, rows=16, width=32, vocabulary=50):
    lengths = rng.integers(1, 12, rows)
    lengths[3] = 0  # a caption with no word
    ids = np.zeros((rows, width), np.int32)
    for row, length in enumerate(lengths):
        ids[row, :length] = rng.integers(1, vocabulary, length)
    ids[5, 2] = 0  # padding inside a caption is kept: only columns after the batch's last real token go
    return ids


def test_trimming_the_padding_columns_changes_neither_states_nor_gradients():
    import tensorflow as tf

    ids = _captions(np.random.default_rng(0))
    for bidirectional in (True, False):
        trimming = GRUTextEncoder(50, 8, 6, bidirectional=bidirectional, trim_padding=True)
        full = GRUTextEncoder(50, 8, 6, bidirectional=bidirectional, trim_padding=False)
        trimming.build((None, 32))
        full.build((None, 32))
        full.set_weights(trimming.get_weights())
        gradients = []
        for encoder in (trimming, full):
            with tf.GradientTape() as tape:
                out = encoder(ids, training=True)
                loss = tf.reduce_sum(tf.square(out) * np.arange(out.shape[1], dtype=np.float32))
            gradients.append((out.numpy(), [tf.convert_to_tensor(g).numpy()
                                            for g in tape.gradient(loss, encoder.trainable_variables)]))
        (out_trim, grads_trim), (out_full, grads_full) = gradients
        # Masked steps copy the state: equal up to the rounding of differently shaped matmuls.
        np.testing.assert_allclose(out_trim, out_full, rtol=0, atol=1e-6)
        assert np.all(out_trim[3] == 0)  # no word: zeros, trimmed or not
        for trimmed_grad, full_grad in zip(grads_trim, grads_full):
            np.testing.assert_allclose(trimmed_grad, full_grad, rtol=1e-5, atol=1e-7)


def test_trimming_runs_in_a_graph_with_an_unknown_width_and_on_all_padding():
    import tensorflow as tf

    encoder = GRUTextEncoder(50, 8, 6)
    ids = _captions(np.random.default_rng(1))
    traced = tf.function(encoder.__call__, input_signature=[tf.TensorSpec([None, None], tf.int32)])
    np.testing.assert_allclose(traced(ids).numpy(), encoder(ids).numpy(), rtol=0, atol=1e-6)
    assert np.all(traced(np.zeros((2, 32), np.int32)).numpy() == 0)
    assert encoder._trimmed(ids).shape[1] == 11  # the longest caption's 11 words


def test_trimming_encoders_keep_keras_auto_xla_off_and_jit_compile_true_builds_without_trimming():
    from kitm.experiment import experiment_config
    from kitm.experiment.encoders import build_text_encoder

    assert GRUTextEncoder(20, 4, 6).supports_jit is False
    assert GRUTextEncoder(20, 4, 6, trim_padding=False).supports_jit is True
    assert GRUTextEncoder.from_config(GRUTextEncoder(20, 4, 6, trim_padding=False).get_config()).trim_padding is False
    assert build_text_encoder(experiment_config("synthetic"), 30).trim_padding is True
    assert build_text_encoder(experiment_config("synthetic", jit_compile="true"), 30).trim_padding is False


def test_the_recurrence_defaults_to_packed_where_the_encoder_trims_and_masked_where_xla_compiles_it():
    """auto, the fastest recurrence that fits the build (docs/performance.md): packed with trimming (no XLA there
    anyway), masked for an XLA build; resolved at construction so that a saved config names what trained."""
    import pytest

    from kitm.errors import KitmConfigError
    from kitm.experiment import experiment_config
    from kitm.experiment.encoders import build_text_encoder

    assert GRUTextEncoder(20, 4, 6).recurrence == "packed"
    assert GRUTextEncoder(20, 4, 6, trim_padding=False).recurrence == "masked"
    assert GRUTextEncoder(20, 4, 6, recurrence="masked").recurrence == "masked"
    assert GRUTextEncoder.from_config(GRUTextEncoder(20, 4, 6).get_config()).recurrence == "packed"
    assert build_text_encoder(experiment_config("synthetic"), 30).recurrence == "packed"
    assert build_text_encoder(experiment_config("synthetic", jit_compile="true"), 30).recurrence == "masked"
    assert build_text_encoder(experiment_config("synthetic", text_recurrence="masked"), 30).recurrence == "masked"
    with pytest.raises(KitmConfigError, match="text_recurrence"):
        build_text_encoder(experiment_config("synthetic", jit_compile="true", text_recurrence="packed"), 30)
    with pytest.raises(ValueError, match="recurrence"):
        GRUTextEncoder(20, 4, 6, recurrence="fast")
