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
