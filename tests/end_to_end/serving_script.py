"""A fresh Python process without kitm that loads an exported SavedModel and calls its three signatures: what a
serving client sees (used by tests/test_export.py and tests/test_launch.py).

argv: export dir, captions (JSON list), image paths (JSON list), output .npz. The .npz holds the served text, image
embeddings and scores; stdout's last line is a JSON object with the error each bad input raised ("accepted" if none).
"""

import os
import subprocess
import sys
import textwrap

SERVE_SCRIPT = textwrap.dedent("""
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
""")


def serve_in_fresh_python(export_dir, captions_json, image_paths_json, out, *, cwd, timeout=300):
    """Run SERVE_SCRIPT in a new interpreter."""
    return run_python(SERVE_SCRIPT, export_dir, captions_json, image_paths_json, out, cwd=cwd, timeout=timeout)


def run_python(script, *args, cwd, timeout=300):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=timeout)
