"""Shared pytest setup: quiet TensorFlow, offline sentence-transformers, the tiny synthetic world, and the work
units that let pytest-xdist (`-n 2` in setup.cfg) run the suite on two workers without running an expensive
fixture twice."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import pathlib

import pytest

import shared_runs  # tests/ is on sys.path under pytest

SHARED = pathlib.Path(__file__).resolve().parents[1].parent / "shared"


# Test modules that must share one xdist worker because they share a session-cached run (a module-scoped
# fixture already keeps each module's own runs to one worker).
SHARED_RUN_GROUPS = {module: "production_run" for module in shared_runs.USERS}


def work_unit(nodeid: str) -> str:
    """The xdist work unit of a test: its module, or the group of modules that share a session-cached run."""
    module = nodeid.split("::", 1)[0]
    return SHARED_RUN_GROUPS.get(pathlib.PurePosixPath(module).name, module)


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: optional, so `-p no:xdist` still loads this file
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile`, with the modules of SHARED_RUN_GROUPS as one unit. A worker runs a whole unit, so the
    module-scoped fixtures (launcher runs, trained models, built worlds) and the shared production run happen
    once, as without xdist. (`--dist loadgroup` with xdist_group marks would say the same, but pytest-xdist 3.8
    marks a group by rewriting `item._nodeid`, which pytest 9.2 no longer reads: the groups are silently lost.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleUnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return work_unit(nodeid)

    return ModuleUnitScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    """Work units holding `slow` tests first (most slow tests first, otherwise collection order), the order within
    a unit unchanged. xdist hands the units out in this order (`--no-loadscope-reorder`): a long unit started
    last would leave the other worker idle at the end. Without xdist the order is the same."""
    units = {}
    for item in items:
        units.setdefault(work_unit(item.nodeid), []).append(item)
    rank = {name: (-sum(1 for item in members if item.get_closest_marker("slow")), position)
            for position, (name, members) in enumerate(units.items())}
    items[:] = [item for name in sorted(units, key=rank.__getitem__) for item in units[name]]


@pytest.fixture(scope="session")
def shared_dir() -> pathlib.Path:
    if not SHARED.is_dir():
        raise RuntimeError(f"The shared data folder is expected beside the checkout at {SHARED}.")
    return SHARED


@pytest.fixture(scope="session")
def tiny_synthetic(tmp_path_factory) -> pathlib.Path:
    """A 120-scene synthetic dataset (96 train / 12 val / 12 test), built once per test session (under xdist once
    per worker: it takes well under a second)."""
    from kitm.data.synthetic_records import build_synthetic

    root = tmp_path_factory.mktemp("data") / "synthetic"
    build_synthetic(root, num_scenes=120, seed=7, image_size=32, num_shards=2, progress=False)
    return root
