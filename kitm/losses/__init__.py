"""kitm losses: each a plain per-row function plus a `keras.losses.Loss` class (ARCHITECTURE.md)."""

from kitm.losses.base import RetrievalLoss, reduce_per_row
from kitm.losses.triplet import TripletLoss, triplet_loss

__all__ = ["RetrievalLoss", "reduce_per_row", "TripletLoss", "triplet_loss"]
