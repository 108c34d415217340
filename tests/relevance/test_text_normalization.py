"""Tests of kitm.relevance.text_normalization against the Stanford tokenizer pycocoevalcap ships.

Oracle: outputs of pycocoevalcap's own jar (``java -cp stanford-corenlp-3.4.1.jar
edu.stanford.nlp.process.PTBTokenizer -preserveLines -lowerCase``), recorded in
``tests/relevance/ptb_java_recorded.json`` by running this file as a script (``python
tests/relevance/test_text_normalization.py``, needs java). Each recorded text was tokenised on its own line,
followed by a neutral line, so no caption sees the next one (see test_cross_caption_context).

Recorded: ``cases``, probe captions for each convention (clitics, abbreviations, numbers, hyphens,
quotes, brackets, symbols, typographic characters); ``flickr8k``, 300 real Flickr8K captions as
written in Flickr8k.token.txt and the same captions re-attached COCO-style ("dog's ball.",
"hello, world"). The pure-Python tokenizer must give exactly the jar's tokens on all of them.

Agreement on the full data, measured while writing the module (not re-run here, it takes a few
seconds): 40,460 / 40,460 Flickr8K captions normalise identically, as written and COCO-style
re-attached, with the jar run on all captions in one batch as pycocoevalcap runs it.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from kitm.relevance.text_normalization import (
    PUNCTUATIONS,
    normalize_captions,
    ptb_normalize,
    ptb_normalize_java,
    ptb_tokenize,
)

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ptb_java_recorded.json")


def _load() -> dict:
    with open(FIXTURE, encoding="utf-8") as stream:
        return json.load(stream)


RECORDED = _load() if __name__ != "__main__" else {"cases": []}  # the script writes the file


def _drop_punctuation(tokens: list[str]) -> str:
    # pycocoevalcap's filter, written out here rather than imported from the module under test.
    return " ".join(token for token in tokens if token not in PUNCTUATIONS)


def _java_tokens(line: str) -> list[str]:
    # The jar separates tokens by single spaces; a token may hold a no-break space ("1\xa01/2").
    return line.split(" ") if line else []


@pytest.mark.parametrize("text, java", RECORDED["cases"], ids=range(len(RECORDED["cases"])))
def test_probe_cases_match_recorded_java(text: str, java: str) -> None:
    assert ptb_tokenize(text) == _java_tokens(java)
    assert ptb_normalize(text) == _drop_punctuation(_java_tokens(java))


def test_flickr8k_captions_match_recorded_java() -> None:
    mismatches = [(text, java, ptb_tokenize(text)) for text, java in RECORDED["flickr8k"]
                  if ptb_tokenize(text) != _java_tokens(java)]
    assert not mismatches, mismatches[:5]
    assert all(ptb_normalize(text) == _drop_punctuation(_java_tokens(java))
               for text, java in RECORDED["flickr8k"])
    assert len(RECORDED["flickr8k"]) == 600


def test_punctuations_are_pycocoevalcaps() -> None:
    from pycocoevalcap.tokenizer import ptbtokenizer

    assert PUNCTUATIONS == frozenset(ptbtokenizer.PUNCTUATIONS)
    # Lower-cased bracket tokens are not in the list, so they survive as in pycocoevalcap.
    assert ptb_normalize("a (red) dog") == "a -lrb- red -rrb- dog"


def test_docstring_examples() -> None:
    assert ptb_tokenize("A dog's ball (red), isn't it?") == [
        "a", "dog", "'s", "ball", "-lrb-", "red", "-rrb-", ",", "is", "n't", "it", "?"]
    assert ptb_normalize('A dog\'s "ball", isn\'t it?') == "a dog 's ball is n't it"


def test_edge_inputs() -> None:
    assert ptb_tokenize("") == [] and ptb_normalize("") == ""
    assert ptb_normalize("   \t ") == ""
    assert ptb_normalize(". , ; : ! ? -- ...") == ""
    # Line breaks inside a caption are spaces (pycocoevalcap writes one caption per line).
    assert ptb_normalize("two dogs\nplay\r\nin\u2028snow .") == "two dogs play in snow"
    assert ptb_normalize("A DOG") == "a dog"


def test_cross_caption_context_is_the_known_difference() -> None:
    # The jar reads a batch as one text: a one-letter initial ending a caption loses its period
    # when the next caption starts a new sentence ("A ...", "The ..."). ptb_normalize sees one
    # caption and keeps it, as the jar does when nothing (or another word) follows.
    context = RECORDED["batch_context"]
    assert context["java_normalized"][0] == "the letter i"
    assert context["java_normalized"][2] == "the letter i."
    assert ptb_normalize(context["texts"][0]) == "the letter i."
    assert [ptb_normalize(text) for text in context["texts"][1:]] == context["java_normalized"][1:]


def test_normalize_captions_dispatch() -> None:
    texts = ["A Dog's ball.", "Two  cats ."]
    expected = ["a dog 's ball", "two cats"]
    assert normalize_captions(texts) == expected
    assert normalize_captions(texts, "python") == expected
    assert normalize_captions(texts, False) == texts and normalize_captions(texts, "none") == texts
    with pytest.raises(ValueError, match="normalize must be"):
        normalize_captions(texts, "spacy")


def test_bad_input_errors() -> None:
    with pytest.raises(TypeError, match="text must be a str, got int"):
        ptb_tokenize(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"texts\[1\] must be a str, got NoneType"):
        ptb_normalize_java(["a", None])  # type: ignore[list-item]
    with pytest.raises(RuntimeError, match="was not found on PATH"):
        ptb_normalize_java(["a"], java="kitm-no-such-java")
    assert ptb_normalize_java([]) == []


def test_java_wrapper_reproduces_recording() -> None:
    # A few live runs of the jar (about a second each) check the wrapper and that the recording
    # is current.
    assert shutil.which("java"), \
        "this test needs a Java runtime on PATH (java), as ptb_normalize_java does"
    with pytest.raises(RuntimeError, match="jar not found"):
        ptb_normalize_java(["a"], jar="/nonexistent/stanford-corenlp.jar")
    texts = [text for text, _ in RECORDED["cases"]]
    expected = [_drop_punctuation(_java_tokens(java)) for _, java in RECORDED["cases"]]
    # A neutral caption after each one, as when recording, so that no caption sees the next.
    got = ptb_normalize_java([line for text in texts for line in (text, "zzz")])[::2]
    assert got == expected
    # Line separators inside a caption do not shift the captions after it.
    assert ptb_normalize_java(["a\rb", "c\u2028d", "e"]) == ["a b", "c d", "e"]
    assert normalize_captions(["A Dog's ball."], "java") == ["a dog 's ball"]


# --------------------------------------------------------------------------------------------
# Recording (run this file as a script; needs java). Not part of the test run.
# --------------------------------------------------------------------------------------------

PROBES = [
    # Clitics and the Treebank's two-token words.
    "A dog's ball.", "the dogs' toys", "don't can't won't isn't I'm you're we'll they've he'd",
    "DON'T Can't", "I'd've don't's", "cannot Cannot CANNOT gonna wanna gotta gimme lemme",
    "gonna's wannabe gonna-be (gonna)", "the 1950's car", "AT&T's logo", "dog 's ball", "do n't",
    "don't-care isn't-it", "An ant's-eye-view", "O'Neil's house", "it's\"", "rock'n'roll",
    "rock 'n' roll", "slip 'n slide", "'tis 'twas 'til 'em 'cause", "y'all y'know",
    # Apostrophes inside words.
    "O'Neil o'clock d'artagnan l'amour ma'am ne'er c'mon", "ab'cd x'y", "peace'using tree'The",
    "'90s '90 music", "5'10 tall", "dogs' 'bout", "'a dog", "'quoted' word", "a ' devil ' outfit",
    # Periods: abbreviations, initials, acronyms.
    "Mr. Smith and Dr. Jones", "the mr. dog", "Jr. Sr. Inc. Co. etc. dog", "Dale Jr. Posters",
    "Dale Jr. posters", "St. Louis and Mt. Hood", "Jan. 5 and Sept. 6", "vs. the team",
    "Calif. beach", "e.g. i.e. a.m. p.m. U.S. D.C. R.V.", "in the U.S. The end",
    "a.b.c. hello.world. dog.The www.google.com.", "letter I. The end", "a U. Miami shirt",
    "A. B. Smith", "Plan B. The end", "letter P.", "No. 5 no. 5 the no. dog", "5. dog",
    "dog., dog.; dog.: dog.! dog.? dog.)", "3.5., 2699., x", "U.S.-made car",
    "Calif.. Ave.. etc...", "the end...", "the end....", "wait . . . what", "a ... b .. c",
    # Numbers and hyphens.
    "He is 3.5 feet", "at 10:30 today", "1,000 people", "a 3-year-old 3.5-inch 3-D T-shirt",
    "-5 +3 a-5 5-a a+5", "10pm 2nd 3d 4x4 1950s", "10:30am 3.5mm 1,000s", ".5 inch ,5 :30",
    "a 2 1/2 year old", "1 1/2-inch", "2 3/4s", "call 555 123 4567.", "12 34 5678",
    "1/2 a/b and/or w/o w/", "-a dog", "a - b", "a -- b", "a---b", "a ----- b", "a-- b --a",
    "well-known.",
    # Quotes, brackets, symbols.
    "\"hello\" he said", "a sign that says \" Mark ' Mom ' Finley \" .", "\"a\"b",
    "``hi'' ''hello''", "`back` quotes", "a (big) dog", "[x] {y} <z>", "<b>bold</b>", "a<b x",
    "a>b", "a & b", "AT&T at&t A&b", "#1 #tag # 2", "100% $5 5$", "US$5 A$ a$", "£5 €5 ¢5",
    "hello@example.com @user", "http://www.x.com/a?b=c", "x_x __init__", "a*b ** C++ c++",
    "wow!!! what?! ?? ?.", "a;b a:b a,b", ":) :-) ;) :( :D :P", "a:)", ":Dog", "## ###",
    # Typography and Unicode.
    "It\u2019s a \u201cnice\u201d day \u2014 really \u2013 ok \u2026 fine",
    "\u2018quoted\u2019 word",
    "a\u2013b a\u2014b", "caf\u00e9 na\u00efve Z\u00fcrich", "\u00bd cup", "1\u00a01/2 cup",
    "\u00ab a \u00bb", "a\u00adb a\u200bb",
]

BATCH_CONTEXT = ["The letter I.", "A dog runs .", "The letter I.", "two dogs run ."]


def _record() -> None:  # pragma: no cover - maintenance script
    import random
    import subprocess

    from kitm.relevance.text_normalization import _default_jar

    def run(lines: list[str]) -> list[str]:
        result = subprocess.run(
            ["java", "-cp", _default_jar(), "edu.stanford.nlp.process.PTBTokenizer",
             "-preserveLines", "-lowerCase"],
            input="\n".join(lines).encode("utf-8"), capture_output=True, check=True)
        return result.stdout.decode("utf-8").split("\n")

    def isolated(texts: list[str]) -> list[str]:
        return run([line for text in texts for line in (text, "zzz")])[:2 * len(texts):2]

    import re

    path = "/work/shared/data/flickr8k/Flickr8k.token.txt"
    with open(path, encoding="utf-8") as stream:
        captions = [line.rstrip("\n").split("\t", 1)[1] for line in stream if "\t" in line]
    sample = random.Random(8).sample(captions, 300)

    def attach(caption: str) -> str:  # COCO-style: "a dog 's ball ." -> "a dog's ball."
        caption = re.sub(r" ([.,;:!?])", r"\1", caption.strip())
        return re.sub(r" ('s|'re|'ll|'ve|'m|'d|n't)\b", r"\1", caption)

    flickr = sample + [attach(caption) for caption in sample]
    payload = {
        "source": "pycocoevalcap 1.2 stanford-corenlp-3.4.1.jar, PTBTokenizer -preserveLines "
                  "-lowerCase; each text on its own line followed by the line 'zzz'",
        "cases": [[text, line.rstrip()] for text, line in zip(PROBES, isolated(PROBES))],
        "flickr8k": [[text, line.rstrip()] for text, line in zip(flickr, isolated(flickr))],
        "batch_context": {
            "texts": BATCH_CONTEXT,
            "java_normalized": [_drop_punctuation(_java_tokens(line.rstrip()))
                                for line in run(BATCH_CONTEXT)[:len(BATCH_CONTEXT)]],
        },
    }
    temporary = FIXTURE + ".tmp"
    with open(temporary, "w", encoding="utf-8") as stream:
        json.dump(payload, stream, ensure_ascii=False, indent=0)
    os.replace(temporary, FIXTURE)


if __name__ == "__main__":  # pragma: no cover
    _record()
