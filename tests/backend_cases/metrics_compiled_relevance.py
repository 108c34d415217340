"""Backend cases: `RelevanceStatistics`' updates inside a compiled step (metrics_compiled.py); its negative mask
comes from kitm.ops.similarity."""

from metrics_compiled import relevance_cases


def cases():
    return relevance_cases()
