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
