"""OnLocalCopy (kitm.callbacks.local_copy): the wrapped callback sees the copy as its model, holding the trained
model's weights at each epoch's end and at the end of training, and the logs it adds reach the other callbacks."""

import keras
import numpy as np

from kitm.callbacks.local_copy import OnLocalCopy


class Recorder(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.seen = []

    def on_epoch_end(self, epoch, logs=None):
        self.seen.append((self.model, [w.copy() for w in self.model.get_weights()]))
        logs["val_recorded"] = float(epoch)

    def on_train_end(self, logs=None):
        self.seen.append((self.model, [w.copy() for w in self.model.get_weights()]))


def _model():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    return model


def test_the_wrapped_callback_reads_the_copy_with_the_trained_weights():
    keras.utils.set_random_seed(0)
    model, local_copy = _model(), _model()
    recorder, history = Recorder(), keras.callbacks.History()
    x, y = np.random.default_rng(0).normal(size=(8, 3)).astype("float32"), np.zeros((8, 2), "float32")
    after_first = []
    snapshot = keras.callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: after_first.append([w.copy() for w in model.get_weights()]))
    model.fit(x, y, epochs=2, batch_size=4, verbose=0, callbacks=[snapshot, OnLocalCopy(recorder, local_copy), history])
    assert [seen_model for seen_model, _ in recorder.seen] == [local_copy] * 3
    for (_, copied), trained in zip(recorder.seen, [*after_first, after_first[-1]]):
        for a, b in zip(copied, trained):
            np.testing.assert_array_equal(a, b)
    assert history.history["val_recorded"] == [0.0, 1.0]  # the wrapped callback's figures reach the logs
