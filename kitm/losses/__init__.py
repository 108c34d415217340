"""kitm losses: each a plain per-row function plus a `keras.losses.Loss` class (docs/layout.md).

Importing this package registers every class with Keras, so `keras.losses.deserialize` finds them.
"""

from kitm.losses import samplers
from kitm.losses.adaptive_margin import (AdaptiveMarginTripletLoss, adaptive_margin_triplet_loss,
                                         adaptive_margin_triplet_terms)
from kitm.losses.angular import AngularLoss, NeighborhoodAngularLoss, angular_loss, neighbor_coverage
from kitm.losses.base import RetrievalLoss, reduce_per_row
from kitm.losses.centers import (ImageIndexCrossEntropy, QuantizedCenterLoss, SemanticCenterLoss, center_repulsion,
                                 index_cross_entropy_terms, quantized_center_loss, quantized_center_terms,
                                 semantic_center_loss, semantic_center_terms)
from kitm.losses.contrastive import (GradedInfoNCELoss, InfoNCELoss, LogitScale, SigLIPLoss, graded_info_nce_loss,
                                     graded_info_nce_targets, info_nce_loss, siglip_loss)
from kitm.losses.ladder import AdaptiveLadderLoss, LadderLoss, adaptive_levels, ladder_levels, ladder_loss
from kitm.losses.reclusterable_ladder import ReclusterableLadderLoss, RelevanceSample
from kitm.losses.sam import SAMLoss, sam_loss
from kitm.losses.triplet import TripletLoss, triplet_loss

__all__ = [
    "samplers", "RetrievalLoss", "reduce_per_row",
    "TripletLoss", "triplet_loss",
    "SAMLoss", "sam_loss",
    "LadderLoss", "AdaptiveLadderLoss", "ladder_levels", "ladder_loss", "adaptive_levels",
    "ReclusterableLadderLoss", "RelevanceSample",
    "AngularLoss", "NeighborhoodAngularLoss", "angular_loss", "neighbor_coverage",
    "SemanticCenterLoss", "semantic_center_loss", "semantic_center_terms",
    "QuantizedCenterLoss", "quantized_center_loss", "quantized_center_terms", "center_repulsion",
    "ImageIndexCrossEntropy", "index_cross_entropy_terms",
    "AdaptiveMarginTripletLoss", "adaptive_margin_triplet_loss", "adaptive_margin_triplet_terms",
    "InfoNCELoss", "info_nce_loss", "GradedInfoNCELoss", "graded_info_nce_loss", "graded_info_nce_targets",
    "SigLIPLoss", "siglip_loss", "LogitScale",
]
