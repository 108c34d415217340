"""Input checks shared by the caption-against-reference-group relevance sources (CIDEr-D, SPICE)."""

from __future__ import annotations


def check_captions(captions: object, name: str) -> list[str]:
    """A list of str from any sequence of str; TypeError naming `name` (and the index) otherwise."""
    if isinstance(captions, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of strings, got a single {type(captions).__name__}")
    try:
        captions = list(captions)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(f"{name} must be a sequence of strings, got {type(captions).__name__}") from None
    for index, caption in enumerate(captions):
        if not isinstance(caption, str):
            raise TypeError(f"{name}[{index}] must be a str, got {type(caption).__name__}")
    return captions


def check_reference_groups(reference_groups: object, metric: str) -> list[list[str]]:
    """Lists of str per group; an empty group is a ValueError naming its index (`metric` needs a reference)."""
    if isinstance(reference_groups, (str, bytes)):
        raise TypeError("reference_groups must be a sequence of sequences of strings, got a single string")
    try:
        groups = list(reference_groups)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError("reference_groups must be a sequence of sequences of strings, "
                        f"got {type(reference_groups).__name__}") from None
    checked = []
    for index, group in enumerate(groups):
        captions = check_captions(group, f"reference_groups[{index}]")
        if not captions:
            raise ValueError(f"reference_groups[{index}] is empty: {metric} needs at least one reference")
        checked.append(captions)
    return checked
