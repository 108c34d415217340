"""kitm layers: encoders, the caption tokenizer, the softmax quantized-center layer."""

from kitm.layers.flat_projections import flatten_projections
from kitm.layers.image_encoders import (IMAGE_ENCODERS, FeatureMLP, ResNetEncoder, SmallConvEncoder,
                                        build_image_encoder)
from kitm.layers.quantized_centers import SoftmaxQuantizedCenters
from kitm.layers.text_encoders import GRUTextEncoder
from kitm.layers.tokenizer import CaptionTokenizer, build_vocabulary, split_words

__all__ = ["IMAGE_ENCODERS", "FeatureMLP", "ResNetEncoder", "SmallConvEncoder", "build_image_encoder",
           "GRUTextEncoder", "CaptionTokenizer", "build_vocabulary", "split_words", "SoftmaxQuantizedCenters",
           "flatten_projections"]
