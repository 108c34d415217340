"""1-D k-means of every row of a matrix (exact optimum, and Lloyd runs scored by silhouette), with the
number of clusters chosen by silhouette.

This is the clustering step of the adaptive ladder loss (Zhou et al., Eqs. 9-12; docs/methods.md#adaptive-ladder):
each query's relevance values are split into k ladder levels, k in [k_min, k_max] being the
one with the highest mean silhouette, and levels are numbered by decreasing cluster centre.

The exact optimum: a dynamic programme
--------------------------------------
In one dimension an optimal k-means partition consists of runs of consecutive values in sorted
order, so the optimum is the best way to cut the sorted row into k runs:

    D_0(0) = 0,   D_0(j > 0) = inf
    D_k(j) = min_{i < j} D_{k-1}(i) + SSE(i, j)                                           (DP)
    SSE(i, j) = sum_{t=i}^{j-1} x_t^2 - (sum_{t=i}^{j-1} x_t)^2 / (j - i)

(Bellman's classic segmentation recursion; it is what Ckmeans.1d.dp [Wang & Song, R Journal 2011]
solves).  D_k(n) is the global minimum of the k-means objective, so it is never worse than Lloyd's
algorithm from any seeding (k-means++ included), and it is deterministic: no restarts, no random
state inside a training graph.  Every SSE(i, j) comes from two prefix sums, so a row's whole
[n, n] table of segment costs is a few broadcast ops, and one DP step is an add plus an argmin
over the table's last axis, batched over all rows.  The last step (k = k_max) only needs the
table row j = n, and the all-infinite triangle i >= j is skipped in bands.  At n = 128 the naive
O(k n^2) work is about 10^5 cell updates per row, cheaper in TensorFlow/XLA than the
data-dependent control flow of the O(k n log n) or SMAWK variants.  Memory is bounded by
processing rows in chunks of at most `max_table_elements / n^2` rows.

The computation runs in float64 whatever the input dtype: SSE from prefix sums subtracts two
nearly equal numbers, and float32 would make near-tied partitions come out in the wrong order.
(Values are also centred per row first, which keeps the cancellation small.)

Why Lloyd runs too
------------------
The number of clusters is chosen by silhouette, and the partition with the lowest SSE is not always
the one with the highest silhouette: Lloyd's algorithm from k-means++ seeds (scikit-learn's default
KMeans, what the reference code runs) sometimes stops in a local optimum that scores higher, e.g.
a singleton cluster for an outlying value.  So for every row and k, `lloyd_runs` runs of that very
algorithm (greedy k-means++ seeding, then Lloyd's iterations with scikit-learn's stopping rule; see
`seeding._kmeans_plus_plus` and `lloyd._lloyd`) are scored too, and the exact optimum is replaced by a run's
result only where that scores a strictly higher silhouette.  Hence, for every k, the kept
clustering is a k-means solution whose SSE is either the global minimum or that of a Lloyd run from
k-means++ seeds, and whose silhouette is at least the higher of the two; its expectation is at least
that of scikit-learn's KMeans (same algorithm, same distribution), and never below the exact
optimum's.  `lloyd_runs=0` keeps the exact optima only.  The seeds are stateless draws from `seed`:
the same input and seed always give the same clusters.  The seed is an input of the compiled clustering,
not part of its trace: clustering with another seed reuses the compiled function.

Ties
----
Cuts are only allowed between two *different* values, so equal values always share a cluster.
This loses nothing: if an optimal partition put copies of a value v in two adjacent clusters, each
copy is (by optimality) equidistant from both centres, and moving all copies to one side keeps the
assignment cost and can only lower the cost after re-centring (it cannot empty a cluster when
k <= d: splitting another cluster that holds two distinct values would then beat the optimum).
Hence, for every k up to the number d of distinct values in the row, the restricted optimum
equals the unrestricted one.  A k
greater than d cannot form k non-empty clusters without splitting equal values, so it is not
eligible.  When d < k_min (e.g. a constant row), the row gets d clusters, one per distinct value
(its exact optimum with zero SSE), and the reported k is d, which is then below k_min; a row with
a single distinct value gets k = 1, label 1 everywhere and silhouette 0; a row with no valid
entry (see `mask`) gets k = 0, label 0 everywhere and silhouette 0.  Outputs never contain NaN.

Silhouette (Rousseeuw 1987; Zhou et al., Eqs. 10-12; scikit-learn's ``silhouette_score``)
-------------------------------------------------------------------------------------
For point i in cluster C_i:  a(i) = sum_{j in C_i} |x_i - x_j| / (|C_i| - 1),
b(i) = min_{C != C_i} sum_{j in C} |x_i - x_j| / |C|,  s(i) = (b - a) / max(a, b), and s(i) = 0 when
|C_i| = 1.  The row score is the mean of s(i) over the row's points.  Because clusters are runs of
the sorted row, the distance sum from x_t to a run [s, e) is, with p = clip(t, s, e),
x_t (p - s) - (S(p) - S(s)) + (S(e) - S(p)) - x_t (e - p) for the prefix sum S, so all sums cost
O(n k) per row instead of O(n^2).  k is chosen as the first (smallest) k with the highest score,
like ``numpy.argmax`` in the reference implementation.
"""

from kitm.ops.kmeans1d.cluster import (DEFAULT_LLOYD_RUNS, DEFAULT_MAX_TABLE_ELEMENTS, KMeans1DCandidates,
                                       auto_kmeans_1d, kmeans_1d_candidates)

__all__ = ["auto_kmeans_1d", "kmeans_1d_candidates", "KMeans1DCandidates", "DEFAULT_LLOYD_RUNS",
           "DEFAULT_MAX_TABLE_ELEMENTS"]
