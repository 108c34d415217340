"""RetrievalEvaluation: figures into the Keras logs and TensorBoard event files (read back here), NCS/SR/CS with a
relevance source, the top-5 image summary, the JSON lines, argument checks."""

import json

import numpy as np
import pytest
import tensorflow as tf

import kitm  # noqa: F401
import keras
from kitm.callbacks import RetrievalEvaluation, flatten_report
from kitm.data.pipeline import PipelineConfig, evaluation_dataset, training_captions
from kitm.eval import build_report, evaluate
from kitm.eval.relevance_sources import cider_relevance
from kitm.data.split_reading import read_split
from kitm.eval.split_relevance import split_relevance
from kitm.layers import CaptionTokenizer, SmallConvEncoder, build_vocabulary
from kitm.losses import TripletLoss
from kitm.models import DualEncoder
from kitm.models.inference import embed_dataset, similarity_matrix
from kitm.study.validation_curves import read_history

CONFIG = PipelineConfig(batch_size=16, image_size=32, flip=False, eval_crop_fraction=1.0, seed=1)


@pytest.fixture(scope="module")
def tokenizer(tiny_synthetic):
    return CaptionTokenizer(build_vocabulary(training_captions(tiny_synthetic)), max_length=16)


@pytest.fixture(scope="module")
def val_truth(tiny_synthetic):
    return split_relevance(read_split(tiny_synthetic, "val", with_images=False), "truth")


def _model(tokenizer):
    keras.utils.set_random_seed(0)
    # A bag-of-words text tower: the callback does not care, and a GRU's graph costs seconds to trace.
    text = keras.Sequential([keras.layers.Embedding(tokenizer.vocabulary_size, 8),
                             keras.layers.GlobalAveragePooling1D()])
    model = DualEncoder(SmallConvEncoder(filters=(8, 8, 8, 8), width=16), text, embedding_dim=12)
    # No XLA: compiling the train step with it costs more than the two steps it runs here.
    model.compile(keras.optimizers.Adam(1e-3), losses={"triplet": TripletLoss()}, jit_compile=False)
    return model


def _events(directory):
    """{tag: [(step, summary value)]} of every event file under `directory`."""
    found = {}
    for path in sorted(tf.io.gfile.glob(str(directory / "events.out.tfevents.*"))):
        for record in tf.data.TFRecordDataset(path):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                found.setdefault(value.tag, []).append((event.step, value))
    return found


def _scalar(value):
    return float(tf.make_ndarray(value.tensor)) if value.HasField("tensor") else float(value.simple_value)


@pytest.fixture(scope="module")
def trained(tiny_synthetic, tokenizer, val_truth, tmp_path_factory):
    """One short fit (2 epochs of 2 steps) with two callbacks, so the costly tracing happens once:
    `main` every epoch with truth relevance, Keras' TensorBoard callback and its own image summary;
    `other` every 2nd epoch on the first 10 images, relevance from captions (CIDEr) and its own scalars."""
    tmp_path = tmp_path_factory.mktemp("callback")
    model = _model(tokenizer)
    # Training data does not matter here (only that weights change between evaluations): random batches cost
    # nothing to build, unlike the decoding and tokenizing pipeline.
    rng = np.random.default_rng(0)
    x = {"image": rng.random((16, 32, 32, 3), dtype=np.float32),
         "tokens": rng.integers(1, tokenizer.vocabulary_size, size=(16, 16)).astype(np.int32)}
    train = tf.data.Dataset.from_tensors((x, {"image_index": np.arange(16, dtype=np.int32)})).repeat()
    val = evaluation_dataset(tiny_synthetic, "val", tokenizer, CONFIG)
    calls = []

    def relevance_fn(captions, captions_per_image):
        calls.append(list(captions))
        return cider_relevance(captions, captions_per_image)

    logs = tmp_path / "logs"
    main = RetrievalEvaluation(val, jsonl_path=str(tmp_path / "evaluations.jsonl"), relevance=val_truth,
                               log_dir=str(logs / "validation"), image_queries=2, thumbnail_size=16)
    other = RetrievalEvaluation(val, every_epochs=2, prefix="sub_", relevance_fn=relevance_fn,
                                log_dir=str(tmp_path / "own"), write_scalars=True, image_queries=0, num_images=10,
                                ks=(1, 5), cs_ks=(3, 10))
    history = model.fit(train, epochs=2, steps_per_epoch=2, verbose=0, shuffle=False,
                        callbacks=[main, other, keras.callbacks.TensorBoard(str(logs), update_freq="epoch")])
    return {"model": model, "val": val, "history": history, "dir": tmp_path, "main": main, "other": other,
            "calls": calls}


def test_scalars_images_and_json_lines_are_written_and_match_the_report(trained, tiny_synthetic, val_truth):
    model, history, tmp_path = trained["model"], trained["history"], trained["dir"]
    # The figures of the last evaluation are those of build_report on the model's final similarity matrix
    # computed independently (inference.embed_dataset), with the truth relevance of the same images.
    images, texts, _ = embed_dataset(model, trained["val"])
    sims = similarity_matrix(images, texts)
    expected = build_report(sims, captions_per_image=5, relevance=val_truth, fold_size=None)["all"]
    assert set(expected["i2t"]) >= {"recall", "recall_vse", "medr", "meanr", "map", "ncs", "semantic_recall",
                                    "coherent_score"}
    flat = flatten_report(expected, "val_")
    assert {"val_i2t_R@1", "val_t2i_IR_R@10", "val_i2t_NCS@5", "val_t2i_SR@1", "val_i2t_CS@2", "val_t2i_CS@12",
            "val_i2t_map", "val_t2i_medr"} <= set(flat)
    for key, value in flat.items():
        np.testing.assert_allclose(history.history[key][-1], value, rtol=1e-6, atol=1e-9, err_msg=key)

    # Keras' TensorBoard callback wrote the "val_" figures to its validation writer, without the prefix.
    events = _events(tmp_path / "logs" / "validation")
    for key, value in flat.items():
        tag = "epoch_" + key[len("val_"):]
        steps = [step for step, _ in events[tag]]
        assert steps == [0, 1], tag
        np.testing.assert_allclose(_scalar(events[tag][-1][1]), value, rtol=1e-6, atol=1e-6, err_msg=tag)
    rsum = sum(expected[d]["recall_vse"][k] for d in ("i2t", "t2i") for k in (1, 5, 10))
    np.testing.assert_allclose(_scalar(events["epoch_rsum"][-1][1]), rsum, rtol=1e-6)

    # The image summary: one grid per fixed query (captions 0 and 55: caption 0 of images 0 and 11), each step.
    captions = read_split(tiny_synthetic, "val", with_images=False).captions
    for j, caption_row in enumerate((0, 55)):
        written = events[f"retrieval_top5/query_{j}"]
        assert [step for step, _ in written] == [0, 1]
        value = written[-1][1]
        assert value.metadata.plugin_data.plugin_name == "images"
        width, height, png = tf.make_ndarray(value.tensor)
        grid = tf.io.decode_png(png).numpy()
        # 6 framed 16-px thumbnails (20 px each) and a 6-px gap.
        assert grid.shape == (20, 6 * 20 + 6, 3) and (int(width), int(height)) == (126, 20)
        descriptions = [v.metadata.summary_description for _, v in written if v.metadata.summary_description]
        assert descriptions and f'"{captions[caption_row]}"' in descriptions[-1]
        assert "True image rank" in descriptions[-1]

    lines = [json.loads(line) for line in (tmp_path / "evaluations.jsonl").read_text().splitlines()]
    assert [line["epoch"] for line in lines] == [1, 2]
    assert lines[-1]["val_i2t_NCS@1"] == pytest.approx(flat["val_i2t_NCS@1"], rel=1e-12)
    # kitm.study's validation curves read these lines as written (epoch 1-based, val_rsum).
    curve, problems = read_history(tmp_path / "evaluations.jsonl")
    assert problems == [] and sorted(curve) == [1, 2]
    np.testing.assert_allclose(curve[2], rsum, rtol=1e-6)


def test_own_writer_relevance_fn_called_once_and_every_n_epochs(trained, tiny_synthetic):
    history, other = trained["history"], trained["other"]
    assert len(history.history["sub_i2t_R@1"]) == 1  # evaluated after epoch 2 only
    # The captions of the first 10 images, in dataset order, were passed once.
    expected_captions = read_split(tiny_synthetic, "val", limit=10, with_images=False).captions
    assert trained["calls"] == [expected_captions]
    events = _events(trained["dir"] / "own")
    assert [step for step, _ in events["epoch_t2i_CS@10"]] == [1]
    assert not any(tag.startswith("retrieval_top") for tag in events)
    assert other.last_report["i2t"]["coherent_score"].keys() == {3, 10}
    sims = other._last_sims
    assert sims.shape == (10, 50)
    relevance = cider_relevance(expected_captions, 5)
    np.testing.assert_allclose(_scalar(events["epoch_i2t_NCS@5"][-1][1]),
                               evaluate(sims, relevance=relevance, ks=(1, 5))["i2t"]["ncs"][5], rtol=1e-6)
    # The main callback's first 10 images give the same similarity block.
    np.testing.assert_allclose(sims, trained["main"]._last_sims[:10, :50], atol=1e-6)
    # Re-evaluating reuses the kept relevance: relevance_fn is not called again.
    other.evaluate_now()
    assert len(trained["calls"]) == 1


def test_retrieval_grid_order_frames_and_rank_by_hand():
    callback = RetrievalEvaluation(None, captions_per_image=1, image_queries=1, top_k_images=2, log_dir="unused")
    # Caption 0 (image 0's) scores images [0.5, 0.9, 0.5, 0.1]: order 1, then the tie 0 and 2 by index -> 1, 0.
    sims = np.array([[0.5, 0, 0, 0], [0.9, 0, 0, 0], [0.5, 0, 0, 0], [0.1, 0, 0, 0]])
    thumbnails = np.stack([np.full((2, 2, 3), 10 * (i + 1), np.uint8) for i in range(4)])
    ((grid, description),) = callback.retrieval_grids(sims, thumbnails, ["a red circle", "b", "c", "d"])
    assert grid.shape == (6, 3 * 6 + 6, 3)
    tiles = [grid[:, 0:6], grid[:, 12:18], grid[:, 18:24]]
    assert [int(t[2, 2, 0]) for t in tiles] == [10, 20, 10]  # true image, then images 1 and 0
    assert tuple(tiles[0][0, 0]) == (90, 90, 90) and tuple(tiles[1][0, 0]) == (220, 50, 40)
    assert tuple(tiles[2][0, 0]) == (40, 200, 60)  # image 0 is the query's own: green
    assert (grid[:, 6:12] == 255).all()
    assert '"a red circle"' in description and "True image rank: 2 of 4" in description
    np.testing.assert_array_equal(RetrievalEvaluation(None, image_queries=3, captions_per_image=5)
                                  .query_captions(12), [0, 30, 55])


def test_flatten_report_keeps_the_launcher_names():
    sims = np.eye(4).repeat(2, axis=1)
    flat = flatten_report(evaluate(sims, captions_per_image=2, ks=(1, 2)), "")
    assert {"i2t_R@1", "i2t_IR_R@2", "t2i_R@2", "i2t_medr", "t2i_meanr", "i2t_map"} <= set(flat)
    assert flat["i2t_R@1"] == 100.0 and flat["i2t_IR_R@1"] == 50.0


def test_bad_arguments_and_relevance_of_the_wrong_shape(trained, val_truth):
    with pytest.raises(ValueError, match="every_epochs"):
        RetrievalEvaluation(None, every_epochs=0)
    with pytest.raises(ValueError, match="not both"):
        RetrievalEvaluation(None, relevance=np.zeros((5, 1)), relevance_fn=lambda c, n: None)
    with pytest.raises(ValueError, match="write_scalars=True needs a `log_dir`"):
        RetrievalEvaluation(None, write_scalars=True)
    with pytest.raises(ValueError, match="image_queries"):
        RetrievalEvaluation(None, image_queries=-1)
    callback = RetrievalEvaluation(trained["val"], relevance=val_truth.T)
    callback.set_model(trained["model"])
    with pytest.raises(ValueError, match=r"`relevance` has shape \(12, 60\).*pass relevance.T"):
        callback.evaluate_now()
