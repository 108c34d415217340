"""kitm.callbacks: Keras callbacks for training (retrieval evaluation to TensorBoard, adaptive margins, ladder
re-clustering)."""

from kitm.callbacks.adaptive_margin import AdaptiveMarginCallback
from kitm.callbacks.ladder_recluster import LadderReclusterCallback, ReclusterableLadderLoss, RelevanceSample
from kitm.callbacks.retrieval_evaluation import RetrievalEvaluation, flatten_report

__all__ = ["RetrievalEvaluation", "flatten_report", "AdaptiveMarginCallback", "LadderReclusterCallback",
           "ReclusterableLadderLoss", "RelevanceSample"]
