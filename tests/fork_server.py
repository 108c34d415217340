"""A fork server for the tests' runs of kitm's commands (the `launch` and `kitm_python` fixtures of tests/conftest.py
start one per xdist worker, on first use).

A fresh interpreter running `python -m kitm.launch` first spends about 10 s importing TensorFlow, Keras and kitm
(more on two busy cores), and the suite starts dozens of them. This server imports those modules once and then forks
one child per run: the child starts where a fresh interpreter stands once its imports are done (nothing has run yet:
no TensorFlow op, no eager context, no flag parsed; the modules' state is what importing them left). It runs a module
as `python -m` does (`runpy`, `__main__`, the argument list in `sys.argv`, the working folder first on `sys.path`), a
source string as `python -c` does, a script as `python script.py` does, in the run's working folder and environment,
its file descriptors 1 and 2 (TensorFlow's C++ log too) written to the files the client names. Forking is safe here
because the server never runs TensorFlow: importing it starts no thread that holds a lock a child could need.

A request whose environment differs from the server's (a test's own KERAS_BACKEND, say: such variables are read
when the modules are imported) is not the server's business: the client runs those in a fresh interpreter.

Protocol: once its imports are done the server writes {"imported_env": the variables they set}; then one line of
JSON each way on stdin / stdout per run: {"argv", "cwd", "env", "stdout", "stderr"} (argv: what follows `python`:
["-m", module, *args], ["-c", source, *args] or [script, *args]) -> {"pid"} once the child is started, then
{"returncode"} once it has ended (negative: killed by that signal, as `subprocess` reports it). The server ends when
its stdin closes.
"""

import json
import os
import sys

# What `python -m kitm.launch` (and kitm's other commands) import before they do anything: TensorFlow, Keras and
# the experiment runner. Not the command modules themselves: the child runs those as `__main__`, and kitm.launch
# defines its absl flags when it is executed (a second copy would define them twice).
PRELOADED = ("kitm.tensorflow_logs", "tensorflow", "keras", "kitm.experiment")


def _child(request: dict) -> None:
    """In the forked child: become the run. Never returns: the run's SystemExit (or exception) unwinds to the top of
    this script, where the interpreter ends as a fresh one would (its threads joined, atexit handlers run, output
    flushed, a traceback and status 1 for an exception)."""
    import runpy

    os.setpgid(0, 0)  # its own process group: a timed-out run is killed with whatever it started
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.stdout.flush()
    sys.stderr.flush()
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    argv = request["argv"]
    if argv[0] == "-m":
        sys.path[0] = os.getcwd()  # as `python -m` puts the working folder first
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    elif argv[0] == "-c":  # the source runs in a fresh __main__, '' first on sys.path
        import types

        sys.path[0] = ""
        sys.argv = ["-c", *argv[2:]]
        main = types.ModuleType("__main__")
        sys.modules["__main__"] = main
        exec(compile(argv[1], "<string>", "exec"), main.__dict__)
    else:  # a script: its folder first on sys.path
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
        sys.argv = list(argv)
        runpy.run_path(argv[0], run_name="__main__")
    sys.exit(0)


def serve() -> None:
    sys.path[0] = os.getcwd()  # the repository (the client starts the server there), not tests/
    import importlib

    before = dict(os.environ)
    for name in PRELOADED:
        importlib.import_module(name)
    reply = sys.stdout
    # What importing set in the environment (TensorFlow sets TF2_BEHAVIOR, KMP_DUPLICATE_LIB_OK, ...): the client
    # does not count those as another environment when a test process has imported the same modules.
    imported = {key: value for key, value in os.environ.items() if before.get(key) != value}
    reply.write(json.dumps({"imported_env": imported}) + "\n")
    reply.flush()
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        reply.write(json.dumps({"pid": pid}) + "\n")
        reply.flush()
        _, status = os.waitpid(pid, 0)
        reply.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")
        reply.flush()


if __name__ == "__main__":
    serve()
