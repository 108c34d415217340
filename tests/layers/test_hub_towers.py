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


# The image-only families (issue 13): ViT, DINOv2, ResNet towers from tiny local presets.
_DOCUMENTED = {  # (mean, std) on [0, 1] pixels: keras-hub's ViT presets map to [-1, 1]; DINOv2 / ResNet: ImageNet
    "vit": ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
    "dinov2": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    "resnet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
}
_WIDTH = {"vit": 16, "dinov2": 16, "resnet": 64}


@pytest.fixture(scope="module")
def image_presets(tmp_path_factory):
    root = tmp_path_factory.mktemp("image_presets")
    return {family: save_tiny_preset(root / family, family) for family in _DOCUMENTED}


@pytest.mark.parametrize("family", sorted(_DOCUMENTED))
def test_an_image_only_tower_normalizes_like_keras_hub_and_pools_by_family(image_presets, family):
    import keras_hub

    preset = image_presets[family]
    backbone = hub_presets.load_backbone(preset, "image_preset")
    assert hub_presets.family_of(backbone, preset, "image_preset", hub_presets.IMAGE_FAMILIES) == family
    scale, offset, size = hub_presets.image_normalization(preset, family)
    mean, std = _DOCUMENTED[family]
    assert hub_presets.FAMILY_NORMALIZATION[family] == (mean, std)
    np.testing.assert_allclose(scale, [1 / s for s in std], rtol=1e-6)
    np.testing.assert_allclose(offset, [-m / s for m, s in zip(mean, std)], rtol=1e-6)
    assert size == (32, 32)
    # keras-hub's own image converter of the preset (its family's class, on [0, 255] pixels) feeds the backbone the
    # same pixels as the tower's in-layer normalisation of [0, 1] images.
    converter = keras_hub.layers.ImageConverter.from_preset(preset)
    assert type(converter).__name__ == {"vit": "ViTImageConverter", "dinov2": "DINOV2ImageConverter",
                                        "resnet": "ResNetImageConverter"}[family]
    images = tf.random.uniform([3, 32, 32, 3], seed=5)
    pixels = converter(images * 255.0)
    np.testing.assert_allclose(pixels.numpy(), (images * tf.constant(scale) + tf.constant(offset)).numpy(),
                               atol=1e-5)
    np.testing.assert_allclose(pixels.numpy(), ((images - tf.constant(mean)) / tf.constant(std)).numpy(), atol=1e-5)

    tower = HubImageTower(backbone, family, scale, offset)
    features = tower(images)
    assert tuple(features.shape) == (3, _WIDTH[family])
    raw = backbone({"images": pixels} if family == "dinov2" else pixels).numpy()
    if family == "resnet":  # [B, h, w, C] feature map -> its global average
        assert raw.ndim == 4
        expected = raw.mean(axis=(1, 2))
    else:  # [B, 1 + patches, W] -> the class token
        assert raw.shape == (3, 1 + (32 // 8) ** 2, 16)
        expected = raw[:, 0, :]
    np.testing.assert_allclose(features.numpy(), expected, atol=1e-5)
    np.testing.assert_allclose(tf.function(tower)(images).numpy(), expected, atol=1e-5)  # traced, as fit runs it
    if family == "resnet":  # no fixed size: any image_size is accepted
        check_image_size(tower, 64, preset, "image_preset")
    else:
        with pytest.raises(KitmConfigError, match="set image_size=32"):
            check_image_size(tower, 64, preset, "image_preset")


def test_a_preset_without_an_image_converter_takes_the_family_constants(image_presets, tmp_path):
    import shutil

    preset = shutil.copytree(image_presets["dinov2"], tmp_path / "dinov2_no_converter")
    (preset / "image_converter.json").unlink()
    scale, offset, size = hub_presets.image_normalization(str(preset), "dinov2")
    mean, std = _DOCUMENTED["dinov2"]
    np.testing.assert_allclose(scale, [1 / s for s in std], rtol=1e-6)
    np.testing.assert_allclose(offset, [-m / s for m, s in zip(mean, std)], rtol=1e-6)
    assert size is None


@pytest.mark.parametrize("family, text", [("vit", "gru"), ("dinov2", "bert"), ("resnet", "gru")])
def test_a_dual_encoder_with_an_image_only_hub_tower_trains_a_step(image_presets, presets, family, text):
    import keras

    from kitm.experiment import encoders, experiment_config
    from kitm.experiment.objectives import build_objective
    from kitm.models import DualEncoder

    settings = {"image_encoder": "hub", "image_preset": image_presets[family], "image_size": 32, "word_dim": 8,
                "text_units": 8, "embedding_dim": 8, "max_violation": False}
    if text == "bert":
        settings.update(text_encoder="hub", text_preset=presets["bert"])
    config = encoders.resolve_hub_settings(experiment_config("synthetic", **settings))
    keras.utils.set_random_seed(0)
    image_tower = encoders.build_image_encoder(config)
    assert isinstance(image_tower, HubImageTower) and image_tower.family == family
    captions = tf.constant(["a red circle", "two shapes", "the blue square", "a small triangle"])
    if text == "bert":
        tokenizer = encoders.build_hub_tokenizer(config)
        text_tower = encoders.build_text_encoder(config, 0, "hub")
        tokens = tokenizer(captions)
    else:
        text_tower = encoders.build_text_encoder(config, 20)
        tokens = tf.random.uniform([4, 6], 1, 20, dtype=tf.int32, seed=2)
    model = DualEncoder(image_tower, text_tower, 8)
    x = {"image": tf.random.uniform([4, 32, 32, 3], seed=1), "tokens": tokens}
    model(x)
    before = [np.array(w) for w in image_tower.trainable_weights]
    losses, weights = build_objective(config, steps_per_epoch=1)
    # Eagerly: tracing the train step costs ~8 s a model on busy CI cores; the tower's traced call is checked above.
    model.compile(keras.optimizers.Adam(1e-2), losses=losses, loss_weights=weights, run_eagerly=True)
    y = {"image_index": tf.range(4), "caption_index": tf.range(4)}
    history = model.fit(tf.data.Dataset.from_tensors((x, y)), epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][-1])
    assert any(not np.array_equal(a, np.array(b)) for a, b in zip(before, image_tower.trainable_weights))


def _joint_clip_model(preset):
    from kitm.models import DualEncoder

    backbone = hub_presets.load_backbone(preset, "joint_preset")
    scale, offset, _ = hub_presets.image_normalization(preset, "clip")
    model = DualEncoder(HubImageTower(backbone.vision_encoder, "clip", scale, offset, name="image_backbone"),
                        HubTextTower(backbone.text_encoder, "clip", name="text_backbone"), 16)
    tokenizer = HubCaptionTokenizer(hub_presets.load_tokenizer(preset, "text_preset"), "clip", 32)
    x = {"image": tf.random.uniform([3, 32, 32, 3], seed=3),
         "tokens": tokenizer(tf.constant(["a red circle", "the blue square", "two small triangles"]))}
    model(x)
    return model, x


def _lora_config(preset, **settings):
    from kitm.experiment import encoders, experiment_config

    return encoders.resolve_hub_settings(experiment_config("synthetic", joint_preset=preset, image_size=32,
                                                           lora_rank=2, **settings))


def test_lora_adapts_the_query_and_value_projections_and_computes_w_plus_ab(presets):
    from kitm.experiment import encoders
    from kitm.training.lora_state import adapted_layers

    model, x = _joint_clip_model(presets["clip"])
    before = {key: value.numpy() for key, value in model(x).items()}
    encoders.apply_tower_training(_lora_config(presets["clip"]), model)
    adapted = adapted_layers(model)
    assert adapted and {layer.name for layer in adapted} == {"query", "value"}
    assert all(layer.lora_rank == 2 for layer in adapted)
    # Only the adapters and the adapted layers' biases train inside the towers; the joint projections train too.
    tower_weights = {id(w) for tower in (model.image_encoder, model.text_encoder) for w in tower.weights}
    inside = [w for w in model.trainable_weights if id(w) in tower_weights]
    assert inside and all(w.name in ("lora_kernel_a", "lora_kernel_b", "bias") for w in inside), [w.path for w in inside]
    assert len([w for w in inside if w.name == "lora_kernel_a"]) == len(adapted)
    assert any(id(w) not in tower_weights for w in model.trainable_weights)  # the projections
    # B starts at zero: the adapted model computes what the pretrained one did.
    after = model(x)
    for key in before:
        np.testing.assert_allclose(after[key].numpy(), before[key], atol=1e-6)

    # The oracle, from the LoRA equation: a model without adapters whose kernels are W + (alpha / r) A B, alpha = r.
    rng = np.random.default_rng(0)
    for layer in adapted:
        layer.lora_kernel_b.assign(rng.normal(0, 0.3, layer.lora_kernel_b.shape).astype("float32"))
    oracle, _ = _joint_clip_model(presets["clip"])
    plain = [w for w in model.weights if not w.name.startswith("lora_kernel")]
    assert len(plain) == len(oracle.weights)
    for ours, theirs in zip(plain, oracle.weights):  # the same architecture: the projections and all else alike
        theirs.assign(ours)
    oracle_layers = [layer for layer in oracle._flatten_layers() if layer.name in ("query", "value") and layer.weights]
    assert len(oracle_layers) == len(adapted)
    for layer, theirs in zip(adapted, oracle_layers):
        a, b = np.asarray(layer.lora_kernel_a), np.asarray(layer.lora_kernel_b)
        theirs.kernel.assign(np.asarray(layer._kernel) + (2 / 2) * (a @ b))  # alpha = rank = 2
    got, want = model(x), oracle(x)
    assert np.abs(got["image"].numpy() - before["image"]).max() > 1e-3  # the adapters changed the tower
    for key in ("image", "text"):
        np.testing.assert_allclose(got[key].numpy(), want[key].numpy(), atol=1e-5)


def test_a_backup_keeps_the_adapters_that_keras_weights_files_merge_and_zero(presets, tmp_path):
    from kitm.experiment import encoders
    from kitm.training.lora_state import adapted_layers, restore_adapters, save_adapters

    model, x = _joint_clip_model(presets["clip"])
    encoders.apply_tower_training(_lora_config(presets["clip"]), model)
    rng = np.random.default_rng(1)
    for layer in adapted_layers(model):
        layer.lora_kernel_b.assign(rng.normal(0, 0.3, layer.lora_kernel_b.shape).astype("float32"))
    want = model(x)
    saved = {layer.path: [np.asarray(v) for v in (layer._kernel, layer.lora_kernel_a, layer.lora_kernel_b)]
             for layer in adapted_layers(model)}
    model.save_weights(tmp_path / "w.weights.h5")
    assert save_adapters(model, tmp_path / "adapters.npz", step=7)

    plain, _ = _joint_clip_model(presets["clip"])  # a model without adapters loads the merged weights
    plain.load_weights(tmp_path / "w.weights.h5")
    np.testing.assert_allclose(plain(x)["image"].numpy(), want["image"].numpy(), atol=1e-5)

    fresh, _ = _joint_clip_model(presets["clip"])
    encoders.apply_tower_training(_lora_config(presets["clip"]), fresh)
    fresh.load_weights(tmp_path / "w.weights.h5")
    # What Keras alone gives back: the merged kernel, both adapters zero (a stationary point of their training).
    assert all(not np.asarray(layer.lora_kernel_a).any() for layer in adapted_layers(fresh))
    np.testing.assert_allclose(fresh(x)["image"].numpy(), want["image"].numpy(), atol=1e-5)
    assert not restore_adapters(fresh, tmp_path / "adapters.npz", step=8)  # another step: fresh A, B = 0
    assert all(np.asarray(layer.lora_kernel_a).any() for layer in adapted_layers(fresh))
    np.testing.assert_allclose(fresh(x)["image"].numpy(), want["image"].numpy(), atol=1e-5)
    assert restore_adapters(fresh, tmp_path / "adapters.npz", step=7)
    for layer in adapted_layers(fresh):
        for got, expected in zip((layer._kernel, layer.lora_kernel_a, layer.lora_kernel_b), saved[layer.path]):
            np.testing.assert_array_equal(np.asarray(got), expected)


def test_lora_needs_a_hub_tower_that_trains_and_an_attention_projection(presets, image_presets):
    from kitm.experiment import encoders, experiment_config
    from kitm.layers.hub_towers import enable_lora

    with pytest.raises(KitmConfigError, match="lora_rank=2 adapts keras-hub towers that train"):
        encoders.resolve_hub_settings(experiment_config("synthetic", lora_rank=2))
    with pytest.raises(KitmConfigError, match="lora_rank=2 adapts keras-hub towers that train"):
        _lora_config(presets["clip"], freeze_image_tower=True, freeze_text_tower=True)
    _lora_config(presets["clip"], freeze_image_tower=True)  # the text tower still adapts
    resnet = HubImageTower(hub_presets.load_backbone(image_presets["resnet"], "image_preset"), "resnet",
                           name="image_backbone")
    with pytest.raises(KitmConfigError, match="lora_rank: the image_backbone has no attention projection named"):
        enable_lora(resnet, 2)
