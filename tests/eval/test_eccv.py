"""ECCV Caption figures through the eccv-caption package, on its real COCO ids and scores built here."""

import numpy as np
import pytest

pytest.importorskip("eccv_caption")

from kitm.eval import map_at_r  # noqa: E402
from kitm.eval.eccv import eccv_caption_metrics, load_metrics, package_ids  # noqa: E402
from kitm.eval.retrieval import ground_truth_ranks, recall_vse_from_ranks  # noqa: E402
from kitm.eval.protocols import fold_slices  # noqa: E402


@pytest.fixture(scope="module")
def metrics():
    return load_metrics()


@pytest.fixture(scope="module")
def sims():
    """Known scores for the 5K test split in the package's order: noisy copies of each image's embedding."""
    rng = np.random.default_rng(0)
    images = rng.normal(size=(5000, 8)).astype(np.float32)
    captions = np.repeat(images, 5, axis=0) + rng.normal(size=(25000, 8)).astype(np.float32)
    return images @ captions.T


@pytest.fixture(scope="module")
def figures(metrics, sims):
    return eccv_caption_metrics(sims, metrics=metrics, ks=(1, 5))


def test_package_order_is_kitm_layout(metrics):
    image_ids, caption_ids = package_ids(metrics)
    assert image_ids.shape == (5000,) and caption_ids.shape == (25000,) and len(set(image_ids.tolist())) == 5000
    owner = metrics.coco_gts["t2i"]
    assert all(owner[int(c)][0] == image_ids[i // 5] for i, c in enumerate(caption_ids))


def test_coco_recalls_equal_kitm_protocols(sims, figures):
    """The package's COCO 5K and 1K R@K of kitm's ranked lists are kitm's own R^V@K (no ties in these scores)."""
    for direction in ("i2t", "t2i"):
        whole = recall_vse_from_ranks(ground_truth_ranks(sims, direction=direction).ranks, (1, 5))
        folds = [recall_vse_from_ranks(ground_truth_ranks(sims[i, c], direction=direction).ranks, (1, 5))
                 for i, c in fold_slices(5000, 5, 5)]
        for k in (1, 5):
            assert figures[f"coco_5k_r{k}"][direction] == pytest.approx(whole[k], abs=1e-9)
            assert figures[f"coco_1k_r{k}"][direction] == pytest.approx(np.mean([f[k] for f in folds]), abs=1e-9)
    assert {"eccv_map_at_r", "eccv_rprecision", "eccv_r1", "cxc_r1", "cxc_r5"} <= set(figures)


def test_eccv_map_at_r_equals_kitm_map_at_r(metrics, sims, figures):
    """t2i: ECCV's annotated caption queries against their positive images (all inside the 5K split)."""
    image_ids, caption_ids = package_ids(metrics)
    row_of_image = {int(i): r for r, i in enumerate(image_ids)}
    column_of_caption = {int(c): j for j, c in enumerate(caption_ids)}
    queries = sorted(metrics.eccv_gts["t2i"])
    relevant = np.zeros((len(queries), 5000), bool)
    for q, caption in enumerate(queries):
        relevant[q, [row_of_image[i] for i in metrics.eccv_gts["t2i"][caption]]] = True
    scores = sims[:, [column_of_caption[c] for c in queries]].T
    assert map_at_r(scores, relevant) == pytest.approx(figures["eccv_map_at_r"]["t2i"], abs=1e-9)


def test_custom_ids_must_keep_the_layout(metrics, sims):
    image_ids, caption_ids = package_ids(metrics)
    swapped = caption_ids.copy()
    swapped[[0, 5]] = swapped[[5, 0]]  # caption column 0 now belongs to image 1
    with pytest.raises(ValueError, match="caption column 0 .* image i must own columns 5i"):
        eccv_caption_metrics(sims, image_ids=image_ids, caption_ids=swapped, metrics=metrics)
    with pytest.raises(ValueError, match=r"`sims` has shape \(5000, 24999\)"):
        eccv_caption_metrics(sims[:, :-1], metrics=metrics)


def test_cli_flags(tmp_path, capsys):
    from kitm.eval.cli import main

    np.save(tmp_path / "sims.npy", np.eye(5))
    assert main([f"--sims={tmp_path / 'sims.npy'}", f"--eccv_image_ids={tmp_path / 'ids.npy'}", "--no-progress"]) == 2
    assert "describe the matrix for --eccv_caption; add it" in capsys.readouterr().err
    assert main([f"--run_dir={tmp_path}", "--eccv_caption", "--no-progress"]) == 2
    assert "--eccv_caption with --run_dir needs --eccv_image_ids and --eccv_caption_ids" in capsys.readouterr().err
    (tmp_path / "ids.json").write_text("[[1, 2], [3, 4]]")
    assert main([f"--sims={tmp_path / 'sims.npy'}", "--captions_per_image=1", "--eccv_caption",
                 f"--eccv_image_ids={tmp_path / 'ids.json'}", "--no-progress"]) == 2
    assert "must hold one list of integer COCO ids" in capsys.readouterr().err
    assert main([f"--sims={tmp_path / 'sims.npy'}", "--captions_per_image=1", "--eccv_caption", "--no-progress"]) == 2
    assert "Karpathy 5K test split, [images, captions] = [5000, 25000]; the matrix scored has shape [5, 5]" in (
        capsys.readouterr().err)
