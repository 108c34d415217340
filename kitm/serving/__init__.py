"""SavedModel export and its signatures, in numbered versions for TensorFlow Serving."""

from kitm.serving.export import export_new_version, export_saved_model
from kitm.serving.versions import latest_version_dir, next_version, version_numbers

__all__ = ["export_new_version", "export_saved_model", "latest_version_dir", "next_version", "version_numbers"]
