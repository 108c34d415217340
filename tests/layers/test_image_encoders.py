"""kitm.layers.image_encoders: an offline `weights="imagenet"` is one KitmConfigError naming Keras' cache file."""

from __future__ import annotations

import os
import urllib.error

import pytest

from kitm.errors import KitmConfigError
from kitm.layers import build_image_encoder
from kitm.layers.image_encoders import imagenet_weights_path


@pytest.fixture
def offline_empty_keras_home(tmp_path, monkeypatch):
    """An empty KERAS_HOME (Keras reads it at import, so its module global is pointed there too) and a download
    function that fails as it does without network, so that no connection is ever tried."""
    from keras.src.backend import config
    from keras.src.utils import file_utils

    home = tmp_path / "keras_home"
    home.mkdir()
    monkeypatch.setenv("KERAS_HOME", str(home))
    monkeypatch.setattr(config, "_KERAS_DIR", str(home))
    calls = []

    def no_network(url, *args, **kwargs):
        calls.append(url)
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(file_utils, "urlretrieve", no_network)
    return home, calls


def test_offline_imagenet_weights_raise_one_error_naming_the_cache_file(offline_empty_keras_home):
    home, calls = offline_empty_keras_home
    expected = home / "models" / "resnet50_weights_tf_dim_ordering_tf_kernels_notop.h5"
    assert imagenet_weights_path(50) == str(expected)
    with pytest.raises(KitmConfigError) as caught:
        build_image_encoder("resnet50", image_size=32, weights="imagenet")
    error = caught.value
    assert calls and calls[0].endswith("resnet50_weights_tf_dim_ordering_tf_kernels_notop.h5")
    assert error.__cause__ is None and error.__suppress_context__  # one error, not Keras' chained traceback
    message = str(error)
    assert "\n" not in message
    assert str(expected) in message
    assert "Temporary failure in name resolution" in message
    assert message.startswith("weights=imagenet: ") and "weights=none" in message
    # Through the launcher the option reads as its flag.
    assert error.for_flags().startswith("--weights=imagenet: ") and "--weights=none" in error.for_flags()
    assert not expected.exists()


def test_the_cache_path_follows_keras_home_for_resnet152(offline_empty_keras_home):
    home, _ = offline_empty_keras_home
    assert imagenet_weights_path(152) == os.path.join(
        str(home), "models", "resnet152_weights_tf_dim_ordering_tf_kernels_notop.h5")


def test_weights_none_needs_no_download(offline_empty_keras_home):
    _, calls = offline_empty_keras_home
    encoder = build_image_encoder("resnet50", image_size=32, weights=None)
    assert encoder.backbone.output_shape == (None, 2048) and not calls


# ---- small_cnn: the pooled head, tower files, the shipped things tower ------------------------------------------


def test_pooled_small_cnn_reads_the_grid_and_each_channels_maximum():
    import numpy as np

    from kitm.layers import SmallConvEncoder

    plain, pooled = SmallConvEncoder(), SmallConvEncoder(pooled=True)
    images = np.random.default_rng(0).random((2, 48, 48, 3)).astype("float32")
    assert plain(images).shape == pooled(images).shape == (2, 256)
    # the head reads 3 x 3 x 64 grid values, plus 64 maxima when pooled
    assert plain.head.kernel.shape == (576, 256) and pooled.head.kernel.shape == (640, 256)
    assert SmallConvEncoder.from_config(pooled.get_config()).pooled


def test_a_tower_file_round_trips_and_refuses_another_architecture(tmp_path):
    import numpy as np

    from kitm.layers.image_encoders import SmallConvEncoder, save_image_backbone

    encoder = SmallConvEncoder(pooled=True)
    images = np.random.default_rng(1).random((3, 48, 48, 3)).astype("float32")
    expected = np.asarray(encoder(images))
    save_image_backbone(encoder, tmp_path / "tower.npz", 48)
    loaded = build_image_encoder("small_cnn", image_size=48, weights=str(tmp_path / "tower.npz"), pooled=True)
    np.testing.assert_array_equal(np.asarray(loaded(images)), expected)
    with pytest.raises(KitmConfigError, match="image_size': 48.*image_size': 64"):
        build_image_encoder("small_cnn", image_size=64, weights=str(tmp_path / "tower.npz"), pooled=True)
    with pytest.raises(KitmConfigError, match="'pooled': True.*'pooled': False"):
        build_image_encoder("small_cnn", image_size=48, weights=str(tmp_path / "tower.npz"), pooled=False)
    with pytest.raises(KitmConfigError, match="no such file"):
        build_image_encoder("small_cnn", image_size=48, weights=str(tmp_path / "missing.npz"))
    # imagenet (the launcher's default for the ResNets) means no weights for small_cnn, as before
    assert build_image_encoder("small_cnn", image_size=48, weights="imagenet") is not None


def test_the_shipped_things_tower_loads_and_serves_frozen_features():
    """`--weights=things`: the tower kitm ships (pretrained on the things world of seed 1, 48 px), and the same file
    as a frozen feature extractor for `kitm.data.build --image_features_run=things`."""
    import numpy as np

    from kitm.data.synthetic import generate_world
    from kitm.serving.image_features import frozen_image_features

    world = generate_world(8, seed=3, image_size=48)
    tower = build_image_encoder("small_cnn", image_size=48, weights="things", pooled=True)
    encode, description = frozen_image_features("things")
    features = encode(world.images)
    assert features.shape == (8, 256) and description["architecture"]["image_size"] == 48
    np.testing.assert_allclose(features, np.asarray(tower(world.images.astype("float32") / 255.0)), atol=1e-6)
    assert np.isfinite(features).all() and features.std() > 0
