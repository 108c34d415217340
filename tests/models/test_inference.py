"""kitm.models.inference: test-time crop averaging (N crops: the normalised mean of their embeddings; one crop: the
centre crop)."""

import numpy as np
import pytest
import tensorflow as tf

import keras
import kitm  # noqa: F401
from kitm.models import DualEncoder


def test_test_crop_embeddings_are_the_normalised_mean_and_one_crop_is_todays(tiny_synthetic):
    from kitm.data.pipeline import PipelineConfig, evaluation_dataset, training_captions
    from kitm.ops.images import decode_image, eval_image
    from kitm.data.split_reading import read_split
    from kitm.layers import CaptionTokenizer, SmallConvEncoder, build_vocabulary
    from kitm.models.inference import embed_dataset, encode_images

    keras.utils.set_random_seed(3)
    tokenizer = CaptionTokenizer(build_vocabulary(training_captions(tiny_synthetic)), 8)
    text = keras.Sequential([keras.layers.Embedding(tokenizer.vocabulary_size, 4), keras.layers.GlobalAveragePooling1D()])
    model = DualEncoder(SmallConvEncoder(filters=(4, 4, 4, 4), width=8), text, embedding_dim=6)
    model.build_from_inputs({"image": tf.TensorSpec([None, 32, 32, 3]), "tokens": tf.TensorSpec([None, 8], tf.int32)})

    def config(crops):
        return PipelineConfig(batch_size=8, image_size=32, flip=False, eval_crop_fraction=0.75, seed=5,
                              test_crops=crops)

    # N = 1: the centre crop, exactly as before test-time crops existed.
    one, _, one_index = embed_dataset(model, evaluation_dataset(tiny_synthetic, "val", tokenizer, config(1)))
    split = read_split(tiny_synthetic, "val")
    center = tf.stack([eval_image(decode_image(encoded), 32, 0.75) for encoded in split.images])
    np.testing.assert_allclose(one, model.encode_image(center).numpy(), atol=1e-6)

    # N = 4: each image's embedding is the normalised mean of its crops' embeddings.
    dataset = evaluation_dataset(tiny_synthetic, "val", tokenizer, config(4))
    batch = next(iter(dataset))
    assert batch["image"].shape == (2, 4, 32, 32, 3)  # 8 // 4 images a batch, 4 crops each
    crops = np.concatenate([b["image"].numpy() for b in dataset])  # [12, 4, 32, 32, 3]
    four, _, index = embed_dataset(model, dataset)
    per_crop = model.encode_image(tf.reshape(crops, [-1, 32, 32, 3])).numpy().reshape(12, 4, -1)
    mean = per_crop.mean(axis=1)
    np.testing.assert_allclose(four, mean / np.linalg.norm(mean, axis=1, keepdims=True), atol=1e-6)
    np.testing.assert_array_equal(index, one_index)
    assert np.abs(four - one).max() > 1e-3  # the crops differ from the centre crop
    np.testing.assert_array_equal(crops, np.concatenate([b["image"].numpy() for b in dataset]))  # same crops each time
    np.testing.assert_allclose(encode_images(model, tf.constant(crops[:3])).numpy(), four[:3], atol=1e-6)
    with pytest.raises(ValueError, match="test_crops must be a positive integer"):
        config(0)

