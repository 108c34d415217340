"""The comparison as a Markdown table and a figure of the non-matching and matching distributions."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from kitm.data.world_stats.statistics import CaptionStats, goals, ks_distance


def _rows(stats: CaptionStats, reference: CaptionStats | None) -> dict[str, str]:
    nm, m = stats.non_matching, stats.matching
    rows = {
        "non-matching mean": f"{nm['mean']:.3f}",
        "non-matching 5 / 50 / 95% quantiles": " / ".join(f"{nm['quantiles'][q]:.2f}" for q in ("0.05", "0.5",
                                                                                                "0.95")),
        "non-matching share >= 0.4": f"{100 * nm['share_at_least_0.4']:.1f}%",
        "non-matching share >= 0.6": f"{100 * nm['share_at_least_0.6']:.2f}%",
        "matching mean": f"{m['mean']:.3f}",
        "contrast (matching - non-matching)": f"{stats.contrast:.3f}",
        "CIDEr-D non-matching / matching": f"{stats.cider_non_matching:.3f} / {stats.cider_matching:.3f}",
        f"vocabulary on {stats.vocabulary_images} images": f"{stats.vocabulary:,}",
        "words per caption (mean / median)": f"{stats.length_mean:.1f} / {stats.length_median:.0f}",
        "duplicate captions": f"{100 * stats.duplicate_rate:.2f}%",
        "images / captions": f"{stats.images:,} / {stats.captions:,}",
    }
    rows["KS distance to the reference"] = (f"{ks_distance(stats, reference):.3f}" if reference is not None
                                            and reference is not stats else "")
    return rows


def comparison_table(sources: Sequence[CaptionStats], reference: CaptionStats | None = None) -> str:
    """Markdown: one row per figure, one column per source (the reference last)."""
    columns = list(sources) + ([reference] if reference is not None else [])
    cells = [_rows(stats, reference) for stats in columns]
    lines = ["| | " + " | ".join(stats.name for stats in columns) + " |",
             "|---|" + "---|" * len(columns)]
    for figure in cells[0]:
        lines.append(f"| {figure} | " + " | ".join(cell[figure] for cell in cells) + " |")
    return "\n".join(lines)


def goals_table(stats: CaptionStats, reference: CaptionStats) -> str:
    """Markdown: each calibration goal, the value reached and whether it is met."""
    lines = [f"| goal ({stats.name} against {reference.name}) | value | met |", "|---|---|---|"]
    lines += [f"| {goal} | {value:.3f} | {'yes' if met else '**no**'} |" for goal, value, met in
              goals(stats, reference)]
    return "\n".join(lines)


def plot_distributions(sources: Sequence[CaptionStats], reference: CaptionStats | None,
                       path: str | os.PathLike) -> None:
    """The non-matching cosine's distribution of each source (and the reference) on one axis; a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kitm.files import atomic_path

    columns = list(sources) + ([reference] if reference is not None else [])
    figure, axis = plt.subplots(figsize=(7.5, 3.6))
    bins = np.linspace(-0.3, 1.0, 66)
    for stats in columns:
        _, _, patches = axis.hist(stats.non_matching_values, bins=bins, density=True, histtype="step", linewidth=1.6,
                                  label=f"{stats.name}: non-matching (mean {stats.non_matching['mean']:.2f})")
        axis.axvline(stats.matching["mean"], linestyle=":", color=patches[0].get_edgecolor())
    axis.set_xlabel("cosine of sentence embeddings (all-MiniLM-L6-v2), first caption vs another image's second")
    axis.set_ylabel("density")
    axis.set_title("Relevance of non-matching caption pairs (dotted: each source's matching mean)", fontsize=9)
    axis.legend(fontsize=8)
    figure.tight_layout()
    with atomic_path(path) as tmp:
        figure.savefig(tmp, dpi=110, format="png")
    plt.close(figure)


def plot_examples(images: np.ndarray, groups: Sequence[Sequence[str]], path: str | os.PathLike,
                  title: str = "") -> None:
    """A few images, each beside its captions, in one PNG at ``path`` (the look of a world at a glance)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kitm.files import atomic_path

    rows = len(images)
    figure, axes = plt.subplots(rows, 2, figsize=(10, 1.45 * rows), gridspec_kw={"width_ratios": [1, 5.5]})
    axes = np.asarray(axes).reshape(rows, 2)
    for row, (image, captions) in enumerate(zip(images, groups)):
        axes[row, 0].imshow(image, interpolation="nearest")
        axes[row, 1].text(0.0, 0.5, "\n".join(captions), va="center", ha="left", fontsize=8.5, wrap=True)
        for axis in axes[row]:
            axis.set_axis_off()
    if title:
        figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    with atomic_path(path) as tmp:
        figure.savefig(tmp, dpi=100, format="png")
    plt.close(figure)
