"""Where a loss finds its negatives under several replicas, spelled once: the losses' modes (kitm.losses.global_batch,
docs/scale.md) and the run setting that adds "auto" (kitm.experiment.config). A leaf module with no imports, so the
configuration reads it without importing Keras."""

LOSS_NEGATIVES = ("local", "global")  # each replica's own batch, or the whole global batch
SETTING_NEGATIVES = ("auto", *sorted(LOSS_NEGATIVES))  # auto: global with several replicas when every loss can gather
