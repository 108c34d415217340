"""The settings of the centers objective's three phases (defaults: the paper's, Malali & Keller Sec. 4.1)."""

from __future__ import annotations

import dataclasses

from kitm.errors import KitmConfigError, option
from kitm.losses.adaptive_margin import SAMPLINGS

PHASE_NAMES = ("unquantized", "quantizer", "end_to_end")
PHASE_DESCRIPTIONS = ("unquantized centres, fixed margins, everything trains",
                      "quantizer only (k-means start), model and heads frozen, fixed margins",
                      "end to end, quantized centres, adaptive margins")


@dataclasses.dataclass(frozen=True)
class CenterPhaseConfig:
    """Everything the three phases need (defaults: the paper's, Sec. 4.1; delta and margin_max are kitm's).

    phase_epochs: epochs of phases 1, 2, 3 (0 skips a phase). learning_rates: Adam rate of each phase.
    centers_learning_rate: SGD rate of the centres (unquantized and quantized). lr_decay_epochs/factor: step
    decay within each phase (0: none). grad_clip_norm: the model optimizer's global clip (None: off).
    delta: the centre hinge radius. num_quantized_centers: N_q. margin: initial m_x = m_y.
    margin_update_every (q), margin_share_threshold (r), margin_multiplier (c), margin_max: Eq. 13.
    loss_weight: one weight for every term (the paper: 1). term_weights: the weights of the triplet, the centre
    loss (per-image or quantized) and the image-index cross-entropy, multiplied by loss_weight (the paper: 1 each).
    seed: negatives' sampler and k-means.
    triplet_sampling: the triplet's negatives, "random" (the paper, Sec. 4.1: one random in-batch negative per
    anchor), "hardest", "easiest" or "all" (the sum over the batch's negatives; AdaptiveMarginTripletLoss).
    """

    phase_epochs: tuple[int, int, int] = (30, 15, 10)
    learning_rates: tuple[float, float, float] = (2e-4, 2e-5, 2e-5)
    centers_learning_rate: float = 0.5
    lr_decay_epochs: int = 15
    lr_decay_factor: float = 0.1
    grad_clip_norm: float | None = 2.0
    delta: float = 0.1
    num_quantized_centers: int = 1000
    margin: float = 0.2
    margin_update_every: int = 500
    margin_share_threshold: float = 0.8
    margin_multiplier: float = 1.03
    margin_max: float = 1.0
    loss_weight: float = 1.0
    seed: int = 0
    triplet_sampling: str = "random"
    term_weights: tuple[float, float, float] = (1.0, 1.0, 1.0)

    def __post_init__(self):
        # Errors name the fields with kitm.errors.option, so that kitm.experiment can show them under the settings
        # that feed them (CENTER_PHASE_SETTINGS in kitm.experiment.presets) and the launcher as flags.
        epochs = tuple(self.phase_epochs)
        shown = ",".join(map(str, epochs))
        if len(epochs) != 3 or any(isinstance(e, bool) or int(e) != e or e < 0 for e in epochs) or sum(epochs) == 0:
            raise KitmConfigError(f"{option('phase_epochs')}={shown}: give three epoch counts >= 0 (phases 1, 2, "
                                  "3), not all 0.")
        object.__setattr__(self, "phase_epochs", tuple(int(e) for e in epochs))
        rates = tuple(float(r) for r in self.learning_rates)
        if len(rates) != 3 or not all(r >= 0 for r in rates):
            raise KitmConfigError(f"{option('learning_rates')} must be three rates >= 0; got {self.learning_rates!r}.")
        object.__setattr__(self, "learning_rates", rates)
        for name in ("centers_learning_rate", "delta", "margin", "loss_weight"):
            if not float(getattr(self, name)) >= 0:
                raise KitmConfigError(f"{option(name)} must be >= 0; got {getattr(self, name)!r}.")
        for name in ("num_quantized_centers", "margin_update_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or int(value) != value or value < 1:
                raise KitmConfigError(f"{option(name)} must be a positive integer; got {value!r}.")
        if not 0.0 <= self.margin_share_threshold <= 1.0:
            raise KitmConfigError(f"{option('margin_share_threshold')} must be in [0, 1]; got "
                                  f"{self.margin_share_threshold}.")
        if not self.margin_multiplier > 1.0:
            raise KitmConfigError(f"{option('margin_multiplier')} must be > 1; got {self.margin_multiplier}.")
        if not self.margin_max >= self.margin or not self.margin_max > 0:
            raise KitmConfigError(f"{option('margin_max')} ({self.margin_max}) must be > 0 and >= the initial "
                                  f"{option('margin')} ({self.margin}).")
        weights = tuple(self.term_weights)
        if len(weights) != 3 or not all(float(w) >= 0 for w in weights) or not any(float(w) > 0 for w in weights):
            raise KitmConfigError(f"{option('term_weights')}={','.join(map(str, weights))}: give three weights >= 0 "
                                  "(triplet, centre loss, image-index cross-entropy), not all 0.")
        object.__setattr__(self, "term_weights", tuple(float(w) for w in weights))
        if self.triplet_sampling not in SAMPLINGS:
            raise KitmConfigError(f"{option('triplet_sampling')} must be one of {SAMPLINGS}; got "
                                  f"{self.triplet_sampling!r}.")
        if self.lr_decay_epochs < 0 or not 0.0 <= self.lr_decay_factor <= 1.0:
            raise KitmConfigError(f"{option('lr_decay_epochs')} must be >= 0 and {option('lr_decay_factor')} in "
                                  f"[0, 1]; got {self.lr_decay_epochs}, {self.lr_decay_factor}.")

    def start_epoch(self, phase: int) -> int:
        """The global epoch at which phase `phase` (1-based) starts."""
        return sum(self.phase_epochs[:phase - 1])

    def end_epoch(self, phase: int) -> int:
        return sum(self.phase_epochs[:phase])

    @property
    def total_epochs(self) -> int:
        return sum(self.phase_epochs)
