"""The centers objective's four losses, built once and shared by its phases (Malali & Keller Eq. 5)."""

from __future__ import annotations

from kitm.losses.adaptive_margin import AdaptiveMarginTripletLoss
from kitm.losses.centers import ImageIndexCrossEntropy, QuantizedCenterLoss, SemanticCenterLoss
from kitm.training.center_phases.config import CenterPhaseConfig


class CenterObjective:
    """The four losses of semantic centers (Malali & Keller), built once (in `strategy.scope()`), shared by the phases.

    Keys (also the names their terms are logged under): "triplet", "centers" (phase 1), "quantized" (phases 2,
    3), "index_ce".
    """

    def __init__(self, config: CenterPhaseConfig, num_images: int, embedding_dim: int):
        self.config = config
        self.num_images = int(num_images)
        if config.num_quantized_centers > self.num_images:
            raise ValueError(f"num_quantized_centers={config.num_quantized_centers} is more than the "
                             f"{self.num_images} training images whose centres k-means groups.")
        self.triplet = AdaptiveMarginTripletLoss(config.margin, config.margin, sampling=config.triplet_sampling,
                                                 seed=config.seed, name="triplet")
        self.centers = SemanticCenterLoss(self.num_images, embedding_dim, delta=config.delta,
                                          centers_learning_rate=config.centers_learning_rate, name="centers")
        self.quantized = QuantizedCenterLoss(config.num_quantized_centers, embedding_dim, delta=config.delta,
                                             centers_learning_rate=config.centers_learning_rate, name="quantized")
        self.index_ce = ImageIndexCrossEntropy(self.num_images, embedding_dim, name="index_ce")

    def all_losses(self) -> dict:
        return {"triplet": self.triplet, "centers": self.centers, "quantized": self.quantized,
                "index_ce": self.index_ce}

    def phase_losses(self, phase: int) -> dict:
        # Phase 2 keeps the triplet and the heads (frozen, no gradient reaches them) so that every term and the
        # total stay comparable on TensorBoard across phases.
        center = self.centers if phase == 1 else self.quantized
        return {"triplet": self.triplet, center.name: center, "index_ce": self.index_ce}

    def phase_weights(self, phase: int) -> dict:
        """The weight of each of `phase_losses(phase)`: `loss_weight` times the term's entry of `term_weights`."""
        triplet, center, index_ce = (self.config.loss_weight * w for w in self.config.term_weights)
        center_name = self.centers.name if phase == 1 else self.quantized.name
        return {"triplet": triplet, center_name: center, "index_ce": index_ce}
