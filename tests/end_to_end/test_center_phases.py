"""End to end: launch/centers.flags (the semantic centers objective, Malali & Keller) on the synthetic world through the
launcher, killed with SIGKILL after phase 1 and resumed in the right phase with its saved centres; every phase
logged, the quantizer started by k-means of the unquantized centres."""

import json
import signal
import subprocess
import time

import numpy as np
import pytest
import tensorflow as tf

import kitm  # noqa: F401
from kitm.callbacks.loss_state_checkpoint import latest_state, read_state_json

# The tiny model of tests/end_to_end/test_paper_flagfiles.py (SMALL), without --epochs: the phases set the epochs.
TINY = ["--dataset=synthetic", "--image_size=32", "--embedding_dim=32", "--word_dim=16", "--text_units=16",
        "--batch_size=16", "--eval_every_epochs=0", "--export=false", "--progress=false", "--captions_per_step=sample"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from kitm.data.synthetic_records import build_synthetic

    root = tmp_path_factory.mktemp("centers") / "synthetic"
    build_synthetic(root, num_scenes=60, seed=3, image_size=32, num_shards=2, progress=False, relevance=("cider",), world="shapes")
    return root


def _launcher(args):
    return ["-m", "kitm.launch", *args]  # what follows `python`, for the kitm_popen and kitm_python fixtures


@pytest.fixture(scope="module")
def killed_and_resumed(world, tmp_path_factory, repo_root, checkpoint_tensors, kitm_popen, kitm_python):
    """Phases 1, 2, 1 epochs: SIGKILL as soon as phase 1's state is on disk, then the same command again."""
    run_dir = tmp_path_factory.mktemp("centers_run") / "run"
    args = [f"--flagfile={repo_root / 'launch' / 'centers.flags'}", *TINY, f"--data_dir={world}", f"--run_dir={run_dir}",
            "--center_phase_epochs=1,2,1", "--num_quantized_centers=8", "--margin_update_every=1"]
    command = _launcher(args)
    first = kitm_popen(command, cwd=repo_root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 400
    try:
        while first.poll() is None and time.time() < deadline:
            state = read_state_json(run_dir / "loss_state") if (run_dir / "loss_state").is_dir() else None
            if state is not None and state["epoch"] >= 1:
                first.send_signal(signal.SIGKILL)
                break
            time.sleep(0.02)
    finally:
        if first.poll() is None and time.time() >= deadline:
            first.kill()
        first_output = first.communicate()[0]
    assert first.returncode == -signal.SIGKILL, f"the first run was not killed mid-way:\n{first_output[-3000:]}"
    saved_dir = latest_state(run_dir / "loss_state")
    saved = {"state": read_state_json(saved_dir), "tensors": checkpoint_tensors(saved_dir, "")}
    started = time.time()
    second = kitm_python(command, cwd=repo_root)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-5000:]
    return run_dir, saved, second, time.time() - started


@pytest.mark.slow
def test_a_killed_run_resumes_in_the_right_phase_with_its_saved_centers(killed_and_resumed, checkpoint_tensors):
    run_dir, saved, second, _ = killed_and_resumed
    done, phase = saved["state"]["epoch"], saved["state"]["tags"]["phase"]
    # Killed once phase 1's epoch was written; at worst phase 2's first epoch followed before the signal landed.
    assert (phase, done) in {(1, 1), (2, 2)}, saved["state"]
    assert f"Resuming from {run_dir / 'loss_state'}: {done} epoch(s) done; continuing with phase 2" in second.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["center_phases"]["resumed"] == {"phase": phase, "epoch": done, "batch": None}
    assert summary["epochs_run"] == 4 - done  # the epochs left, not the whole schedule
    # The unquantized centres are trained in phase 1 only: the resumed run ends with exactly the saved ones
    # (a run that had lost them would hold the zero initialisation or a retrained table).
    key = "losses/centers/table/0/.ATTRIBUTES/VARIABLE_VALUE"
    final = checkpoint_tensors(latest_state(run_dir / "loss_state"), key)[key]
    assert np.abs(saved["tensors"][key]).sum() > 0
    np.testing.assert_array_equal(final, saved["tensors"][key])
    # The model came back too: phase 2 (frozen) ends with the weights of the killed run's state.
    phase_2 = checkpoint_tensors(run_dir / "phases" / "phase_2", "model/")
    for name, value in phase_2.items():
        np.testing.assert_array_equal(value, saved["tensors"][name], err_msg=name)
    # TensorBoard's epoch axis runs on across the phases: the resumed process logs epochs done..3. (The killed
    # one's last epoch may be missing: a summary writer buffers, and SIGKILL gives it no chance to flush.)
    steps = set()
    for event_file in (run_dir / "logs" / "train").glob("events.out.tfevents.*"):
        for record in tf.data.TFRecordDataset(str(event_file)):
            event = tf.compat.v1.Event.FromString(record.numpy())
            steps.update(event.step for value in event.summary.value if value.tag == "epoch_loss")
    assert set(range(done, 4)) <= steps <= {0, 1, 2, 3}


@pytest.mark.slow
def test_centers_flagfile_runs_every_phase_on_the_synthetic_world(killed_and_resumed, checkpoint_tensors,
                                                                  quantizer_centers):
    run_dir, _, second, seconds = killed_and_resumed
    assert "Defaults for --dataset=synthetic" in second.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    phases = {record["phase"]: record for record in summary["center_phases"]["phases"]}
    assert sorted(phases) == [1, 2, 3] and all(phases[k]["finished"] for k in (1, 2, 3))
    assert [phases[k]["end_epoch"] for k in (1, 2, 3)] == [1, 3, 4]
    assert summary["flags"]["loss"] == ["centers"] and summary["flags"]["epochs"] == 4
    for k in (2, 3):
        metrics = phases[k]["final_metrics"]
        assert all(value is not None and np.isfinite(value) for value in metrics.values()), metrics
        assert {"quantized/image", "quantized/repulsion", "index_ce/text", "triplet/i2t"} <= set(metrics)
    assert np.isfinite(summary["final_train_metrics"]["loss"])
    # Phase 2 started from k-means over the unquantized centres: each quantized centre is the mean of the centres
    # assigned to it, and each unquantized centre is assigned to its nearest quantized one.
    assert summary["center_phases"]["quantizer_init"]["method"] == "kmeans"
    init = np.load(run_dir / "phases" / "quantizer_init.npz")
    centers = checkpoint_tensors(run_dir / "phases" / "phase_1", "losses/centers/")[
        "losses/centers/table/0/.ATTRIBUTES/VARIABLE_VALUE"].astype(np.float64)
    assert centers.shape == (48, 32) and init["centroids"].shape == (8, 32)
    for j in range(8):
        np.testing.assert_allclose(init["centroids"][j], centers[init["labels"] == j].mean(axis=0), atol=1e-5)
    distances = ((centers[:, None, :] - init["centroids"][None].astype(np.float64)) ** 2).sum(-1)
    np.testing.assert_array_equal(init["labels"], distances.argmin(axis=1))
    # The encoders did not move in phase 2 (the quantizer did); they did in phase 3.
    one, two, three = (checkpoint_tensors(run_dir / "phases" / f"phase_{k}", "") for k in (1, 2, 3))
    for name in one:
        if name.startswith("model/"):
            np.testing.assert_array_equal(one[name], two[name], err_msg=name)
    assert any(not np.array_equal(two[name], three[name]) for name in two if name.startswith("model/"))
    assert not np.allclose(quantizer_centers(two, 8, 32), init["centroids"])
    # Phase 3 adapted the margins every batch and logged them: epoch logs (TensorBoard) and per update.
    assert {"triplet/margin_x", "triplet/margin_y", "triplet/share_x"} <= set(phases[3]["final_metrics"])
    tags = set()
    for event_file in (run_dir / "logs").rglob("events.out.tfevents.*"):
        for record in tf.data.TFRecordDataset(str(event_file)):
            event = tf.compat.v1.Event.FromString(record.numpy())
            tags.update((value.tag, event.step) for value in event.summary.value)
    assert ("epoch_triplet/margin_x", 3) in tags
    # 3 batches of 16 out of 48 training images, q = 1: a margin decision after each (steps of phase 3).
    assert {step for tag, step in tags if tag == "triplet/margin_y"} == {1, 2, 3}
    print(f"resumed run: {seconds:.1f} s")
