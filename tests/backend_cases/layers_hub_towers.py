"""A backend case: kitm's keras-hub towers (their input normalisation, the families' pooling: CLIP's first token and
end-of-text token, BERT's masked mean, ResNet's average, SigLIP's pooled output) over tiny keras-hub backbones whose
weights are set from numpy, outputs and gradients with respect to the images; and a CLIP image tower with LoRA
adapters (`enable_lora`, its W, A and B set from numpy): the layers adapted, what trains, its output."""

import keras_hub
import numpy as np
from keras import ops
from run import to_numpy, value_and_gradients

from kitm.layers.hub_towers import HubImageTower, HubTextTower, enable_lora

SIZES = dict(num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16)


def _fill(layer, seed):
    rng = np.random.default_rng(seed)
    for weight in layer.weights:
        if "float" in str(weight.dtype):
            value = rng.normal(scale=0.3, size=tuple(weight.shape))
            weight.assign(np.abs(value) + 0.5 if "variance" in weight.path else value)


def _image_case(name, backbone, images, seed):
    tower = HubImageTower(backbone, name, scale=(2.0, 1.5, 1.0), offset=(-1.0, -0.5, 0.0))
    _fill(tower, seed)

    def scalar(images):
        out = tower(images, training=False)
        return ops.sum(out * ops.convert_to_tensor(np.random.default_rng(seed + 1).normal(size=out.shape)))

    value, grads = value_and_gradients(scalar, {"images": images}, ("images",))
    return {f"{name}/out": to_numpy(tower(ops.convert_to_tensor(images))), f"{name}/value": value,
            f"{name}/d_images": grads["images"]}


def cases():
    rng = np.random.default_rng(0)
    images = rng.random((2, 16, 16, 3))
    results = {}
    results.update(_image_case("clip", keras_hub.models.CLIPVisionEncoder(
        patch_size=8, image_shape=(16, 16, 3), **SIZES), images, 1))
    results.update(_image_case("siglip", keras_hub.models.SigLIPVisionEncoder(
        patch_size=8, image_shape=(16, 16, 3), **SIZES), images, 3))
    results.update(_image_case("resnet", keras_hub.models.ResNetBackbone(
        input_conv_filters=[64], input_conv_kernel_sizes=[3], stackwise_num_filters=[64], stackwise_num_blocks=[1],
        stackwise_num_strides=[1], block_type="basic_block"), images, 5))
    lora = HubImageTower(keras_hub.models.CLIPVisionEncoder(patch_size=8, image_shape=(16, 16, 3), **SIZES), "clip")
    results["clip_lora/adapted"] = np.array(float(enable_lora(lora, 2)))
    _fill(lora, 9)  # W, A and B from numpy: the backends draw A differently
    results["clip_lora/trainable"] = np.array(float(sum(np.prod(w.shape) for w in lora.trainable_weights)))
    results["clip_lora/out"] = to_numpy(lora(ops.convert_to_tensor(images)))
    # CLIP's text pooling reads the end-of-text token, the largest id; BERT's means over the padding mask.
    token_ids = np.array([[5, 3, 19, 0, 0, 0], [5, 7, 8, 9, 19, 0], [5, 19, 0, 0, 0, 0]], dtype="int32")
    clip = HubTextTower(keras_hub.models.CLIPTextEncoder(
        vocabulary_size=20, embedding_dim=8, max_sequence_length=6, **SIZES), "clip")
    _fill(clip, 7)
    results["clip_text/out"] = to_numpy(clip({"token_ids": ops.convert_to_tensor(token_ids)}))
    bert = HubTextTower(keras_hub.models.BertBackbone(vocabulary_size=20, max_sequence_length=6, **SIZES), "bert")
    _fill(bert, 8)
    mask = (token_ids > 0).astype("int32")
    results["bert_text/out"] = to_numpy(bert({"token_ids": ops.convert_to_tensor(token_ids),
                                              "segment_ids": ops.convert_to_tensor(np.zeros_like(token_ids)),
                                              "padding_mask": ops.convert_to_tensor(mask)}))
    return results
