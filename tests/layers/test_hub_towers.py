"""keras-hub towers from tiny local presets (offline): output shapes, the families' normalisation, the preset's
tokenizer in tf.data, the joint-preset initialisation against keras-hub's own CLIP embeddings, the offline errors."""

import numpy as np
import pytest
import tensorflow as tf

from kitm.errors import KitmConfigError
from kitm.layers import hub_presets
from kitm.layers.hub_tiny import save_tiny_preset
from kitm.layers.hub_tokenizers import HubCaptionTokenizer
from kitm.layers.hub_towers import HubImageTower, HubTextTower, JointPreset, _sub_backbone, check_image_size


@pytest.fixture(autouse=True)
def _empty_keras_home(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras_home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def presets(tmp_path_factory):
    root = tmp_path_factory.mktemp("presets")
    return {family: save_tiny_preset(root / family, family) for family in ("clip", "siglip", "bert")}


def test_family_normalization_constants():
    mean, std = hub_presets.FAMILY_NORMALIZATION["clip"]
    assert mean == (0.48145466, 0.4578275, 0.40821073) and std == (0.26862954, 0.26130258, 0.27577711)
    assert hub_presets.FAMILY_NORMALIZATION["siglip"] == ((0.5,) * 3, (0.5,) * 3)
    assert hub_presets.FAMILY_NORMALIZATION["dinov2"] == ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    assert hub_presets.FAMILY_NORMALIZATION["resnet"] == hub_presets.FAMILY_NORMALIZATION["dinov2"]


@pytest.mark.parametrize("family", ["clip", "siglip"])
def test_the_preset_image_converter_gives_the_tower_its_normalization(presets, family):
    scale, offset, size = hub_presets.image_normalization(presets[family], family)
    mean, std = hub_presets.FAMILY_NORMALIZATION[family]
    np.testing.assert_allclose(scale, [1 / s for s in std], rtol=1e-6)
    np.testing.assert_allclose(offset, [-m / s for m, s in zip(mean, std)], rtol=1e-6)
    assert size == (32, 32)
    backbone = hub_presets.load_backbone(presets[family], "image_preset")
    tower = HubImageTower(_sub_backbone(backbone, "image"), family, scale, offset)
    assert tuple(tower(tf.random.uniform([3, 32, 32, 3])).shape) == (3, 16)
    with pytest.raises(KitmConfigError, match="set image_size=32"):
        check_image_size(tower, 64, presets[family], "image_preset")


@pytest.mark.parametrize("family", ["clip", "siglip", "bert"])
def test_the_preset_tokenizer_runs_in_tf_data_and_feeds_the_text_tower(presets, family):
    tokenizer = HubCaptionTokenizer(hub_presets.load_tokenizer(presets[family], "text_preset"), family, 32)
    captions = tf.data.Dataset.from_tensor_slices(["A red circle, left of a square.", "two shapes", "x"] * 2)
    tokens = next(iter(captions.batch(6).map(tokenizer)))
    assert set(tokens) == set(tokenizer.input_names)
    assert all(tuple(value.shape) == (6, 32) and value.dtype == tf.int32 for value in tokens.values())
    ids = tokens["token_ids"].numpy()
    if family != "siglip":  # SigLIP captions have an end token only (SigLIPPreprocessor's default)
        assert ids[0, 0] == tokenizer.tokenizer.start_token_id
    assert tokenizer.tokenizer.end_token_id in ids[0]
    tower = HubTextTower(_sub_backbone(hub_presets.load_backbone(presets[family], "text_preset"), "text"), family)
    assert tuple(tower(tokens).shape) == (6, 16)


def test_a_joint_clip_preset_gives_keras_hubs_own_normalized_embeddings(presets):
    from kitm.models import DualEncoder

    preset = presets["clip"]
    backbone = hub_presets.load_backbone(preset, "joint_preset")
    joint = JointPreset(backbone, "clip", preset)
    scale, offset, _ = hub_presets.image_normalization(preset, "clip")
    model = DualEncoder(HubImageTower(backbone.vision_encoder, "clip", scale, offset),
                        HubTextTower(backbone.text_encoder, "clip"), joint.embedding_dim)
    tokenizer = HubCaptionTokenizer(hub_presets.load_tokenizer(preset, "text_preset"), "clip", 32)
    tokens = tokenizer(tf.constant(["a red circle", "the blue square above a small triangle"]))
    images = tf.random.uniform([2, 32, 32, 3], seed=3)
    model({"image": images, "tokens": tokens})
    joint.initialize_projections(model)
    ours = model({"image": images, "tokens": tokens})
    pixels = images * tf.constant(scale) + tf.constant(offset)  # what keras-hub's image converter feeds it
    theirs_image = tf.math.l2_normalize(backbone.get_vision_embeddings(pixels), axis=-1)
    theirs_text = tf.math.l2_normalize(backbone.get_text_embeddings(tokens["token_ids"]), axis=-1)
    np.testing.assert_allclose(ours["image"].numpy(), theirs_image.numpy(), atol=1e-5)
    np.testing.assert_allclose(ours["text"].numpy(), theirs_text.numpy(), atol=1e-5)
    assert joint.logit_scale == pytest.approx(np.log(1 / 0.07), rel=1e-6) and joint.logit_bias is None


def test_a_joint_siglip_preset_starts_from_identity_projections_and_carries_its_bias(presets):
    backbone = hub_presets.load_backbone(presets["siglip"], "joint_preset")
    joint = JointPreset(backbone, "siglip", presets["siglip"])
    image_kernel, text_kernel = joint.projection_kernels()
    np.testing.assert_array_equal(image_kernel, np.eye(16)) and np.testing.assert_array_equal(text_kernel, np.eye(16))
    assert joint.embedding_dim == 16 and joint.logit_bias is not None


def test_an_unknown_or_offline_handle_names_the_preset_and_the_local_directory_way():
    with pytest.raises(KitmConfigError) as error:
        hub_presets.load_backbone("no_such_preset_anywhere", "text_preset")
    message = str(error.value)
    assert "text_preset=no_such_preset_anywhere" in message and "downloads on first use" in message
    assert "save_to_preset(dir)" in message and "text_preset=/path/to/preset_dir" in message
    with pytest.raises(KitmConfigError, match="image_preset=clip_vit_base_patch32.*downloads on first use"):
        hub_presets.load_backbone("clip_vit_base_patch32", "image_preset")  # a real handle, offline here


def test_a_directory_that_is_not_a_preset_is_named(tmp_path):
    with pytest.raises(KitmConfigError, match="has no config.json"):
        hub_presets.load_backbone(str(tmp_path), "joint_preset")
