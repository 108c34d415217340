"""A user's own objectives, as a package of theirs would define them: imported by `--objective_module` (or
`objective_module=[...]`), it registers its losses with kitm when imported. Used by tests/experiment/test_objectives.py;
not a test module itself."""

from kitm.experiment import register_objective
from kitm.experiment.objectives import loss_negatives
from kitm.losses import TripletLoss


class DoubleMarginTripletLoss(TripletLoss):
    """VSE++'s triplet with twice its margin: a loss of the user's whose class (a TripletLoss) takes global
    negatives and hardest_warmup_steps."""

    def __init__(self, margin: float = 0.2, negatives: str = "local", hardest_warmup_steps: int = 0):
        super().__init__(2 * margin, max_violation=True, negatives=negatives,
                         hardest_warmup_steps=hardest_warmup_steps, name="double_margin")


class LocalOnlyTripletLoss(TripletLoss):
    """The same, declared unable to gather other replicas' rows."""

    supports_global_negatives = False

    def __init__(self, **settings):
        super().__init__(name="local_only", **settings)


def _build_double_margin(config, warmup):
    return DoubleMarginTripletLoss(config.objective.margin, negatives=loss_negatives(config),
                                   hardest_warmup_steps=warmup)


register_objective("double_margin", _build_double_margin, loss_class=DoubleMarginTripletLoss)
register_objective("local_only", LocalOnlyTripletLoss)
