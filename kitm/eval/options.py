"""The settings of an evaluation, declared once: :class:`MetricOptions` for :func:`kitm.eval.evaluate` and its
per-query twin, :class:`ReportOptions` (the same plus CS, the COCO 1K folds and R@K folds) for
:func:`kitm.eval.build_report` and its per-query twin.

Each public entry point takes them as keywords, as before (``evaluate(sims, captions_per_image=5, ks=(1, 5))``), or
as one object (``evaluate(sims, options=MetricOptions(ks=(1, 5)))``, keywords then override its fields); the entry
points and their ``*_per_query`` twins pass the object on, so a setting is spelled, defaulted and documented here
only. An unknown keyword is refused by name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping


@dataclasses.dataclass(frozen=True)
class MetricOptions:
    """The settings of :func:`kitm.eval.evaluate`.

    Attributes:
      captions_per_image: cpi; image i owns captions i*cpi .. i*cpi + cpi - 1.
      ks: cut-offs K of R@K, R^V@K, NCS@K and SR@K.
      include_gt: NCS and SR keep each query's own ground truth (the NCS reference's ``include_anns``). R, R^V,
        medr, meanr and mAP always rank every candidate.
      semantic_threshold: m of SR, the number of most relevant images that form the extended ground truth (the
        reference's ``threshold``, default 1).
      semantic_depth: per-caption list length in SR's aggregation; None: max(ks), as the reference (which uses its
        last recall cut-off).
      positive_threshold: mAP@R and R-Precision (:mod:`kitm.eval.map_at_r`) count as relevant each query's own
        ground truth and, with relevance and this threshold, every candidate whose relevance is >= it (extended
        positives, as ECCV Caption extends COCO's); None: the ground truth only.
      chunk_size: queries per chunk; None: sized to about 4M matrix elements.
    """

    captions_per_image: int = 5
    ks: Iterable[int] = (1, 5, 10)
    include_gt: bool = False
    semantic_threshold: int = 1
    semantic_depth: int | None = None
    positive_threshold: float | None = None
    chunk_size: int | None = None

    @classmethod
    def of(cls, options: "MetricOptions | None" = None, settings: Mapping[str, object] | None = None):
        """`options` (default: the defaults) with the keyword `settings` replacing its fields; a keyword that is not
        a field is refused, naming it and the fields."""
        options = cls() if options is None else options
        if not isinstance(options, cls):
            raise TypeError(f"`options` must be a {cls.__name__}; got {type(options).__name__}.")
        settings = dict(settings or {})
        fields = [field.name for field in dataclasses.fields(cls)]
        unknown = sorted(set(settings) - set(fields))
        if unknown:
            raise TypeError(f"unexpected keyword argument(s) {', '.join(map(repr, unknown))}; the settings are "
                            f"{', '.join(fields)}.")
        return dataclasses.replace(options, **settings) if settings else options

    def metric_options(self) -> "MetricOptions":
        """The fields :func:`kitm.eval.evaluate` reads, as a :class:`MetricOptions`."""
        return MetricOptions(**{field.name: getattr(self, field.name) for field in dataclasses.fields(MetricOptions)})


@dataclasses.dataclass(frozen=True)
class ReportOptions(MetricOptions):
    """The settings of :func:`kitm.eval.build_report`: those of :class:`MetricOptions` and

    Attributes:
      cs_ks: CS cut-offs for the whole set; None: :func:`kitm.eval.coherent_cutoffs` (N/10, N). The five-fold block
        always uses the folds' own (fold_size/10, fold_size).
      cs_caption: the caption of each image that CS uses.
      fold_size: images per fold of the COCO 1K protocol; the "coco_1k" block is added when the set holds exactly
        5 * fold_size images. None: never.
      fold_images: F of the "folds" block (R^V@K and R@K on folds of F images); None: no such block.
    """

    cs_ks: Iterable[int] | None = None
    cs_caption: int = 0
    fold_size: int | None = 1000
    fold_images: int | None = None
