"""Several workers on one machine's CPU, per engine: step time, input work and traffic per worker, 8 workers predicted.

For each engine (TensorFlow: `--strategy=multi_worker` with `TF_CONFIG`; JAX: `--strategy=multi_worker` with
`--coordinator_address / --num_processes / --process_id`, gloo's CPU collectives), the launcher trains the same
graded run with global negatives four ways:

    1 process, batch B              the reference
    1 process, batches B/2 and B/4  the same model with fewer rows: splits the step into a part that grows with the
                                    rows (towers, input) and a part that does not (the optimizer's update, fixed costs)
    2 processes, batch B            each process one worker with B / 2 rows of the global batch (kitm.data.own_rows)

The run: the demo's model (launch/demo.flags: the frozen small CNN of the things world, the BiGRU, the triplet summed
over the negatives, `--relevance=truth`) on a small things world built once (`--scenes`, 48 px), one caption per image
per step (`--captions_per_step=sample`, so a batch of B rows holds B images), `--epochs` epochs, no validation or
export. The figures per run:

- step time: Keras' own per-epoch "ms/step" (the launcher prints a line per epoch when its output is a file), the
  median over the epochs after the first (which traces or compiles the step);
- images decoded per worker per step: the pipeline's counter (summary.json's "input", kitm.data.own_rows);
- bytes gathered per worker per step, computed from the sizes (not captured from the wire): the global negatives'
  all-gather of the image and text embeddings, (W - 1) * (B / W) * D * 4 bytes each way and modality, and the
  gradients' all-reduce, 2 * (W - 1) / W * P * 4 bytes for P trainable weights (a ring all-reduce's traffic per
  worker); the relevance rows travel nowhere (every worker reads the global batch's per-row relevance features from
  the records itself);
- for 8 workers: images decoded B / 8, the bytes by the same formulas, and a step time from the one-process runs,
  t(b) = a + c * b fitted by least squares through b = B, B/2, B/4 (a >= 0): t_8 = a + c * B / 8 + bytes / bandwidth
  (at 10 and 100 Gbit/s), an estimate of what machines of this CPU would take, not a measurement.

On one machine the processes share its cores, so the two-process step is not faster here: what the two-process run
shows is that each worker does half the input work and that the run trains as one (tests/end_to_end check the
equality); the 8-worker row is the extrapolation the measured parts allow.

    python benchmarks/bench_multiworker.py [--engines tensorflow,jax] [--batch 128] [--scenes 2400] [--epochs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import socket
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
RUN_FLAGS = ("--flagfile=launch/demo.flags", "--captions_per_step=sample", "--eval_every_epochs=0", "--export=false",
             "--projector_samples=0", "--progress=true")
STEP_LINE = re.compile(r"^\s*(\d+)/(\d+) - \S+ - ([\d.]+)(ms|s)/step", re.MULTILINE)
FLOAT_BYTES = 4
BANDWIDTHS_GBIT = (10, 100)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _environment(engine: str, cache: pathlib.Path) -> dict:
    env = dict(os.environ, KERAS_BACKEND=engine, TF_CPP_MIN_LOG_LEVEL="2", HF_HUB_OFFLINE="1",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if engine == "jax":
        env.update(JAX_PLATFORMS="cpu", JAX_COMPILATION_CACHE_DIR=str(cache / "jax_cache"),
                   JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    return env


def _commands(engine: str, processes: int, flags: list) -> list[tuple[list, dict]]:
    """(command, extra environment) of each process."""
    base = [sys.executable, "-m", "kitm.launch", *flags]
    if processes == 1:
        return [(base, {})]
    if engine == "tensorflow":
        cluster = {"worker": [f"127.0.0.1:{_free_port()}" for _ in range(processes)]}
        return [([*base, "--strategy=multi_worker"],
                 {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})})
                for index in range(processes)]
    address = f"127.0.0.1:{_free_port()}"
    return [([*base, "--strategy=multi_worker", f"--coordinator_address={address}", f"--num_processes={processes}",
              f"--process_id={index}"], {}) for index in range(processes)]


def _run(engine: str, processes: int, batch: int, args, data_dir: pathlib.Path, work: pathlib.Path) -> dict:
    name = f"{engine}_{processes}p_b{batch}"
    run_dir = work / name
    flags = [*RUN_FLAGS, f"--data_dir={data_dir}", f"--run_dir={run_dir}", f"--batch_size={batch}",
             f"--epochs={args.epochs}", f"--lr_decay_epochs={args.epochs}"]
    env = _environment(engine, work)
    started = []
    for index, (command, extra) in enumerate(_commands(engine, processes, flags)):
        log = open(work / f"{name}.process{index}.txt", "w")
        started.append((subprocess.Popen(command, cwd=ROOT, env={**env, **extra, "TMPDIR": str(work)}, stdout=log,
                                         stderr=subprocess.STDOUT), log))
    codes = []
    try:
        for process, _ in started:
            codes.append(process.wait(timeout=args.timeout))
    finally:  # a run past its timeout (or an interrupt) leaves no process of it behind
        for process, log in started:
            if process.poll() is None:
                process.kill()
            log.close()
    output = (work / f"{name}.process0.txt").read_text()
    if any(codes):
        raise SystemExit(f"{name}: exit statuses {codes}; the chief's output ends:\n{output[-3000:]}")
    steps = [float(value) / (1.0 if unit == "ms" else 1e-3) for _, _, value, unit in STEP_LINE.findall(output)]
    if len(steps) < 2:
        raise SystemExit(f"{name}: fewer than 2 epochs' 'ms/step' lines in {work / f'{name}.process0.txt'}")
    summary = json.loads((run_dir / "summary.json").read_text())
    return {"engine": engine, "processes": processes, "batch": batch, "step_ms": statistics.median(steps[1:]),
            "epoch_step_ms": steps, "images_per_step": summary["input"]["images_decoded_per_batch"]
            if "input" in summary else float(batch), "summary": summary, "run_dir": str(run_dir)}


def _trainable_weights(run_dir: pathlib.Path) -> int:
    """The number of trainable weights of a run's model (the launcher's weights file, the towers' frozen parts
    excluded: what the gradients' all-reduce carries)."""
    import h5py

    with h5py.File(run_dir / "checkpoints" / "last.weights.h5") as weights:
        optimizer = weights["optimizer"]["vars"]
        # Adam keeps two slots per trainable weight after its step count and learning rate.
        sizes = [optimizer[key].size for key in sorted(optimizer, key=int)][2:]
        total = sum(sizes[0::2])
    return int(total)


def _gathered_bytes(workers: int, batch: int, dim: int, weights: int) -> dict:
    embeddings = 2 * (workers - 1) * (batch // workers) * dim * FLOAT_BYTES  # image and text embeddings
    gradients = int(2 * (workers - 1) / workers * weights * FLOAT_BYTES)
    return {"embeddings": embeddings, "gradients": gradients, "total": embeddings + gradients}


def _prediction(singles: list, workers: int, dim: int, weights: int) -> dict:
    import numpy as np

    batch = max(run["batch"] for run in singles)
    rows = np.array([run["batch"] for run in singles], float)
    times = np.array([run["step_ms"] for run in singles], float)
    per_row, fixed = np.polyfit(rows, times, 1)
    if fixed < 0:  # the fixed part cannot be negative: the line through the origin
        per_row, fixed = float(rows @ times / (rows @ rows)), 0.0
    traffic = _gathered_bytes(workers, batch, dim, weights)
    compute = float(fixed + per_row * batch / workers)
    return {"workers": workers, "images_per_step": batch / workers, "bytes": traffic, "fixed_ms": float(fixed),
            "per_row_ms": float(per_row), "compute_ms": compute,
            "step_ms": {gbit: compute + traffic["total"] * 8 / (gbit * 1e9) * 1e3 for gbit in BANDWIDTHS_GBIT}}


def _megabytes(count: int) -> str:
    return f"{count / 1e6:.2f} MB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", default="tensorflow,jax")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--scenes", type=int, default=2400)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a run may take")
    parser.add_argument("--work_dir", default=None, help="where the world and the runs go (default: a temporary one)")
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args()
    if args.batch % 8:
        raise SystemExit(f"--batch={args.batch}: must be a multiple of 8 (2 workers split it, 8 are predicted)")
    work = pathlib.Path(args.work_dir or tempfile.mkdtemp(prefix="bench_multiworker_"))
    work.mkdir(parents=True, exist_ok=True)
    data_dir = work / "things"
    if not (data_dir / "dataset.json").is_file():
        print(f"building a things world of {args.scenes} scenes into {data_dir}", flush=True)
        subprocess.run([sys.executable, "-m", "kitm.data.build", "--dataset=synthetic", "--world=things",
                        f"--out={data_dir}", f"--num_scenes={args.scenes}", "--seed=0", "--image_size=48",
                        f"--val_images={args.scenes // 10}", f"--test_images={args.scenes // 10}", "--quiet"],
                       cwd=ROOT, env=_environment("tensorflow", work), check=True)
    rows, predictions = [], []
    for engine in args.engines.split(","):
        runs = {}
        for processes, batch in ((1, args.batch), (1, args.batch // 2), (1, args.batch // 4), (2, args.batch)):
            print(f"{engine}: {processes} process(es), batch {batch} ...", flush=True)
            runs[(processes, batch)] = _run(engine, processes, batch, args, data_dir, work)
        full = runs[(1, args.batch)]
        dim = int(full["summary"]["flags"]["embedding_dim"])
        weights = _trainable_weights(pathlib.Path(full["run_dir"]))
        for run in runs.values():
            run["bytes"] = _gathered_bytes(run["processes"], run["batch"], dim, weights)
            rows.append({key: value for key, value in run.items() if key not in ("summary", "run_dir")})
        singles = [run for (processes, _), run in runs.items() if processes == 1]
        predictions.append({"engine": engine, "weights": weights, "dim": dim,
                            **_prediction(singles, 8, dim, weights)})
    cpus = os.cpu_count()
    print(f"\nsteps on this machine ({cpus} CPUs, shared by the processes), the demo's model, batch = global batch:")
    print("| engine | processes | batch | step (ms, median of epochs 2+) | images decoded per worker per step "
          "| bytes gathered per worker per step (embeddings + gradients) |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        traffic = row["bytes"]
        print(f"| {row['engine']} | {row['processes']} | {row['batch']} | {row['step_ms']:.0f} | "
              f"{row['images_per_step']:.0f} | {_megabytes(traffic['total'])} ({_megabytes(traffic['embeddings'])} + "
              f"{_megabytes(traffic['gradients'])}) |")
    print("\n8 workers predicted (global batch as above; step = fixed + per-row x B/8 + bytes / bandwidth):")
    print("| engine | trainable weights | images per worker per step | bytes per worker per step | fixed (ms) "
          "| per row (ms) | step at 10 Gbit/s (ms) | step at 100 Gbit/s (ms) | 1 process (ms) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for prediction, full in zip(predictions, [r for r in rows if r["processes"] == 1 and r["batch"] == args.batch]):
        print(f"| {prediction['engine']} | {prediction['weights']:,} | {prediction['images_per_step']:.0f} | "
              f"{_megabytes(prediction['bytes']['total'])} | {prediction['fixed_ms']:.0f} | "
              f"{prediction['per_row_ms']:.2f} | {prediction['step_ms'][10]:.0f} | {prediction['step_ms'][100]:.0f} | "
              f"{full['step_ms']:.0f} |")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"rows": rows, "predictions": predictions}, indent=1))


if __name__ == "__main__":
    main()
