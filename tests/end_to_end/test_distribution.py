"""End to end: two real MultiWorkerMirroredStrategy workers of the launcher on 127.0.0.1 train together (with global
negatives), and only the chief writes the run directory."""

import json
import os
import socket
import subprocess
import sys

import h5py
import numpy as np
import pytest


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@pytest.mark.slow
def test_two_workers_on_localhost_train_together_and_only_the_chief_writes(tiny_synthetic, tmp_path, tiny_flags, repo_root,
                                                                          kitm_python):
    run_dir, scratch = tmp_path / "run", tmp_path / "scratch"
    scratch.mkdir()
    cluster = {"worker": [f"127.0.0.1:{port}" for port in _free_ports(2)]}
    args = [sys.executable, "-m", "kitm.launch", *tiny_flags, f"--data_dir={tiny_synthetic}", f"--run_dir={run_dir}",
            "--epochs=1", "--eval_every_epochs=0", "--strategy=multi_worker"]
    workers = []
    for index in (0, 1):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TMPDIR=str(scratch),
                   TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}))
        workers.append(subprocess.Popen(args, cwd=repo_root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True))
    outputs = []
    try:
        for worker in workers:
            outputs.append(worker.communicate(timeout=480))
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
    for worker, (out, err) in zip(workers, outputs):
        assert worker.returncode == 0, out[-2000:] + err[-4000:]

    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["workers"] == {"count": 2, "chief": True} and summary["replicas"] == 2
    # The triplet resolves --negatives=auto to global: each worker's replica gathers the other's rows, and its
    # relevance rows [8, 16] come from a pipeline that reads every record (docs/scale.md).
    assert summary["flags"]["negatives"] == "global"
    # Global batch 16 = 2 replicas x 8 rows: 96 images make 6 steps, not 96 / (2 x 16) = 3.
    assert summary["steps_per_epoch"] == 6 and summary["optimizer_steps"] == 6
    assert np.isfinite(summary["history"]["loss"][0])
    with h5py.File(run_dir / "checkpoints" / "last.weights.h5") as weights:
        assert int(weights["optimizer/vars/0"][()]) == 6  # the optimizer's iterations
    assert (run_dir / "export" / "1" / "saved_model.pb").is_file()
    # One checkpoint, one export, one summary: the chief's; the other worker's scratch directory is gone.
    assert sorted(p.name for p in run_dir.iterdir()) == ["checkpoints", "export", "logs", "summary.json",
                                                        "summary.per_query.npz", "vocabulary.txt"]
    assert list((run_dir / "checkpoints").iterdir()) == [run_dir / "checkpoints" / "last.weights.h5"]
    assert list(scratch.iterdir()) == []
    # The non-chief wrote its summary into its scratch directory (removed since).
    assert f"This worker's files went to {scratch}" in outputs[1][0]
    # Each worker decoded only its own rows' images (kitm.data.own_rows): 8 of each global batch's 16.
    assert summary["input"]["images_decoded_per_batch"] == 8.0 and summary["input"]["batches"] >= 6
    # And yet the two workers trained the model of one worker with the whole batch over the same two replicas
    # (--strategy=mirrored --cpu_devices=2; not one device: each replica's BatchNorm normalizes its own 8 rows):
    # the same weights after the 6 steps.
    one_dir = tmp_path / "one"
    one_args = [a for a in args if not a.startswith(("--run_dir=", "--strategy="))]
    one = kitm_python([*one_args[1:], f"--run_dir={one_dir}", "--export=false", "--strategy=mirrored",
                       "--cpu_devices=2"], cwd=repo_root, timeout=480)
    assert one.returncode == 0, one.stdout[-2000:] + one.stderr[-4000:]
    with h5py.File(run_dir / "checkpoints" / "last.weights.h5") as two_file, \
            h5py.File(one_dir / "checkpoints" / "last.weights.h5") as one_file:
        names = []
        one_file.visititems(lambda name, item: names.append(name) if isinstance(item, h5py.Dataset) else None)
        assert len(names) > 10
        for name in names:
            np.testing.assert_allclose(two_file[name][()], one_file[name][()], atol=1e-5, err_msg=name)
