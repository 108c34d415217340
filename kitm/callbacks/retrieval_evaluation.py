"""Retrieval evaluation during training, reported through the Keras logs (and so to TensorBoard)."""

from __future__ import annotations

import json
import os

import keras
import numpy as np

from kitm.models.inference import embed_dataset, similarity_matrix


def flatten_report(report: dict, prefix: str) -> dict[str, float]:
    """{"i2t": {"recall_vse": {1: 40.0}}} -> {"<prefix>i2t_R@1": 40.0, ...}: flat scalar names for logs."""
    names = {"recall_vse": "R", "recall": "IR_R", "ncs": "NCS", "semantic_recall": "SR"}
    flat = {}
    for direction, figures in report.items():
        if not isinstance(figures, dict):
            continue
        for metric, value in figures.items():
            if isinstance(value, dict):
                for k, v in value.items():
                    flat[f"{prefix}{direction}_{names.get(metric, metric)}@{k}"] = float(v)
            else:
                flat[f"{prefix}{direction}_{metric}"] = float(value)
    return flat


class RetrievalEvaluation(keras.callbacks.Callback):
    """Every `every_epochs` epochs: embed `dataset`, evaluate retrieval, add the figures to the epoch's logs.

    Put it before `keras.callbacks.TensorBoard` in the callback list so that TensorBoard writes the figures.
    With `jsonl_path`, one JSON line per evaluation is appended (epoch and every figure).
    """

    def __init__(self, dataset, *, captions_per_image: int = 5, every_epochs: int = 1, prefix: str = "val_",
                 ks=(1, 5, 10), jsonl_path: str | None = None, num_images: int | None = None):
        super().__init__()
        if every_epochs < 1:
            raise ValueError(f"every_epochs must be >= 1; got {every_epochs}.")
        self.dataset, self.captions_per_image, self.every_epochs = dataset, captions_per_image, every_epochs
        self.prefix, self.ks, self.jsonl_path, self.num_images = prefix, tuple(ks), jsonl_path, num_images
        self.last_report: dict | None = None

    def evaluate_now(self) -> dict:
        from kitm.eval import evaluate

        images, texts, _ = embed_dataset(self.model, self.dataset, total=self.num_images)
        self.last_report = evaluate(similarity_matrix(images, texts), captions_per_image=self.captions_per_image,
                                    ks=self.ks)
        return self.last_report

    def on_epoch_end(self, epoch, logs=None):
        if (epoch + 1) % self.every_epochs:
            return
        flat = flatten_report(self.evaluate_now(), self.prefix)
        flat[f"{self.prefix}rsum"] = float(sum(v for k, v in flat.items() if "_R@" in k and "IR_" not in k))
        if logs is not None:
            logs.update(flat)
        if self.jsonl_path:
            with open(self.jsonl_path, "a") as handle:
                handle.write(json.dumps({"epoch": epoch + 1, **flat}) + "\n")
