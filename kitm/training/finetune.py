"""Fine-tuning the image backbone after a frozen phase (VSE++ "FT", Faghri et al. 2018, Sec. 4).

Epochs 0 .. E-1 train with the ImageNet backbone frozen (its BatchNorm in inference mode, no gradient
through it, the cheap phase); from epoch E on the backbone trains too, at the fine-tuning learning rate
(`kitm.training.schedules.PhaseSwitch`).

One `fit()` call covers both phases: `BackboneFineTuning` unfreezes the backbone at the start of epoch E and
rebuilds the train function (`make_train_function(force=True)`; Keras' fit loop reads
`model.train_function` at every step), so the traced step differentiates the new trainable set.
`prepare_backbone_finetuning` builds the optimizer over every variable that will ever train, before the
first step, so its slot variables are the same in both phases: Keras' `BackupAndRestore` (and any
`load_weights` of a checkpoint, which stores the optimizer's variables) then restores a run killed in either
phase into the same model, and the callback re-applies the phase for the restored epoch.
"""

from __future__ import annotations

import keras


def image_backbone(model):
    """The image tower's pretrained backbone (a ResNet's `backbone`), or ValueError naming the encoder."""
    encoder = getattr(model, "image_encoder", None)
    backbone = getattr(encoder, "backbone", None)
    if backbone is None:
        raise ValueError(f"fine-tuning after a frozen phase needs an image encoder with a pretrained backbone "
                         f"(resnet50, resnet152); the model's image encoder is {type(encoder).__name__}.")
    return backbone


def set_backbone_trainable(model, trainable: bool) -> None:
    """Freeze or unfreeze the image backbone (and the encoder's flag that puts its BatchNorm in training mode)."""
    backbone = image_backbone(model)
    backbone.trainable = bool(trainable)
    if hasattr(model.image_encoder, "trainable_backbone"):
        model.image_encoder.trainable_backbone = bool(trainable)


def prepare_backbone_finetuning(model) -> list:
    """Freeze the backbone and build `model.optimizer` over the variables of both phases (module docstring).

    Call after `model.compile` (which may wrap the optimizer for loss scaling), under the strategy's scope.
    Returns the variables the optimizer was built for.
    """
    if model.optimizer is None:
        raise ValueError("compile the model before preparing the fine-tuning phases.")
    set_backbone_trainable(model, True)
    # With the losses' variables that the model's optimizer trains (DualEncoder.optimizer_variables).
    optimizer_variables = getattr(model, "optimizer_variables", None)
    variables = optimizer_variables() if optimizer_variables else list(model.trainable_variables)
    set_backbone_trainable(model, False)
    if model.optimizer.built:
        raise ValueError("the optimizer is already built; prepare the fine-tuning phases before training.")
    model.optimizer.build(variables)
    return variables


class BackboneFineTuning(keras.callbacks.Callback):
    """Keep the image backbone frozen for epochs 0 .. after_epochs-1, train it from epoch `after_epochs` on.

    The state is set at every epoch's start from the epoch number alone, so a run resumed by
    `BackupAndRestore` in the fine-tuning phase unfreezes at its first epoch.
    """

    def __init__(self, after_epochs: int, verbose: int = 1):
        super().__init__()
        if isinstance(after_epochs, bool) or int(after_epochs) != after_epochs or after_epochs < 1:
            raise ValueError(f"after_epochs must be a positive integer; got {after_epochs!r}.")
        self.after_epochs = int(after_epochs)
        self.verbose = int(verbose)

    def on_epoch_begin(self, epoch, logs=None):
        fine_tuning = epoch >= self.after_epochs
        if image_backbone(self.model).trainable == fine_tuning:
            return
        set_backbone_trainable(self.model, fine_tuning)
        # The traced step captured the old trainable set; trace it again for the new one.
        self.model.make_train_function(force=True)
        if self.verbose:
            state = "trains" if fine_tuning else "is frozen"
            print(f"BackboneFineTuning: from epoch {epoch + 1} the image backbone {state}.")
