"""The semantic centers' three training phases (Malali & Keller, Sec. 4.1), each one `model.fit`, resumable after a kill.

Objective (Eq. 5), every term a batch sum, unweighted: L = L_C + L_T + L_CE^I + L_CE^T with
- L_T: `AdaptiveMarginTripletLoss`, symmetric triplet on L2 distances, one random in-batch negative per anchor
  (Sec. 4.1: "matching an image to randomly chosen caption within the batch"), margins m_x, m_y;
- L_C: `SemanticCenterLoss` (Eq. 6, one centre per training image) in phase 1, `QuantizedCenterLoss` (Eq. 7,
  N_q centres and a softmax assignment layer) in phases 2 and 3;
- L_CE: `ImageIndexCrossEntropy`, both embeddings classified into their training image's index.

Phases (paper defaults in brackets; docs/methods.md#centers):
  1. unquantized centres, fixed margins m_x = m_y = --margin [0.2], encoders and heads by Adam [2e-4], centres by
     SGD [0.5]; [30 epochs]
  2. the quantizer's centres initialised by k-means over the unquantized centres; *only* the quantizer trains
     (model and classifier heads frozen: `model.trainable = False`, recompiled), assignment layer by Adam [2e-5],
     quantized centres by SGD [0.5]; margins fixed; [15 epochs]
  3. end to end with the quantized centres and adaptive margins (`AdaptiveMarginCallback`: every q [500]
     batches, r = 0.8, c = 1.03, capped); Adam [2e-5]. [10 epochs]
"Reduced the learning rates by a factor of 0.1 every 15 epochs" is applied within each phase to every optimizer
(Adam and the centres' SGD), counting the phase's own epochs: with 30/15/10 epochs only phase 1 decays (at its
epoch 15), which gives the paper's "2e-4 for the first phase, and 2e-5 for the second and third". Each phase
starts fresh optimizers (the phases are separate trainings in the paper). A phase with 0 epochs is skipped; if
phase 1 never ran, the unquantized centres are untrained and the quantizer keeps its random start (the paper's
alternative, "similar results, but a longer convergence").

Image indices. The centres and classifier heads need one row per *training* image: `kitm.data.image_index.
ImageIndexMap` maps image/id to its rank among the training split's sorted ids (centre n belongs to the training
image with the n-th smallest id), in the input pipeline; `training_image_index` keeps the ids in
`<run_dir>/phases/image_ids.npy`.

Epochs are global: phase k runs `fit(initial_epoch=start_k, epochs=start_k + epochs_k)`, so TensorBoard's epoch
axis, the validation log and BackupAndRestore continue across phases.

Resuming (`<run_dir>/loss_state`, `kitm.callbacks.loss_state_checkpoint.LossStateCheckpoint`, tags {"phase": k}):
every epoch end writes the model's weights, every loss's parameters and optimizers, the margins and their
counters, and the phase. A new run in the same run directory reads it first: a phase cut short resumes inside
that phase (k-means is not redone; the callback restores everything at train begin, after the phase's
BackupAndRestore has restored the model's optimizer); a finished phase hands its parameters to the next one.
Each phase has its own BackupAndRestore folder (`backup/phase_k`): a backup is only loadable into a model
compiled as when it was written. At each phase end the state is kept as `<run_dir>/phases/phase_k/` (hard links)
and the k-means start as `<run_dir>/phases/quantizer_init.npz` (centroids, labels).
"""

from kitm.data.image_index import ImageIndexMap, read_image_ids
from kitm.training.center_phases.config import PHASE_DESCRIPTIONS, PHASE_NAMES, CenterPhaseConfig
from kitm.training.center_phases.objective import CenterObjective
from kitm.training.center_phases.trainer import CenterPhaseTrainer, training_image_index

__all__ = ["PHASE_NAMES", "PHASE_DESCRIPTIONS", "CenterPhaseConfig", "ImageIndexMap", "read_image_ids",
           "training_image_index", "CenterObjective", "CenterPhaseTrainer"]
