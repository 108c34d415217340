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

Protocol: messages of JSON on a SOCK_SEQPACKET socket (its descriptor the server's argument). Once its imports are
done the server sends {"imported_env": the variables they set}. A request {"argv", "cwd", "env", "stdout", "stderr"}
(argv: what follows `python`: ["-m", module, *args], ["-c", source, *args] or [script, *args]; each stream a file
path, "stdout" for stderr joining it, or the index of a descriptor sent with the request, the write end of a pipe)
is answered {"pid"} once the child is started; {"ended": pid, "returncode"} follows when a child ends (negative:
killed by that signal, as `subprocess` reports it). Several children may run at once. The server ends when the
client closes its end.
"""

import json
import os
import sys

# What `python -m kitm.launch` (and kitm's other commands) import before they do anything: TensorFlow, Keras and
# the experiment runner. Not the command modules themselves: the child runs those as `__main__`, and kitm.launch
# defines its absl flags when it is executed (a second copy would define them twice).
PRELOADED = ("kitm.tensorflow_logs", "tensorflow", "keras", "kitm.experiment")


def _child(request: dict, fds: list) -> None:
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
    # Each stream: a file path, the index of a descriptor sent with the request (a pipe the client reads), or
    # "stdout" (stderr joins stdout).
    for fd, where in ((1, request["stdout"]), (2, request["stderr"])):
        if where == "stdout":
            os.dup2(1, 2)
            continue
        target = fds[where] if isinstance(where, int) else os.open(where, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
    for target in fds:
        os.close(target)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    if os.environ.get("PYTHONUNBUFFERED"):  # read at start-up: what it would have made of the two streams
        sys.stdout.reconfigure(write_through=True)
        sys.stderr.reconfigure(write_through=True)
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


def serve(channel_fd: int) -> None:
    import importlib
    import select
    import socket

    sys.path[0] = os.getcwd()  # the repository (the client starts the server there), not tests/
    channel = socket.socket(fileno=channel_fd)  # SOCK_SEQPACKET: one message a request or a reply
    before = dict(os.environ)
    for name in PRELOADED:
        importlib.import_module(name)
    # What importing set in the environment (TensorFlow sets TF2_BEHAVIOR, KMP_DUPLICATE_LIB_OK, ...): the client
    # does not count those as another environment when a test process has imported the same modules.
    imported = {key: value for key, value in os.environ.items() if before.get(key) != value}
    channel.send(json.dumps({"imported_env": imported}).encode())
    running = set()
    while True:
        # Requests as they come; the children's ends looked for every 50 ms while any runs.
        ready, _, _ = select.select([channel], [], [], 0.05 if running else None)
        if ready:
            message, fds, _, _ = socket.recv_fds(channel, 1 << 22, 4)
            if not message:
                break
            pid = os.fork()
            if pid == 0:
                channel.close()
                _child(json.loads(message), fds)
            for fd in fds:
                os.close(fd)
            running.add(pid)
            channel.send(json.dumps({"pid": pid}).encode())
        for pid in list(running):
            ended, status = os.waitpid(pid, os.WNOHANG)
            if ended:
                running.discard(pid)
                channel.send(json.dumps({"ended": pid, "returncode": os.waitstatus_to_exitcode(status)}).encode())


if __name__ == "__main__":
    serve(int(sys.argv[1]))
