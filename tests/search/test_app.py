"""kitm.search's web app for real: `python -m kitm.search` serving the tiny index on 127.0.0.1, driven by headless
Chromium (Debian's chromium and chromium-driver, through selenium; nothing is downloaded) and called as a JSON API.

The browser types one of the world's captions and checks the results table: ranks, scores, and the relevance column
with the world's exact truth (the annotated image at relevance 1). KITM_SEARCH_SCREENSHOT=<path.png> saves the page.
"""

import asyncio
import base64
import json
import os
import pathlib
import shutil
import socket
import struct
import subprocess
import time
import urllib.error
import urllib.request
import zlib

import numpy as np
import pytest

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
# The machines have no internet: without these, chromium keeps dialling out (and floods refused connections).
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=1200,1500")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _png_header(width: int, height: int) -> bytes:
    """A few dozen bytes of PNG declaring `width` x `height` pixels (an image bomb; its pixel data a stub)."""
    def chunk(kind: bytes, payload: bytes) -> bytes:
        return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))


def _request(url, data=None, headers=None, method=None, timeout=60):
    """(status, parsed JSON) of one bounded request."""
    request = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.fixture(scope="module")
def server(tiny_search_index, kitm_popen, tmp_path_factory):
    """The base URL of `python -m kitm.search` serving tiny_search_index on 127.0.0.1 (stopped after the module)."""
    port = _free_port()
    log = (tmp_path_factory.mktemp("server") / "server.log").open("w")
    process = kitm_popen(["-m", "kitm.search", f"--index={tiny_search_index}", f"--port={port}", "--host=127.0.0.1"],
                         stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if _request(base + "/api/info", timeout=5)[0] == 200:
                    break
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                log.flush()
                pytest.fail(f"kitm.search did not start: {pathlib.Path(log.name).read_text()[-3000:]}")
            time.sleep(0.5)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Headless Chromium through selenium and Debian's chromedriver (skipped only where chromium is missing and
    this is not CI: .ci/run installs it)."""
    if not CHROMIUM or not os.path.exists(CHROMEDRIVER):
        message = "chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)"
        if os.environ.get("CI"):
            pytest.fail(message + "; .ci/run installs them")
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(driver, condition, timeout=60):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(condition)


def test_a_person_types_a_caption_and_sees_images_with_their_graded_relevance(server, browser, tiny_search_index,
                                                                              tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    caption = json.loads((tiny_search_index / "captions.json").read_text())[5]  # image 1's first caption
    browser.get(server + "/")
    _wait(browser, lambda d: "12 images" in d.find_element(By.ID, "info").text)
    assert "graded relevance: the synthetic world's truth" in browser.find_element(By.ID, "info").text

    Select(browser.find_element(By.ID, "k")).select_by_visible_text("20")
    browser.find_element(By.ID, "query").send_keys(caption["text"])
    browser.find_element(By.ID, "search").click()
    rows = _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#image-results tbody tr"))
    assert len(rows) == 12  # k=20, and the index holds 12 images
    ranks = [int(row.find_element(By.CSS_SELECTOR, ".rank").text) for row in rows]
    scores = [float(row.find_element(By.CSS_SELECTOR, ".score").text) for row in rows]
    relevance = [float(row.find_element(By.CSS_SELECTOR, ".relevance").get_attribute("data-value")) for row in rows]
    assert ranks == list(range(1, 13)) and scores == sorted(scores, reverse=True)
    assert all(0.0 <= value <= 1.0 for value in relevance)
    labels = [row.find_element(By.CSS_SELECTOR, ".label").text for row in rows]
    assert labels.count("annotated pair") == 1
    annotated = labels.index("annotated pair")
    assert relevance[annotated] == pytest.approx(1.0)
    assert rows[annotated].find_element(By.CSS_SELECTOR, ".relevance").text.startswith("1.000")
    # What binary labels miss: other images the caption fits in part (the world's truth grades them all).
    assert len({round(value, 3) for value in relevance}) > 2
    summary = browser.find_element(By.ID, "summary").text
    assert "binary labels count 1 as right" in summary
    thumbnails = browser.find_elements(By.CSS_SELECTOR, "#image-results img.thumb")
    assert all(browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth", t) == 32
               for t in thumbnails)
    screenshot = os.environ.get("KITM_SEARCH_SCREENSHOT")
    browser.save_screenshot(screenshot or str(tmp_path / "search_page.png"))

    # A click on an image: its nearest captions, graded against it, its own five captions labelled.
    thumbnails[annotated].click()
    caption_rows = _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#caption-results tbody tr"))
    assert len(caption_rows) == 20
    graded = [float(r.find_element(By.CSS_SELECTOR, ".relevance").get_attribute("data-value")) for r in caption_rows]
    own = [r.find_element(By.CSS_SELECTOR, ".label").text == "annotated pair" for r in caption_rows]
    assert all(0.0 <= value <= 1.0 for value in graded) and all(g == pytest.approx(1.0) for g, o in zip(graded, own) if o)

    # Bad input: a clear message on the page, and the page goes on working.
    browser.find_element(By.ID, "query").clear()
    browser.find_element(By.ID, "search").click()
    _wait(browser, lambda d: d.find_element(By.ID, "error").is_displayed())
    assert "Type a caption" in browser.find_element(By.ID, "error").text
    not_an_image = tmp_path / "notes.png"
    not_an_image.write_text("a shopping list")
    browser.find_element(By.ID, "file").send_keys(str(not_an_image))
    _wait(browser, lambda d: "not a PNG, JPEG" in d.find_element(By.ID, "error").text)
    # An indexed image dropped on the page (its own bytes, in a real drop event): the captions, graded against it.
    with urllib.request.urlopen(server + "/api/thumbnail/1", timeout=30) as response:
        png = response.read()
    browser.execute_script("""
        const bytes = Uint8Array.from(atob(arguments[0]), (c) => c.charCodeAt(0));
        const transfer = new DataTransfer();
        transfer.items.add(new File([bytes], "scene.png", { type: "image/png" }));
        document.getElementById("drop").dispatchEvent(new DragEvent("drop", { dataTransfer: transfer, bubbles: true }));
    """, base64.b64encode(png).decode())
    _wait(browser, lambda d: "scene.png" in d.find_element(By.CSS_SELECTOR, "#results h2").text)
    assert not browser.find_element(By.ID, "error").is_displayed()
    dropped = browser.find_elements(By.CSS_SELECTOR, "#caption-results tbody tr")
    assert len(dropped) == 20 and all(r.find_element(By.CSS_SELECTOR, ".relevance").get_attribute("data-value")
                                      for r in dropped)  # recognised as indexed image 1: relevance known

    # The page opened on a query (?q=): filled in and searched; a query of no word the model knows is said so.
    browser.get(server + "/?q=%E2%80%8B%F0%9F%99%82!!!&k=5")
    warning = _wait(browser, lambda d: d.find_elements(By.ID, "query-warning"))[0]
    assert "no words the model can read" in warning.text
    assert len(browser.find_elements(By.CSS_SELECTOR, "#image-results tbody tr")) == 5
    assert browser.find_element(By.ID, "query").get_attribute("value") == "\u200b\U0001F642!!!"
    browser.find_element(By.ID, "query").clear()
    browser.find_element(By.ID, "query").send_keys(caption["text"])
    browser.find_element(By.ID, "search").click()
    _wait(browser, lambda d: not d.find_elements(By.ID, "query-warning"))
    assert "q=" in browser.current_url and "k=5" in browser.current_url  # the address names the search


def test_the_json_api_answers_bad_input_with_a_message_and_keeps_serving(server, tiny_search_index):
    caption = json.loads((tiny_search_index / "captions.json").read_text())[0]["text"]
    json_headers = {"Content-Type": "application/json"}
    status, answer = _request(server + "/api/search/text", json.dumps({"query": caption, "k": 3}).encode(),
                              json_headers)
    assert status == 200 and answer["relevance_source"] == "truth" and answer["matched_caption"]["image"] == 0
    assert [r["rank"] for r in answer["results"]] == [1, 2, 3]
    assert answer["warning"] is None and answer["unknown_words"] == [] and answer["num_words"] > 3
    # A query of words the model never saw gets results, and says that they answer no word of it.
    status, answer = _request(server + "/api/search/text?q=%E2%80%8B%F0%9F%99%82!!!&k=3")
    assert status == 200 and answer["num_words"] == 0 and "no words the model can read" in answer["warning"]

    bad = [
        (json.dumps({"query": "x" * 100_000}).encode(), json_headers, "/api/search/text", 413, "100,000 characters"),
        (json.dumps({"query": ""}).encode(), json_headers, "/api/search/text", 400, "empty"),
        (b"{not json", json_headers, "/api/search/text", 400, "must be JSON"),
        (json.dumps({"query": "a red circle", "k": 0}).encode(), json_headers, "/api/search/text", 400,
         "k (the number of results) must be an integer from 1 to 100; got 0."),
        # JSON's Infinity and 1e400 (a float past its range) were a 500 OverflowError; an integer of 5,000 digits
        # is past Python's bound on parsing them.
        (b'{"query": "a red circle", "k": Infinity}', json_headers, "/api/search/text", 400, "got Infinity."),
        (b'{"query": "a red circle", "k": 1e400}', json_headers, "/api/search/text", 400, "got Infinity."),
        (b'{"query": "a red circle", "k": ' + b"9" * 5000 + b"}", json_headers, "/api/search/text", 400,
         "must be JSON"),
        (b"%PDF-1.4 not an image", {}, "/api/search/image", 415, "not a PNG, JPEG"),
        (b"", {}, "/api/search/image", 400, "empty"),
        # A body announced as 21 MB is refused from its Content-Length, before any of it is read.
        (b"\x89PNG" + bytes(1000), {"Content-Length": str(21 * 2**20)}, "/api/search/image", 413,
         "at most 20,971,520"),
        # Image bombs: refused from the pixel count in their header, before decoding (kitm.index.sources).
        (_png_header(12000, 12000), {}, "/api/search/image", 413, "12000 x 12000 pixels (144 MP) where at most 40 MP"),
        (_png_header(20000, 20000), {}, "/api/search/image", 413, "too large (400 MP): at most 40 MP"),
    ]
    for body, headers, route, expected, message in bad:
        status, answer = _request(server + route, body, headers, method="POST")
        assert (status, message in answer["error"]) == (expected, True), (route, answer)
    assert _request(server + "/api/search/image/99")[0] == 404
    # The API's page works offline: nothing in it is fetched from another site (FastAPI's Swagger page was blank).
    with urllib.request.urlopen(server + "/api/docs", timeout=30) as response:
        page = response.read().decode()
    assert "/api/search/text" in page and "/api/openapi.json" in page and "http" not in page
    assert _request(server + "/api/search/text?q=a+red+circle&k=2")[1]["relevance_source"] == "cider"
    # Still serving after all of that.
    status, answer = _request(server + "/api/search/image/0?k=5")
    assert status == 200 and len(answer["captions"]) == 5 and answer["query_image"]["image"] == 0


def test_an_index_is_refused_with_another_model(tiny_search_index, other_search_model, capsys):
    from kitm.errors import KitmDataError
    from kitm.search import Searcher
    from kitm.search.cli import main

    other = other_search_model
    with pytest.raises(KitmDataError, match="built with another model"):
        Searcher.open(tiny_search_index, other)
    assert main([f"--index={tiny_search_index}", f"--export_dir={other}"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("kitm.search: error: The index at") and "Rebuild the index with this model" in line
    assert main([f"--index={tiny_search_index.parent / 'missing'}"]) == 2
    assert "No index at" in capsys.readouterr().err


def test_batched_queries_get_the_answers_of_queries_asked_alone(tiny_search_index):
    """Dynamic batching changes nothing in an answer: 24 text queries and 12 indexed-image queries asked at once
    from 36 threads, and again as 36 tasks of one event loop (the server's path; a 50 ms window, so they gather),
    against the same queries one at a time with batches of 1."""
    from concurrent.futures import ThreadPoolExecutor

    from kitm.search import Searcher
    from kitm.search.settings import ServingSettings

    alone = Searcher.open(tiny_search_index, settings=ServingSettings(batch_window_ms=0.0, max_batch=1))
    batched = Searcher.open(tiny_search_index, settings=ServingSettings(batch_window_ms=50.0, max_batch=64))
    captions = [caption["text"] for caption in alone.index.captions[:20]] + ["a red", "circle", "blue square left", "!!"]
    asks = [("text", caption, 1 + i % 7) for i, caption in enumerate(captions)]
    asks += [("image", position % alone.index.num_images, 3 + position % 5) for position in range(12)]

    def answer(searcher, ask):
        kind, query, k = ask
        found = searcher.search_text(query, k) if kind == "text" else searcher.search_indexed_image(query, k)
        found.pop("seconds")
        return found

    async def answer_on_a_loop(ask):  # the server's path: awaited on its event loop, no thread per request
        kind, query, k = ask
        found = await (batched.search_text_async(query, k) if kind == "text"
                       else batched.search_indexed_image_async(query, k))
        found.pop("seconds")
        return found

    async def all_at_once():
        return await asyncio.gather(*map(answer_on_a_loop, asks))

    with ThreadPoolExecutor(len(asks)) as pool:
        together = list(pool.map(lambda ask: answer(batched, ask), asks))
    awaited = asyncio.run(all_at_once())
    one_by_one = [answer(alone, ask) for ask in asks]
    for ask, got, expected in [*zip(asks, together, one_by_one), *zip(asks, awaited, one_by_one)]:
        scores = [r["score"] for r in got.get("results", got.get("captions", []))]
        wanted = [r["score"] for r in expected.get("results", expected.get("captions", []))]
        np.testing.assert_allclose(scores, wanted, atol=1e-6, err_msg=str(ask))
        assert _without_scores(got) == _without_scores(expected), ask  # all but the scores' last bits: equal
    statistics = batched.info()["batching"]
    assert statistics["text"]["largest_batch"] > 1 and statistics["search"]["largest_batch"] > 1, statistics
    assert batched.info()["serving"]["batch_window_ms"] == 50.0


def _without_scores(answer):
    if isinstance(answer, dict):
        return {key: _without_scores(value) for key, value in answer.items() if key != "score"}
    if isinstance(answer, list):
        return [_without_scores(value) for value in answer]
    return answer
