"""SPICE of every hypothesis caption against every group of reference captions, via pycocoevalcap.

SPICE (Anderson et al. 2016, "SPICE: Semantic Propositional Image Caption Evaluation") parses
captions into scene graphs and scores a hypothesis h against references G by the F-score of their
semantic tuples (objects, attributes, relations):

    P = |T(h) ⊗ T(G)| / |T(h)|,   R = |T(h) ⊗ T(G)| / |T(G)|,   SPICE(h, G) = 2 P R / (P + R)

where T(G) is the union of the references' tuples and ⊗ matches tuples up to WordNet synonyms.
NCS (Thomas & Kovashka's metric section, docs/methods.md#ncs) may use it instead of CIDEr-D as the
relevance N[c, i] of caption c to image i. ``spice_matrix`` returns [H, G] with entry
``SPICE(hypotheses[h], reference_groups[g])`` (the "All" F-score), computed by pycocoevalcap's
``Spice`` (its SPICE 1.0 jar, run by Java) with one (hypothesis, group) pair per scored item.

The jar needs Stanford CoreNLP 3.6.0 (``stanford-corenlp-3.6.0.jar`` and
``stanford-corenlp-3.6.0-models.jar`` in pycocoevalcap's ``spice/lib``), which pycocoevalcap
downloads on first use. kitm never triggers that download: it checks the files (every jar on the
SPICE jar's manifest class path) and Java first, and raises ``SpiceUnavailableError`` naming what
is missing and how to get it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pathlib
import re
import shutil
import subprocess
import zipfile
from collections.abc import Iterator, Sequence

import numpy as np

from kitm.errors import KitmError
from kitm.relevance._inputs import check_captions, check_reference_groups

__all__ = ["SpiceUnavailableError", "check_spice_available", "spice_matrix", "spice_missing_requirements"]

_SPICE_JAR = "spice-1.0.jar"
_CORENLP_ARCHIVE = "stanford-corenlp-full-2015-12-09.zip"
# SPICE 1.0's parse cache serialises JDK objects by reflection (FST); Java 9+ forbids that unless
# these packages are opened to the class path, and Java 17 fails outright without it.
_JAVA_OPENS = ("java.lang", "java.util", "java.util.concurrent", "java.math", "java.net", "java.text", "java.io")
_DEFAULT_PAIRS_PER_CALL = 50_000


class SpiceUnavailableError(KitmError, RuntimeError):
    """SPICE cannot run here: Java or files the SPICE jar needs are missing (nothing is downloaded)."""


def _spice_dir() -> pathlib.Path:
    import pycocoevalcap.spice

    return pathlib.Path(pycocoevalcap.spice.__file__).resolve().parent


def _manifest_class_path(jar: pathlib.Path) -> list[str]:
    with zipfile.ZipFile(jar) as archive:
        manifest = archive.read("META-INF/MANIFEST.MF").decode("utf-8")
    # Manifest lines wrap at 72 bytes; a continuation line starts with one space.
    unfolded = manifest.replace("\r\n", "\n").replace("\n ", "")
    for line in unfolded.split("\n"):
        if line.startswith("Class-Path:"):
            return line.split(":", 1)[1].split()
    return []


@functools.lru_cache(maxsize=None)
def _java_major_version(java: str) -> int | None:
    try:
        completed = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', completed.stderr + completed.stdout)
    if not match:
        return None
    major = int(match.group(1))
    # Java 8 and older report "1.8.0_..."; the major version is the second number.
    return int(match.group(2) or 0) if major == 1 else major


def spice_missing_requirements() -> list[str]:
    """What SPICE still needs on this machine, one readable item each; empty when it can run."""
    missing = []
    if shutil.which("java") is None:
        missing.append("a Java runtime on PATH (`java`; SPICE 1.0 was built for Java 8, e.g. "
                       "`apt-get install openjdk-17-jre-headless` or any JRE >= 8)")
    spice_dir = _spice_dir()
    jar = spice_dir / _SPICE_JAR
    if not jar.is_file():
        missing.append(f"{jar} (ships with pycocoevalcap==1.2: reinstall it)")
        return missing
    try:
        class_path = _manifest_class_path(jar)
    except (OSError, KeyError, zipfile.BadZipFile) as error:
        missing.append(f"a readable {jar} ({error}; reinstall pycocoevalcap)")
        return missing
    for entry in class_path:
        if not (spice_dir / entry).is_file():
            missing.append(str(spice_dir / entry))
    return missing


def check_spice_available() -> None:
    """Raises ``SpiceUnavailableError`` naming every missing requirement and how to obtain it."""
    missing = spice_missing_requirements()
    if not missing:
        return
    spice_dir = _spice_dir()
    corenlp = [item for item in missing if "stanford-corenlp" in item]
    advice = []
    if corenlp:
        advice.append(
            "The Stanford CoreNLP 3.6.0 jars come from pycocoevalcap's own script, which downloads "
            f"{_CORENLP_ARCHIVE} from the Stanford NLP site and extracts them: on a machine with network run "
            "`python -c \"from pycocoevalcap.spice.get_stanford_models import get_stanford_models; "
            "get_stanford_models()\"`, or copy stanford-corenlp-3.6.0.jar and stanford-corenlp-3.6.0-models.jar "
            f"from that archive into {spice_dir / 'lib'}. kitm never downloads them itself.")
    raise SpiceUnavailableError("SPICE cannot run: missing " + "; ".join(missing) + ". " + " ".join(advice))


@contextlib.contextmanager
def _java_options_for_spice() -> Iterator[None]:
    """Opens the JDK packages SPICE's cache needs, through the launcher's JDK_JAVA_OPTIONS (Java 9+).

    pycocoevalcap builds the java command line itself, so the environment is the one way in.
    """
    java = shutil.which("java")
    major = _java_major_version(java) if java else None
    if major is None or major < 9:
        yield
        return
    previous = os.environ.get("JDK_JAVA_OPTIONS")
    opens = " ".join(f"--add-opens=java.base/{package}=ALL-UNNAMED" for package in _JAVA_OPENS)
    os.environ["JDK_JAVA_OPTIONS"] = f"{previous} {opens}" if previous else opens
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("JDK_JAVA_OPTIONS", None)
        else:
            os.environ["JDK_JAVA_OPTIONS"] = previous


def spice_matrix(hypotheses: Sequence[str], reference_groups: Sequence[Sequence[str]], *,
                 pairs_per_call: int = _DEFAULT_PAIRS_PER_CALL, nan_value: float | None = 0.0,
                 progress: bool = False) -> np.ndarray:
    """SPICE F-score of each hypothesis against each reference group: float64 [H, G].

    ``result[h, g] = SPICE(hypotheses[h], reference_groups[g])`` (the "All" tuple F-score of
    Anderson et al. 2016, Sec. 3), as pycocoevalcap's ``Spice.compute_score`` returns it for an item
    with test caption ``hypotheses[h]`` and references ``reference_groups[g]``.

    Args:
      hypotheses: H captions.
      reference_groups: G non-empty lists of reference captions.
      pairs_per_call: (hypothesis, group) items per Java run; SPICE caches parses on disk, so
        splitting costs only the start-up of Java and CoreNLP per call while bounding the input
        file and the heap (pycocoevalcap starts Java with -Xmx8G).
      nan_value: SPICE's F-score is undefined (pycocoevalcap gives NaN) when a caption yields no
        tuple; such entries become ``nan_value`` (0: no shared meaning), or stay NaN with None.
      progress: tqdm bar over Java runs.

    Raises:
      SpiceUnavailableError: Java or the Stanford CoreNLP jars are missing (nothing is downloaded).
    """
    hypotheses = check_captions(hypotheses, "hypotheses")
    groups = check_reference_groups(reference_groups, "SPICE")
    if isinstance(pairs_per_call, bool) or not isinstance(pairs_per_call, (int, np.integer)) or pairs_per_call < 1:
        raise ValueError(f"pairs_per_call must be a positive integer, got {pairs_per_call!r}")
    if nan_value is not None and not np.isfinite(nan_value):
        raise ValueError(f"nan_value must be a finite number or None, got {nan_value!r}")
    result = np.zeros((len(hypotheses), len(groups)), dtype=np.float64)
    if result.size == 0:
        return result
    check_spice_available()
    from pycocoevalcap.spice import spice as spice_module
    from kitm.progress import progress_bar as tqdm

    # Spice.__init__ only fetches the CoreNLP models (from the network when absent); the files were
    # checked above, so the scorer is made without it and can never start a download.
    scorer = spice_module.Spice.__new__(spice_module.Spice)
    num_groups = len(groups)
    flat = result.reshape(-1)
    with _java_options_for_spice():
        for start in tqdm(range(0, result.size, int(pairs_per_call)), disable=not progress, desc="SPICE",
                          unit="call"):
            # Item p is the pair (p // G, p % G); SPICE takes its items as dicts, one entry per pair.
            pair_ids = range(start, min(start + int(pairs_per_call), result.size))
            candidates = {p: [hypotheses[p // num_groups]] for p in pair_ids}
            references = {p: groups[p % num_groups] for p in pair_ids}
            _, scores = scorer.compute_score(references, candidates)
            # compute_score returns its per-item scores in the order of sorted(item ids).
            ordered = np.fromiter(sorted(references), dtype=np.int64, count=len(references))
            if len(scores) != len(ordered):
                raise RuntimeError(f"SPICE returned {len(scores)} scores for {len(ordered)} pairs")
            flat[ordered] = [float(score["All"]["f"]) for score in scores]
    if nan_value is not None:
        np.nan_to_num(result, copy=False, nan=float(nan_value))
    return result
