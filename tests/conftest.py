"""Shared pytest setup: quiet TensorFlow, offline sentence-transformers, the repository paths, the tiny synthetic
world, helpers that start kitm in a fresh interpreter, and the work units that let pytest-xdist (`-n 2` in
setup.cfg) run the suite on two workers without running an expensive fixture twice.

The tests mirror the package: the test of `kitm/<subpackage>/<module>.py` is `tests/<subpackage>/test_<module>.py`,
of `kitm/<module>.py` `tests/test_<module>.py`; whole runs through `python -m kitm.launch` (and kitm.study, the
README, the two-worker cluster) are under `tests/end_to_end/`. pytest imports test modules with
`--import-mode=importlib` (setup.cfg), so no test module imports another: what several share is a fixture here
(or in a folder's own conftest.py)."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# The sentence-embedding cache (kitm.relevance.embedding_cache) of the tests' runs: a fresh folder, not the user's.
import tempfile  # noqa: E402

os.environ["KITM_CACHE_DIR"] = tempfile.mkdtemp(prefix="kitm-test-cache-")
# JAX's persistent compilation cache, one folder for the whole session: pytest-xdist's workers inherit the environment
# of the process that started them, and every subprocess (the backend cases, the launcher on JAX) that of its test.
# Each short JAX process otherwise compiles the same small XLA programs again, one per eager op and shape: a tiny
# DualEncoder's first call costs 163 compilations, 34 s on the 2 busy cores, and 1.4 s from the cache. Entries are
# keyed by the program, the compile options and JAX's version, so a hit runs what a compilation would have built.
# Compilations of any length are cached (JAX's default keeps those over 1 s only); the process that made the folder
# removes it when its session finishes (pytest_sessionfinish); a folder the caller set is used and left alone.
_JAX_CACHE_MADE_HERE = "JAX_COMPILATION_CACHE_DIR" not in os.environ
if _JAX_CACHE_MADE_HERE:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="kitm-test-jax-cache-")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")

import contextlib
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"

# The launcher's tiny model on the synthetic world: what the launcher tests (and the end-to-end runs) train.
TINY_FLAGS = ("--dataset=synthetic", "--image_size=32", "--flip=false", "--eval_crop_fraction=1.0",
              "--embedding_dim=32", "--word_dim=16", "--text_units=16", "--batch_size=16", "--learning_rate=1e-3",
              "--relevance=truth", "--captions_per_step=sample", "--progress=false")

# Test modules that must share one xdist worker because they share a session-cached run (a module-scoped fixture
# already keeps each module's own runs to one worker), by their path from the repository root (a node id's start).
SHARED_RUN_GROUPS = {"tests/end_to_end/test_export.py": "production_run",
                     "tests/end_to_end/test_frozen_features.py": "production_run",
                     "tests/end_to_end/test_monitoring.py": "production_run",
                     "tests/index/test_build.py": "tiny_search_index",
                     "tests/search/test_app.py": "tiny_search_index"}


def work_unit(nodeid: str) -> str:
    """The xdist work unit of a test: its module, or the group of modules that share a session-cached run."""
    module = nodeid.split("::", 1)[0]
    return SHARED_RUN_GROUPS.get(module, module)


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: optional, so `-p no:xdist` still loads this file
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile`, with the modules of SHARED_RUN_GROUPS as one unit. A worker runs a whole unit, so the
    module-scoped fixtures (launcher runs, trained models, built worlds) and the shared production run happen
    once, as without xdist. (`--dist loadgroup` with xdist_group marks would say the same, but pytest-xdist 3.8
    marks a group by rewriting `item._nodeid`, which pytest 9.2 no longer reads: the groups are silently lost.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleUnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return work_unit(nodeid)

    return ModuleUnitScheduling(config, log)


def pytest_sessionfinish(session, exitstatus):
    """The session's JAX compilation cache goes with it (under xdist, once the workers are done)."""
    if _JAX_CACHE_MADE_HERE:
        import shutil

        shutil.rmtree(os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    """Work units holding `slow` tests first (most slow tests first, otherwise collection order), the order within
    a unit unchanged. xdist hands the units out in this order (`--no-loadscope-reorder`): a long unit started
    last would leave the other worker idle at the end. Without xdist the order is the same."""
    units = {}
    for item in items:
        units.setdefault(work_unit(item.nodeid), []).append(item)
    rank = {name: (-sum(1 for item in members if item.get_closest_marker("slow")), position)
            for position, (name, members) in enumerate(units.items())}
    items[:] = [item for name in sorted(units, key=rank.__getitem__) for item in units[name]]


@pytest.fixture(scope="session")
def repo_root() -> pathlib.Path:
    """The checkout under test (its `launch/` flagfiles, README.md, kitm/)."""
    return ROOT


@pytest.fixture(scope="session")
def shared_dir() -> pathlib.Path:
    if not SHARED.is_dir():
        raise RuntimeError(f"The shared data folder is expected beside the checkout at {SHARED}.")
    return SHARED


def kitm_env(**extra) -> dict:
    """The environment of a child process that imports kitm: this checkout first on PYTHONPATH, TensorFlow quiet."""
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(ROOT), **extra)


# The fork server's environment: kitm_env() before any test has changed os.environ.
_SESSION_KITM_ENV = kitm_env()


@pytest.fixture(scope="session")
def subprocess_env():
    """`subprocess_env(**extra)`: a child process's environment with this checkout on PYTHONPATH."""
    return kitm_env


@pytest.fixture(scope="session")
def tiny_flags() -> list:
    """The launcher flags of the tiny model on the synthetic world (a fresh list each time it is asked for)."""
    return list(TINY_FLAGS)


class ForkServer:
    """The client of tests/fork_server.py: `run(argv, cwd, env, timeout)` is `python *argv` (argv: "-m", a module and
    its arguments; "-c", a source string and its arguments; or a script and its arguments) with its output captured (a
    CompletedProcess, TimeoutExpired past `timeout`), started as a child forked from a server that has already imported
    TensorFlow, Keras and kitm (about 10 s saved a run; the child starts as a fresh interpreter stands after those
    imports). The server starts on first use, in `kitm_env()` as it was when this file was imported (before any test's
    monkeypatching); a run in another environment (variables read at import, a test's KERAS_HOME say) gets a fresh
    interpreter instead. `start(argv, cwd, env, stdout, stderr, text)` is the same run as `subprocess.Popen` starts it
    (a ForkedProcess); several may run at once."""

    # pytest's per-test note, and what importing torch's compiler (sentence-transformers does) sets: read by nothing
    # the server imports.
    # PYTHONUNBUFFERED is read at start-up, and the child applies it (tests/fork_server.py).
    _IGNORED = ("PYTEST_CURRENT_TEST", "TORCHINDUCTOR_CACHE_DIR", "PYTHONUNBUFFERED")

    def __init__(self, env):
        self.process = None
        self.env = dict(env)
        self.imported_env = {}
        self.channel = None
        self.ended = {}  # pid -> return code, as the server reports the ends

    def _same_env(self, env) -> bool:
        """Whether `env` is the server's, but for _IGNORED and what the server's imports set themselves (a test
        process that imported TensorFlow holds TensorFlow's variables too)."""
        def kept(e):
            return {k: v for k, v in e.items()
                    if k not in self._IGNORED and not (k in self.imported_env and v == self.imported_env[k])}
        return kept(env) == kept(self.env)

    def _forks(self, env) -> bool:
        """Whether a run in `env` is forked (the server started first where it is not running)."""
        if self.process is None or self.process.poll() is not None:
            self._start()
        return self._same_env(env)

    def _start(self):
        import json
        import socket

        self.channel, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.process = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fork_server.py"), str(theirs.fileno())],
                                        cwd=ROOT, env=self.env, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
        theirs.close()
        self.ended = {}
        self.imported_env = json.loads(self._message(None))["imported_env"]

    def _message(self, deadline):
        """The server's next message, or None past `deadline` (time.monotonic; None: wait)."""
        import select
        import time

        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, _, _ = select.select([self.channel], [], [], left)
        if not ready:
            return None
        message = self.channel.recv(1 << 22)
        if not message:
            raise RuntimeError("tests/fork_server.py ended unexpectedly (its output is above)")
        return message

    def collect(self, deadline) -> bool:
        """Read one message (a child's end) before `deadline`; False if none came."""
        import json

        message = self._message(deadline)
        if message is None:
            return False
        reply = json.loads(message)
        assert "ended" in reply, reply
        self.ended[reply["ended"]] = reply["returncode"]
        return True

    def _stream(self, spec, which, sent):
        """A stream's request value and the client's read end (or None): spec as subprocess.Popen takes it, or a
        file path."""
        if spec == subprocess.PIPE:
            read_end, write_end = os.pipe()
            sent.append(write_end)
            return len(sent) - 1, read_end
        if spec == subprocess.STDOUT:
            return "stdout", None
        if spec == subprocess.DEVNULL:
            return os.devnull, None
        if isinstance(spec, (str, os.PathLike)):
            return str(spec), None
        fd = (which if spec is None else spec if isinstance(spec, int) else spec.fileno())
        sent.append(os.dup(fd))
        return len(sent) - 1, None

    def start(self, argv, cwd, env, stdout=None, stderr=None, text=False):
        """`subprocess.Popen([python, *argv], cwd, env, stdout, stderr, text)`: a ForkedProcess, or a Popen in a
        fresh interpreter where `env` is not the server's."""
        import json
        import socket

        command = [sys.executable, *map(str, argv)]
        if not self._forks(env):
            return subprocess.Popen(command, cwd=cwd, env=env, stdout=stdout, stderr=stderr, text=text)
        sent = []
        out, out_read = self._stream(stdout, 1, sent)
        err, err_read = self._stream(stderr, 2, sent)
        request = {"argv": command[1:], "cwd": str(cwd), "env": dict(env), "stdout": out, "stderr": err}
        try:
            socket.send_fds(self.channel, [json.dumps(request).encode()], sent)
        finally:
            for fd in sent:
                os.close(fd)
        while True:  # ends of other children may come first
            reply = json.loads(self._message(None))
            if "pid" in reply:
                break
            self.ended[reply["ended"]] = reply["returncode"]
        wrap = (lambda fd: fd if fd is None else open(fd, "r" if text else "rb", errors="replace" if text else None))
        return ForkedProcess(self, command, reply["pid"], wrap(out_read), wrap(err_read))

    def run(self, argv, cwd, env, timeout):
        """`subprocess.run([python, *argv], cwd, env, capture_output=True, text=True, timeout)`."""
        import signal

        if not self._forks(env):
            return subprocess.run([sys.executable, *map(str, argv)], cwd=cwd, env=env, capture_output=True, text=True,
                                  timeout=timeout)
        with tempfile.TemporaryDirectory(prefix="kitm-fork-") as folder:
            out, err = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
            process = self.start(argv, cwd, env, stdout=out, stderr=err)
            read = lambda path: open(path, errors="replace").read() if os.path.exists(path) else ""  # noqa: E731
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                raise subprocess.TimeoutExpired(process.args, timeout, output=read(out), stderr=read(err)) from None
            return subprocess.CompletedProcess(process.args, process.returncode, read(out), read(err))

    def close(self):
        if self.process is not None and self.process.poll() is None:
            self.channel.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()


class ForkedProcess:
    """What subprocess.Popen gives, for a child of tests/fork_server.py: pid, args, stdout and stderr (the read ends
    of pipes, or None), returncode, poll, wait, communicate, send_signal, terminate, kill."""

    def __init__(self, server, args, pid, stdout, stderr):
        self.server, self.args, self.pid, self.stdout, self.stderr = server, args, pid, stdout, stderr
        self.stdin = None
        self.returncode = None

    def poll(self):
        import time

        while self.returncode is None and self.pid not in self.server.ended and self.server.collect(time.monotonic()):
            pass
        if self.returncode is None and self.pid in self.server.ended:
            self.returncode = self.server.ended.pop(self.pid)
        return self.returncode

    def wait(self, timeout=None):
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if not self.server.collect(deadline):
                raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def communicate(self, input=None, timeout=None):
        import threading

        assert input is None, "the forked runs read nothing"
        results = {}
        readers = [threading.Thread(target=lambda name=name, stream=stream: results.__setitem__(name, stream.read()),
                                    daemon=True)
                   for name, stream in (("out", self.stdout), ("err", self.stderr)) if stream is not None]
        for reader in readers:
            reader.start()
        self.wait(timeout)
        for reader in readers:
            reader.join()
        return results.get("out"), results.get("err")

    def send_signal(self, signal_number):
        if self.poll() is None:
            os.kill(self.pid, signal_number)

    def terminate(self):
        import signal

        self.send_signal(signal.SIGTERM)

    def kill(self):
        import signal

        self.send_signal(signal.SIGKILL)


@pytest.fixture(scope="session")
def fork_server():
    server = ForkServer(_SESSION_KITM_ENV)
    yield server
    server.close()


@pytest.fixture(scope="session")
def launch(fork_server):
    """`launch(args, cwd=<repository>, timeout=600)`: `python -m kitm.launch *args` as a fresh interpreter would
    run it (forked from tests/fork_server.py, past its imports), output captured (a CompletedProcess)."""
    def run(args, cwd=ROOT, timeout=600):
        return fork_server.run(["-m", "kitm.launch", *args], cwd, kitm_env(), timeout)
    return run


@pytest.fixture(scope="session")
def kitm_popen(fork_server):
    """`kitm_popen(argv, cwd=<repository>, env=None, stdout=None, stderr=None, text=False)`: `subprocess.Popen` of
    `python *argv` (as `kitm_python`), forked from tests/fork_server.py past its imports where `env` (default: this
    checkout on PYTHONPATH, TensorFlow quiet) is the server's; otherwise a fresh interpreter. stdout and stderr as
    Popen takes them (PIPE, STDOUT, DEVNULL, a file); stdin is empty."""
    def start(argv, cwd=ROOT, env=None, stdout=None, stderr=None, text=False):
        return fork_server.start(argv, cwd, kitm_env() if env is None else env, stdout, stderr, text)
    return start


@pytest.fixture(scope="session")
def kitm_python(fork_server):
    """`kitm_python(argv, cwd=<repository>, env=None, timeout=600)`: `python *argv` ("-m", a kitm command and its
    arguments; "-c", a source string; or a script) as a fresh interpreter would run it, in `env` (default: this checkout
    on PYTHONPATH, TensorFlow quiet), output captured (a CompletedProcess). Forked from tests/fork_server.py past its
    imports where the environment is the server's; otherwise a fresh interpreter."""
    def run(argv, cwd=ROOT, env=None, timeout=600):
        return fork_server.run(argv, cwd, kitm_env() if env is None else env, timeout)
    return run


@pytest.fixture
def launch_refused(capsys):
    """`launch_refused(args) -> stderr`: kitm.launch's `main` on `args` in this process, expected to stop with exit
    status 2 before training (the refusals of flags and data, which a fresh interpreter would only add its ~7 s
    of imports to); absl's flags are reset before and after. What only the command line does (absl's parsing of a
    flagfile, the exit status of the process) is tested through `launch`."""
    from absl import flags

    from kitm import launch as launcher

    def run(args):
        flags.FLAGS.unparse_flags()
        try:
            flags.FLAGS(["kitm.launch", *args])
            with pytest.raises(SystemExit) as stopped:
                launcher.main(["kitm.launch"])
        finally:
            flags.FLAGS.unparse_flags()
        assert stopped.value.code == 2
        return capsys.readouterr().err
    return run


# The launcher's `main` on each argument list in one interpreter (as `launch_refused` does in this one): on another
# backend each refusal comes before training, so one start of the interpreter and its backend serves them all.
_REFUSALS = """
import contextlib, io, json, sys

from absl import flags

from kitm import launch as launcher

outcomes = []
for args in json.loads(sys.argv[1]):
    flags.FLAGS.unparse_flags()
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            flags.FLAGS(["kitm.launch", *args])
            launcher.main(["kitm.launch"])
            code = 0
        except SystemExit as stopped:
            code = stopped.code
    outcomes.append({"code": code, "stderr": err.getvalue()})
print(json.dumps(outcomes))
"""


@pytest.fixture(scope="session")
def launch_refused_on():
    """`launch_refused_on(backend, argument_lists, python_path=()) -> [{"code", "stderr"}]`: kitm.launch's `main` on
    each argument list, one after another in one fresh interpreter with KERAS_BACKEND=backend (and `python_path`'s
    folders after this checkout on PYTHONPATH)."""
    import json

    def run(backend, argument_lists, python_path=()):
        env = kitm_env(KERAS_BACKEND=backend)
        env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], *map(str, python_path)])
        done = subprocess.run([sys.executable, "-c", _REFUSALS, json.dumps(argument_lists)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-4000:]
        return json.loads(done.stdout.strip().splitlines()[-1])
    return run


@pytest.fixture(scope="session")
def run_python():
    """`run_python(script, *args, cwd, timeout=300)`: a Python source string in a fresh interpreter, with the
    caller's environment (TensorFlow quiet); a serving client's view needs nothing of kitm."""
    def run(script, *args, cwd, timeout=300):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        return subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True,
                              env=env, cwd=cwd, timeout=timeout)
    return run


@pytest.fixture(scope="session")
def identity_model():
    """`identity_model(dim)`: a DualEncoder whose embeddings are its inputs, normalised (identity towers and
    projections, frozen): the test chooses the geometry."""
    import numpy as np
    import tensorflow as tf

    import keras
    from kitm.models import DualEncoder

    def build(dim):
        model = DualEncoder(keras.layers.Identity(), keras.layers.Identity(), embedding_dim=dim)
        model.build_from_inputs({"image": tf.TensorSpec([None, dim]), "tokens": tf.TensorSpec([None, dim])})
        for projection in (model.image_projection, model.text_projection):
            projection.kernel.assign(np.eye(dim, dtype=np.float32))
            projection.bias.assign(np.zeros(dim, np.float32))
        model.trainable = False
        return model
    return build


@pytest.fixture(scope="session")
def tiny_dual_encoder():
    """`tiny_dual_encoder(gru=True)`: a built DualEncoder over 16 px images and 5 tokens of a 12-word vocabulary
    (a 4-filter CNN; a GRU, or a mean of word embeddings with gru=False), joint space 6."""
    import tensorflow as tf

    import keras
    from kitm.layers import GRUTextEncoder, SmallConvEncoder
    from kitm.models import DualEncoder

    def build(gru=True):
        text = GRUTextEncoder(12, 4, 4) if gru else keras.Sequential([keras.layers.Embedding(12, 4),
                                                                      keras.layers.GlobalAveragePooling1D()])
        model = DualEncoder(SmallConvEncoder(filters=(4, 4, 4, 4), width=8), text, embedding_dim=6)
        model.build_from_inputs({"image": tf.TensorSpec([None, 16, 16, 3]),
                                 "tokens": tf.TensorSpec([None, 5], tf.int32)})
        return model
    return build


@pytest.fixture(scope="session")
def tiny_batches():
    """`tiny_batches(steps=2, batch=6)`: a dataset of `steps` batches for `tiny_dual_encoder` (fixed random images and
    tokens, each image its own index)."""
    import numpy as np
    import tensorflow as tf

    def make(steps=2, batch=6):
        rng = np.random.default_rng(0)
        x = {"image": rng.uniform(size=(steps * batch, 16, 16, 3)).astype(np.float32),
             "tokens": rng.integers(1, 12, size=(steps * batch, 5)).astype(np.int32)}
        y = {"image_index": np.arange(steps * batch, dtype=np.int32)}
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch)
    return make


@pytest.fixture(scope="session")
def read_events():
    """`read_events(directory)`: TensorBoard event files read back."""
    import tensorflow as tf

    def read(directory):
        """{tag: [(step, value or plugin content)]} of every event file directly in `directory`."""
        tags = {}
        for event_file in sorted(directory.glob("events.out.tfevents.*")):
            for event in tf.compat.v1.train.summary_iterator(str(event_file)):
                for value in event.summary.value:
                    plugin = value.metadata.plugin_data
                    if plugin.plugin_name == "hparams":
                        content = plugin.content
                    elif value.HasField("tensor"):
                        content = tf.make_ndarray(value.tensor)
                    else:
                        content = value.simple_value
                    tags.setdefault(value.tag, []).append((event.step, content))
        return tags
    return read


@pytest.fixture(scope="session")
def checkpoint_tensors():
    """`checkpoint_tensors(state_dir, prefix)`: {key: array} of the tensors under `prefix` in `<state_dir>/ckpt`
    (the loss-state and phase checkpoints of the semantic centers objective)."""
    import tensorflow as tf

    def read(state_dir, prefix):
        reader = tf.train.load_checkpoint(str(pathlib.Path(state_dir) / "ckpt"))
        return {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map() if key.startswith(prefix)}
    return read


@pytest.fixture(scope="session")
def quantizer_centers():
    """`quantizer_centers(tensors, count, dim)`: the quantized centres among a state's tensors, the [N_q, D] one
    under the quantizer."""
    def find(tensors, count, dim):
        (value,) = [v for k, v in tensors.items()
                    if k.startswith("losses/quantized/quantizer/") and v.shape == (count, dim)]
        return value
    return find


@pytest.fixture(scope="session")
def random_ranking_rsum():
    """rsum (R@1, 5, 10 both ways, in points) of random rankings on n test images with 5 captions each, simulated:
    a function of n giving (mean, standard deviation, the 99.9th percentile) over 4,000 rankings. A caption query's
    image has a uniform rank among n; an image query's first right caption is the best of 5 uniform places among 5n.
    A learning test with a few dozen test images compares its rsum with this distribution, not with a multiple of
    its mean (runs of the same settings differ by CPU: oneDNN's kernels round differently on another processor)."""
    import numpy as np

    def simulate(n: int, captions: int = 5, rankings: int = 4000) -> tuple[float, float, float]:
        rng = np.random.default_rng(0)
        caption_ranks = rng.integers(1, n + 1, size=(rankings, captions * n))
        places = np.argsort(np.argsort(rng.random((rankings, n, captions * n)), axis=-1), axis=-1)
        image_ranks = places[..., :captions].min(axis=-1) + 1
        rsum = sum(100 * ((caption_ranks <= k).mean(-1) + (image_ranks <= k).mean(-1)) for k in (1, 5, 10))
        return float(rsum.mean()), float(rsum.std()), float(np.quantile(rsum, 0.999))

    return simulate


@pytest.fixture(scope="session")
def tiny_synthetic(tmp_path_factory) -> pathlib.Path:
    """A 120-scene synthetic dataset (96 train / 12 val / 12 test), built once per test session (under xdist once
    per worker: it takes well under a second). The shapes world: the machinery's tests (pipelines, losses through
    the launcher, resuming, serving) learn its few shapes in a few steps; the things world's own tests use
    `tiny_things`."""
    from kitm.data.synthetic_records import build_synthetic

    root = tmp_path_factory.mktemp("data") / "synthetic"
    build_synthetic(root, num_scenes=120, seed=7, image_size=32, num_shards=2, progress=False, world="shapes")
    return root


@pytest.fixture(scope="session")
def tiny_things(tmp_path_factory) -> pathlib.Path:
    """A 120-scene things world at 48 px (the shipped tower's side), with CIDEr-D rows, built once per session."""
    from kitm.data.synthetic_records import build_synthetic

    root = tmp_path_factory.mktemp("data") / "things"
    build_synthetic(root, num_scenes=120, seed=7, image_size=48, num_shards=2, progress=False)
    return root


def _export_tiny_search_model(base: pathlib.Path, vocabulary, seed: int) -> pathlib.Path:
    import keras
    import tensorflow as tf

    from kitm.layers import CaptionTokenizer, SmallConvEncoder
    from kitm.models import DualEncoder
    from kitm.serving import export_new_version

    keras.utils.set_random_seed(seed)
    tokenizer = CaptionTokenizer(vocabulary, 12, name="tokenizer")
    # A bag-of-words text tower: a GRU's graph costs seconds to trace and export, and nothing here needs one.
    text = keras.Sequential([keras.layers.Embedding(tokenizer.vocabulary_size, 8), keras.layers.GlobalAveragePooling1D()])
    model = DualEncoder(SmallConvEncoder(filters=(4, 4, 4, 4), width=8), text, embedding_dim=8)
    model({"image": tf.zeros([1, 32, 32, 3]), "tokens": tf.zeros([1, 12], tf.int32)})
    return pathlib.Path(export_new_version(model, tokenizer, base / "export", image_size=32))


@pytest.fixture(scope="session")
def tiny_search_run(tiny_synthetic, tmp_path_factory) -> pathlib.Path:
    """A run directory (summary.json naming tiny_synthetic, export/1) holding an untrained tiny model's SavedModel
    over 32 px images (a 4-filter CNN, a bag of words; joint space 8): what kitm.index and kitm.search tests embed
    with."""
    import json

    run = tmp_path_factory.mktemp("search_model") / "run"
    _export_tiny_search_model(run, _tiny_words(tiny_synthetic), seed=0)
    (run / "summary.json").write_text(json.dumps({"flags": {"data_dir": str(tiny_synthetic)}}))
    return run


def _tiny_words(data_dir) -> list:
    from kitm.data.split_reading import read_split

    return sorted({word for caption in read_split(data_dir, "train", with_images=False).captions
                   for word in caption.lower().split()})


@pytest.fixture(scope="session")
def other_search_model(tiny_synthetic, tmp_path_factory) -> pathlib.Path:
    """The SavedModel of tiny_search_run's architecture with other weights: another embedding space."""
    return _export_tiny_search_model(tmp_path_factory.mktemp("other_model"), _tiny_words(tiny_synthetic), seed=1)


@pytest.fixture(scope="session")
def tiny_search_index(tiny_search_run, tiny_synthetic, tmp_path_factory) -> pathlib.Path:
    """The index (kitm.index) of tiny_synthetic's test split (12 images, 60 captions, the world's truth) embedded by
    tiny_search_run's model."""
    from kitm.index import BuildOptions, build_index, dataset_source

    out = tmp_path_factory.mktemp("search_index") / "index"
    build_index(dataset_source(tiny_synthetic, "test"), tiny_search_run / "export" / "1", out,
                BuildOptions(progress=False, chunk_size=5))
    return out


# ---- the same computation on every Keras 3 backend (tests/backend_cases/run.py) ----------------------------------
BACKENDS = ("tensorflow", "jax", "torch")


def _backend_available(backend: str) -> bool:
    import importlib.util

    return importlib.util.find_spec({"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}[backend]) is not None


def _case_answer(process):
    """The next answer of a `run.py --serve` interpreter (the JSON after its marker; other lines skipped), or None
    when it stops. (A case that hangs is stopped by pytest-timeout, setup.cfg.)"""
    import json

    marker = "kitm-case-answer: "
    for line in process.stdout:
        if line.startswith(marker):
            return json.loads(line[len(marker):])
    return None


@pytest.fixture(scope="session")
def backend_results(tmp_path_factory):
    """``backend_results(case_file, backend) -> {name: float64 array}``: a case file of tests/backend_cases/ run
    under ``KERAS_BACKEND=backend`` (Keras picks its backend once per process) in an interpreter of that backend kept
    for the session (`run.py --serve`: one start per backend and xdist worker, not one per case file; each case
    from a cleared Keras session), each (file, backend) once per session. A backend that is not installed skips
    the test that asks for it."""
    import json

    cache: dict[tuple[str, str], dict] = {}
    servers: dict[str, subprocess.Popen] = {}
    folder = tmp_path_factory.mktemp("backend_results")

    def server(backend):
        if backend not in servers or servers[backend].poll() is not None:
            env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3",
                   "JAX_PLATFORMS": "cpu", "CUDA_VISIBLE_DEVICES": ""}
            servers[backend] = subprocess.Popen(
                [sys.executable, str(ROOT / "tests" / "backend_cases" / "run.py"), "--serve"], env=env, cwd=ROOT,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(folder / f"{backend}.stderr", "w"),
                text=True)
        return servers[backend]

    def run(case_file: str, backend: str) -> dict:
        if not _backend_available(backend):
            pytest.skip(f"the {backend} backend is not installed here")
        key = (str(case_file), backend)
        if key not in cache:
            case = ROOT / "tests" / "backend_cases" / case_file
            out = folder / f"{case.stem}.{backend}.npz"
            process = server(backend)
            process.stdin.write(json.dumps({"case": str(case), "out": str(out)}) + "\n")
            process.stdin.flush()
            answer = _case_answer(process)
            if answer is None:
                raise AssertionError(f"{case_file} on {backend}: the case interpreter stopped (exit status "
                                     f"{process.wait()}; its stderr: {folder / f'{backend}.stderr'}).")
            if not answer["ok"]:
                raise AssertionError(f"{case_file} on {backend} failed:\n{answer['error']}")
            import numpy as np

            with np.load(out) as data:
                cache[key] = {name: data[name] for name in data.files}
        return cache[key]

    yield run
    for process in servers.values():
        process.stdin.close()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture(scope="session")
def assert_matches_tensorflow(backend_results):
    """``assert_matches_tensorflow(case_file, backend, rtol=..., atol=...)``: the case file run on `backend` gives the
    same names as on TensorFlow and every array equal to TensorFlow's within the tolerance (np.testing.assert_allclose
    keywords; each test states its own and why)."""
    import numpy as np

    def check(case_file: str, backend: str, **tolerance) -> dict:
        reference = backend_results(case_file, "tensorflow")
        results = backend_results(case_file, backend)
        assert set(results) == set(reference)
        for name in reference:
            np.testing.assert_allclose(results[name], reference[name], err_msg=name, **tolerance)
        return results

    return check
