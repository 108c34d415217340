"""kitm.index: a dataset's split or a folder of photos becomes an index; a killed build resumes; the CLI's errors."""

import io
import json
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from kitm.errors import KitmDataError
from kitm.index import BuildOptions, build_index, dataset_source, folder_source, load_index
from kitm.index.cli import main


def test_a_dataset_split_becomes_an_index_with_its_captions_and_truth(tiny_search_index, tiny_search_run):
    index = load_index(tiny_search_index)
    manifest = index.manifest
    assert (index.num_images, len(index.captions), manifest["captions_per_image"]) == (12, 60, 5)
    assert manifest["relevance"] == "truth" and manifest["images_index"]["kind"] == "exact"
    assert manifest["model"]["export_dir"] == str((tiny_search_run / "export" / "1").resolve())
    assert manifest["model"]["fingerprint"].startswith("tf:") and manifest["model"]["embedding_dim"] == 8
    assert all(image["path"].startswith("test/scene_") for image in index.images)
    assert index.captions[7] == {"text": index.captions[7]["text"], "image": 1} and index.captions_of(1) == [5, 6, 7, 8, 9]
    assert index.scene_facts.shape[0] == 12 and index.caption_facts.shape[0] == 60
    thumbnail, media_type = index.thumbnail(3)
    assert media_type == "image/png" and Image.open(io.BytesIO(thumbnail)).size == (32, 32)
    embeddings = np.load(tiny_search_index / "image_embeddings.npy")
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, rtol=1e-5)
    assert not tiny_search_index.with_name("index.partial").exists()  # the work folder is gone


def _jpeg(size, color, exif_orientation=None, fmt="JPEG"):
    image = Image.new("RGB", size, color)
    image.paste((255, 255, 255), (0, 0, size[0] // 2, size[1] // 4))
    buffer = io.BytesIO()
    if exif_orientation:
        exif = Image.Exif()
        exif[0x0112] = exif_orientation
        image.save(buffer, fmt, exif=exif)
    else:
        image.save(buffer, fmt)
    return buffer.getvalue()


def test_a_folder_of_photos_is_indexed_upright_and_unreadable_files_are_named(tmp_path, tiny_search_run):
    photos = tmp_path / "photos"
    (photos / "trip").mkdir(parents=True)
    (photos / ".hidden").mkdir()
    (photos / "b.jpg").write_bytes(_jpeg((40, 30), (200, 30, 30)))
    (photos / "trip" / "a.JPG").write_bytes(_jpeg((600, 300), (30, 30, 200), exif_orientation=6))  # shot sideways
    (photos / "c.webp").write_bytes(_jpeg((50, 50), (30, 200, 30), fmt="WEBP"))
    (photos / "broken.jpg").write_bytes(b"these are not image bytes")
    cmyk = io.BytesIO()
    Image.new("CMYK", (30, 30), (0, 200, 200, 0)).save(cmyk, "JPEG")  # a print scan: TF cannot decode CMYK
    (photos / "print.jpg").write_bytes(cmyk.getvalue())
    (photos / ".hidden" / "x.png").write_bytes(_jpeg((8, 8), (0, 0, 0), fmt="PNG"))
    (photos / "notes.txt").write_text("not an image name")

    source = folder_source(photos)
    assert [p.split("photos/")[1] for p in source.paths] == ["b.jpg", "broken.jpg", "c.webp", "print.jpg",
                                                             "trip/a.JPG"]
    manifest = build_index(source, tiny_search_run / "export" / "1", tmp_path / "index", BuildOptions(progress=False))
    assert manifest["num_images"] == 4 and manifest["num_captions"] == 0 and manifest["relevance"] is None
    (skipped,) = manifest["skipped"]
    assert skipped["path"].endswith("broken.jpg") and "not a PNG, JPEG, GIF, BMP or WebP image" in skipped["error"]
    index = load_index(tmp_path / "index")
    assert index.captions is None and index.caption_index is None
    assert [image["path"].split("photos/")[1] for image in index.images] == ["b.jpg", "c.webp", "print.jpg",
                                                                             "trip/a.JPG"]
    # The sideways photo is turned upright (EXIF orientation 6) before its thumbnail is made and it is embedded.
    assert Image.open(io.BytesIO(index.thumbnail(3)[0])).size == (96, 192)


def test_a_killed_build_resumes_after_its_last_whole_chunk(tmp_path, tiny_search_run, tiny_synthetic,
                                                          tiny_search_index):
    export = tiny_search_run / "export" / "1"
    source = dataset_source(tiny_synthetic, "test")
    read, calls = source.read, []

    def killed_at_the_second_chunk(positions):
        calls.append(list(positions))
        if len(calls) == 2:
            raise KeyboardInterrupt  # as a Ctrl-C or a kill would stop it, half-way through
        return read(positions)

    source.read = killed_at_the_second_chunk
    out = tmp_path / "index"
    with pytest.raises(KeyboardInterrupt):
        build_index(source, export, out, BuildOptions(progress=False, chunk_size=5))
    assert not out.exists() and sorted(p.name for p in (tmp_path / "index.partial" / "chunks").iterdir()) == \
        ["images-00000.npz"]

    calls.clear()
    source.read = lambda positions: (calls.append(list(positions)), read(positions))[1]
    build_index(source, export, out, BuildOptions(progress=False, chunk_size=5))
    assert calls == [[5, 6, 7, 8, 9], [10, 11]]  # the first chunk was kept
    np.testing.assert_allclose(np.load(out / "image_embeddings.npy"),
                               np.load(tiny_search_index / "image_embeddings.npy"), atol=1e-6)
    assert not (tmp_path / "index.partial").exists()

    # Other options (or inputs, or model) than the unfinished build's: it starts over rather than mixing them.
    (tmp_path / "index.partial" / "chunks").mkdir(parents=True)
    (tmp_path / "index.partial" / "state.json").write_text(json.dumps({"signature": "another build"}))
    (tmp_path / "index.partial" / "chunks" / "images-00000.npz").write_bytes(b"stale")
    calls.clear()
    build_index(source, export, tmp_path / "index", BuildOptions(progress=False, chunk_size=6, overwrite=True))
    assert calls == [list(range(6)), list(range(6, 12))]


def test_the_cli_indexes_the_runs_dataset_and_refuses_bad_input_in_one_line(tmp_path, tiny_search_run, capsys):
    out = tmp_path / "index"
    assert main([f"--run={tiny_search_run}", f"--out={out}", "--no-progress", "--exact_threshold=5"]) == 0
    printed = capsys.readouterr().out
    assert "12 images, 60 captions" in printed and "HNSW, efSearch" in printed and "recall@10" in printed
    assert load_index(out).manifest["images_index"]["kind"] == "hnsw"
    from kitm.search import Searcher  # the HNSW index answers with its tuned efSearch

    caption = load_index(out).captions[0]["text"]
    assert [r["rank"] for r in Searcher.open(out).search_text(caption, k=3)["results"]] == [1, 2, 3]

    def error(*argv):
        assert main(list(argv)) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("kitm.index: error: ")
        return lines[0]

    assert "--out" in error(f"--run={tiny_search_run}", f"--out={out}") and "--overwrite" in error(
        f"--run={tiny_search_run}", f"--out={out}")
    assert "is not a folder" in error(f"--run={tiny_search_run}", f"--images={tmp_path / 'nowhere'}",
                                      f"--out={tmp_path / 'x'}")
    assert "holds no image files" in error(f"--run={tiny_search_run}", f"--images={tmp_path}", f"--out={tmp_path / 'x'}")
    assert "exactly one of --run" in error(f"--out={tmp_path / 'x'}")
    assert "splits ['test', 'train', 'val']" in error(f"--run={tiny_search_run}", "--split=tset",
                                                      f"--out={tmp_path / 'x'}")
    with pytest.raises(KitmDataError, match="No index at"):
        load_index(tmp_path / "x")


@pytest.mark.parametrize("module", ["kitm.index", "kitm.search"])
def test_help(module, kitm_python):
    result = kitm_python(["-m", module, "--help"], timeout=120)
    assert result.returncode == 0 and "usage: python -m " + module in result.stdout


def test_a_sigkilled_build_resumes_with_the_same_command(tmp_path, tiny_search_run, kitm_popen, kitm_python):
    import signal
    import time

    photos = tmp_path / "photos"
    photos.mkdir()
    rng = np.random.default_rng(0)
    for i in range(150):
        Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(photos / f"{i:03d}.jpg")
    out = tmp_path / "index"
    command = ["-m", "kitm.index", f"--export_dir={tiny_search_run / 'export' / '1'}", f"--images={photos}",
               f"--out={out}", "--chunk_size=1", "--batch_size=1", "--no-progress"]
    process = kitm_popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    chunks = tmp_path / "index.partial" / "chunks"

    def finished_chunks():
        # A chunk being written is `images-NNNNN.partial.npz` (it matches the glob too): only renamed ones count,
        # else the kill can land when 4 are finished and the fifth is still a temporary.
        return [p for p in chunks.glob("images-*.npz") if ".partial" not in p.name]

    deadline = time.monotonic() + 180
    while process.poll() is None and time.monotonic() < deadline and len(finished_chunks()) < 5:
        time.sleep(0.01)
    if process.poll() is not None:
        pytest.fail(f"the build ended (status {process.returncode}) before it could be killed: "
                    f"{process.stderr.read().decode()[-2000:]}")
    process.send_signal(signal.SIGKILL)
    process.wait()
    process.stderr.close()
    assert not out.exists()
    kept = len(finished_chunks())
    assert 5 <= kept < 150

    result = kitm_python(command, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"Resuming {out}: {kept} of 150 images already embedded" in result.stderr
    assert "Index: " in result.stdout and "150 images" in result.stdout
    assert not (tmp_path / "index.partial").exists() and load_index(out).num_images == 150


_UNDER_A_FILE_SIZE_LIMIT = """
import resource, sys
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), resource.RLIM_INFINITY))
{body}
"""


def test_a_file_size_limit_on_a_numpy_write_is_named_with_its_file_and_cause(tmp_path, subprocess_env):
    # np.save says only "8000000 requested and 100000 written" (an OSError without errno or file): kitm.index
    # reads the cause from the file and its limit.
    body = """
import pathlib
import numpy as np
from kitm.files import no_room_error
from kitm.index.build import _save_npy
try:
    _save_npy(pathlib.Path(sys.argv[2]), np.zeros(1_000_000))
except Exception as error:
    print(no_room_error(error))
"""
    target = tmp_path / "caption_embeddings.npy"
    result = subprocess.run([sys.executable, "-c", _UNDER_A_FILE_SIZE_LIMIT.format(body=body), "100000", str(target)],
                            capture_output=True, text=True, env=subprocess_env(), timeout=120)
    assert result.stdout.strip() == (
        f"Writing {tmp_path / 'caption_embeddings.partial.npy'} failed: File too large. The disk is full, or a disk "
        "quota or the file-size limit (ulimit -f) was reached. It was a temporary name: "
        f"{target} was not created (nothing half-written is left). Free space (or raise the limit) and run the "
        "same command again: what was finished is kept and the work resumes."), result.stderr[-2000:]
    assert list(tmp_path.iterdir()) == []


def test_kitm_index_under_a_file_size_limit_says_so_in_one_line_and_resumes(tmp_path, tiny_search_run,
                                                                           subprocess_env):
    body = "from kitm.index.cli import main\nsys.exit(main(sys.argv[2:]))"
    env = subprocess_env()
    del env["TF_CPP_MIN_LOG_LEVEL"]  # as a user runs it: the command quiets TensorFlow itself
    out = tmp_path / "index"
    command = [f"--run={tiny_search_run}", f"--out={out}", "--no-progress", "--chunk_size=1"]
    # 20,000 bytes: each image's chunk fits, the thumbnails of all 12 (27 kB) do not.
    result = subprocess.run([sys.executable, "-c", _UNDER_A_FILE_SIZE_LIMIT.format(body=body), "20000", *command],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 2, result.stderr[-3000:]
    (line,) = result.stderr.strip().splitlines() or [""]
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr[-3000:]
    assert line.startswith(f"kitm.index: error: Writing {tmp_path}/index.") and line.endswith(
        ".tmp/thumbnails.bin failed: File too large. The disk is full, or a disk quota or the file-size limit (ulimit "
        "-f) was reached. Free space (or raise the limit) and run the same command again: what was finished is kept "
        "and the work resumes.")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.partial"]  # nothing under the final name
    assert main(command) == 0  # the same command, the limit raised: the 12 embedded images are kept
    assert load_index(out).num_images == 12 and not (tmp_path / "index.partial").exists()


def test_a_symlink_loop_and_an_image_bomb_in_the_folder_are_skipped_and_listed(tmp_path, tiny_search_run):
    import struct
    import zlib

    def chunk(kind, payload):
        return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))

    photos = tmp_path / "photos"
    photos.mkdir()
    (photos / "a.jpg").write_bytes(_jpeg((40, 30), (200, 30, 30)))
    (photos / "loop.jpg").symlink_to("loop.jpg")  # [Errno 40] stopped the whole build
    # A few dozen bytes declaring 20000 x 20000 pixels: Pillow's DecompressionBombError stopped the build.
    header = struct.pack(">IIBBBBB", 20000, 20000, 8, 2, 0, 0, 0)
    (photos / "bomb.png").write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
                                      + chunk(b"IDAT", zlib.compress(bytes(64))) + chunk(b"IEND", b""))
    manifest = build_index(folder_source(photos), tiny_search_run / "export" / "1", tmp_path / "index",
                           BuildOptions(progress=False))
    assert manifest["num_images"] == 1
    skipped = {entry["path"].split("photos/")[1]: entry["error"] for entry in manifest["skipped"]}
    assert skipped == {
        "bomb.png": "too large (400 MP): at most 40 MP are decoded (kitm.index.sources.MAX_IMAGE_PIXELS); scale it "
                    "down",
        "loop.jpg": "unreadable: a symbolic link loop (the link leads back to itself)"}
    assert json.loads((tmp_path / "index" / "manifest.json").read_text())["skipped"] == manifest["skipped"]


def test_a_build_logged_to_a_file_is_quiet(tmp_path, tiny_search_run, subprocess_env):
    env = subprocess_env()
    del env["TF_CPP_MIN_LOG_LEVEL"]  # as a user runs it
    log = tmp_path / "index.log"
    with log.open("w") as stream:  # not a terminal
        result = subprocess.run([sys.executable, "-m", "kitm.index", f"--run={tiny_search_run}",
                                 f"--out={tmp_path / 'index'}", "--batch_size=1", "--chunk_size=2"],
                                stdout=subprocess.PIPE, stderr=stream, text=True, env=env, timeout=300)
    assert result.returncode == 0, log.read_text()[-3000:]
    lines = log.read_text().splitlines()
    # No TensorFlow start-up lines (cuInit, oneDNN); a progress line at the start and the end of each bar (and one
    # every 30 s), not one per batch.
    assert all(line.startswith(("embedding images", "embedding captions")) for line in lines), lines
    assert len(lines) <= 6, lines
