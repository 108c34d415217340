"""The scale settings: `negatives` resolves for the replica count (auto: global with several replicas where every
loss can gather) and reaches the losses; `grad_cache_chunk` must divide the per-replica batch and refuses the centers
objective; the launcher lists both flags and names them in its errors."""

import pytest

from kitm.errors import KitmConfigError
from kitm.experiment import experiment_config
from kitm.experiment.objectives import build_objective, check_grad_cache, resolve_negatives


def _config(**settings):
    return experiment_config("synthetic", relevance="truth", **settings)


@pytest.mark.parametrize("loss, negatives, replicas, resolved", [
    (["infonce"], "auto", 1, "local"),
    (["infonce"], "auto", 2, "global"),
    (["triplet", "sam"], "auto", 8, "global"),
    (["graded_infonce", "ladder"], "auto", 2, "local"),  # the ladder cannot gather: auto stays local
    (["siglip"], "local", 2, "local"),
    (["siglip"], "global", 1, "global"),  # harmless on one replica
])
def test_negatives_resolve_for_the_replica_count_and_reach_the_losses(loss, negatives, replicas, resolved):
    config = resolve_negatives(_config(loss=loss, negatives=negatives), replicas)
    assert config.training.negatives == resolved
    built, _ = build_objective(config)
    for name, value in built.items():
        if getattr(type(value), "supports_global_negatives", False):
            assert value.negatives == resolved, name


def test_global_negatives_with_a_loss_that_cannot_gather_are_refused_by_name():
    with pytest.raises(KitmConfigError, match=r"negatives=global: .*loss=angular cannot gather.*infonce.*"
                                              r"negatives=local"):
        resolve_negatives(_config(loss=["infonce", "angular"], negatives="global"), 2)


@pytest.mark.parametrize("loss, negatives, devices, resolved", [
    (["triplet"], "auto", 1, "local"),  # one device: as everywhere
    (["triplet"], "auto", 2, "global"),
    (["graded_infonce", "ladder"], "auto", 2, "global"),  # nothing to gather: the loss spans the devices
    (["angular"], "global", 4, "global"),
])
def test_on_devices_that_one_loss_spans_the_negatives_are_global(loss, negatives, devices, resolved):
    """JAX's keras.distribution (kitm.distribute.data_parallel): every loss runs over the global batch."""
    config = resolve_negatives(_config(loss=loss, negatives=negatives), devices, whole_batch=True)
    assert config.training.negatives == resolved


def test_local_negatives_on_devices_that_one_loss_spans_are_refused_naming_the_flag():
    with pytest.raises(KitmConfigError) as error:
        resolve_negatives(_config(loss=["triplet"], negatives="local"), 2, whole_batch=True)
    assert "--negatives=local: on the " in error.value.for_flags()
    assert "per-device negatives are not implemented there" in error.value.for_flags()


def test_grad_cache_chunk_must_divide_the_per_replica_batch_and_refuses_centers():
    check_grad_cache(_config(batch_size=16, grad_cache_chunk=4), 2)
    check_grad_cache(_config(batch_size=16, grad_cache_chunk=0), 2)
    with pytest.raises(KitmConfigError, match=r"grad_cache_chunk=3 must divide the per-replica batch: "
                                              r"batch_size=16 over 2 replica\(s\) is 8 rows.*e\.g\. 2"):
        check_grad_cache(_config(batch_size=16, grad_cache_chunk=3), 2)
    with pytest.raises(KitmConfigError, match=r"grad_cache_chunk=4: loss=centers trains state of its own.*"
                                              r"grad_cache_chunk=0"):
        check_grad_cache(_config(batch_size=16, grad_cache_chunk=4, loss=["centers"]), 1)


def test_the_launcher_lists_both_flags():
    from kitm import launch

    shown = launch.FLAGS.module_help("kitm.launch")  # the launcher's part of --helpfull
    assert "--negatives: <auto|global|local>" in shown and "--grad_cache_chunk" in shown
