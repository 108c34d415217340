"""Caption normalisation as pycocoevalcap applies it before CIDEr-D and SPICE.

pycocoevalcap's ``PTBTokenizer`` pipes every caption through the Stanford PTB tokenizer of the
jar it ships (``-preserveLines -lowerCase``) and drops the tokens in :data:`PUNCTUATIONS`.
Two implementations:

* :func:`ptb_normalize` (``normalize=True`` or ``"python"`` in :func:`normalize_captions` and
  ``kitm.relevance.cider_matrix``): a small pure-Python tokenizer, a **clean-room approximation**.
  It was written from the Penn Treebank conventions (lower case; punctuation split from words;
  clitics ``n't 's 'm 'd 're 've 'll`` split; ``cannot gonna wanna gotta gimme lemme`` cut in two;
  hyphenated words, numbers such as ``3.5 1,000 10:30 1/2`` and acronyms such as ``u.s.`` kept
  whole; brackets written ``-lrb- -rrb-``..., which survive pycocoevalcap's filter because it
  lists them in upper case) and from the observed output of the jar on probe strings. It contains
  no code or tables taken from the tokenizer's sources.
* :func:`ptb_normalize_java` (``normalize="java"``): the exact tokenizer, running
  pycocoevalcap's own jar (needs ``java`` on ``PATH``).

Measured agreement of :func:`ptb_normalize` with the jar, run on all captions in one batch in file
order as pycocoevalcap runs it: all 40,460 Flickr8K captions (``Flickr8k.token.txt``) normalise
identically (100%), and so do the same 40,460 captions re-attached COCO-style (``"a dog's
ball."``, ``"hello, world"``), with or without a capital first letter. Token for token
(:func:`ptb_tokenize`, punctuation kept) 2 captions differ, by a "." that is dropped anyway. On
20,000 Flickr8K captions perturbed at random (punctuation glued to words, contractions,
abbreviations, numbers, symbols inserted; run in one batch) 3 normalised strings differ (0.015%),
all by the first known difference below; on deliberately garbled strings (random words glued to
random symbols) about 1% differ, by the kinds listed below.

Known differences, all rare in captions:

* Context across captions: the jar reads a batch as one text, so a one-letter initial at the very
  end of a caption (``"... letter B."``) loses its period when the *next* caption starts a new
  sentence (``"A ..."``, ``"The ..."``). Here a caption's end counts as the end of the text and
  the period is kept (``"letter b."``), as the jar does when nothing or another word follows.
* Abbreviations: the period stays on one-letter initials, ``x.y.`` acronyms and common
  abbreviations (``mr. dr. st. mt. jr. inc. co. etc. vs.``, month and weekday abbreviations,
  some state abbreviations such as ``calif.``). Rarer ones the jar also knows (``Assn. Bldg.
  Maj. Mme.``, capitalised states that are also words such as ``Wash. Miss. Pa.``) lose it here.
* Apostrophes: dialect spellings ending in an apostrophe (``somethin'`` and ``ol'`` keep it in the
  jar), a curly apostrophe inside a name (``O’Neil``), and garbled forms such as
  ``"mountain'traverse"`` or ``"'ll1203"`` may be split differently.
* Rare symbols and forms: emoticons beyond ``:) :-) ;) :( :D :P``, currency signs other than
  ``$ £ € ¢``, HTML-like tags with spaces, e-mail addresses followed by symbols,
  signed numbers joined by a hyphen (``+41-18``), runs of unusual punctuation (``=] ;|``).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence

__all__ = [
    "PUNCTUATIONS",
    "ptb_tokenize",
    "ptb_normalize",
    "ptb_normalize_java",
    "normalize_captions",
]

#: Tokens pycocoevalcap's ``PTBTokenizer`` removes after tokenisation (its ``PUNCTUATIONS``).
#: The bracket names are upper case while the tokenizer lower-cases its output, so ``-lrb-`` and
#: friends survive, as in pycocoevalcap.
PUNCTUATIONS = frozenset(
    ["''", "'", "``", "`", "-LRB-", "-RRB-", "-LCB-", "-RCB-",
     ".", "?", "!", ",", ":", "-", "--", "...", ";"]
)

# Line separators: pycocoevalcap writes one caption per line, so inside a caption they are spaces.
_LINE_BREAKS = re.compile(r"[\r\n\u2028\u2029\u000B\u000C\u0085]")

# Typographic characters written as their ASCII Penn Treebank forms before tokenising.
_TYPOGRAPHY = str.maketrans({
    "\u2018": "`", "\u2019": "'", "\u201c": "``", "\u201d": "''", "\u00ab": "``", "\u00bb": "''",
    "\u2013": " -- ", "\u2014": " -- ", "\u2026": "...", "\u00a0": " ", "\u200b": " ",
    "\u00ad": "", "\u00bd": "1/2", "\u00bc": "1/4", "\u00be": "3/4",
})

_BRACKETS = {"(": "-LRB-", ")": "-RRB-", "[": "-LSB-", "]": "-RSB-", "{": "-LCB-", "}": "-RCB-"}
# Currency signs as the tokenizer writes them (pound as "#", the Penn Treebank's old convention).
_CURRENCY = {"\u00a3": "#", "\u20ac": "$", "\u00a2": "cents"}

# Abbreviations whose final period stays on the word (compared lower-cased). Titles and the like.
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof st mt ft ave gen col capt lt sgt rev gov sen rep vs cf dept hon pres".split()
)
# Abbreviations that can also end a sentence: the period stays on the word, and when a capitalised
# word follows, the tokenizer adds a sentence-final "." token after it.
_SENTENCE_ABBREVIATIONS = frozenset(
    "jr sr inc ltd co corp bros etc al rd blvd univ esq ph.d "
    "jan feb mar apr jun jul aug sep sept oct nov dec mon tue tues wed thu thurs fri "
    "ala ariz calif colo conn fla ga ind kan ky md mich minn mo mont neb nev okla tenn va vt wis wyo"
    .split()
)
# Capitalised words that, after a one-letter initial or an acronym, mark the start of a new
# sentence: "letter I. The end" -> "i . the" but "U. Miami" -> "u. miami".
_SENTENCE_STARTS = frozenset(
    "a about after an as at but he her here however if in it last many more now once one other "
    "our since so some such that the their then there these they this we what when while yet you"
    .split()
)
# Words the Penn Treebank writes as two tokens, and where they are cut.
_SPLIT_WORDS = {"cannot": 3, "gonna": 3, "wanna": 3, "gotta": 3, "gimme": 3, "lemme": 3}
_CLITICS = frozenset(["n't", "'s", "'m", "'d", "'re", "'ve", "'ll"])
# Spellings with an inner apostrophe that stay whole though no rule below keeps them.
_APOSTROPHE_WORDS = frozenset(["c'mon", "ev'ry"])

_ALNUM = r"[^\W_]"
_CLITIC = r"(?i:s|m|d|re|ve|ll)"
# A piece of a word: a number with inner . , : / ("3.5", "1,000", "10:30", "1/2"); an acronym
# before a hyphen ("U.S.-made"); or letters and digits joined by inner . / _, by ' after a letter
# (but not before a clitic: "dog's" is two tokens) or by & between capitals ("e.g", "and/or",
# "x_x", "o'neil", "AT&T"). Pieces joined by single hyphens make one word ("3.5-inch").
_PIECE = (rf"(?:\d+(?:[.,:/]\d+)+|(?:[A-Za-z]\.)+(?=-[^\W_])"
          rf"|{_ALNUM}+(?:(?:[./_]|(?<=[^\W\d_])'(?!{_CLITIC}(?![^\W\d_]))|(?<=[A-Z])&(?=[A-Z]))"
          rf"{_ALNUM}+)*)")
# One token at the current position. Python takes the first alternative that matches, so the
# special forms come before the generic ones.
_TOKEN = re.compile(
    r"""
      (?P<url>(?:https?|ftp)://[^\s"<>]*[^\s"<>.,;:!?'()\[\]{}])
    | (?P<email>[\w.+-]*\w@\w(?:[\w.-]*\w)?|@[^\W\d]\w*)
    | (?P<hashtag>\#[A-Za-z]+)
    | (?P<fraction>\d+\ \d+/\d+(?!\d))                 # "1 1/2": one token, NBSP inside
    | (?P<digits>\d{2,4}(?:\ \d{3,4}){2,}(?!\d))         # "555 123 4567" likewise
    | (?P<clitic>(?:'CLITIC|(?i:n't))(?![^\W\d_]))      # "dog 's", and "'s" after "dog"
    | (?P<leading>'\d\d(?=\s|$)|'\d\ds(?![^\W_])        # '90s, 'til, 'tis -> 't is
                 |'(?i:til|em|cause|n'|n)(?![^\W_])|(?i:'t)(?=(?i:is|was)\b))
    | (?P<symbol>[A-Z]+\$|(?i:c\+\+)|\#\#+|__+)         # US$, C++, ##, __
    | (?P<word>(?:[+-](?=\d))?PIECE(?:-(?!-)PIECE)*)    # "+5", "3-year-old", "AT&T"
    | (?P<decimal>[.,:]\d+(?:[.,:]\d+)*)               # ".5", ",5", ":30"
    | (?P<ellipsis>\.\.\.\.?\.?|\.(?:\ \.){2}(?:\ ?\.)?)  # "...", "....", ". . ."
    | (?P<dashes>-----+|--+|-)                        # 2 to 4 dashes are "--"
    | (?P<exclaim>[?!]+)
    | (?P<emoticon>[:;=]-?[()DPp](?![^\W_]))
    | (?P<tag></?[A-Za-z][^<>\s]*>|<<|>>)
    | (?P<stars>\*+)
    | (?P<quote>''|``|["'`])
    | (?P<other>\S)
    """.replace("PIECE", _PIECE).replace("CLITIC", _CLITIC),
    re.VERBOSE,
)
_CHUNK = re.compile(r"\S+")
_ACRONYM = re.compile(r"[A-Za-z](?:\.[A-Za-z])+")
_NEXT_WORD = re.compile(r"\s+([A-Za-z]+)(?=\s|$)")
_NEXT_CAPITAL = re.compile(r"\s+[A-Z]")
_NEXT_DIGIT = re.compile(r"\s*\d")
_NUMBER_END = re.compile(r"\d[.,:/]\d+$")
_CLITIC_AHEAD = re.compile(rf"'{_CLITIC}(?![^\W\d_])")
_NOT_SUFFIX = re.compile(r"(?i)n't$")
_NOT_BEFORE_HYPHEN = re.compile(r"(?i)(?<=[^\W\d_])n't(?=-)")
_ROCK_N_ROLL = re.compile(r"(?i)(.+?)('n')(.+)")
_TWO_DIGITS = re.compile(r"\d\ds?")
_OPENING_SINGLE = re.compile(r"[^\W\d_](?:[^\W\d_]|')")


def _period_stays(word: str, text: str, end: int) -> tuple[bool, bool]:
    """Whether the "." at ``text[end]`` after ``word`` belongs to the word, and whether a
    sentence-final "." token follows it (an abbreviation that may also end a sentence)."""
    lower = word.lower()
    if lower in _CLITICS:
        return False, False
    following = _NEXT_WORD.match(text, end + 1)
    new_sentence = (following is not None and following.group(1)[0].isupper()
                    and following.group(1).lower() in _SENTENCE_STARTS)
    if len(word) == 1 and word.isalpha():  # an initial, unless a new sentence follows
        return not new_sentence, False
    if _ACRONYM.fullmatch(word.rsplit("-", 1)[-1]):  # u.s., e.g., d.c., post-u.s.
        return True, new_sentence
    if lower in _ABBREVIATIONS:
        return True, False
    if lower in _SENTENCE_ABBREVIATIONS:
        return True, _NEXT_CAPITAL.match(text, end + 1) is not None
    if lower == "no" and _NEXT_DIGIT.match(text, end + 1):  # "No. 5"
        return True, False
    # "dog.," keeps its period (a sentence does not end before a comma); "3.5.," does not.
    return text[end + 1:end + 2] in (",", ";", ":") and not _NUMBER_END.search(word), False


def _split_apostrophes(stem: str) -> list[str]:
    """Split a clitic-free word at the inner apostrophes that are quotes rather than spelling."""
    if "'" not in stem or stem.lower() in _APOSTROPHE_WORDS:
        return [stem]
    rock_n_roll = _ROCK_N_ROLL.fullmatch(stem)
    if rock_n_roll:
        head, infix, rest = rock_n_roll.groups()
        return [*_split_apostrophes(head), infix, *_split_apostrophes(rest)]
    head, rest = stem.split("'", 1)
    if _TWO_DIGITS.fullmatch(rest):
        return [head, "'" + rest]  # floaties'22 -> floaties '22
    first, *more = _split_apostrophes(rest)
    if len(head) == 1 and (head in "dlno" or (head.isupper() and head != "I")):
        return [head + "'" + first, *more]  # names and elisions: O'Neil, D'Arcy, l'amour, o'clock
    if head in ("y", "j", "Y", "J"):
        return [head + "'", first, *more]  # y'all -> y' all
    if head.isalpha() and head[-1] in "aeiouyAEIOUY" and (first[0] in "aeiouAEIOU"
                                                          or first[0].isupper()):
        return [head + "'" + first, *more]  # elision after a vowel: ma'am, ne'er, dell'Arte
    return [head, "`" if len(first) > 1 else "'", first, *more]


def _split_word(word: str, before_clitic: bool = False) -> list[str]:
    """Split off "n't" ("do n't", "ca n't"), cut the Treebank's two-token words ("can not",
    "gon na", but "gonna 's") and the inner apostrophes that are quotes."""
    suffix: list[str] = []
    negation = _NOT_SUFFIX.search(word)
    # "n't" is split off plain words only: "2900n't", "red-hairedn't", "canonn't" keep it.
    if negation and word[:negation.start()].isalpha() and word[negation.start() - 1] not in "nN":
        word, suffix = word[:negation.start()], [negation.group()]
    cut = None if before_clitic else _SPLIT_WORDS.get(word.lower())
    return ([word[:cut], word[cut:]] if cut else _split_apostrophes(word)) + suffix


def _tokens(text: str) -> list[str]:
    """Penn Treebank tokens of ``text`` in their original case (brackets as -LRB-...)."""
    tokens: list[str] = []
    position = 0
    for chunk in _CHUNK.finditer(text):
        if chunk.start() >= position and chunk.group().isalpha() \
                and chunk.group().lower() not in _SPLIT_WORDS:
            tokens.append(chunk.group())  # fast path: a plain word is a token
            continue
        position = max(position, chunk.start())  # a token can span chunks: "1 1/2"
        while position < chunk.end():
            position = _scan(text, position, tokens)
    return tokens


def _scan(text: str, position: int, tokens: list[str]) -> int:
    """Append the token(s) at ``text[position]`` to ``tokens``; return the position after them."""
    match = _TOKEN.match(text, position)
    assert match is not None  # the last alternative matches any non-space character
    kind, token, position = match.lastgroup, match.group(), match.end()
    if kind == "word":
        negation = _NOT_BEFORE_HYPHEN.search(token)
        if negation:  # "don't-care" -> do n't - care
            token, position = token[:negation.end()], match.start() + negation.end()
        parts = _split_word(token, before_clitic=_CLITIC_AHEAD.match(text, position) is not None)
        if text.startswith(".", position):
            stays, sentence_end = _period_stays(parts[-1], text, position)
            if stays:
                parts[-1] += "."
                position += 1
                if sentence_end:
                    parts.append(".")
        tokens.extend(parts)
    elif kind in ("fraction", "digits"):
        tokens.append(token.replace(" ", "\u00a0"))
    elif kind == "ellipsis":
        tokens.append("...")
    elif kind == "dashes":
        tokens.append(token if len(token) == 1 or len(token) > 4 else "--")
    elif kind == "emoticon":
        tokens.append("".join(_BRACKETS.get(char, char) for char in token))
    elif kind == "quote":
        tokens.append(_quote(token, text, position))
    elif kind == "other":
        tokens.append(_BRACKETS.get(token) or _CURRENCY.get(token) or token)
    else:
        tokens.append(token)
    return position


def _quote(token: str, text: str, end: int) -> str:
    """Quotes as the Treebank writes them: a ``"`` before a word (or a ``$``) becomes ``````, a
    ``'`` before a word becomes ```` ` ````; any other ``"`` is ``''`` and ``'`` stays."""
    if token in ("''", "``", "`"):
        return token
    following = text[end:end + 1]
    if token == '"':
        return "``" if following.isalnum() or following == "$" else "''"
    # Before a one-letter word ("'a dog") the tokenizer keeps the plain apostrophe.
    return "`" if _OPENING_SINGLE.match(text, end) else "'"


def ptb_tokenize(text: str) -> list[str]:
    """Penn Treebank tokens of ``text``, lower-cased, punctuation tokens kept.

    A clean-room approximation of the Stanford tokenizer pycocoevalcap runs (see the module
    docstring for its measured agreement and known differences). Line breaks inside ``text`` are
    treated as spaces, as pycocoevalcap does before tokenising.

    Example:
        >>> ptb_tokenize("A dog's ball (red), isn't it?")
        ['a', 'dog', "'s", 'ball', '-lrb-', 'red', '-rrb-', ',', 'is', "n't", 'it', '?']
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    text = _LINE_BREAKS.sub(" ", text).translate(_TYPOGRAPHY)
    return [token.lower() for token in _tokens(text)]


@functools.lru_cache(maxsize=65536)
def ptb_normalize(text: str) -> str:
    """pycocoevalcap's caption normalisation, approximated in pure Python.

    :func:`ptb_tokenize`, then the tokens in :data:`PUNCTUATIONS` dropped and the rest joined by
    single spaces, as ``pycocoevalcap.tokenizer.ptbtokenizer.PTBTokenizer.tokenize`` does.
    Use :func:`ptb_normalize_java` for the exact tokenizer.

    Example:
        >>> ptb_normalize('A dog\\'s "ball", isn\\'t it?')
        "a dog 's ball is n't it"
    """
    return " ".join(token for token in ptb_tokenize(text) if token not in PUNCTUATIONS)


def _default_jar() -> str:
    try:
        from pycocoevalcap.tokenizer import ptbtokenizer
    except ImportError as error:  # pragma: no cover - pycocoevalcap is a dependency
        raise RuntimeError("ptb_normalize_java needs pycocoevalcap (it ships the Stanford jar)"
                           ) from error
    return os.path.join(os.path.dirname(os.path.abspath(ptbtokenizer.__file__)),
                        ptbtokenizer.STANFORD_CORENLP_3_4_1_JAR)


def ptb_normalize_java(texts: Sequence[str], *, java: str = "java",
                       jar: str | None = None) -> list[str]:
    """pycocoevalcap's normalisation by its own Java tokenizer: exact (the reference that
    :func:`ptb_normalize` approximates).

    Runs ``java -cp stanford-corenlp-3.4.1.jar edu.stanford.nlp.process.PTBTokenizer
    -preserveLines -lowerCase`` on all ``texts`` at once, one caption per line, and drops
    :data:`PUNCTUATIONS`, as ``pycocoevalcap.tokenizer.ptbtokenizer.PTBTokenizer.tokenize`` does.
    Unlike pycocoevalcap it writes its temporary file to the system temp directory (not into
    site-packages) and replaces every line separator the tokenizer recognises, not only ``\\n``,
    so that captions and output lines stay aligned.

    Raises:
        TypeError: an element of ``texts`` is not a str.
        RuntimeError: ``java`` is not on ``PATH``, the jar is missing, or the tokenizer fails.
    """
    texts = list(texts)
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{index}] must be a str, got {type(text).__name__}")
    if not texts:
        return []
    java_path = shutil.which(java)
    if java_path is None:
        raise RuntimeError(
            f"ptb_normalize_java needs a Java runtime: {java!r} was not found on PATH "
            "(install a JRE, or use ptb_normalize, the pure-Python approximation)")
    jar = jar or _default_jar()
    if not os.path.isfile(jar):
        raise RuntimeError(f"Stanford CoreNLP jar not found at {jar!r}")
    handle, path = tempfile.mkstemp(suffix=".txt", prefix="kitm_ptb_")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write("\n".join(_LINE_BREAKS.sub(" ", text) for text in texts))
        result = subprocess.run(
            [java_path, "-cp", jar, "edu.stanford.nlp.process.PTBTokenizer",
             "-preserveLines", "-lowerCase", path],
            capture_output=True, check=False)
    finally:
        os.remove(path)
    if result.returncode != 0:
        raise RuntimeError(f"Stanford PTBTokenizer failed ({result.returncode}): "
                           f"{result.stderr.decode('utf-8', 'replace')[-2000:]}")
    output = result.stdout.decode("utf-8").split("\n")
    if len(output) < len(texts) or any(output[len(texts):]):
        raise RuntimeError(f"Stanford PTBTokenizer returned {len(output)} lines "
                           f"for {len(texts)} captions")
    return [" ".join(token for token in line.rstrip().split(" ") if token not in PUNCTUATIONS)
            for line in output[:len(texts)]]


def normalize_captions(texts: Sequence[str], method: bool | str = True) -> list[str]:
    """Normalise captions the way CIDEr-D compares them.

    Args:
        texts: captions.
        method: ``True`` or ``"python"`` for :func:`ptb_normalize` (clean-room approximation),
            ``"java"`` for :func:`ptb_normalize_java` (pycocoevalcap's exact tokenizer),
            ``False`` or ``"none"`` to keep the captions as they are (they are then compared as
            whitespace-separated tokens, case-sensitively).
    """
    if method is True or method == "python":
        return [ptb_normalize(text) for text in texts]
    if method == "java":
        return ptb_normalize_java(texts)
    if method is False or method == "none":
        return list(texts)
    raise ValueError(f"normalize must be True, False, 'python', 'java' or 'none', got {method!r}")
