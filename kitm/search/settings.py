"""The search server's settings, declared once: `python -m kitm.search` makes a flag of each field (its type, default
and help from here), `/api/info` shows them, docs/search.md explains them."""

from __future__ import annotations

import dataclasses


def _setting(default, help_text: str, low, high):
    return dataclasses.field(default=default, metadata={"help": help_text, "range": (low, high)})


@dataclasses.dataclass(frozen=True)
class ServingSettings:
    """How queries are batched and how much the server takes on at once."""

    batch_window_ms: float = _setting(
        0.0, "how long a query waits for others to be encoded with it, in milliseconds; 0: a batch is what waits "
             "when the model is free (under load the queries that arrive during a call)", 0.0, 1000.0)
    max_batch: int = _setting(64, "at most this many queries a model call", 1, 4096)
    max_in_flight: int = _setting(
        256, "requests answered at once; more are refused at once with 503, a JSON error and Retry-After", 1, 100_000)
    retry_after_s: int = _setting(1, "the Retry-After of a refused request, in seconds", 0, 3600)
    header_timeout_s: float = _setting(
        10.0, "a connection whose request line and headers are not in after this many seconds is closed", 0.1, 3600.0)
    body_timeout_s: float = _setting(
        30.0, "a request whose body is not in after this many seconds is answered 408", 0.1, 3600.0)

    def __post_init__(self):
        for field in dataclasses.fields(self):
            low, high = field.metadata["range"]
            value = getattr(self, field.name)
            if not low <= value <= high:
                raise ValueError(f"--{field.name} must be from {low} to {high}; got {value}.")

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)
