"""kitm.training: learning-rate schedules, mixed precision and the frozen-then-fine-tuned backbone phases."""
