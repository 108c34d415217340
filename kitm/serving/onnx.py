"""ONNX towers: a trained dual encoder's image tower and text tower as two ONNX files, for runtimes without
TensorFlow (onnxruntime on a CPU or GPU, a browser, a phone).

A folder `<run_dir>/onnx/<n>/` (`python -m kitm.launch ... --export_onnx`; n is the SavedModel's version) holds:

- `image_tower.onnx`: `pixels` float32 [N, S, S, 3], RGB in [0, 1] after the evaluation pre-processing (decode, centre
  crop of `eval_crop_fraction` of the shorter side, antialiased bilinear resize to S x S), or `features` float32
  [N, F] for a model trained on precomputed features -> `embeddings` float32 [N, D].
- `text_tower.onnx`: `token_ids` int32 [N, L] (a hub text tower's packer may add `padding_mask`) -> `embeddings`
  float32 [N, D].
- `preprocessing.json`: S, the crop fraction, L, how captions become ids; `vocabulary.txt` for kitm's own tokenizer
  (the word on line i has id i + 2; 0 pads, 1 is an unknown word).

The embeddings are L2-normalised, so an image's and a caption's dot product is the score of the SavedModel's
`score` signature. The towers are the same computation as the SavedModel's (tests/end_to_end/test_export.py: 1e-5
under onnxruntime); the SavedModel stays the reference server (its signatures take raw captions and image bytes).

The conversion is the one Keras' `model.export(format="onnx")` uses for each backend: tf2onnx from a traced
`tf.function` on TensorFlow, jax2onnx from the JAX computation on JAX (PyTorch: not supported here; load the
weights under TensorFlow or JAX). Each tower is converted alone, so a client embedding only captions loads only the
text tower. The folder is written under a temporary name and renamed when complete (kitm.files.atomic_path).
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib

import numpy as np

from kitm.distribute.backend import backend_name
from kitm.files import atomic_path

IMAGE_TOWER_FILE = "image_tower.onnx"
TEXT_TOWER_FILE = "text_tower.onnx"
PREPROCESSING_FILE = "preprocessing.json"
# The converter (a Python module) of each backend the towers are converted on.
CONVERTERS = {"tensorflow": "tf2onnx", "jax": "jax2onnx"}
# ONNX opset 17 (2022) runs on every onnxruntime since 1.14, and both converters emit it.
OPSET = 17


def write_onnx_towers(model, path: str | os.PathLike, *, image_input: tuple[str, tuple[int, ...]],
                      text_inputs: dict[str, tuple[tuple[int | None, ...], str]], text_as_dict: bool = False,
                      preprocessing: dict | None = None, vocabulary: list[str] | None = None) -> str:
    """Write `model`'s two towers (a DualEncoder's `encode_image` and `encode_text`) as ONNX files in a new folder
    `path`, atomically; returns its path.

    Args:
      model: a built DualEncoder on the TensorFlow or JAX backend.
      image_input: (name, shape of one row): ("pixels", (S, S, 3)) or ("features", (F,)).
      text_inputs: name -> (shape of one row, dtype): {"token_ids": ((L,), "int32")}, or a hub text tower's inputs.
      text_as_dict: the text tower takes a dict of `text_inputs` (a hub text tower), not one tensor of token ids.
      preprocessing: written as preprocessing.json with the inputs' names and shapes added.
      vocabulary: written as vocabulary.txt, one word a line.
    """
    if backend_name() not in CONVERTERS:
        raise NotImplementedError(f"The ONNX towers are converted on the TensorFlow and JAX backends, not "
                                  f"{backend_name()}: load the weights under KERAS_BACKEND=tensorflow (or jax) and "
                                  "write them there.")
    path = pathlib.Path(path)
    if path.exists():
        raise FileExistsError(f"{path} exists; ONNX towers are never overwritten.")
    image_name, image_shape = image_input
    if not text_as_dict and len(text_inputs) != 1:
        raise ValueError(f"A text tower of one input takes one tensor; got the inputs {sorted(text_inputs)}.")

    def encode_text(*flat):
        tokens = dict(zip(text_inputs, flat)) if text_as_dict else flat[0]
        return model.encode_text(tokens, training=False)

    def encode_image(pixels):
        return model.encode_image(pixels, training=False)

    towers = ((IMAGE_TOWER_FILE, encode_image, {image_name: ((None, *image_shape), "float32")}),
              (TEXT_TOWER_FILE, encode_text, {name: ((None, *shape), dtype)
                                              for name, (shape, dtype) in text_inputs.items()}))
    with atomic_path(path, overwrite=False) as tmp, _forward_scans(model):
        tmp.mkdir(parents=True)
        for file_name, function, inputs in towers:
            _convert(function, inputs, tmp / file_name)
        description = {**(preprocessing or {}),
                       "image_tower": {"file": IMAGE_TOWER_FILE, "inputs": _described(towers[0][2]),
                                       "output": "embeddings float32 [N, D], L2-normalised"},
                       "text_tower": {"file": TEXT_TOWER_FILE, "inputs": _described(towers[1][2]),
                                      "output": "embeddings float32 [N, D], L2-normalised"},
                       "embedding_dim": int(model.embedding_dim), "opset": OPSET}
        (tmp / PREPROCESSING_FILE).write_text(json.dumps(description, indent=2) + "\n")
        if vocabulary is not None:
            (tmp / "vocabulary.txt").write_text("".join(f"{word}\n" for word in vocabulary))
    return str(path)


@contextlib.contextmanager
def _forward_scans(model):
    """On JAX, the GRU text encoders' recurrence as kitm's masked scan (`kitm.ops.packed_gru.masked_gru`: the same
    final states on the same weights, equal to float rounding, tests/ops/test_packed_gru.py) while the towers are
    converted: Keras' JAX GRU reads a backward layer by a reversed `lax.scan`, which jax2onnx cannot translate, and
    kitm's scan reads it forward over the flipped steps."""
    from kitm.layers.text_encoders import GRUTextEncoder

    switched = [layer for layer in model._flatten_layers() if isinstance(layer, GRUTextEncoder)
                and layer.recurrence == "masked"] if backend_name() == "jax" else []
    for layer in switched:
        layer.recurrence = "packed"
    try:
        yield
    finally:
        for layer in switched:
            layer.recurrence = "masked"


def _described(inputs: dict) -> dict:
    return {name: {"shape": ["N" if size is None else size for size in shape], "dtype": dtype}
            for name, (shape, dtype) in inputs.items()}


def _convert(function, inputs: dict[str, tuple[tuple[int | None, ...], str]], output: pathlib.Path) -> None:
    """`function(*inputs)` -> one ONNX file whose inputs carry `inputs`' names and whose output is `embeddings`, the
    batch dimension (and any None) left dynamic."""
    if backend_name() == "tensorflow":
        import tensorflow as tf
        import tf2onnx
        from keras.src.export.tf2onnx_lib import patch_tf2onnx  # tf2onnx 1.17 and numpy 2, as Keras' own export

        patch_tf2onnx()
        specs = [tf.TensorSpec(shape, dtype, name=name) for name, (shape, dtype) in inputs.items()]
        traced = tf.function(lambda *flat: {"embeddings": tf.cast(function(*flat), tf.float32)},
                             input_signature=specs, autograph=False)
        tf2onnx.convert.from_function(traced, input_signature=specs, opset=OPSET, output_path=str(output))
        return
    import jax
    import jax2onnx

    # A symbol for each dynamic size: one batch symbol N for every input of a tower (they share it), one of its
    # own for any other.
    structs = [jax.ShapeDtypeStruct(tuple(size if size is not None else "N" if axis == 0 else f"{name}_{axis}"
                                          for axis, size in enumerate(shape)), np.dtype(dtype))
               for name, (shape, dtype) in inputs.items()]
    # Traced with JAX's 32-bit defaults even where a program enabled 64-bit types: under them a Python number in
    # the towers' arithmetic (`1 - z`) becomes a float64 constant beside float32 weights, which ONNX refuses to mix.
    with jax.enable_x64(False):
        jax2onnx.to_onnx(lambda *flat: function(*flat).astype("float32"), inputs=structs, opset=OPSET,
                         input_names=list(inputs), output_names=["embeddings"], return_mode="file",
                         output_path=str(output))


# How kitm's own tokenizer (kitm.layers.CaptionTokenizer) turns a caption into ids, for a client without TensorFlow.
_KITM_TOKENIZATION = ("Unicode case folding (NFKC, lower case: tensorflow_text.case_fold_utf8); split where the "
                      "Unicode script changes and at whitespace (tensorflow_text.UnicodeScriptTokenizer: 'dog.' gives "
                      "'dog' and '.'); tokens made only of punctuation or symbols dropped; a word on line i of "
                      "vocabulary.txt has id i + 2, any other word id 1; the first max_length ids kept, 0 after them.")


def tokenizer_inputs(tokenizer) -> tuple[dict, bool, dict, list[str] | None]:
    """(text_inputs, text_as_dict, its description, vocabulary or None) of `write_onnx_towers` for a run's tokenizer:
    kitm's CaptionTokenizer (token ids [N, max_length]; its vocabulary travels as vocabulary.txt) or a preset's
    HubCaptionTokenizer (its backbone's inputs [N, sequence_length]; the preset's own tokenizer makes them)."""
    if hasattr(tokenizer, "input_names"):  # kitm.layers.hub_tokenizers.HubCaptionTokenizer
        length = tokenizer.sequence_length
        return ({name: ((length,), "int32") for name in tokenizer.input_names}, True,
                {"tokenizer": f"the keras-hub {tokenizer.family} preset's own tokenizer, packed to {length} tokens as "
                              "kitm.layers.hub_tokenizers.HubCaptionTokenizer packs them (docs/serving.md)",
                 "sequence_length": length}, None)
    return ({"token_ids": ((tokenizer.max_length,), "int32")}, False,
            {"tokenizer": _KITM_TOKENIZATION, "max_length": tokenizer.max_length, "padding_id": 0, "unknown_id": 1},
            list(tokenizer.vocabulary))


def export_onnx_version(model, tokenizer, base: str | os.PathLike, version: int, *, image_mode: str = "encoded",
                        image_size: int = 64, eval_crop_fraction: float = 1.0,
                        feature_dim: int | None = None) -> str:
    """The run's ONNX towers as `<base>/<version>` (the SavedModel's version number, so that the two pair);
    returns its path. The arguments after `version` are the SavedModel export's (kitm.serving.export)."""
    text_inputs, text_as_dict, text_description, vocabulary = tokenizer_inputs(tokenizer)
    if image_mode == "encoded":
        image_input = ("pixels", (image_size, image_size, 3))
        image_description = {"image_size": image_size, "eval_crop_fraction": eval_crop_fraction,
                             "pixels": "RGB float32 in [0, 1] (x / 255) of the centre crop (eval_crop_fraction of the "
                                       "shorter side), resized to image_size x image_size (bilinear, antialiased: "
                                       "tf.image.resize(..., antialias=True)), clipped to [0, 1]"}
    elif feature_dim is None:
        raise ValueError("Feature models need feature_dim for the ONNX image tower's input.")
    else:
        image_input = ("features", (feature_dim,))
        image_description = {"features": f"float32 [N, {feature_dim}]: the dataset's precomputed image features"}
    return write_onnx_towers(model, pathlib.Path(base) / str(version), image_input=image_input,
                             text_inputs=text_inputs, text_as_dict=text_as_dict, vocabulary=vocabulary,
                             preprocessing={**image_description, **text_description})
