"""``python -m kitm.search``: a web page to search an index (``python -m kitm.index``) by caption or by image.

    python -m kitm.search --index=indexes/demo                 # then open http://127.0.0.1:8000
    python -m kitm.search --index=indexes/pictures --port=8080

Type a caption to see the nearest images as thumbnails with their scores, or drop an image to see the nearest
captions; where the index knows graded relevance (the synthetic world's truth, or CIDEr-D against a dataset's
captions) each result shows it beside its rank. The same searches are a JSON API (``/api/search/text``,
``/api/search/image``; ``/api/docs`` lists them). The server listens on 127.0.0.1 unless ``--host`` says otherwise.
Bad input ends with one line ``kitm.search: error: ...`` on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import socket
import sys
from collections.abc import Sequence

from kitm.errors import CliError, OneLineArgumentParser
from kitm.search.settings import ServingSettings
from kitm.tensorflow_logs import quiet_tensorflow_logs

PROG = "kitm.search"
EXIT_BAD_INPUT = 2


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(prog=f"python -m {PROG}",
                                   formatter_class=argparse.RawDescriptionHelpFormatter,
                                   description="Serve a web page (and a JSON API) that searches a kitm index by "
                                               "caption or by image.")
    parser.add_argument("--index", required=True, help="An index folder written by python -m kitm.index.")
    parser.add_argument("--port", type=int, default=8000, help="Port to listen on (default 8000).")
    parser.add_argument("--host", default="127.0.0.1",
                        help="Address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 opens it to the "
                             "network, without any authentication).")
    parser.add_argument("--export_dir", help="The SavedModel the index was built with, where it has moved "
                                             "(default: the path the index recorded). Another model is refused.")
    parser.add_argument("--log_level", default="warning", choices=("critical", "error", "warning", "info", "debug"),
                        help="uvicorn's log level (default warning).")
    for field in dataclasses.fields(ServingSettings):  # one flag per serving setting, declared there
        parser.add_argument(f"--{field.name}", type={"int": int, "float": float}[str(field.type)],
                            default=field.default, help=f"{field.metadata['help']} (default {field.default}).")
    return parser


def serving_settings(args: argparse.Namespace) -> ServingSettings:
    """The serving settings the flags give; CliError naming the flag that is out of its range."""
    try:
        values = {field.name: getattr(args, field.name) for field in dataclasses.fields(ServingSettings)}
        return ServingSettings(**values)
    except ValueError as error:
        raise CliError(str(error)) from None


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to `host`:`port` and listening, for uvicorn to serve on; CliError naming the port when it is
    taken (another server: uvicorn said so only after "serving on ..." was printed) or not this machine's."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as error:
        raise CliError(f"--host={host} is not an address this machine can listen on ({error.strerror}); give "
                       "127.0.0.1 (this machine only) or 0.0.0.0 (every network).") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: a restart need not wait for TIME_WAIT
    try:
        sock.bind(address)
        sock.listen(2048)
    except OSError as error:
        sock.close()
        if error.errno == errno.EADDRINUSE:
            raise CliError(f"--port={port}: port {port} on {host} is in use by another program (another "
                           f"kitm.search?): stop it, or give another port, e.g. --port={port + 1}.") from None
        if error.errno == errno.EACCES:
            raise CliError(f"--port={port}: ports below 1024 need administrator rights; give a port from 1024 up, "
                           "e.g. --port=8000.") from None
        raise CliError(f"--host={host} --port={port}: cannot listen there ({error.strerror}).") from None
    return sock


def _run(args: argparse.Namespace) -> int:
    from kitm.search.app import serve
    from kitm.search.engine import Searcher

    if not 0 < args.port < 65536:
        raise CliError(f"--port must be between 1 and 65535; got {args.port}.")
    # The port first: a taken one is said in one line, before the model loads and before "serving".
    settings = serving_settings(args)
    sock = listening_socket(args.host, args.port)
    try:
        searcher = Searcher.open(args.index, args.export_dir, settings)
        info = searcher.info()
        print(f"kitm.search: {args.index}: {info['num_images']} images, {info['num_captions']} captions; "
              f"serving on http://{args.host}:{args.port} (Ctrl-C stops)", flush=True)
        serve(searcher, host=args.host, port=args.port, log_level=args.log_level, sock=sock)
    finally:
        sock.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI on `argv` (default ``sys.argv[1:]``); returns the exit status (0, or 2 on bad input)."""
    from kitm.eval.cli import _one_line

    quiet_tensorflow_logs()  # before TensorFlow is imported: no cuInit or oneDNN lines on a machine without a GPU
    try:
        return _run(build_parser().parse_args(argv))
    except (CliError, ValueError, OSError) as error:
        print(f"{PROG}: error: {_one_line(error)}", file=sys.stderr)
        return EXIT_BAD_INPUT
