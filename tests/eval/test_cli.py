"""python -m kitm.eval: saved similarity matrices (.npy, the NCS reference's JSON, CSV relevance), a run directory
through its SavedModel, relevance from the split (truth, CIDEr-D, SBERT), the COCO 1K block, one-line errors."""

import json
import re

import numpy as np
import pytest
from scipy.stats import kendalltau

import kitm  # noqa: F401
from kitm.eval import evaluate
from kitm.eval.cli import main



def _keys_to_int(block):
    """JSON turned the cut-offs K into strings; turn them back for comparison with evaluate()."""
    if isinstance(block, dict):
        return {(int(k) if isinstance(k, str) and k.isdigit() else k): _keys_to_int(v) for k, v in block.items()}
    return block


def _assert_same_figures(reported, expected):
    reported = _keys_to_int(reported)
    for direction in ("i2t", "t2i"):
        for metric, value in expected[direction].items():
            if isinstance(value, dict):
                assert reported[direction][metric].keys() == value.keys(), (direction, metric)
                for k in value:
                    assert reported[direction][metric][k] == pytest.approx(value[k], rel=1e-12, abs=1e-12)
            else:
                assert reported[direction][metric] == pytest.approx(value, rel=1e-12, abs=1e-12), (direction, metric)


def _cs_oracle(scores, relevance, k):
    """Mean over queries of scipy's Kendall tau-b on the top k candidates (descending score, ties by index)."""
    taus = []
    for row_scores, row_relevance in zip(scores, relevance):
        top = np.argsort(-row_scores, kind="stable")[:k]
        tau = kendalltau(row_scores[top], row_relevance[top], variant="b").statistic
        if np.isfinite(tau):
            taus.append(tau)
    return float(np.mean(taus))


@pytest.fixture(scope="module")
def matrices(tmp_path_factory):
    """20 images x 100 captions with ties in sims (values rounded to 0.1) and graded relevance."""
    folder = tmp_path_factory.mktemp("matrices")
    rng = np.random.default_rng(3)
    sims = np.round(rng.normal(size=(20, 100)), 1)
    sims[np.arange(20)[:, None], np.arange(20)[:, None] * 5 + np.arange(5)] += 1.0  # some signal
    relevance = np.round(rng.random((100, 20)), 2)
    np.save(folder / "sims.npy", sims)
    np.save(folder / "relevance.npy", relevance)
    (folder / "sims.json").write_text(json.dumps(sims.tolist()))
    np.savetxt(folder / "relevance.csv", relevance, delimiter=",", fmt="%.17g")
    return folder, sims, relevance


def test_sims_npy_with_relevance_matrix_matches_evaluate_and_scipy_cs(matrices, capsys):
    folder, sims, relevance = matrices
    out = folder / "report.json"
    assert main([f"--sims={folder / 'sims.npy'}", f"--relevance_matrix={folder / 'relevance.npy'}",
                 f"--out={out}"]) == 0
    report = json.loads(out.read_text())
    _assert_same_figures(report["all"], evaluate(sims, relevance=relevance))
    assert report["cs_ks"] == [2, 20] and "coco_1k" not in report
    # CS: one caption per image (the first), K = N/10 and N; oracle from scipy.
    s1, r1 = sims[:, ::5], relevance[::5, :]
    for k in (2, 20):
        assert report["all"]["i2t"]["coherent_score"][str(k)] == pytest.approx(_cs_oracle(s1, r1.T, k), abs=1e-12)
        assert report["all"]["t2i"]["coherent_score"][str(k)] == pytest.approx(_cs_oracle(s1.T, r1, k), abs=1e-12)
    expected = evaluate(sims, relevance=relevance)
    assert report["flat"]["t2i_NCS@5"] == pytest.approx(expected["t2i"]["ncs"][5])
    assert report["rsum"] == pytest.approx(sum(expected[d]["recall_vse"][k] for d in ("i2t", "t2i")
                                               for k in (1, 5, 10)))
    printed = capsys.readouterr().out
    assert "image->text" in printed and "text->image" in printed and "NCS@10" in printed and "CS@20" in printed
    assert f"Report: {out}" in printed


def test_ncs_reference_json_and_csv_layouts_give_the_same_report(matrices):
    folder, sims, relevance = matrices
    assert main([f"--sims={folder / 'sims.json'}", f"--relevance_matrix={folder / 'relevance.csv'}"]) == 0
    from_json = json.loads((folder / "sims.eval_matrix.json").read_text())  # default name beside --sims
    assert main([f"--sims={folder / 'sims.npy'}", f"--relevance_matrix={folder / 'relevance.npy'}",
                 f"--out={folder / 'npy.json'}"]) == 0
    from_npy = json.loads((folder / "npy.json").read_text())
    assert from_json["all"] == from_npy["all"]


def test_coco_1k_block_is_the_mean_over_five_folds(matrices):
    folder, sims, relevance = matrices
    out = folder / "folds.json"
    assert main([f"--sims={folder / 'sims.npy'}", f"--relevance_matrix={folder / 'relevance.npy'}", "--fold_size=4",
                 "--ks=1,2,3", f"--out={out}"]) == 0
    report = json.loads(out.read_text())
    assert report["fold_size"] == 4
    folds = [evaluate(sims[4 * f:4 * f + 4, 20 * f:20 * f + 20], relevance=relevance[20 * f:20 * f + 20, 4 * f:4 * f + 4],
                      ks=(1, 2, 3)) for f in range(5)]
    block = _keys_to_int(report["coco_1k"])
    for direction in ("i2t", "t2i"):
        assert block[direction]["medr"] == pytest.approx(np.mean([f[direction]["medr"] for f in folds]))
        for k in (1, 2, 3):
            for metric in ("recall_vse", "ncs", "semantic_recall"):
                assert block[direction][metric][k] == pytest.approx(np.mean([f[direction][metric][k] for f in folds]))
    # CS per fold at the fold's own (fold_size/10 -> 2, fold_size).
    s1 = [sims[4 * f:4 * f + 4, 20 * f:20 * f + 20][:, ::5] for f in range(5)]
    r1 = [relevance[20 * f:20 * f + 20, 4 * f:4 * f + 4][::5] for f in range(5)]
    assert block["t2i"]["coherent_score"].keys() == {2, 4}
    assert block["t2i"]["coherent_score"][4] == pytest.approx(np.mean([_cs_oracle(s.T, r, 4) for s, r in zip(s1, r1)]))


# ---- a run directory ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def run(tiny_synthetic, tmp_path_factory):
    """An untrained tiny DualEncoder exported as a run directory would hold it, with a minimal summary.json."""
    import tensorflow as tf

    from kitm.data.pipeline import training_captions
    from kitm.layers import CaptionTokenizer, SmallConvEncoder, build_vocabulary
    from kitm.models import DualEncoder
    from kitm.serving import export_saved_model

    import keras

    keras.utils.set_random_seed(1)
    run_dir = tmp_path_factory.mktemp("run")
    tokenizer = CaptionTokenizer(build_vocabulary(training_captions(tiny_synthetic)), 16, name="tokenizer")
    # A bag-of-words text tower: scoring does not care, and a GRU's graph costs seconds to trace and export.
    text = keras.Sequential([keras.layers.Embedding(tokenizer.vocabulary_size, 8),
                             keras.layers.GlobalAveragePooling1D()])
    model = DualEncoder(SmallConvEncoder(filters=(8, 8, 8, 8), width=16), text, embedding_dim=12)
    model({"image": tf.zeros([1, 32, 32, 3]), "tokens": tf.zeros([1, 16], tf.int32)})
    export_saved_model(model, tokenizer, run_dir / "export" / "1", image_size=32, eval_crop_fraction=1.0)
    (run_dir / "summary.json").write_text(json.dumps({"flags": {"data_dir": str(tiny_synthetic), "image_size": 32,
                                                                "eval_crop_fraction": 1.0}}))
    return run_dir, model, tokenizer


@pytest.fixture(scope="module")
def run_report(run):
    run_dir, _, _ = run
    assert main([f"--run_dir={run_dir}", "--split=test", "--relevance=truth", f"--save_sims={run_dir / 'sims.npy'}",
                 "--no-progress"]) == 0
    return json.loads((run_dir / "eval_test_truth.json").read_text()), np.load(run_dir / "sims.npy")


def test_run_dir_embeds_through_the_saved_model_and_scores_truth_relevance(run, run_report, tiny_synthetic):
    from kitm.data import synthetic
    from kitm.relevance.world_truth import world_relevance
    from kitm.data.pipeline import PipelineConfig, evaluation_dataset
    from kitm.models.inference import embed_dataset

    _, model, tokenizer = run
    report, sims = run_report
    # The SavedModel's similarity matrix is the Keras model's on the launcher's evaluation pipeline.
    config = PipelineConfig(batch_size=5, image_size=32, eval_crop_fraction=1.0)
    images, texts, image_index = embed_dataset(model, evaluation_dataset(tiny_synthetic, "test", tokenizer, config))
    assert sims.shape == (12, 60)
    np.testing.assert_allclose(sims, images @ texts.T, atol=2e-5)
    # Truth relevance from the generator itself, for the images in evaluation order, [captions, images].
    world = synthetic.generate_world(120, seed=7, image_size=32, world="shapes")
    caption_facts = world.caption_facts[image_index].reshape(-1, world.caption_facts.shape[-1])
    truth = world_relevance(world.scene_facts[image_index], caption_facts, world="shapes", image_size=32).T
    # mAP@R and R-Precision count the captions fully true of an image as its positives (truth relevance 1.0).
    _assert_same_figures(report["all"], evaluate(sims, relevance=truth, positive_threshold=1.0))
    assert report["positive_threshold"] == report["settings"]["positive_threshold"] == 1.0
    assert report["source"]["split"] == "test" and report["relevance"]["source"] == "truth"
    assert report["source"]["data_dir"] == str(tiny_synthetic)
    assert report["num_images"] == 12 and report["cs_ks"] == [2, 12]
    assert set(report["all"]["i2t"]) == {"recall", "recall_vse", "medr", "meanr", "map", "map_at_r", "r_precision",
                                         "ncs", "semantic_recall", "coherent_score", "n_way"}
    # N-way R@1 for the N Thomas & Kovashka report that fit 12 images (5 only), as kitm.eval.n_way_recall computes it.
    from kitm.eval import n_way_recall

    expected = n_way_recall(sims, 5, captions_per_image=5, seed=0)
    assert report["all"]["i2t"]["n_way"] == {"5": pytest.approx(expected["i2t"])}
    assert report["all"]["t2i"]["n_way"] == {"5": pytest.approx(expected["t2i"])}


def test_run_dir_neighborhood_preservation_against_sentence_embeddings(run, tiny_synthetic, tmp_path):
    from kitm.data.pipeline import PipelineConfig, evaluation_dataset
    from kitm.eval import neighborhood_preservation
    from kitm.data.split_reading import read_split
    from kitm.models.inference import embed_dataset
    from kitm.relevance import sentence_embeddings

    run_dir, model, tokenizer = run
    out = tmp_path / "neighbourhood.json"
    assert main([f"--run_dir={run_dir}", "--split=test", "--neighborhood=sbert", "--neighborhood_k=4",
                 f"--out={out}", "--no-progress"]) == 0
    figures = json.loads(out.read_text())["neighbourhood_preservation"]
    config = PipelineConfig(batch_size=5, image_size=32, eval_crop_fraction=1.0)
    images, texts, _ = embed_dataset(model, evaluation_dataset(tiny_synthetic, "test", tokenizer, config))
    reference = sentence_embeddings(read_split(tiny_synthetic, "test", with_images=False).captions)
    per_image = reference.reshape(12, 5, -1).mean(axis=1)
    per_image /= np.linalg.norm(per_image, axis=1, keepdims=True)
    assert figures["k"] == 4 and figures["reference"] == "sbert"
    assert figures["text"] == pytest.approx(neighborhood_preservation(reference, texts, k=4), abs=1e-6)
    assert figures["image"] == pytest.approx(neighborhood_preservation(per_image, images, k=4), abs=1e-6)


def test_run_dir_sentence_embeddings_are_cached_between_evaluations(run, tmp_path, monkeypatch):
    """The second evaluation of the split reads the captions' embeddings from $KITM_CACHE_DIR (the model is never
    loaded) and reports the same figures; --no-embedding_cache keeps nothing."""
    from kitm.relevance import sentence

    run_dir, _, _ = run
    monkeypatch.setenv("KITM_CACHE_DIR", str(tmp_path / "cache"))
    common = [f"--run_dir={run_dir}", "--split=test", "--neighborhood=sbert", "--neighborhood_k=4", "--no-progress"]
    assert main(common + [f"--out={tmp_path / 'first.json'}"]) == 0
    assert len(list((tmp_path / "cache" / "sentence_embeddings").glob("*.npy"))) == 1

    def refuse(*args, **kwargs):
        raise AssertionError("the sentence model was loaded although its embeddings were cached")

    monkeypatch.setattr(sentence, "load_sentence_model", refuse)
    assert main(common + [f"--out={tmp_path / 'second.json'}"]) == 0
    first, second = (json.loads((tmp_path / name).read_text())["neighbourhood_preservation"]
                     for name in ("first.json", "second.json"))
    assert first == second
    monkeypatch.undo()  # the real loader again, for the uncached run
    monkeypatch.setenv("KITM_CACHE_DIR", str(tmp_path / "unused"))
    assert main(common + ["--no-embedding_cache", f"--out={tmp_path / 'third.json'}"]) == 0
    assert not (tmp_path / "unused").exists()
    assert json.loads((tmp_path / "third.json").read_text())["neighbourhood_preservation"] == first


def _ptb_like(caption):
    # The synthetic captions hold only ".", "," and ":" besides words; PTB normalisation lowercases and drops them.
    return " ".join(re.sub(r"[.,:]", " ", caption.lower()).split())


def test_sims_scored_against_a_split_with_cider_relevance(run, run_report, tiny_synthetic, tmp_path):
    from pycocoevalcap.cider.cider_scorer import CiderScorer

    from kitm.data.split_reading import read_split

    run_dir, _, _ = run
    _, sims = run_report
    out = tmp_path / "cider.json"
    assert main([f"--sims={run_dir / 'sims.npy'}", f"--data_dir={tiny_synthetic}", "--split=test",
                 "--relevance=cider", "--cider_normalization=ptb", f"--out={out}"]) == 0
    captions = [_ptb_like(c) for c in read_split(tiny_synthetic, "test", with_images=False).captions]
    groups = [captions[5 * i:5 * i + 5] for i in range(12)]
    # pycocoevalcap's scorer on every (caption, image) pair; repeating each group once per caption scales D and
    # every document frequency alike, so the idf is that of the 12 groups.
    scorer = CiderScorer(n=4, sigma=6.0)
    for caption in captions:
        for group in groups:
            scorer += (caption, group)
    _, scores = scorer.compute_score()
    cider = np.asarray(scores).reshape(60, 12)
    _assert_same_figures(json.loads(out.read_text())["all"], evaluate(sims, relevance=cider))


def test_cider_relevance_defaults_to_the_ncs_references_caption_handling(run, run_report, tiny_synthetic,
                                                                          tmp_path):
    """Without --cider_normalization the captions are only lower-cased and split on whitespace, as the NCS
    reference's custom_cider.py does; the synthetic captions' "." and "," then stay glued to their words."""
    from pycocoevalcap.cider.cider_scorer import CiderScorer

    from kitm.data.split_reading import read_split

    run_dir, _, _ = run
    _, sims = run_report
    out = tmp_path / "cider_ncs.json"
    assert main([f"--sims={run_dir / 'sims.npy'}", f"--data_dir={tiny_synthetic}", "--split=test",
                 "--relevance=cider", f"--out={out}"]) == 0
    captions = [c.lower() for c in read_split(tiny_synthetic, "test", with_images=False).captions]
    assert any(re.search(r"\w[.,]", c) for c in captions)  # the two handlings differ on these captions
    groups = [captions[5 * i:5 * i + 5] for i in range(12)]
    scorer = CiderScorer(n=4, sigma=6.0)  # the reference's scorer is this one (plus an all-pairs loop)
    for caption in captions:
        for group in groups:
            scorer += (caption, group)
    cider = np.asarray(scorer.compute_score()[1]).reshape(60, 12)
    report = json.loads(out.read_text())
    assert report["relevance"]["cider_normalization"] == "ncs"
    _assert_same_figures(report["all"], evaluate(sims, relevance=cider))


def test_sbert_relevance_is_the_mean_cosine_to_the_images_captions(run, run_report, tiny_synthetic, tmp_path):
    from kitm.data.split_reading import read_split
    from kitm.relevance.sentence import load_sentence_model

    run_dir, _, _ = run
    _, sims = run_report
    np.save(tmp_path / "sims4.npy", sims[:4, :20])
    out = tmp_path / "sbert.json"
    assert main([f"--sims={tmp_path / 'sims4.npy'}", f"--data_dir={tiny_synthetic}", "--split=test",
                 "--num_images=4", "--relevance=sbert", "--ks=1,2,3", f"--out={out}", "--no-progress"]) == 0
    captions = read_split(tiny_synthetic, "test", limit=4, with_images=False).captions
    # The bundled model (loaded once per process: the CLI's call above loaded it); raw, unnormalised embeddings.
    encoder = load_sentence_model(None)
    e = encoder.encode(captions, normalize_embeddings=False)
    cos = (e @ e.T) / np.outer(np.linalg.norm(e, axis=1), np.linalg.norm(e, axis=1))
    relevance = np.array([[cos[c, 5 * i:5 * i + 5].mean() for i in range(4)] for c in range(20)])
    report = json.loads(out.read_text())
    expected = evaluate(sims[:4, :20], relevance=relevance, ks=(1, 2, 3))
    reported = _keys_to_int(report["all"])
    for direction in ("i2t", "t2i"):
        for k in (1, 2, 3):
            assert reported[direction]["ncs"][k] == pytest.approx(expected[direction]["ncs"][k], rel=1e-5)


def test_default_cutoffs_fit_a_split_of_fewer_than_ten_images(matrices, tmp_path, capsys):
    from kitm.eval.report import recall_cutoffs

    assert [recall_cutoffs(n) for n in (1, 4, 5, 9, 10, 1000)] == [(1,), (1,), (1, 5), (1, 5), (1, 5, 10), (1, 5, 10)]
    _, sims, relevance = matrices
    for images, ks in ((6, [1, 5]), (3, [1])):
        np.save(tmp_path / "small.npy", sims[:images, :5 * images])
        np.save(tmp_path / "small_relevance.npy", relevance[:5 * images, :images])
        out = tmp_path / f"small{images}.json"
        assert main([f"--sims={tmp_path / 'small.npy'}", f"--relevance_matrix={tmp_path / 'small_relevance.npy'}",
                     f"--out={out}"]) == 0
        report = json.loads(out.read_text())
        assert report["ks"] == ks
        assert sorted(_keys_to_int(report["all"])["t2i"]["recall"]) == ks
        assert sorted(_keys_to_int(report["all"])["i2t"]["ncs"]) == ks
    capsys.readouterr()
    np.save(tmp_path / "small.npy", sims[:6, :30])
    err = _error([f"--sims={tmp_path / 'small.npy'}", "--ks=1,5,10"], capsys)
    assert "--ks=1,5,10 holds [10], larger than the 6 candidates a t2i (caption) query ranks" in err
    assert "give --ks values <= 6, or leave --ks out" in err


# ---- bad input ------------------------------------------------------------------------------------------------

def _error(argv, capsys):
    status = main(argv)
    err = capsys.readouterr().err.strip()
    assert status == 2, err
    assert err.startswith("kitm.eval: error: ") and "\n" not in err and "Traceback" not in err, err
    return err


def test_bad_input_gives_one_line_errors_and_status_2(matrices, tmp_path, capsys):
    folder, sims, relevance = matrices
    s, r = f"--sims={folder / 'sims.npy'}", f"--relevance_matrix={folder / 'relevance.npy'}"

    def saved(name, array):
        np.save(tmp_path / name, array)
        return str(tmp_path / name)

    assert "exactly one of --run_dir" in _error([], capsys)
    assert "no file at" in _error([f"--sims={tmp_path / 'missing.npy'}"], capsys)
    assert "unrecognized arguments: --bogus" in _error([s, "--bogus"], capsys)
    assert "must be finite" in _error([f"--sims={saved('nan.npy', np.where(sims > 2, np.nan, sims))}"], capsys)
    assert "must be finite" in _error([f"--sims={saved('inf.npy', np.where(sims > 2, np.inf, sims))}"], capsys)
    assert "not divisible by captions_per_image=5" in _error([f"--sims={saved('odd.npy', sims[:, :99])}"], capsys)
    assert "expected [num_images, num_images * 5]" in _error([f"--sims={saved('wide.npy', sims[:19])}"], capsys)
    assert "pass relevance.T" in _error([s, f"--relevance_matrix={saved('t.npy', relevance.T)}"], capsys)
    assert "`relevance` has shape (100, 19)" in _error([s, f"--relevance_matrix={saved('r.npy', relevance[:, :19])}"],
                                                       capsys)
    assert "larger than the 20 candidates" in _error([s, "--ks=1,5,50"], capsys)
    assert "--ks must be comma-separated integers" in _error([s, "--ks=1,five"], capsys)
    assert "not both" in _error([s, r, "--relevance=cider"], capsys)
    assert "needs the captions of the scored split" in _error([s, "--relevance=cider"], capsys)
    (tmp_path / "ragged.json").write_text("[[1, 2], [3]]")
    assert "rows of different lengths" in _error([f"--sims={tmp_path / 'ragged.json'}"], capsys)
    (tmp_path / "sims.txt").write_text("1")
    assert "expected one of ('.npy', '.json', '.csv')" in _error([f"--sims={tmp_path / 'sims.txt'}"], capsys)
    assert "summary.json is missing" in _error([f"--run_dir={tmp_path}"], capsys)


def test_a_full_disk_when_writing_the_report_is_named_with_its_file(matrices, tmp_path, capsys, monkeypatch):
    import errno

    from kitm.eval import cli

    folder, _, _ = matrices
    out = tmp_path / "report.json"

    def full_disk(path, payload):
        raise OSError(errno.ENOSPC, "No space left on device", f"{path}.tmp")

    monkeypatch.setattr(cli, "write_report_json", full_disk)
    err = _error([f"--sims={folder / 'sims.npy'}", f"--relevance_matrix={folder / 'relevance.npy'}",
                  f"--out={out}"], capsys)
    assert f"Writing {out}.tmp failed: No space left on device. The disk is full" in err
    assert f"{out} was not created" in err


def test_bad_input_against_a_dataset(run, run_report, tiny_synthetic, capsys):
    run_dir, _, _ = run
    sims = f"--sims={run_dir / 'sims.npy'}"
    data = f"--data_dir={tiny_synthetic}"
    assert "--sims has shape (12, 60), but split 'test'" in _error([sims, data, "--num_images=5"], capsys)
    assert "has no split 'dev'" in _error([sims, data, "--split=dev"], capsys)
    assert "disagrees with the dataset" in _error([sims, data, "--captions_per_image=4"], capsys)
    assert "SPICE" in _error([sims, data, "--split=test", "--relevance=spice"], capsys).upper()


def test_python_dash_m_entry_point(matrices, repo_root, kitm_python):
    folder, _, _ = matrices
    ok = kitm_python(["-m", "kitm.eval", f"--sims={folder / 'sims.npy'}",
                      f"--relevance_matrix={folder / 'relevance.npy'}", f"--out={folder / 'sub.json'}"],
                     cwd=repo_root, timeout=120)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "text->image" in ok.stdout and json.loads((folder / "sub.json").read_text())["num_images"] == 20
    bad = kitm_python(["-m", "kitm.eval", f"--sims={folder / 'sims.npy'}", "--ks=1,500"], cwd=repo_root,
                      timeout=120)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip().splitlines() == [
        "kitm.eval: error: `ks` holds [500], larger than the 100 candidates an i2t query ranks."]


def test_british_neighbourhood_flags_stay_as_deprecated_aliases():
    from kitm.eval.cli import build_parser

    old = build_parser().parse_args(["--sims=s.npy", "--neighbourhood=sbert", "--neighbourhood_k=7"])
    new = build_parser().parse_args(["--sims=s.npy", "--neighborhood=sbert", "--neighborhood_k=7"])
    assert (old.neighborhood, old.neighborhood_k) == (new.neighborhood, new.neighborhood_k) == ("sbert", 7)


def test_coherent_cutoffs_follow_the_paper_and_fit_small_sets():
    from kitm.eval import coherent_cutoffs, coherent_scores

    assert coherent_cutoffs(1000) == (100, 1000) and coherent_cutoffs(5000) == (500, 5000)
    assert coherent_cutoffs(12) == (2, 12) and coherent_cutoffs(2) == (2,) and coherent_cutoffs(1) == ()
    rng = np.random.default_rng(0)
    sims, relevance = rng.random((6, 12)), rng.random((12, 6))  # captions_per_image = 2
    cs = coherent_scores(sims, relevance, captions_per_image=2, ks=(3,), caption=1)
    assert cs["t2i"][3] == pytest.approx(_cs_oracle(sims[:, 1::2].T, relevance[1::2], 3), abs=1e-12)
    assert cs["i2t"][3] == pytest.approx(_cs_oracle(sims[:, 1::2], relevance[1::2].T, 3), abs=1e-12)
    with pytest.raises(ValueError, match=r"`caption` must be an int in \[0, 1\]"):
        coherent_scores(sims, relevance, captions_per_image=2, caption=2)


def test_truth_relevance_needs_the_synthetic_facts():
    import types

    from kitm.data.split_reading import SplitData
    from kitm.eval.split_relevance import split_relevance

    info = types.SimpleNamespace(name="f8k", relevance={}, captions_per_image=1)
    data = SplitData(info=info, split="test", image_ids=np.arange(2), captions=["a dog", "a cat"], images=None)
    with pytest.raises(ValueError, match="relevance 'truth' needs the synthetic world's facts; dataset 'f8k'"):
        split_relevance(data, "truth")
    assert split_relevance(data, "none") is None


def test_sims_that_are_not_a_numpy_file_are_one_line_saying_what_they_are(matrices, tmp_path, capsys):
    """A text file, a renamed .npz or random bytes as --sims answered with numpy's allow_pickle hint."""
    _, sims, _ = matrices
    (tmp_path / "text.npy").write_text("0.1,0.2\n0.3,0.4\n")
    assert _error([f"--sims={tmp_path / 'text.npy'}"], capsys) == (
        f"kitm.eval: error: --sims: {tmp_path / 'text.npy'} is text (a matrix as text goes in a .csv or .json file); "
        "expected a matrix written by numpy.save (a .npy file starts with the bytes \\x93NUMPY), or a .json / .csv "
        "matrix.")
    with open(tmp_path / "archive.npy", "wb") as handle:
        np.savez(handle, sims=sims)
    assert "archive.npy is a zip archive (numpy.savez writes .npz archives: save the one matrix with numpy.save)" \
        in _error([f"--sims={tmp_path / 'archive.npy'}"], capsys)
    (tmp_path / "noise.npy").write_bytes(bytes(range(200, 256)) * 4)
    assert "noise.npy is not a .npy file; expected a matrix written by numpy.save" in _error(
        [f"--sims={tmp_path / 'noise.npy'}"], capsys)
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    assert "objects.npy holds Python objects (an object array), not numbers" in _error(
        [f"--sims={tmp_path / 'objects.npy'}"], capsys)
    np.save(tmp_path / "cut.npy", sims)
    (tmp_path / "cut.npy").write_bytes((tmp_path / "cut.npy").read_bytes()[:200])
    assert "cut.npy is not a whole .npy array (" in _error([f"--sims={tmp_path / 'cut.npy'}"], capsys)
    for name in ("text.npy", "noise.npy", "objects.npy", "cut.npy"):
        assert "allow_pickle" not in _error([f"--sims={tmp_path / name}"], capsys)


def test_a_split_too_small_for_the_figures_asked_is_warned_about(tmp_path, capsys):
    """A 2-image test split printed NCS 0.00 without a word: a caption query ranks 1 image once its ground truth
    is removed, so NCS@1 is 0 (relevance 0) or 100 whatever the model."""
    sims = np.array([[0.9, 0.8, 0.1, 0.2, 0.3, 0.1, 0.0, 0.2, 0.1, 0.3],
                     [0.1, 0.2, 0.3, 0.0, 0.1, 0.9, 0.7, 0.8, 0.6, 0.5]])
    relevance = np.zeros((10, 2))
    relevance[:5, 0] = relevance[5:, 1] = 1.0  # each caption relevant to its own image only
    np.save(tmp_path / "two.npy", sims)
    np.save(tmp_path / "two_relevance.npy", relevance)
    out = tmp_path / "two.json"
    assert main([f"--sims={tmp_path / 'two.npy'}", f"--relevance_matrix={tmp_path / 'two_relevance.npy'}",
                 f"--out={out}"]) == 0
    captured = capsys.readouterr()
    assert "NCS" in captured.out
    warnings = json.loads(out.read_text())["warnings"]
    assert warnings == [
        "the set scored has 2 image(s) and 10 caption(s): its figures vary by several points from one split to "
        "another (the benchmarks score 1,000 or 5,000 images); compare runs on 100 images or more (--test_images when "
        "building).",
        "NCS@1 (t2i): a caption query ranks 1 image(s) once its ground truth is removed, so K = 1 retrieves them all "
        "in any order and NCS is 100, or 0 where their relevance is 0, whatever the model: it measures nothing here."]
    assert captured.err.splitlines() == [f"kitm.eval: warning: {warning}" for warning in warnings]
    # A set large enough for its cut-offs gets no warning.
    rng = np.random.default_rng(0)
    np.save(tmp_path / "big.npy", rng.normal(size=(120, 600)))
    assert main([f"--sims={tmp_path / 'big.npy'}", f"--out={tmp_path / 'big.json'}"]) == 0
    assert capsys.readouterr().err == "" and "warnings" not in json.loads((tmp_path / "big.json").read_text())
