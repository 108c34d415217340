"""Semantic centers (Malali & Keller): center loss, quantized center loss, image-index heads.

docs/methods.md#centers. With x_p, y_p the embeddings of image p and caption
p, n_p = `y_true["image_index"][p]` and `[v]+ = max(v, 0)`:

- Center loss (Eq. 6), one centre c_n per training image, shared by the image and its captions:
      L_C = sum_p [|x_p - c_{n_p}|^2 - delta]+  +  [|y_p - c_{n_p}|^2 - delta]+
- Quantized center loss (Eq. 7), N_q << N centres c_j and soft assignments w (a softmax layer,
  `kitm.layers.SoftmaxQuantizedCenters`):
      L_Q = sum_p sum_j w_x_p(j) [|x_p - c_j|^2 - delta]+  +  sum_p sum_j w_y_p(j) [|y_p - c_j|^2 - delta]+
            + a_c sum_{k1 != k2} [2 delta - |c_k1 - c_k2|^2]+
  The last sum runs over ordered pairs (each unordered pair counts twice), a_c = 1.
- Cross-entropy heads (Sec. 3.2): a Dense(N) classifier on each modality predicts the image index n_p;
      L_CE^I + L_CE^T = sum_p -log softmax(W_I x_p + b_I)[n_p] - log softmax(W_T y_p + b_T)[n_p].

The paper leaves delta unspecified; kitm defaults to 0.1 (squared L2 on unit vectors, so a sample may
sit within 0.32 of its centre and quantized centres are pushed to squared distance >= 0.2).

Parameters that belong to the objective, not to the encoders
-----------------------------------------------------------
The centres, the quantizer and the classifier heads exist only to shape training: retrieval and the
served model use the embeddings alone. So each of these losses owns its parameters (as Keras layers)
*and the optimizer that updates them*, and says so through `optimizer_groups()` ->
`[(optimizer, variables)]`. The DualEncoder's training step takes one gradient tape over the weighted
total, applies the model's optimizer to the encoders and each group's optimizer to its variables
(under MirroredStrategy each optimizer all-reduces its gradients across replicas, as the model's
does). This gives the paper's separate centre optimizer (SGD, lr 0.5, Sec. 4.1) without touching the
model's optimizer, and freezing works per part: `model.trainable = False` with the quantizer left
trainable is the paper's phase 2. Create these losses inside `strategy.scope()`, like the model: their
variables and optimizers are built at construction.

Centre learning rate. The paper's "SGD, lr 0.5" is the usual center-loss setting (Wen et al. [37] and
its common implementations), where the centre step is taken on the *batch mean* of the center loss.
kitm's losses are batch sums (reduction "sum"); on a sum, lr 0.5 would move a centre met by one image
and one caption to x + y - c, a reflection about their midpoint that never settles. So with reduction
"sum" the gradient that reaches the centres is divided by the local batch size (the encoders'
gradients are untouched): the centre step is `lr * gradient of the batch-mean loss`, whatever the
batch size or the number of replicas.
"""

from kitm.losses.centers.loss_classes import ImageIndexCrossEntropy, QuantizedCenterLoss, SemanticCenterLoss
from kitm.losses.centers.parameters import ImageIndexHeads, SemanticCenters
from kitm.losses.centers.terms import (DEFAULT_DELTA, DEFAULT_REPULSION_CHUNK, center_repulsion,
                                       index_cross_entropy_terms, quantized_center_loss, quantized_center_terms,
                                       scale_gradient, semantic_center_loss, semantic_center_terms)

__all__ = [
    "DEFAULT_DELTA",
    "semantic_center_terms",
    "semantic_center_loss",
    "center_repulsion",
    "quantized_center_terms",
    "quantized_center_loss",
    "index_cross_entropy_terms",
    "SemanticCenters",
    "ImageIndexHeads",
    "SemanticCenterLoss",
    "QuantizedCenterLoss",
    "ImageIndexCrossEntropy",
]
