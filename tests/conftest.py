"""Shared pytest setup: quiet TensorFlow, offline sentence-transformers, a fixed seed."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import pathlib

import pytest

SHARED = pathlib.Path(__file__).resolve().parents[1].parent / "shared"


@pytest.fixture(scope="session")
def shared_dir() -> pathlib.Path:
    if not SHARED.is_dir():
        raise RuntimeError(f"The shared data folder is expected beside the checkout at {SHARED}.")
    return SHARED


@pytest.fixture(scope="session")
def tiny_synthetic(tmp_path_factory) -> pathlib.Path:
    """A 120-scene synthetic dataset (96 train / 12 val / 12 test), built once per test session."""
    from kitm.data.synthetic_records import build_synthetic

    root = tmp_path_factory.mktemp("data") / "synthetic"
    build_synthetic(root, num_scenes=120, seed=7, image_size=32, num_shards=2, progress=False)
    return root
