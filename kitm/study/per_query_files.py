"""The study's compact per-query files: what a run keeps of kitm.eval's ``study_eval.per_query.npz``, and reading it.

Why. kitm.eval writes every figure that is a mean over queries as a float64 array (:func:`kitm.eval.report.
write_per_query`): 52 arrays of 1,000 image or 5,000 caption queries, about 180 kB a run compressed. The study
reads them only for its per-query bootstrap (:mod:`kitm.study.bootstrap`), and with hundreds of runs in git the
full files were most of the repository. After a run's evaluation the study therefore rewrites the file in place
(:func:`compact_file`, called by :mod:`kitm.study.runner`) keeping only the arrays a bootstrap can use, each as
small as its values allow. The full files stay reproducible: kitm.eval writes them again for a run whose model
exists, and those of the committed claims study are in git history (docs/studies.md).

What is kept (:func:`kept`): R@K per direction (the six of rsum and any other K), the fold figures' R@K
(``fold100_i2t_R@1``, ...), NCS@K, SR@K, CS@K and N-way R@1 (two-level, a few bits a query) of every K, and mAP@R,
in both directions; not mAP, R-Precision, IR_R@K (their arrays go: a study that bootstraps them needs the full
file).

The format (an ``np.savez_compressed`` archive, deflate; read with ``np.load(allow_pickle=False)``):

- ``format``: int64 ``[1]`` (:data:`FORMAT_VERSION`); a file without it is kitm.eval's full format, which
  :func:`read_per_query` still reads;
- ``names`` (unicode), ``sizes`` (int64), ``kinds`` (uint8): one entry per kept array, in kitm.eval's order;
- a *two-level* array (kind 0: at most two distinct values apart from NaN, e.g. R@K per query in {0, 100},
  IR_R@1 in {0, 20}): its row of ``levels`` (float64 [n, 2]: the value of a 0 bit and of a 1 bit, exact), its
  ``np.packbits`` bits in ``bits`` (each array's bits padded to whole bytes, the arrays one after another) and,
  when it has NaN queries (``has_nan``), its NaN mask packed the same way in ``nan_bits``: read back bit for bit;
- any other array (kind 1: NCS@K, CS@K, mAP@R, SR@K with more than two levels) as float32 in ``float32`` (the
  arrays one after another; NaN stays NaN). Read back as float64, each value is one of the two float32 numbers
  nearest the float64 value (:func:`to_float32`: rounded to nearest, except the few values rounded the other way
  so that the array's sum, and so its nanmean, is kept to half a float32 ulp): a relative error below 2**-23
  (1.2e-7), i.e. below 1.2e-5 for a figure in percent, below 1.2e-7 for a Kendall tau; arrays whose values are
  float32 numbers already (SR@K's multiples of 20) are exact. A bootstrap resample's mean over 1,000 or 5,000
  queries moves by about a hundredth of that; on the claims study's 346 runs the report's bootstrap figures moved
  by at most 1.7e-7 (absolute, in the figures' units; 1e-4 relative).

Why not smaller: the continuous arrays (28,000 values a run) are ratios and Kendall taus whose float32 mantissas
look random, so deflate leaves about 2.2 bytes a value (about 60 kB a run); a budget of 1 byte a value would
mean rounding to about 1/256 of each array's spread, which moves the bootstrap's intervals by about 1e-3 of their
values.
"""

from __future__ import annotations

import os
import pathlib
import re
from collections.abc import Iterable, Mapping

import numpy as np

FORMAT_VERSION = 1
TWO_LEVELS = 0
FLOAT32 = 1
KEPT_PATTERNS = (re.compile(r"^(fold\d+_)?(i2t|t2i)_(R|NCS|SR|CS|NWAY_R1)@\d+$"), re.compile(r"^(i2t|t2i)_mAP_at_R$"))


def kept(name: str, extra: Iterable[str] = ()) -> bool:
    """Whether the compact file keeps the array `name` (module docstring), or it is one of `extra`."""
    return name in set(extra) or any(pattern.match(name) for pattern in KEPT_PATTERNS)


def _two_levels(values: np.ndarray) -> tuple[float, float] | None:
    """(the 0-bit value, the 1-bit value) when `values` has at most two distinct values apart from NaN and they
    come back bit for bit; else None."""
    defined = values[~np.isnan(values)]
    distinct = np.unique(defined)
    if distinct.size > 2:
        return None
    low = float(distinct[0]) if distinct.size else 0.0
    high = float(distinct[-1]) if distinct.size else 0.0
    back = np.where(values == high, high, low)
    back[np.isnan(values)] = np.nan
    return (low, high) if back.tobytes() == values.tobytes() else None  # -0.0 against 0.0: not two-level


def to_float32(values: np.ndarray) -> np.ndarray:
    """`values` (float64) as float32, each value one of its two nearest float32 numbers, the array's sum kept.

    Rounded to nearest, the errors of Q values add up to about ulp * sqrt(Q / 12); so that a run's nanmean (the
    figure in its eval JSON, and the observed difference of a paired bootstrap) moves by at most half an ulp over
    Q instead, the fewest values whose rounding costs least are rounded the other way (each switch moves the sum
    by one ulp), until the sum of the errors is as near 0 as a switch can bring it. A value stays within 1 float32
    ulp (relative 2**-23) of the original, and values that are float32 numbers already are never moved."""
    values = np.asarray(values, dtype=np.float64)
    rounded = values.astype(np.float32)
    finite = np.isfinite(values) & np.isfinite(rounded)
    error = np.where(finite, rounded.astype(np.float64) - values, 0.0)
    total = float(error.sum())
    if total == 0.0:
        return rounded
    direction = np.float32(-np.inf) if total > 0 else np.float32(np.inf)
    candidates = np.flatnonzero(finite & (np.sign(error) == np.sign(total)))
    other = np.nextafter(rounded[candidates], direction)
    other_error = other.astype(np.float64) - values[candidates]
    usable = np.isfinite(other)
    candidates, other, other_error = candidates[usable], other[usable], other_error[usable]
    order = np.argsort(np.abs(other_error), kind="stable")  # the switches that cost least first
    change = (other_error - error[candidates])[order]  # each of the other sign than the total
    totals = total + np.concatenate([[0.0], np.cumsum(change)])
    switched = order[:int(np.argmin(np.abs(totals)))]
    rounded[candidates[switched]] = other[switched]
    return rounded


def encode(arrays: Mapping[str, np.ndarray], extra: Iterable[str] = ()) -> dict[str, np.ndarray]:
    """The compact archive's members (module docstring) for the kept arrays of a full per-query file."""
    names, sizes, kinds, levels, has_nan, bits, nan_bits, floats = [], [], [], [], [], [], [], []
    extra = tuple(extra)
    for name, values in arrays.items():
        if not kept(name, extra):
            continue
        values = np.asarray(values, dtype=np.float64).reshape(-1)
        pair = _two_levels(values)
        names.append(name)
        sizes.append(values.size)
        missing = np.isnan(values)
        if pair is not None:
            kinds.append(TWO_LEVELS)
            levels.append(pair)
            has_nan.append(bool(missing.any()))
            bits.append(np.packbits(values == pair[1]))
            if missing.any():
                nan_bits.append(np.packbits(missing))
        else:
            kinds.append(FLOAT32)
            levels.append((np.nan, np.nan))
            has_nan.append(False)
            floats.append(to_float32(values))

    def joined(parts, dtype):
        return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype=dtype)

    return {"format": np.array([FORMAT_VERSION], dtype=np.int64), "names": np.array(names, dtype=str),
            "sizes": np.array(sizes, dtype=np.int64), "kinds": np.array(kinds, dtype=np.uint8),
            "levels": np.array(levels, dtype=np.float64).reshape(-1, 2), "has_nan": np.array(has_nan, dtype=bool),
            "bits": joined(bits, np.uint8), "nan_bits": joined(nan_bits, np.uint8),
            "float32": joined(floats, np.float32)}


def decode(members: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The float64 arrays {name: per-query values} of a compact archive's members."""
    version = int(np.asarray(members["format"]).reshape(-1)[0])
    if version != FORMAT_VERSION:
        raise ValueError(f"compact per-query format {version}; this kitm reads {FORMAT_VERSION}.")
    bits, nan_bits, floats = members["bits"], members["nan_bits"], members["float32"]
    at_bits = at_nan = at_float = 0
    arrays = {}
    for name, size, kind, (low, high), missing in zip(members["names"], members["sizes"], members["kinds"],
                                                      members["levels"], members["has_nan"]):
        size = int(size)
        if kind == TWO_LEVELS:
            length = (size + 7) // 8
            hit = np.unpackbits(bits[at_bits:at_bits + length], count=size).astype(bool)
            at_bits += length
            values = np.where(hit, high, low).astype(np.float64)
            if missing:
                values[np.unpackbits(nan_bits[at_nan:at_nan + length], count=size).astype(bool)] = np.nan
                at_nan += length
        elif kind == FLOAT32:
            values = floats[at_float:at_float + size].astype(np.float64)
            at_float += size
        else:
            raise ValueError(f"{name}: unknown kind {int(kind)} in a compact per-query file.")
        if values.size != size:
            raise ValueError(f"{name}: {values.size} values where the file says {size}; the file is truncated.")
        arrays[str(name)] = values
    return arrays


def is_compact(path: str | os.PathLike) -> bool:
    with np.load(path, allow_pickle=False) as data:
        return "format" in data.files


def read_per_query(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """{name: float64 per-query values} of a per-query file, compact or kitm.eval's full format."""
    with np.load(path, allow_pickle=False) as data:
        if "format" in data.files:
            return decode({name: data[name] for name in data.files})
        return {name: np.asarray(data[name], dtype=np.float64) for name in data.files}


def _replace_with(path: pathlib.Path, members: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray] | None,
                  purpose: str) -> None:
    """Write the compact archive `members` under a temporary name beside `path`, check that it reads back (every
    member array, of the right length; with `expected`, each array bit for bit), then ``os.replace`` it over
    `path`: a process killed before leaves `path` as it was."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{purpose}")
    try:
        with open(temporary, "wb") as handle:
            np.savez_compressed(handle, **members)
            handle.flush()
            os.fsync(handle.fileno())
        back = read_per_query(temporary)  # what a reader will get
        if set(back) != set(members["names"].tolist()) or (
                expected is not None and any(back[n].tobytes() != expected[n].tobytes() for n in back)):
            raise ValueError(f"{temporary}: the compact file does not read back")
        os.replace(temporary, path)
    finally:
        if temporary.exists():
            temporary.unlink()


def compact_file(path: str | os.PathLike, extra: Iterable[str] = ()) -> bool:
    """Rewrite kitm.eval's full per-query file at `path` in the compact format, in place: written under a temporary
    name in the same folder, then ``os.replace`` (a process killed before leaves the full file as it was). False
    when the file is compact already (nothing written)."""
    path = pathlib.Path(path)
    with np.load(path, allow_pickle=False) as data:
        if "format" in data.files:
            return False
        arrays = {name: np.asarray(data[name], dtype=np.float64) for name in data.files}
    _replace_with(path, encode(arrays, extra), None, "compacting")
    return True


def prune_file(path: str | os.PathLike, keep: Iterable[str]) -> bool:
    """Rewrite the per-query file at `path` (either format) in the compact format with only the arrays named in
    `keep`, in place (a temporary file, then ``os.replace``); False when it holds nothing else (nothing written).
    A full file is compacted first (:func:`compact_file`); a compact file's arrays read back exactly as before:
    their values are float32 numbers or two levels already, which :func:`encode` keeps bit for bit."""
    path = pathlib.Path(path)
    keep = set(keep)
    compacted = compact_file(path, extra=keep)
    arrays = read_per_query(path)
    kept_arrays = {name: values for name, values in arrays.items() if name in keep}
    if len(kept_arrays) == len(arrays):
        return compacted
    _replace_with(path, encode(kept_arrays, extra=kept_arrays), kept_arrays, "pruning")
    return True


__all__ = ["FORMAT_VERSION", "compact_file", "decode", "encode", "is_compact", "kept", "prune_file", "read_per_query",
           "to_float32"]
