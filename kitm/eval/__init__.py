"""kitm.eval: retrieval and graded-relevance metrics from similarity and relevance matrices.

Plain numpy, chunked over queries (bounded memory at COCO-5K scale), with one ranking rule
everywhere: descending score, ties by ascending candidate index.

- :func:`evaluate`: R@K, R^V@K, medr, meanr, mAP, and with relevance NCS@K and SR@K, both
  directions.
- :func:`evaluate_folds`, :func:`evaluate_coco_protocols`: COCO 1K (five-fold mean) and 5K.
- :func:`coherent_score`: CS@K, mean Kendall tau-b of the top K (ladder loss paper).
- :func:`mean_average_precision`, :func:`neighborhood_preservation`, :func:`n_way_recall`.
- :func:`map_at_r`, :func:`r_precision`: mAP@R and R-Precision of any [Q, N] scores and bool relevance.
- :func:`build_report`: all of the above for one similarity matrix (shared by the
  ``python -m kitm.eval`` CLI, :mod:`kitm.eval.cli`, and the RetrievalEvaluation callback), with R@K on
  folds of F images; :func:`build_report_per_query` also gives every figure's per-query values
  (:func:`write_per_query`); :func:`coherent_scores`: CS@K both directions with one caption per image.
"""

from kitm.eval.coherent import coherent_score, coherent_score_per_query
from kitm.eval.evaluation import evaluate
from kitm.eval.kendall import kendall_tau_b
from kitm.eval.map_at_r import map_at_r, map_at_r_per_query, r_precision
from kitm.eval.neighborhood import nearest_neighbor_indices, neighborhood_preservation
from kitm.eval.nway import n_way_recall
from kitm.eval.options import MetricOptions, ReportOptions
from kitm.eval.protocols import evaluate_coco_protocols, evaluate_folds
from kitm.eval.ranking import top_k_indices
from kitm.eval.report import (build_report, build_report_per_query, coherent_cutoffs, coherent_scores, flat_figures,
                              flatten_figures, format_report, write_per_query)
from kitm.eval.retrieval import (
    GroundTruthRanks,
    ground_truth_ranks,
    mean_average_precision,
    recall_at_k,
    recall_vse_at_k,
)
from kitm.eval.semantic import ncs_score, semantic_recall, semantic_relevant_images

__all__ = [
    "GroundTruthRanks",
    "build_report",
    "build_report_per_query",
    "coherent_cutoffs",
    "coherent_scores",
    "coherent_score",
    "coherent_score_per_query",
    "evaluate",
    "MetricOptions",
    "ReportOptions",
    "evaluate_coco_protocols",
    "evaluate_folds",
    "flat_figures",
    "flatten_figures",
    "format_report",
    "ground_truth_ranks",
    "kendall_tau_b",
    "map_at_r",
    "map_at_r_per_query",
    "mean_average_precision",
    "n_way_recall",
    "ncs_score",
    "nearest_neighbor_indices",
    "neighborhood_preservation",
    "r_precision",
    "recall_at_k",
    "recall_vse_at_k",
    "semantic_recall",
    "semantic_relevant_images",
    "top_k_indices",
    "write_per_query",
]
