"""A serving client: a fresh Python process without kitm that loads an exported SavedModel and calls its three
signatures (run as a script by the `serve_in_fresh_python` fixture of tests/end_to_end/conftest.py, for
tests/end_to_end/test_export.py and tests/end_to_end/test_launch_runs.py; not a test module).

argv: export dir, captions (JSON list), image paths (JSON list), output .npz. The .npz holds the served text, image
embeddings and scores; stdout's last line is a JSON object with the error each bad input raised ("accepted" if none).
"""
import sys, json, numpy as np
import tensorflow as tf, tensorflow_text  # noqa: F401  (registers the tokenizer's ops)
loaded = tf.saved_model.load(sys.argv[1])
captions = tf.constant(json.loads(sys.argv[2]))
images = tf.constant([open(p, "rb").read() for p in json.loads(sys.argv[3])])
text = loaded.signatures["encode_text"](captions=captions)["embeddings"].numpy()
image = loaded.signatures["encode_image"](images=images)["embeddings"].numpy()
scores = loaded.signatures["score"](captions=captions, images=images)["scores"].numpy()

def error(signature, **inputs):
    try:
        loaded.signatures[signature](**inputs)
    except tf.errors.InvalidArgumentError as failure:
        return str(failure)
    return "accepted"

errors = {
    "empty": error("encode_text", captions=tf.constant(["a red circle", "  ", "a square"])),
    "not_image": error("encode_image", images=tf.constant([images.numpy()[0], b"this is not an image"])),
    "truncated": error("encode_image", images=tf.constant([images.numpy()[0][:40]])),
    "score_not_image": error("score", captions=captions, images=tf.constant([b""])),
}
assert not any(name == "kitm" or name.startswith("kitm.") for name in sys.modules), "kitm was imported"
np.savez(sys.argv[4], text=text, image=image, scores=scores)
print(json.dumps(errors))
