"""kitm losses: each a plain per-row function plus a `keras.losses.Loss` class (ARCHITECTURE.md).

Importing this package registers every class with Keras, so `keras.losses.deserialize` finds them.
"""

from kitm.losses import samplers
from kitm.losses.angular import AngularLoss, NeighborhoodAngularLoss, angular_loss, neighbor_coverage
from kitm.losses.base import RetrievalLoss, reduce_per_row
from kitm.losses.ladder import AdaptiveLadderLoss, LadderLoss, adaptive_levels, ladder_levels, ladder_loss
from kitm.losses.sam import SAMLoss, sam_loss
from kitm.losses.triplet import TripletLoss, triplet_loss

__all__ = [
    "samplers", "RetrievalLoss", "reduce_per_row",
    "TripletLoss", "triplet_loss",
    "SAMLoss", "sam_loss",
    "LadderLoss", "AdaptiveLadderLoss", "ladder_levels", "ladder_loss", "adaptive_levels",
    "AngularLoss", "NeighborhoodAngularLoss", "angular_loss", "neighbor_coverage",
]
