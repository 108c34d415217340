"""kitm models."""

from kitm.models.dual_encoder import DualEncoder

__all__ = ["DualEncoder"]
