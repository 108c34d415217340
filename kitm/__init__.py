"""kitm: image-text matching with graded relevance, on Keras 3 and TensorFlow.

Importing kitm selects the TensorFlow backend for Keras (unless the user already chose one
through ``KERAS_BACKEND``), because every part of kitm (tf.data, tensorflow-text, SavedModel
export, distribution strategies) is TensorFlow.
"""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

__version__ = "0.1.0"
