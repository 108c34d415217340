"""kitm layers: encoders, the caption tokenizer, the softmax quantized-center layer."""

from kitm.layers.flat_projections import flatten_projections
from kitm.layers.image_encoders import (IMAGE_ENCODERS, FeatureMLP, ResNetEncoder, SmallConvEncoder,
                                        build_image_encoder)
from kitm.layers.quantized_centers import SoftmaxQuantizedCenters
from kitm.layers.text_encoders import GRUTextEncoder

__all__ = ["IMAGE_ENCODERS", "FeatureMLP", "ResNetEncoder", "SmallConvEncoder", "build_image_encoder",
           "GRUTextEncoder", "CaptionTokenizer", "build_vocabulary", "split_words", "SoftmaxQuantizedCenters",
           "flatten_projections"]

_TOKENIZER_NAMES = ("CaptionTokenizer", "build_vocabulary", "split_words")


def __getattr__(name):
    # The tokenizer is TensorFlow's (tensorflow-text, in the tf.data pipeline): imported when first asked for, so
    # that the model-side layers import without it on the other Keras backends.
    if name in _TOKENIZER_NAMES:
        from kitm.layers import tokenizer

        return getattr(tokenizer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
