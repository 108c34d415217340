"""python -m kitm.search's command line: a port in use is said in one line, before "serving"."""

import socket

from kitm.search.cli import main


def test_a_port_in_use_is_named_in_one_line_before_serving(tmp_path, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert main([f"--index={tmp_path}", f"--port={port}"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no "serving on ..."
    assert captured.err == (f"kitm.search: error: --port={port}: port {port} on 127.0.0.1 is in use by another "
                            f"program (another kitm.search?): stop it, or give another port, e.g. --port={port + 1}.\n")


def test_a_host_that_is_not_this_machines_is_named(tmp_path, capsys):
    assert main([f"--index={tmp_path}", "--host=no-such-host.invalid", "--port=8123"]) == 2
    assert capsys.readouterr().err.startswith("kitm.search: error: --host=no-such-host.invalid is not an address")


def test_tensorflow_is_quieted_before_it_loads(tmp_path, monkeypatch, capsys):
    import os

    from kitm.tensorflow_logs import has_nvidia_driver

    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    main([f"--index={tmp_path / 'missing'}", "--port=70000"])
    # 3 (fatal only: no cuInit or oneDNN lines) without an NVIDIA driver, as the other commands.
    assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == ("2" if has_nvidia_driver() else "3")
    capsys.readouterr()
