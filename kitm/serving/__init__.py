"""SavedModel export and its signatures."""

from kitm.serving.export import export_saved_model

__all__ = ["export_saved_model"]
