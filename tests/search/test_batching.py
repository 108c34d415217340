"""The search server under load, without a model: the dynamic batcher (queries that arrive together share a call,
each gets its own row, an error reaches every caller of its batch), the overload answer (JSON, 503, Retry-After)
and slow clients (a connection trickling its headers is closed; 100 of them do not slow a normal client)."""

import asyncio
import json
import socket
import threading
import time
import urllib.request

import numpy as np
import pytest

from kitm.search.batching import QueryBatcher
from kitm.search.settings import ServingSettings


def _squares(items):
    time.sleep(0.02)  # a model call's fixed cost: the next queries gather meanwhile
    return np.asarray(items, np.float64)[:, None] ** 2


def test_queries_arriving_together_share_a_call_and_each_gets_its_own_row():
    batcher = QueryBatcher(_squares, ServingSettings(batch_window_ms=5.0, max_batch=16))
    answers = {}

    def ask(value):
        answers[value] = batcher(value)

    threads = [threading.Thread(target=ask, args=(value,)) for value in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert {value: float(row[0]) for value, row in answers.items()} == {v: float(v * v) for v in range(40)}
    stats = batcher.statistics()
    assert stats["queries"] == 40 and stats["calls"] < 40 and stats["largest_batch"] <= 16, stats


def test_one_query_alone_waits_no_longer_than_the_window():
    batcher = QueryBatcher(lambda items: np.zeros((len(items), 1)), ServingSettings(batch_window_ms=1.0))
    batcher(0)  # the worker thread is up
    started = time.perf_counter()
    for _ in range(20):
        batcher(1)
    assert (time.perf_counter() - started) / 20 < 0.02
    assert batcher.statistics()["largest_batch"] == 1


def test_an_error_reaches_every_caller_of_its_batch_and_the_batcher_goes_on():
    def fails_on_seven(items):
        if 7 in items:
            raise ValueError("seven")
        return np.asarray(items)[:, None]

    batcher = QueryBatcher(fails_on_seven, ServingSettings(batch_window_ms=0.0))
    with pytest.raises(ValueError, match="seven"):
        batcher(7)
    assert int(batcher(3)[0]) == 3


@pytest.mark.parametrize("settings", [dict(batch_window_ms=-1.0), dict(max_batch=0), dict(max_in_flight=0)])
def test_a_setting_out_of_its_range_is_refused_naming_its_flag(settings):
    name = next(iter(settings))
    with pytest.raises(ValueError, match=f"--{name} must be from"):
        ServingSettings(**settings)


def test_overload_is_answered_in_json_with_retry_after():
    from kitm.search.app import InFlightLimit

    release = asyncio.Event()

    async def slow_app(scope, receive, send):
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    limit = InFlightLimit(slow_app, ServingSettings(max_in_flight=2, retry_after_s=3))

    async def request():
        sent = []

        async def send(message):
            sent.append(message)

        await limit({"type": "http"}, None, send)
        return sent

    async def scenario():
        first = [asyncio.create_task(request()) for _ in range(2)]
        await asyncio.sleep(0.01)
        refused = await request()  # a third while two are in flight
        release.set()
        return refused, await asyncio.gather(*first)

    refused, served = asyncio.run(scenario())
    start, body = refused
    headers = dict(start["headers"])
    assert start["status"] == 503 and headers[b"retry-after"] == b"3"
    assert headers[b"content-type"] == b"application/json"
    assert json.loads(body["body"])["error"].startswith("The server is busy: 2 requests")
    assert [answer[0]["status"] for answer in served] == [200, 200] and limit.refused == 1 and limit.in_flight == 0


@pytest.fixture(params=["h11", "httptools"])
def small_server(request):
    """A tiny app behind kitm's uvicorn protocol (on each HTTP parser uvicorn has: h11, and httptools, which the
    server takes where installed) with a 1 s header timeout, on a free port, in a thread."""
    import uvicorn
    from uvicorn.config import HTTP_PROTOCOLS
    from uvicorn.importer import import_from_string

    from kitm.search.app import header_timeout_protocol

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(512)
    port = sock.getsockname()[1]
    if request.param == "httptools":
        pytest.importorskip("httptools")
    protocol = header_timeout_protocol(import_from_string(HTTP_PROTOCOLS[request.param]), 1.0)
    server = uvicorn.Server(uvicorn.Config(app, http=protocol, log_level="error", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", port
    server.should_exit = True
    thread.join(timeout=10)
    sock.close()


def test_slow_clients_trickling_headers_do_not_starve_others_and_are_closed(small_server):
    base, port = small_server
    slow = []
    for _ in range(100):
        connection = socket.create_connection(("127.0.0.1", port))
        connection.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # and then nothing: the headers never end
        slow.append(connection)
    latencies = []
    for _ in range(10):
        started = time.perf_counter()
        with urllib.request.urlopen(base + "/", timeout=10) as response:
            assert response.read() == b"ok"
        latencies.append(time.perf_counter() - started)
    assert max(latencies) < 0.5, latencies
    time.sleep(1.5)  # past the header timeout: the server has closed every slow connection
    for connection in slow:
        connection.settimeout(5)
        assert connection.recv(100) == b""
        connection.close()
