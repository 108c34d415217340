"""tests/fork_server.py (the `kitm_python` and `launch` fixtures): a forked run behaves as `python -c` / `python -m` in
a fresh interpreter would: exit status, both output streams (file-descriptor writes too), the working folder on
sys.path, the environment, atexit handlers and threads at the end, a timeout that kills the run."""

import os
import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent("""
    import atexit, json, os, sys, threading, time
    atexit.register(lambda: print("atexit ran"))
    threading.Thread(target=lambda: (time.sleep(0.2), print("thread finished"))).start()
    os.write(2, b"fd 2 line\\n")
    print(json.dumps({"argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(), "probe": os.environ.get("PROBE"),
                      "tensorflow_ready": "tensorflow" in sys.modules, "main": __name__}))
    sys.exit(int(sys.argv[1]))
""")


@pytest.fixture
def env(subprocess_env):
    return subprocess_env()


def test_a_forked_source_runs_as_python_dash_c(kitm_python, tmp_path, subprocess_env):
    import json

    import tensorflow  # noqa: F401  (importing it sets variables in os.environ: still the server's environment)

    env = subprocess_env()
    done = kitm_python(["-c", PROBE, "3", "x"], cwd=tmp_path, env=env)
    assert done.returncode == 3, done.stderr
    facts = json.loads(done.stdout.splitlines()[0])
    assert facts == {"argv": ["-c", "3", "x"], "path0": "", "cwd": str(tmp_path), "probe": None,
                     "tensorflow_ready": True, "main": "__main__"}  # TensorFlow imported: the server's
    assert done.stdout.splitlines()[1:] == ["thread finished", "atexit ran"]
    assert "fd 2 line" in done.stderr
    fresh = subprocess.run([sys.executable, "-c", PROBE, "3", "x"], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=120)
    assert (fresh.returncode, fresh.stdout.splitlines()[1:]) == (3, done.stdout.splitlines()[1:])


def test_a_module_runs_as_python_dash_m_with_the_working_folder_first(kitm_python, tmp_path, env):
    (tmp_path / "probe_module.py").write_text(PROBE.replace("int(sys.argv[1])", "0"))
    done = kitm_python(["-m", "probe_module"], cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert f'"path0": "{tmp_path}"' in done.stdout and '"argv": ["' + str(tmp_path / "probe_module.py") in done.stdout


def test_an_exception_gives_status_1_and_its_traceback(kitm_python, env):
    done = kitm_python(["-c", "raise ValueError('named')"], env=env)
    assert done.returncode == 1 and "ValueError: named" in done.stderr


def test_another_environment_gets_a_fresh_interpreter(kitm_python, tmp_path, env):
    done = kitm_python(["-c", PROBE, "0"], cwd=tmp_path, env=dict(env, PROBE="yes"))
    assert done.returncode == 0, done.stderr
    assert '"probe": "yes"' in done.stdout and '"tensorflow_ready": false' in done.stdout


def test_a_run_past_its_timeout_is_killed_and_the_server_goes_on(kitm_python, env):
    with pytest.raises(subprocess.TimeoutExpired):
        kitm_python(["-c", "import time; print('started', flush=True); time.sleep(60)"], env=env, timeout=3)
    assert kitm_python(["-c", "print('next')"], env=env).stdout == "next\n"
    assert os.environ.get("PROBE") is None


def test_a_script_runs_with_its_folder_first_on_sys_path(kitm_python, tmp_path, env):
    (tmp_path / "scripts").mkdir()
    script = tmp_path / "scripts" / "probe.py"
    script.write_text(PROBE)
    done = kitm_python([script, "0", "y"], cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert f'"path0": "{tmp_path / "scripts"}"' in done.stdout and f'"argv": ["{script}", "0", "y"]' in done.stdout


def test_popen_streams_lines_while_the_run_goes_on_and_is_killed(kitm_popen, env):
    import signal

    process = kitm_popen(["-c", "import time\nfor i in range(100):\n    print(i, flush=True)\n    time.sleep(0.1)"],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout.readline() == "0\n" and process.poll() is None
    os.kill(process.pid, signal.SIGKILL)
    assert process.wait(timeout=30) == -signal.SIGKILL


def test_two_popens_at_once_and_communicate(kitm_popen, env):
    source = "import sys, time\ntime.sleep(float(sys.argv[1]))\nprint('out', sys.argv[1])\nprint('err', file=sys.stderr)"
    slow = kitm_popen(["-c", source, "2"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    quick = kitm_popen(["-c", source, "0"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert quick.communicate(timeout=60) == ("out 0\n", "err\n") and quick.returncode == 0
    with pytest.raises(subprocess.TimeoutExpired):
        slow.wait(timeout=0.01)
    assert slow.communicate(timeout=60) == ("out 2\n", "err\n") and slow.returncode == 0
