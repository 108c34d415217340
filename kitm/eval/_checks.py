"""Input validation shared by the metrics in :mod:`kitm.eval`.

Every check raises ``ValueError`` naming the argument, the shape or value it got and what was
expected, so that a caller who passed a transposed matrix or a bad cut-off learns which one.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

# Rows checked for NaN/inf at a time: keeps the boolean temporary small on 5000 x 25000 inputs.
_FINITE_CHECK_ELEMENTS = 1 << 22


def as_matrix(value: object, name: str) -> np.ndarray:
    """`value` as a 2-D floating array (float16/32/64 kept as given, anything else as float64).

    Raises ValueError when it is not 2-D, is empty, or holds NaN or inf.
    """
    array = np.asarray(value)
    if array.ndim != 2:
        raise ValueError(f"`{name}` must be a 2-D matrix; got an array of shape {array.shape}.")
    if array.size == 0:
        raise ValueError(f"`{name}` must not be empty; got shape {array.shape}.")
    if not np.issubdtype(array.dtype, np.floating):
        if not (np.issubdtype(array.dtype, np.integer) or array.dtype == bool):
            raise ValueError(f"`{name}` must be numeric; got dtype {array.dtype}.")
        array = array.astype(np.float64)
    rows_per_check = max(1, _FINITE_CHECK_ELEMENTS // array.shape[1])
    for start in range(0, array.shape[0], rows_per_check):
        block = array[start : start + rows_per_check]
        if not np.isfinite(block).all():
            bad = np.argwhere(~np.isfinite(block))[0]
            row, col = int(bad[0]) + start, int(bad[1])
            raise ValueError(
                f"`{name}` must be finite; found {array[row, col]} at [{row}, {col}] "
                f"(shape {array.shape})."
            )
    return array


def positive_int(value: object, name: str) -> int:
    """`value` as an int >= 1 (bools and non-integral numbers rejected)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"`{name}` must be a positive integer; got {value!r}.")
    return int(value)


def cutoffs(ks: Iterable[object] | int, name: str = "ks") -> tuple[int, ...]:
    """The cut-offs K as a tuple of distinct positive ints, in the caller's order."""
    if isinstance(ks, (int, np.integer)) and not isinstance(ks, bool):
        ks = (ks,)
    try:
        values = tuple(ks)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError(f"`{name}` must be an int or a sequence of ints; got {ks!r}.") from None
    if not values:
        raise ValueError(f"`{name}` must hold at least one cut-off; got {ks!r}.")
    out = tuple(positive_int(k, f"{name} entry") for k in values)
    if len(set(out)) != len(out):
        raise ValueError(f"`{name}` must not repeat a cut-off; got {out}.")
    return out


def cutoffs_within(ks: tuple[int, ...], limit: int, name: str, what: str) -> None:
    """Raise when a cut-off exceeds the number of candidates a query can rank."""
    too_big = [k for k in ks if k > limit]
    if too_big:
        raise ValueError(
            f"`{name}` holds {too_big}, larger than the {limit} candidates {what}."
        )


def similarity_layout(sims: np.ndarray, captions_per_image: int) -> tuple[int, int]:
    """(num_images, num_captions) of an image-by-caption matrix where image i owns captions
    i*cpi .. i*cpi + cpi - 1."""
    num_images, num_captions = sims.shape
    if num_captions % captions_per_image:
        raise ValueError(
            f"`sims` has {num_captions} columns (captions), not divisible by "
            f"captions_per_image={captions_per_image}."
        )
    if num_captions != num_images * captions_per_image:
        raise ValueError(
            f"`sims` has shape {sims.shape}: with captions_per_image={captions_per_image} "
            f"expected [num_images, num_images * {captions_per_image}] = "
            f"[{num_images}, {num_images * captions_per_image}] (rows images, columns captions)."
        )
    return num_images, num_captions


def relevance_layout(relevance: object, num_images: int, num_captions: int) -> np.ndarray:
    """Check that `relevance` is [num_captions, num_images] (the NCS reference's orientation:
    N[c, i] = relevance of caption c to image i) and return it as a float array."""
    relevance = as_matrix(relevance, "relevance")
    expected = (num_captions, num_images)
    if relevance.shape == expected:
        return relevance
    if relevance.shape == (num_images, num_captions):
        raise ValueError(
            f"`relevance` has shape {relevance.shape}, which is [num_images, num_captions] as "
            f"read from `sims`; it must be [num_captions, num_images] = {expected} "
            "(rows captions, columns images, as the NCS reference stores it): pass relevance.T."
        )
    raise ValueError(
        f"`relevance` has shape {relevance.shape}; expected [num_captions, num_images] = "
        f"{expected} from `sims` of shape ({num_images}, {num_captions})."
    )


def figure(values: object) -> float:
    """The figure of per-query values: ``float(np.nanmean(values))``, NaN (no warning) when every value is NaN.

    Every mean over queries in kitm.eval goes through here, so a figure equals the nanmean of its per-query
    array exactly (the contract of the per-query files, kitm.eval.report.write_per_query).
    """
    values = np.asarray(values, dtype=np.float64)
    if np.isnan(values).all():
        return float("nan")
    return float(np.nanmean(values))
