"""SavedModel export and its signatures, in numbered versions for TensorFlow Serving; the towers as ONNX files
(`kitm.serving.onnx`).

The SavedModel names load on first use (PEP 562), so that `kitm.serving.onnx` imports without TensorFlow (JAX).
"""

import importlib

_NAMES = {"export_new_version": "kitm.serving.export", "export_saved_model": "kitm.serving.export",
          "latest_version_dir": "kitm.serving.versions", "next_version": "kitm.serving.versions",
          "version_numbers": "kitm.serving.versions"}
__all__ = sorted(_NAMES)


def __getattr__(name):
    if name not in _NAMES:
        raise AttributeError(f"module 'kitm.serving' has no attribute {name!r}")
    return getattr(importlib.import_module(_NAMES[name]), name)
