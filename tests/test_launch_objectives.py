"""The launcher's --loss flags build each paper's objective, and refuse impossible settings by flag name."""

import pytest
from absl import flags

import kitm  # noqa: F401
from kitm import launch
from kitm.losses import AdaptiveLadderLoss, AngularLoss, LadderLoss, SAMLoss, TripletLoss

FLAGS = flags.FLAGS


@pytest.fixture
def parse():
    def parse_flags(*args):
        FLAGS.unparse_flags()
        FLAGS(["kitm.launch", *args])
        return launch.build_objective()

    yield parse_flags
    FLAGS.unparse_flags()


def test_each_loss_flag_builds_its_objective(parse):
    triplet = parse("--loss=triplet", "--margin=0.3", "--max_violation=false")["triplet"]
    assert isinstance(triplet, TripletLoss) and (triplet.margin, triplet.max_violation) == (0.3, False)
    sam = parse("--loss=sam", "--relevance=truth", "--sam_tau=3", "--sam_sampling=random", "--sam_weight=0.5")["sam"]
    assert isinstance(sam, SAMLoss)
    assert (sam.tau, sam.sampling, sam.sam_weight, sam.triplet_weight) == (3.0, "random", 0.5, 1.0)
    ladder = parse("--loss=ladder", "--relevance=truth", "--ladder_thresholds=0.6,0.3",
                   "--ladder_margins=0.2,0.01,0.01", "--ladder_betas=1,0.25,0.125")["ladder"]
    assert isinstance(ladder, LadderLoss) and list(ladder.thresholds) == [0.6, 0.3]
    adaptive = parse("--loss=ladder_adaptive", "--relevance=truth", "--ladder_level_bounds=2,5")["ladder"]
    assert isinstance(adaptive, AdaptiveLadderLoss) and tuple(adaptive.level_bounds) == (2, 5)
    assert isinstance(parse("--loss=angular", "--angle_degrees=40")["angular"], AngularLoss)


def test_relevance_losses_need_a_relevance_source(parse):
    with pytest.raises(launch.LaunchError, match="--loss=sam learns from graded relevance: set --relevance"):
        parse("--loss=sam")


def test_inconsistent_ladder_flags_are_named(parse):
    with pytest.raises(launch.LaunchError, match="--loss=ladder"):
        parse("--loss=ladder", "--relevance=truth", "--ladder_thresholds=0.3,0.6")
    with pytest.raises(launch.LaunchError, match="--ladder_margins=a,b"):
        parse("--loss=ladder", "--relevance=truth", "--ladder_margins=a,b")
