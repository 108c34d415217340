"""kitm.serving.export: versions never overwritten, and the feature-input signature checks its width inside the graph
(served in a process without kitm)."""

import json
import textwrap

import numpy as np
import pytest


FEATURES = textwrap.dedent("""
    import sys, json, numpy as np
    import tensorflow as tf, tensorflow_text  # noqa: F401
    loaded = tf.saved_model.load(sys.argv[1])
    features = np.load(sys.argv[2])
    embeddings = loaded.signatures["encode_image"](features=tf.constant(features))["embeddings"].numpy()
    try:
        loaded.signatures["encode_image"](features=tf.constant(features[:, :5]))
        wrong = "accepted"
    except tf.errors.InvalidArgumentError as failure:
        wrong = str(failure)
    assert not any(name == "kitm" or name.startswith("kitm.") for name in sys.modules), "kitm was imported"
    np.save(sys.argv[3], embeddings)
    print(json.dumps({"wrong": wrong}))
""")


def test_versions_never_overwrite_and_feature_widths_are_checked_in_the_graph(tmp_path, run_python):
    import keras
    import tensorflow as tf

    from kitm.eval.run_dir import default_export_dir
    from kitm.layers import CaptionTokenizer, FeatureMLP
    from kitm.models import DualEncoder
    from kitm.serving import export_new_version, export_saved_model, latest_version_dir

    keras.utils.set_random_seed(2)
    tokenizer = CaptionTokenizer(["red", "circle", "square"], 8, name="tokenizer")
    # A bag-of-words text tower: a GRU's graph costs seconds to trace and export, and nothing here needs one.
    text = keras.Sequential([keras.layers.Embedding(tokenizer.vocabulary_size, 8), keras.layers.GlobalAveragePooling1D()])
    model = DualEncoder(FeatureMLP(width=16), text, embedding_dim=6)
    model({"image": tf.zeros([1, 8]), "tokens": tf.zeros([1, 8], tf.int32)})
    base = tmp_path / "run" / "export"
    options = dict(image_mode="feature", feature_dim=8)

    assert export_new_version(model, tokenizer, base, **options) == str(base / "1")
    stamp = (base / "1" / "saved_model.pb").stat().st_mtime_ns
    (base / "7").mkdir()  # whatever numbers exist, the next one is above them all
    (base / "7" / "keep.txt").write_text("an operator's version")
    assert export_new_version(model, tokenizer, base, **options) == str(base / "8")
    assert (base / "1" / "saved_model.pb").stat().st_mtime_ns == stamp and (base / "7" / "keep.txt").is_file()
    assert sorted(p.name for p in base.iterdir()) == ["1", "7", "8"]  # no temporary directories left
    assert latest_version_dir(base) == base / "8" and default_export_dir(tmp_path / "run") == base / "8"
    with pytest.raises(FileExistsError, match="never overwritten"):
        export_saved_model(model, tokenizer, base / "1", **options)

    features = np.random.default_rng(0).normal(size=(3, 8)).astype(np.float32)
    np.save(tmp_path / "features.npy", features)
    result = run_python(FEATURES, base / "8", tmp_path / "features.npy", tmp_path / "served.npy", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    wrong = json.loads(result.stdout.strip().splitlines()[-1])["wrong"]
    assert "encode_image: features must be float32 [N, 8]" in wrong and "got width] [5]" in wrong.replace("\n", " ")
    np.testing.assert_allclose(np.load(tmp_path / "served.npy"), model.encode_image(features).numpy(), atol=1e-5)

