"""kitm.callbacks: Keras callbacks for training (retrieval evaluation to TensorBoard, adaptive margins, ladder
re-clustering, the embedding projector, the collapse monitor, atomic checkpoints, the losses' state)."""

from kitm.callbacks.adaptive_margin import AdaptiveMarginCallback
from kitm.callbacks.every_q_batches import EveryQBatchesCallback
from kitm.callbacks.ladder_recluster import LadderReclusterCallback
from kitm.callbacks.retrieval_evaluation import RetrievalEvaluation, flatten_report

__all__ = ["RetrievalEvaluation", "flatten_report", "AdaptiveMarginCallback", "LadderReclusterCallback",
           "EveryQBatchesCallback"]
