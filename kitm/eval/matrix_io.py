"""Reading and writing the matrices the evaluation CLI scores: similarity and relevance files.

Accepted layouts, chosen by the file's extension:

- ``.npy``: a 2-D numeric array (``numpy.save``).
- ``.json``: a JSON list of equally long lists of numbers. This is the layout the NCS reference
  (furkanbiten/ncs_metric, ``eval.py --model_path``) reads a model's similarity matrix from:
  ``json.load`` of a nested list, one row per image, one column per caption (for example
  1000 x 5000 on Flickr30K). A relevance matrix in JSON is the same nesting, rows captions.
- ``.csv``: comma-separated numbers without a header, one row per line; the layout of the NCS
  reference's precomputed SPICE matrices (rows captions, columns images).

Orientation is not guessed here: similarity is [num_images, num_captions] and relevance is
[num_captions, num_images]; :func:`kitm.eval.evaluate` names a transposed matrix.
"""

from __future__ import annotations

import json
import os
import pathlib

import numpy as np

from kitm.files import atomic_path

MATRIX_SUFFIXES = (".npy", ".json", ".csv")


def load_matrix(path: str | os.PathLike, name: str) -> np.ndarray:
    """The 2-D matrix stored at `path` (.npy, .json nested list, or .csv).

    Args:
      path: the file.
      name: what the matrix is, for error messages (e.g. "--sims").

    Raises:
      FileNotFoundError: the file is missing.
      ValueError: unknown extension, unreadable content, ragged rows, not 2-D, not numeric.
    """
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{name}: no file at {path}.")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        matrix = _load_npy(path, name)
    elif suffix == ".json":
        matrix = _load_json_matrix(path, name)
    elif suffix == ".csv":
        try:
            matrix = np.loadtxt(path, delimiter=",", dtype=np.float64, ndmin=2)
        except ValueError as error:
            raise ValueError(f"{name}: {path} is not a comma-separated numeric matrix ({error}).") from None
    else:
        raise ValueError(f"{name}: {path} has extension {path.suffix!r}; expected one of {MATRIX_SUFFIXES}.")
    if matrix.ndim != 2:
        raise ValueError(f"{name}: {path} holds an array of shape {matrix.shape}; expected a 2-D matrix.")
    if not (np.issubdtype(matrix.dtype, np.floating) or np.issubdtype(matrix.dtype, np.integer)):
        raise ValueError(f"{name}: {path} holds dtype {matrix.dtype}; expected numbers.")
    return matrix


NPY_MAGIC = b"\x93NUMPY"


def _load_npy(path: pathlib.Path, name: str) -> np.ndarray:
    """A .npy file's array. numpy takes any file without its header for a pickle and answers with its allow_pickle
    hint, which is wrong for a text file or an .npz renamed: the header is checked here first, and each case named."""
    with open(path, "rb") as handle:
        head = handle.read(len(NPY_MAGIC))
    if head != NPY_MAGIC:
        if head.startswith(b"PK"):
            what = "a zip archive (numpy.savez writes .npz archives: save the one matrix with numpy.save)"
        elif not head:
            what = "empty"
        elif all(32 <= byte < 127 or byte in (9, 10, 13) for byte in head):
            what = "text (a matrix as text goes in a .csv or .json file)"
        else:
            what = "not a .npy file"
        raise ValueError(f"{name}: {path} is {what}; expected a matrix written by numpy.save (a .npy file starts "
                         "with the bytes \\x93NUMPY), or a .json / .csv matrix.")
    try:
        return np.load(path, allow_pickle=False)
    except ValueError as error:
        if "pickle" in str(error):
            raise ValueError(f"{name}: {path} holds Python objects (an object array), not numbers; save a numeric "
                             "matrix, e.g. numpy.save(path, sims.astype('float32')).") from None
        raise ValueError(f"{name}: {path} is not a whole .npy array ({error}); write it again.") from None
    except (EOFError, OSError) as error:  # cut short
        raise ValueError(f"{name}: {path} is not a whole .npy array ({error}); write it again.") from None


def _load_json_matrix(path: pathlib.Path, name: str) -> np.ndarray:
    try:
        rows = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{name}: {path} is not valid JSON ({error}).") from None
    if isinstance(rows, dict):  # tolerate {"sims": [[...]]}-style wrappers with a single entry
        if len(rows) != 1:
            raise ValueError(f"{name}: {path} holds a JSON object with keys {sorted(rows)[:5]}; expected a list "
                             "of rows (the NCS reference's layout).")
        rows = next(iter(rows.values()))
    if not isinstance(rows, list) or not rows or not all(isinstance(row, list) for row in rows):
        raise ValueError(f"{name}: {path} must hold a JSON list of rows (lists of numbers), as the NCS reference "
                         "stores similarity matrices.")
    lengths = {len(row) for row in rows}
    if len(lengths) != 1:
        raise ValueError(f"{name}: {path} has rows of different lengths {sorted(lengths)[:5]}; expected a matrix.")
    try:
        return np.asarray(rows, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: {path} holds entries that are not numbers.") from None


def save_matrix(path: str | os.PathLike, matrix: np.ndarray) -> str:
    """Write `matrix` to `path` (.npy or .json), atomically (`kitm.files.atomic_path`)."""
    path = pathlib.Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".npy", ".json"):
        raise ValueError(f"cannot save a matrix as {path}: use a .npy or .json name.")
    with atomic_path(path) as tmp:
        if suffix == ".npy":
            with open(tmp, "wb") as handle:  # a handle, so np.save does not append ".npy" to the temporary name
                np.save(handle, np.asarray(matrix))
        else:
            tmp.write_text(json.dumps(np.asarray(matrix, dtype=np.float64).tolist()))
    return str(path)
