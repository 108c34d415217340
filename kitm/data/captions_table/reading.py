"""Reading a caption table: its format from the name, the CSV separator, the file streamed once as UTF-8 (every
line fed to a digest), and its rows as `TableRow`s; every error names the file, line and column
(kitm.data.captions_table)."""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import itertools
import json
import os
import pathlib
from collections.abc import Iterator
from typing import Any

from kitm.errors import KitmDataError, option

FORMATS = ("auto", "csv", "jsonl")


@dataclasses.dataclass
class TableRow:
    """One (image, caption) row: its line number (the first line of a quoted multi-line CSV record)."""

    line: int
    image: str
    caption: str
    split: str | None = None



class _Where:
    """Names a place in the table: "<file>, line N, column 'title'" (CSV) or "..., key 'title'" (JSON Lines);
    `role` is image, caption or split (the column named by that option) or a column name itself."""

    def __init__(self, path: pathlib.Path, fmt: str, columns: dict[str, str | None]):
        self.path, self.field, self.columns = path, "column" if fmt == "csv" else "key", columns

    def __call__(self, line: int, role: str | None = None) -> str:
        if role is None:
            return f"{self.path}, line {line}"
        return f"{self.path}, line {line}, {self.field} {self.columns.get(role, role)!r}"


def table_format(path: pathlib.Path, captions_format: str) -> str:
    if captions_format not in FORMATS:
        raise KitmDataError(f"{option('captions_format')} must be one of {FORMATS}; got {captions_format!r}.")
    if captions_format != "auto":
        return captions_format
    suffix = path.suffix.lower()
    if suffix in (".csv", ".tsv"):
        return "csv"
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    raise KitmDataError(f"{path}: cannot tell the table's format from its name (expected .csv, .tsv, .jsonl or "
                        f".ndjson); give {option('captions_format')}=csv or jsonl.")


def separator_of(text: str) -> str | None:
    """A --csv_separator value as one character (None for auto); "tab" and a typed backslash-t mean a tab."""
    if text in ("auto", None):
        return None
    text = {"tab": "\t", "\\t": "\t", "comma": ",", "semicolon": ";", "space": " "}.get(text, text)
    if len(text) != 1:
        raise KitmDataError(f"{option('csv_separator')} must be one character (or auto, tab); got {text!r}.")
    return text


def _hashed_lines(handle, digest, where: pathlib.Path) -> Iterator[str]:
    """The binary file's lines as text (line ends kept, a leading byte-order mark dropped), each also fed to
    `digest`. Decoding line by line names the exact line that is not UTF-8."""
    for line, data in enumerate(handle, start=1):
        digest.update(data)
        try:
            text = data.decode("utf-8-sig" if line == 1 else "utf-8")
        except UnicodeDecodeError as error:
            raise KitmDataError(f"{where}, line {line} is not UTF-8 text ({error.reason} at byte {error.start} of "
                                "the line); save the table as UTF-8.") from None
        yield text


def _read_csv(path: pathlib.Path, lines: Iterator[str], columns: dict[str, str | None], separator: str | None,
              where: _Where) -> tuple[Iterator[TableRow], str]:
    try:
        first = next(lines)
    except StopIteration:
        raise KitmDataError(f"{path} is empty: expected a header row naming the columns.") from None
    if separator is None:
        separator = "\t" if "\t" in first else ","
    reader = csv.reader(itertools.chain([first], lines), delimiter=separator)
    header = next(reader)
    positions: dict[str, int] = {}
    for index, name in enumerate(header):
        if name in positions:
            raise KitmDataError(f"{where(1)}: the header names column {name!r} twice (columns "
                                f"{positions[name] + 1} and {index + 1}); each column needs its own name.")
        positions[name] = index
    shown = "tab" if separator == "\t" else repr(separator)
    for role, name in columns.items():
        if name is not None and name not in positions:
            raise KitmDataError(
                f"{where(1, role)}: no such column (the {role} column); the header has {header} when split at "
                f"{shown}. Name the right one with {option(role + '_column')}=..."
                + ("" if len(header) > 1 else f", or give the separator with {option('csv_separator')}") + ".")
    wanted = {role: positions[name] for role, name in columns.items() if name is not None}

    def rows():
        start = reader.line_num + 1
        for record in reader:
            if not record:  # a blank line
                start = reader.line_num + 1
                continue
            if len(record) != len(header):
                raise KitmDataError(f"{where(start)}: {len(record)} field(s) where the header has {len(header)} "
                                    f"(separator {shown}; quote fields that hold it).")
            yield TableRow(start, record[wanted["image"]], record[wanted["caption"]],
                           record[wanted["split"]] if "split" in wanted else None)
            start = reader.line_num + 1

    return rows(), separator


def _read_jsonl(lines: Iterator[str], columns: dict[str, str | None], where: _Where) -> Iterator[TableRow]:
    for line_number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            record = json.loads(text.rstrip("\r\n"))
        except json.JSONDecodeError as error:
            raise KitmDataError(f"{where(line_number)}: not valid JSON ({error.msg} at character {error.colno})."
                                ) from None
        if not isinstance(record, dict):
            raise KitmDataError(f"{where(line_number)}: expected a JSON object, got {type(record).__name__} "
                                f"({text.strip()[:60]!r}).")
        values = {}
        for role, name in columns.items():
            if name is None:
                continue
            if name not in record:
                raise KitmDataError(f"{where(line_number, role)}: no such key (the {role} key; the object has "
                                    f"{sorted(record)}). Name the right one with {option(role + '_column')}=...")
            value = record[name]
            if not isinstance(value, str):
                raise KitmDataError(f"{where(line_number, role)}: expected text, got {json.dumps(value)[:60]}.")
            values[role] = value
        yield TableRow(line_number, values["image"], values["caption"], values.get("split"))


def read_table(path: str | os.PathLike, *, image_column: str = "filepath", caption_column: str = "title",
               split_column: str | None = None, csv_separator: str = "auto", captions_format: str = "auto",
               digest=None) -> tuple[Iterator[TableRow], dict[str, Any]]:
    """Stream the table's rows (file order) and describe the table ({"format", "csv_separator"}).

    Rows are parsed as they are iterated; `digest` (a hashlib object) sees every line.
    """
    path = pathlib.Path(path)
    if path.is_dir():
        raise KitmDataError(_folder_given(path))
    if not path.is_file():
        raise KitmDataError(f"Caption table {path} does not exist.")
    fmt = table_format(path, captions_format)
    separator = separator_of(csv_separator)
    columns = {"image": image_column, "caption": caption_column, "split": split_column}
    where = _Where(path, fmt, columns)
    digest = digest if digest is not None else hashlib.sha256()
    # Binary lines split at "\n" only, so the csv module sees "\r\n" and quoted line breaks as written (as
    # newline="" would give it).
    handle = open(path, "rb")
    lines = _hashed_lines(handle, digest, path)

    def closing(rows):
        with handle:
            yield from rows

    if fmt == "csv":
        try:
            rows, separator = _read_csv(path, lines, columns, separator, where)
        except BaseException:
            handle.close()
            raise
        return closing(rows), {"format": "csv", "csv_separator": separator}
    return closing(_read_jsonl(lines, columns, where)), {"format": "jsonl", "csv_separator": None}


def _folder_given(path: pathlib.Path) -> str:
    """The message for a folder given where the table file is expected, naming the tables inside it if any."""
    tables = sorted(child.name for child in path.iterdir()
                    if child.is_file() and child.suffix.lower() in (".csv", ".tsv", ".jsonl", ".ndjson"))
    inside = (f"; it holds {', '.join(tables[:5])}{', ...' if len(tables) > 5 else ''}: give one of them, e.g. "
              f"{option('captions')}={path / tables[0]}" if tables else "; it holds no .csv, .tsv, .jsonl or .ndjson "
              "file")
    return (f"Caption table {path} is a folder, not a table: {option('captions')} expects the table file itself (a "
            f".csv/.tsv with a header row, or .jsonl/.ndjson with one object per line){inside}. The image folder goes "
            f"to {option('images')}.")
