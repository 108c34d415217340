"""kitm.data.world_stats: the figures on hand-made captions (vocabulary, lengths, duplicates, pairs), the KS
distance against scipy, the goals, the sources (a built dataset, Flickr8K's files, a caption table), and the things
world within its calibration goals against Flickr8K's test captions (the command, as docs/demo.md shows it)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from scipy.stats import ks_2samp

from kitm.data.world_stats import (caption_statistics, comparison_table, dataset_groups, goals, goals_table,
                                   ks_distance, reference_groups)
from kitm.data.world_stats.cli import main
from kitm.data.world_stats.statistics import vocabulary_size

FLICKR8K = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "flickr8k")

GROUPS = [["A dog runs on the grass.", "a dog running on grass", "A brown dog."],
          ["Two cats sleep on a sofa", "Cats sleeping on the couch", "two cats"],
          ["A red car parked on the street", "a red car parked on the street.", "A car"]]


@pytest.fixture(scope="module")
def stats():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return caption_statistics(GROUPS, name="hand-made", vocabulary_images=2)


def test_vocabulary_lengths_and_duplicates_on_hand_made_captions(stats):
    # first two images: a dog runs on the grass running brown two cats sleep sofa sleeping couch
    assert vocabulary_size(GROUPS, 2) == 14 == stats.vocabulary and stats.vocabulary_images == 2
    lengths = [6, 5, 3, 6, 5, 2, 7, 7, 2]
    assert stats.length_mean == pytest.approx(np.mean(lengths)) and stats.length_median == 5
    # "a red car parked on the street." repeats its neighbour once case and punctuation are ignored: 1 of 9
    assert stats.duplicate_rate == pytest.approx(1 / 9)
    assert stats.images == 3 and stats.captions == 9


def test_pairs_are_first_against_second_captions(stats):
    from kitm.relevance import sentence_embeddings

    first = sentence_embeddings([g[0] for g in GROUPS])
    second = sentence_embeddings([g[1] for g in GROUPS])
    similarity = first @ second.T
    off = similarity[~np.eye(3, dtype=bool)]
    assert stats.non_matching["mean"] == pytest.approx(float(off.mean()), abs=1e-6)
    assert stats.matching["mean"] == pytest.approx(float(np.diag(similarity).mean()), abs=1e-6)
    assert stats.contrast == pytest.approx(stats.matching["mean"] - stats.non_matching["mean"])
    assert stats.non_matching["share_at_least_0.4"] == pytest.approx(float((off >= 0.4).mean()))
    assert stats.cider_matching > stats.cider_non_matching >= 0.0


def test_ks_distance_is_scipys_and_goals_read_the_figures(stats):
    other = caption_statistics([g[::-1] for g in GROUPS], name="reversed", vocabulary_images=2)
    assert ks_distance(stats, other) == pytest.approx(
        ks_2samp(stats.non_matching_values, other.non_matching_values).statistic)
    met = dict((goal, value) for goal, value, _ in goals(stats, other))
    assert met["vocabulary at least half the reference's"] == pytest.approx(stats.vocabulary / other.vocabulary)
    assert "| goal (hand-made against reversed) |" in goals_table(stats, other)
    assert "| non-matching mean |" in comparison_table([stats], other)
    with pytest.raises(ValueError, match="equal counts"):
        goals(stats, caption_statistics(GROUPS, name="three", vocabulary_images=3))


def test_too_few_images_is_refused():
    with pytest.raises(ValueError, match="at least two images with two captions"):
        caption_statistics([["one caption"], ["a", "b"]], name="thin")


def test_sources_read_a_dataset_a_table_and_flickr8k(tiny_synthetic, tmp_path):
    groups = dataset_groups(tiny_synthetic, "test")
    assert groups and all(len(g) == 5 for g in groups)
    table = tmp_path / "mine.csv"
    table.write_text("filepath\ttitle\na.jpg\tA dog\na.jpg\tA puppy\nb.jpg\tA cat\n")
    assert reference_groups(table) == [["A dog", "A puppy"], ["A cat"]]
    flickr = reference_groups(FLICKR8K, "test")
    assert len(flickr) == 1000 and all(len(g) == 5 for g in flickr)
    with pytest.raises(Exception, match="expected Flickr8K's text folder"):
        reference_groups(tmp_path)


def test_the_things_world_meets_its_calibration_goals_against_flickr8k(tmp_path, capsys):
    """The command of docs/demo.md: the launcher's default world (3,000 scenes, seed 0, its 300 test images) against
    Flickr8K's 1,000 test images; every goal met (exit status 0 with --check), the figures in the JSON."""
    out = tmp_path / "stats.json"
    with pytest.raises(SystemExit) as exit_status:
        main(["--world=things,shapes", f"--reference={FLICKR8K}", "--check", f"--json={out}",
              f"--plot={tmp_path / 'worlds.png'}"])
    printed = capsys.readouterr().out
    assert exit_status.value.code == 1  # the shapes world misses them all; the things world none
    payload = json.loads(out.read_text())
    things, shapes = payload["goals"]["things world"], payload["goals"]["shapes world"]
    assert all(goal["met"] for goal in things), things
    assert not any(goal["met"] for goal in shapes), shapes
    assert payload["reference"]["images"] == 1000 and payload["sources"][0]["images"] == 300
    assert payload["reference"]["non_matching"]["mean"] == pytest.approx(0.080, abs=0.001)
    assert (tmp_path / "worlds.png").stat().st_size > 10_000 and "| things world | shapes world |" in printed


def test_examples_are_drawn_from_a_dataset_and_from_a_world(tiny_synthetic, tmp_path):
    """--examples_png's two sources: a built dataset's first test records (decoded pixels and their captions) and a
    generated world's first test scenes, each drawn beside its captions."""
    from kitm.data.world_stats.report import plot_examples
    from kitm.data.world_stats.sources import dataset_examples, world_examples

    images, groups = dataset_examples(tiny_synthetic, 3, "test")
    assert images.shape == (3, 32, 32, 3) and images.dtype == np.uint8
    assert groups == dataset_groups(tiny_synthetic, "test")[:3]
    world_images, world_captions = world_examples("things", 2, num_scenes=40, seed=3, image_size=48)
    assert world_images.shape == (2, 48, 48, 3) and all(len(c) == 5 for c in world_captions)
    plot_examples(world_images, world_captions, tmp_path / "examples.png", title="two scenes")
    assert (tmp_path / "examples.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
