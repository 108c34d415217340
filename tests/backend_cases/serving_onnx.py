"""A backend case: a DualEncoder's two towers written as ONNX files (kitm.serving.onnx: tf2onnx on TensorFlow,
jax2onnx on JAX) give under onnxruntime the embeddings of the model they were written from (issue 47, item 3). The
text tower is the bidirectional GRU over 0-padded captions (on JAX converted through kitm's forward masked scan), the
image tower a feature MLP; every weight from numpy, so the backends' models are the same. PyTorch refuses, naming the
backends that convert."""

import os
import tempfile

import keras
import numpy as np

from kitm.layers.image_encoders import FeatureMLP
from kitm.layers.text_encoders import GRUTextEncoder
from kitm.models import DualEncoder
from kitm.serving.onnx import write_onnx_towers


def cases():
    keras.config.set_floatx("float32")  # a served model's precision (run.py sets float64 for each case it runs)
    rng = np.random.default_rng(0)
    features = rng.normal(size=(4, 6)).astype("float32")
    token_ids = np.array([[3, 4, 5, 0, 0], [6, 0, 0, 0, 0], [1, 2, 3, 4, 5], [7, 7, 2, 9, 0]], "int32")
    model = DualEncoder(FeatureMLP(width=5, dropout=0.0), GRUTextEncoder(12, word_dim=4, units=3), embedding_dim=4)
    model({"image": features, "tokens": token_ids})
    weights = np.random.default_rng(1)
    for weight in model.weights:
        weight.assign(weights.normal(scale=0.5, size=tuple(weight.shape)))
    results = {"model_text": keras.ops.convert_to_numpy(model.encode_text(token_ids)),
               "model_image": keras.ops.convert_to_numpy(model.encode_image(features))}
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "1")
        try:
            write_onnx_towers(model, path, image_input=("features", (6,)), text_inputs={"token_ids": ((5,), "int32")},
                              vocabulary=[f"w{i}" for i in range(10)])
        except NotImplementedError as refusal:
            return {**results, "refused": np.array(float("TensorFlow and JAX" in str(refusal)))}
        import onnxruntime

        def embed(file_name, name, values):
            session = onnxruntime.InferenceSession(os.path.join(path, file_name), providers=["CPUExecutionProvider"])
            return session.run(["embeddings"], {name: values})[0]

        results["onnx_text"] = embed("text_tower.onnx", "token_ids", token_ids)
        results["onnx_image"] = embed("image_tower.onnx", "features", features)
        # A batch of another size through the same files: N is dynamic.
        results["onnx_text_one"] = embed("text_tower.onnx", "token_ids", token_ids[1:2])
        results["files"] = np.array(float(sorted(os.listdir(path)) == ["image_tower.onnx", "preprocessing.json",
                                                                        "text_tower.onnx", "vocabulary.txt"]))
    return results
