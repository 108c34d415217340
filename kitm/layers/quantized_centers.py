"""The softmax quantized-center layer of semantic centers (Malali & Keller, Sec. 3.4, Fig. 2).

N_q << N learnable centres c_1..c_Nq and a soft assignment of every embedding e to them,

    w(e) = softmax(W e + b),   W: [D, N_q], b: [N_q]                          ("N_q FC" + Softmax, Fig. 2)

so that sum_j w_j(e) = 1 (Eqs. 8-9). The paper computes the assignments "by applying the Softmax layer
to x (image) and y (text)" and cites NetVLAD [38] for the soft assignment: the logits come from a
dense layer on the embedding, not from distances to the centres. (NetVLAD's softmax of negative
squared distances is the special case W = 2 alpha c^T, b = -alpha |c|^2, with the |e|^2 term cancelling
in the softmax; `initialize_from(..., assignment_scale=alpha)` starts the dense layer there.) The
centres are initialised by k-means over the unquantized centres (Sec. 4.1); a random start also
works in the paper, only slower.

The layer does not compute a loss: `kitm.losses.QuantizedCenterLoss` (Eq. 7) combines its assignments
and centres.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

__all__ = ["SoftmaxQuantizedCenters", "check_centers"]


def check_centers(centers, name: str = "centers", dim: int | None = None) -> np.ndarray:
    """`centers` as a finite float64 [N, D] array, or a ValueError naming `name` and the shape."""
    if isinstance(centers, keras.Variable) or ops.is_tensor(centers):
        centers = ops.convert_to_numpy(centers)  # any backend's tensor, on any device
    elif hasattr(centers, "numpy"):
        centers = centers.numpy()  # e.g. a TensorFlow tensor under another Keras backend
    array = np.asarray(centers, dtype=np.float64)
    if array.ndim != 2 or array.shape[0] < 1 or array.shape[1] < 1:
        raise ValueError(f"{name} must be a non-empty [N, D] matrix; got shape {array.shape}.")
    if dim is not None and array.shape[1] != dim:
        raise ValueError(f"{name} must have D = {dim} columns (the layer's embedding size); got shape {array.shape}.")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be finite; got {int(np.sum(~np.isfinite(array)))} NaN/inf entries.")
    return array


@keras.saving.register_keras_serializable(package="kitm")
class SoftmaxQuantizedCenters(keras.layers.Layer):
    """`call(embeddings [B, D])` -> soft assignments `softmax(W e + b)` [B, N_q]; `centers` is [N_q, D].

    Args:
      num_centers: N_q.
      centers_initializer: initial centres before `initialize_from` (default: normal with standard
        deviation 1/sqrt(D), i.e. random vectors of about unit norm, the scale of the embeddings).
      kernel_initializer, bias_initializer: of the assignment layer ("N_q FC").
    """

    def __init__(self, num_centers: int, centers_initializer=None, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        if isinstance(num_centers, bool) or int(num_centers) != num_centers or int(num_centers) < 1:
            raise ValueError(f"num_centers must be a positive integer; got {num_centers!r}.")
        self.num_centers = int(num_centers)
        self.centers_initializer = (keras.initializers.get(centers_initializer)
                                    if centers_initializer is not None else None)
        self.assignment = keras.layers.Dense(self.num_centers, kernel_initializer=kernel_initializer,
                                             bias_initializer=bias_initializer, name="assignment")

    def build(self, input_shape):
        dim = input_shape[-1]
        if dim is None:
            raise ValueError(f"SoftmaxQuantizedCenters needs a known embedding size; got input shape {input_shape}.")
        self.embedding_dim = int(dim)
        self.assignment.build((None, self.embedding_dim))
        initializer = self.centers_initializer or keras.initializers.RandomNormal(stddev=self.embedding_dim ** -0.5)
        self.centers = self.add_weight(shape=(self.num_centers, self.embedding_dim), initializer=initializer,
                                       name="centers", trainable=True)

    def logits(self, embeddings):
        """`W e + b`, [B, N_q]."""
        return self.assignment(embeddings)

    def call(self, embeddings):
        return ops.softmax(self.logits(embeddings), axis=-1)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.num_centers,)

    def initialize_from(self, centers, *, seed: int = 0, n_init: int = 1, max_iter: int = 300,
                        assignment_scale: float | None = None) -> np.ndarray:
        """Set the N_q centres to the k-means centroids of `centers` (the N unquantized ones; Malali & Keller, Sec. 4.1).

        scikit-learn's `KMeans` (k-means++ seeding, Lloyd iterations), seeded, offline, in float64.
        With `assignment_scale = alpha`, the assignment layer starts as NetVLAD's soft assignment to
        those centroids (W = 2 alpha c^T, b = -alpha |c|^2, i.e. softmax of -alpha |e - c_j|^2); by
        default it keeps its weights (the paper trains it with the rest frozen).

        Returns the int [N] cluster of every unquantized centre.
        """
        from sklearn.cluster import KMeans

        if not self.built:
            array = check_centers(centers)
            self.build((None, array.shape[1]))
        array = check_centers(centers, dim=self.embedding_dim)
        if array.shape[0] < self.num_centers:
            raise ValueError(f"k-means needs at least num_centers={self.num_centers} points; centers has shape "
                             f"{array.shape}.")
        kmeans = KMeans(n_clusters=self.num_centers, n_init=n_init, max_iter=max_iter, random_state=seed)
        labels = kmeans.fit_predict(array)
        centroids = kmeans.cluster_centers_
        self.centers.assign(centroids.astype(self.centers.dtype))
        if assignment_scale is not None:
            alpha = float(assignment_scale)
            if not alpha > 0:
                raise ValueError(f"assignment_scale must be > 0; got {assignment_scale}.")
            self.assignment.kernel.assign((2.0 * alpha * centroids.T).astype(self.assignment.kernel.dtype))
            self.assignment.bias.assign((-alpha * np.sum(centroids ** 2, axis=1)).astype(self.assignment.bias.dtype))
        return labels.astype(np.int64)

    def get_config(self):
        config = super().get_config()
        config.update(num_centers=self.num_centers,
                      centers_initializer=(keras.initializers.serialize(self.centers_initializer)
                                           if self.centers_initializer is not None else None),
                      kernel_initializer=keras.initializers.serialize(self.assignment.kernel_initializer),
                      bias_initializer=keras.initializers.serialize(self.assignment.bias_initializer))
        return config
