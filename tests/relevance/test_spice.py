"""kitm.relevance.spice: SPICE matrices through pycocoevalcap, and a clear error when SPICE can't run.

The Stanford CoreNLP models SPICE needs are not on this machine (and must not be downloaded), so
real SPICE values are not checked here. What is checked: which files are reported missing (against
the SPICE jar's manifest, read independently here) and that nothing is downloaded; and, with the
Java run replaced by a fake ``Spice`` that keeps pycocoevalcap's contract (items keyed by id, one
hypothesis and >= 1 references each, per-item scores returned in sorted id order), that the [H, G]
matrix is assembled from the right per-pair scores.
"""

from __future__ import annotations

import os
import pathlib
import zipfile

import numpy as np
import pytest

import pycocoevalcap.spice.spice as pycoco_spice
from kitm.relevance import spice
from kitm.relevance.spice import SpiceUnavailableError, check_spice_available, spice_matrix, spice_missing_requirements

# The Class-Path of pycocoevalcap 1.2's spice-1.0.jar manifest, in order.
REAL_CLASS_PATH = [
    "lib/stanford-corenlp-3.6.0.jar", "lib/ejml-0.23.jar", "lib/slf4j-api-1.7.12.jar",
    "lib/stanford-corenlp-3.6.0-models.jar", "lib/slf4j-simple-1.7.21.jar", "lib/lmdbjni-0.4.6.jar",
    "lib/lmdbjni-linux64-0.4.6.jar", "lib/lmdbjni-osx64-0.4.6.jar", "lib/lmdbjni-win64-0.4.6.jar",
    "lib/fst-2.47.jar", "lib/jackson-core-2.5.3.jar", "lib/javassist-3.19.0-GA.jar", "lib/objenesis-2.4.jar",
    "lib/guava-19.0.jar", "lib/json-simple-1.1.1.jar", "lib/Meteor-1.5.jar", "lib/SceneGraphParser-1.0.jar",
]
CORENLP = ["lib/stanford-corenlp-3.6.0.jar", "lib/stanford-corenlp-3.6.0-models.jar"]


def fake_spice_dir(root: pathlib.Path, absent: tuple[str, ...] = ()) -> pathlib.Path:
    """A spice folder whose jar's manifest wraps its Class-Path at 72 bytes, as Maven writes it."""
    root.mkdir()
    text = "Class-Path: " + " ".join(REAL_CLASS_PATH)
    lines = [text[:72]] + [" " + text[i:i + 71] for i in range(72, len(text), 71)]
    manifest = "Manifest-Version: 1.0\r\n" + "\r\n".join(lines) + "\r\nMain-Class: edu.anu.spice.SpiceScorer\r\n"
    with zipfile.ZipFile(root / "spice-1.0.jar", "w") as jar:
        jar.writestr("META-INF/MANIFEST.MF", manifest)
    (root / "lib").mkdir()
    for entry in REAL_CLASS_PATH:
        if entry not in absent:
            (root / entry).write_bytes(b"")
    return root


@pytest.fixture
def no_downloads(monkeypatch):
    """Any attempt to fetch the CoreNLP models fails the test."""
    import urllib.request

    import pycocoevalcap.spice.get_stanford_models as models

    def forbidden(*args, **kwargs):
        raise AssertionError("a download was attempted")

    monkeypatch.setattr(urllib.request, "urlretrieve", forbidden)
    monkeypatch.setattr(models, "urlretrieve", forbidden)
    monkeypatch.setattr(models, "get_stanford_models", forbidden)
    monkeypatch.setattr(pycoco_spice, "get_stanford_models", forbidden)


def test_real_manifest_is_read_with_its_wrapped_lines():
    assert spice._manifest_class_path(spice._spice_dir() / "spice-1.0.jar") == REAL_CLASS_PATH


def test_this_installation_reports_exactly_the_absent_files(no_downloads):
    spice_dir = spice._spice_dir()
    absent = [entry for entry in REAL_CLASS_PATH if not os.path.isfile(spice_dir / entry)]
    reported = spice_missing_requirements()
    assert [item for item in reported if "Java" not in item] == [str(spice_dir / entry) for entry in absent]
    if not reported:
        check_spice_available()
        return
    with pytest.raises(SpiceUnavailableError) as raised:
        spice_matrix(["a dog runs"], [["a dog is running", "a brown dog"]])
    for entry in absent:
        assert str(spice_dir / entry) in str(raised.value)
    if set(CORENLP) & set(absent):
        assert "get_stanford_models()" in str(raised.value)
    # Still absent: nothing was fetched.
    assert [entry for entry in REAL_CLASS_PATH if not os.path.isfile(spice_dir / entry)] == absent


def test_missing_models_jar_is_named_with_how_to_get_it(tmp_path, monkeypatch, no_downloads):
    spice_dir = fake_spice_dir(tmp_path / "spice", absent=("lib/stanford-corenlp-3.6.0-models.jar",))
    monkeypatch.setattr(spice, "_spice_dir", lambda: spice_dir)
    monkeypatch.setattr(spice.shutil, "which", lambda name: "/usr/bin/java")
    assert spice_missing_requirements() == [str(spice_dir / "lib" / "stanford-corenlp-3.6.0-models.jar")]
    with pytest.raises(SpiceUnavailableError) as raised:
        spice_matrix(["a dog"], [["a dog runs"]])
    message = str(raised.value)
    assert "stanford-corenlp-3.6.0-models.jar" in message and "get_stanford_models()" in message
    assert "ejml" not in message and "Java runtime" not in message


def test_missing_java_and_jar(tmp_path, monkeypatch, no_downloads):
    spice_dir = fake_spice_dir(tmp_path / "spice")
    monkeypatch.setattr(spice, "_spice_dir", lambda: spice_dir)
    monkeypatch.setattr(spice.shutil, "which", lambda name: None)
    with pytest.raises(SpiceUnavailableError, match="Java runtime on PATH"):
        check_spice_available()
    (spice_dir / "spice-1.0.jar").unlink()
    reported = spice_missing_requirements()
    assert len(reported) == 2 and "spice-1.0.jar" in reported[1]


def token_f1(hypothesis: str, references: list[str]) -> float:
    """Stand-in for SPICE's tuple F-score: F1 of word sets (NaN when the hypothesis has no words)."""
    words = set(hypothesis.split())
    union = set(" ".join(references).split())
    if not words:
        return float("nan")
    shared = len(words & union)
    return 2 * shared / (len(words) + len(union))


class FakeSpice:
    """pycocoevalcap's Spice with the Java run replaced; it records each call."""

    calls: list[dict] = []

    def __init__(self):
        raise AssertionError("Spice.__init__ fetches models; kitm must not call it")

    def compute_score(self, gts, res):
        assert sorted(gts) == sorted(res)
        ids = sorted(gts)
        for item in ids:
            assert isinstance(res[item], list) and len(res[item]) == 1
            assert isinstance(gts[item], list) and len(gts[item]) >= 1
        FakeSpice.calls.append({"items": len(ids), "java_options": os.environ.get("JDK_JAVA_OPTIONS")})
        scores = [{"All": {"f": token_f1(res[item][0], gts[item]), "pr": 0.0, "re": 0.0}} for item in ids]
        return float(np.mean([s["All"]["f"] for s in scores])), scores


HYPOTHESES = ["a dog runs on grass", "two men play chess", "", "a child in a pink dress"]
GROUPS = [["a dog is running", "the brown dog runs on the grass"], ["men playing a board game"],
          ["a girl in a pink dress climbs stairs", "a child", "a little girl"]]


@pytest.fixture
def fake_spice(tmp_path, monkeypatch, no_downloads):
    spice_dir = fake_spice_dir(tmp_path / "spice")
    monkeypatch.setattr(spice, "_spice_dir", lambda: spice_dir)
    monkeypatch.setattr(spice.shutil, "which", lambda name: "/usr/bin/java")
    monkeypatch.setattr(pycoco_spice, "Spice", FakeSpice)
    monkeypatch.delenv("JDK_JAVA_OPTIONS", raising=False)
    FakeSpice.calls = []
    return FakeSpice


def expected_matrix(nan_value: float | None) -> np.ndarray:
    expected = np.array([[token_f1(h, g) for g in GROUPS] for h in HYPOTHESES])
    return expected if nan_value is None else np.where(np.isnan(expected), nan_value, expected)


@pytest.mark.parametrize("pairs_per_call, calls", [(50_000, 1), (5, 3), (1, 12)])
def test_matrix_is_assembled_from_per_pair_scores(fake_spice, monkeypatch, pairs_per_call, calls):
    monkeypatch.setattr(spice, "_java_major_version", lambda java: 8)
    result = spice_matrix(HYPOTHESES, GROUPS, pairs_per_call=pairs_per_call)
    assert result.dtype == np.float64 and result.shape == (4, 3)
    np.testing.assert_array_equal(result, expected_matrix(0.0))
    assert len(fake_spice.calls) == calls
    assert sum(call["items"] for call in fake_spice.calls) == 12


def test_nan_scores_are_kept_or_replaced(fake_spice, monkeypatch):
    monkeypatch.setattr(spice, "_java_major_version", lambda java: 8)
    kept = spice_matrix(HYPOTHESES, GROUPS, nan_value=None)
    assert np.isnan(kept[2]).all()
    np.testing.assert_array_equal(kept, expected_matrix(None))
    np.testing.assert_array_equal(spice_matrix(HYPOTHESES, GROUPS, nan_value=-1.0), expected_matrix(-1.0))


def test_java_9_and_later_get_the_packages_spice_reflects_on(fake_spice, monkeypatch):
    monkeypatch.setattr(spice, "_java_major_version", lambda java: 17)
    monkeypatch.setenv("JDK_JAVA_OPTIONS", "-Dkeep=1")
    spice_matrix(HYPOTHESES[:1], GROUPS[:1])
    options = fake_spice.calls[-1]["java_options"]
    assert options.startswith("-Dkeep=1 ") and "--add-opens=java.base/java.lang=ALL-UNNAMED" in options
    assert os.environ["JDK_JAVA_OPTIONS"] == "-Dkeep=1"
    monkeypatch.setattr(spice, "_java_major_version", lambda java: 8)
    monkeypatch.delenv("JDK_JAVA_OPTIONS")
    spice_matrix(HYPOTHESES[:1], GROUPS[:1])
    assert fake_spice.calls[-1]["java_options"] is None and "JDK_JAVA_OPTIONS" not in os.environ


@pytest.mark.parametrize("output, major", [('openjdk version "17.0.15" 2025-04-15', 17),
                                           ('java version "1.8.0_101"', 8), ('openjdk version "11" 2018', 11),
                                           ("no version here", None)])
def test_java_version_parsing(monkeypatch, output, major):
    class Completed:
        stdout, stderr = "", output

    monkeypatch.setattr(spice.subprocess, "run", lambda *args, **kwargs: Completed())
    spice._java_major_version.cache_clear()
    try:
        assert spice._java_major_version("/fake/java") == major
    finally:
        spice._java_major_version.cache_clear()


def test_empty_inputs_need_no_java(monkeypatch):
    monkeypatch.setattr(spice.shutil, "which", lambda name: None)
    assert spice_matrix([], [["a dog"]]).shape == (0, 1)
    assert spice_matrix(["a dog"], []).shape == (1, 0)


def test_bad_inputs():
    with pytest.raises(ValueError, match=r"reference_groups\[1\] is empty"):
        spice_matrix(["a"], [["b"], []])
    with pytest.raises(TypeError, match="single str"):
        spice_matrix("a dog", [["b"]])
    with pytest.raises(TypeError, match=r"hypotheses\[1\] must be a str"):
        spice_matrix(["a", None], [["b"]])
    with pytest.raises(TypeError, match=r"reference_groups\[0\]\[1\] must be a str"):
        spice_matrix(["a"], [["b", 3]])
    with pytest.raises(ValueError, match="pairs_per_call"):
        spice_matrix(["a"], [["b"]], pairs_per_call=0)
    with pytest.raises(ValueError, match="nan_value"):
        spice_matrix(["a"], [["b"]], nan_value=float("inf"))
