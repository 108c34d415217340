"""kitm.training.schedules: step decay, warm-up + cosine against their formulas, the fine-tuning switch."""

import numpy as np
import pytest

import keras
import kitm  # noqa: F401
from kitm.training import schedules


def test_step_decay_is_the_launchers_former_schedule():
    schedule = schedules.step_decay(2e-4, steps_per_epoch=10, epochs=30, decay_epochs=15, decay_factor=0.1)
    rates = [float(schedule(step)) for step in (0, 149, 150, 299)]
    np.testing.assert_allclose(rates, [2e-4, 2e-4, 2e-5, 2e-5], rtol=1e-6)
    three = schedules.step_decay(1.0, steps_per_epoch=2, epochs=7, decay_epochs=3, decay_factor=0.5)
    np.testing.assert_allclose([float(three(s)) for s in (5, 6, 12, 13)], [1.0, 0.5, 0.25, 0.25])
    assert schedules.step_decay(1e-3, steps_per_epoch=5, epochs=4, decay_epochs=0, decay_factor=0.1) == 1e-3
    assert schedules.step_decay(1e-3, steps_per_epoch=5, epochs=4, decay_epochs=4, decay_factor=0.1) == 1e-3


def test_warmup_cosine_follows_the_formula():
    lr, warmup, total = 1e-3, 10, 50
    schedule = schedules.warmup_cosine(lr, total_steps=total, warmup_steps=warmup)
    steps = np.array([0, 5, 10, 20, 30, 50, 60])
    expected = np.where(steps < warmup, lr * steps / warmup,
                        lr * (1 + np.cos(np.pi * np.minimum(steps - warmup, total - warmup) / (total - warmup))) / 2)
    np.testing.assert_allclose([float(schedule(int(s))) for s in steps], expected, rtol=1e-5, atol=1e-12)
    plain = schedules.warmup_cosine(lr, total_steps=total)
    assert float(plain(0)) == pytest.approx(lr) and float(plain(total)) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="shorter than training"):
        schedules.warmup_cosine(lr, total_steps=10, warmup_steps=10)


def test_fine_tuning_switch_and_its_serialisation():
    schedule = schedules.build_schedule("cosine", 1e-3, steps_per_epoch=4, epochs=10, warmup_steps=2,
                                        finetune_after_epochs=5, finetune_learning_rate=1e-5)
    assert isinstance(schedule, schedules.PhaseSwitch) and schedule.boundary_step == 20
    # The cosine spans the frozen phase (20 steps), then the fine-tuning rate holds.
    assert float(schedule(2)) == pytest.approx(1e-3) and float(schedule(19)) < 1e-4
    assert [float(schedule(s)) for s in (20, 39)] == pytest.approx([1e-5, 1e-5])
    restored = keras.optimizers.schedules.deserialize(keras.optimizers.schedules.serialize(schedule))
    np.testing.assert_allclose([float(restored(s)) for s in (0, 1, 10, 25)], [float(schedule(s)) for s in (0, 1, 10, 25)])
    with pytest.raises(ValueError, match="warm-up is part of the cosine"):
        schedules.build_schedule("step", 1e-3, steps_per_epoch=4, epochs=10, warmup_steps=3)
    with pytest.raises(ValueError, match="unknown schedule"):
        schedules.build_schedule("linear", 1e-3, steps_per_epoch=4, epochs=10)

