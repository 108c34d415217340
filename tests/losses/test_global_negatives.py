"""Global negatives (kitm.losses.global_batch): the per-replica blocks of the contrastive losses put together are the
one-device whole-batch terms (replicas emulated by hand, the oracle being the square functions); the scaling of a
replica's share; one replica changes nothing; losses that cannot gather refuse. The gathers under a real
MirroredStrategy, with gradients, are checked by benchmarks/bench_global_negatives.py --check
(tests/benchmarks/test_global_negatives_check.py)."""

import numpy as np
import pytest
import tensorflow as tf

from kitm import losses
from kitm.losses import contrastive
from kitm.losses.global_batch import check_negatives, replica_share


def _batch(rows=8, dim=5, seed=0):
    rng = np.random.default_rng(seed)
    image = rng.normal(size=(rows, dim))
    text = rng.normal(size=(rows, dim))
    image /= np.linalg.norm(image, axis=1, keepdims=True)
    text /= np.linalg.norm(text, axis=1, keepdims=True)
    image_index = rng.permutation(np.repeat(np.arange(rows // 2), 2)).astype(np.int32)
    relevance = rng.uniform(size=(rows, rows))
    return image, text, image_index, relevance


def _blocks(image, text, image_index, replica, local):
    """Replica `replica`'s blocks, as GlobalBatch builds them from the gathered rows."""
    mine = slice(replica * local, (replica + 1) * local)
    rows = image[mine] @ text.T
    columns = image @ text[mine].T
    positives = image_index[:, None] == image_index[None, :]
    np.fill_diagonal(positives, True)
    return rows, columns, positives[mine], positives[:, mine]


@pytest.mark.parametrize("replicas", [1, 2, 4])
def test_the_replicas_blocks_put_together_are_the_whole_batch_terms(replicas):
    image, text, image_index, relevance = _batch()
    similarity = image @ text.T
    local = len(image) // replicas
    expected = {
        "infonce": contrastive.info_nce_terms(similarity, 3.0, image_index=image_index),
        "graded": contrastive.graded_info_nce_terms(similarity, relevance, 3.0, tau_relevance=0.2,
                                                    image_index=image_index),
        "siglip": contrastive.siglip_terms(similarity, 3.0, -1.0, image_index=image_index),
    }
    got = {name: ([], []) for name in expected}
    for replica in range(replicas):
        rows, columns, row_positives, column_positives = _blocks(image, text, image_index, replica, local)
        mine = slice(replica * local, (replica + 1) * local)
        parts = {
            "infonce": contrastive.info_nce_block_terms(rows, columns, 3.0, row_positives, column_positives),
            "graded": contrastive.graded_info_nce_block_terms(rows, columns, relevance[mine], relevance[:, mine], 3.0,
                                                              row_positives, column_positives, tau_relevance=0.2),
            "siglip": contrastive.siglip_block_terms(rows, columns, 3.0, -1.0, row_positives, column_positives),
        }
        for name, (i2t, t2i) in parts.items():
            got[name][0].append(i2t.numpy())
            got[name][1].append(t2i.numpy())
    for name, (i2t, t2i) in expected.items():
        np.testing.assert_allclose(np.concatenate(got[name][0]), i2t.numpy(), atol=1e-12, err_msg=name)
        np.testing.assert_allclose(np.concatenate(got[name][1]), t2i.numpy(), atol=1e-12, err_msg=name)


@pytest.mark.parametrize("make", [
    lambda negatives: losses.InfoNCELoss(negatives=negatives),
    lambda negatives: losses.SigLIPLoss(negatives=negatives),
    lambda negatives: losses.GradedInfoNCELoss(0.1, negatives=negatives),
    lambda negatives: losses.TripletLoss(negatives=negatives),
    lambda negatives: losses.SAMLoss(3.0, negatives=negatives),
], ids=["infonce", "siglip", "graded_infonce", "triplet", "sam"])
def test_global_negatives_on_one_replica_are_the_local_loss_and_round_trip(make):
    image, text, image_index, relevance = _batch()
    y_true = {"image_index": image_index, "relevance": relevance.astype(np.float32)}
    y_pred = {"image": image.astype(np.float32), "text": text.astype(np.float32)}
    local, global_ = make("local"), make("global")
    assert not local.global_negatives and global_.global_negatives
    np.testing.assert_allclose(global_(y_true, y_pred).numpy(), local(y_true, y_pred).numpy(), rtol=1e-6)
    config = global_.get_config()
    assert config["negatives"] == "global"
    assert type(global_).from_config(config).negatives == "global"


def test_a_loss_that_cannot_gather_refuses_global_negatives_by_name():
    class Stateful(losses.RetrievalLoss):
        pass

    with pytest.raises(ValueError, match="Stateful cannot take negatives='global'.*negatives='local'"):
        Stateful(name="stateful", negatives="global")
    with pytest.raises(ValueError, match="negatives must be one of"):
        check_negatives("everyone")
    with pytest.raises(ValueError, match="negatives must be one of"):
        losses.InfoNCELoss(negatives="all")


def test_a_replica_share_of_a_global_sum_is_not_divided():
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])  # one replica: nothing divided either way
    with strategy.scope():
        assert float(replica_share(tf.constant(6.0), "sum", True)) == 6.0

    class Two:
        num_replicas_in_sync = 2

    import unittest.mock

    with unittest.mock.patch.object(tf.distribute, "get_strategy", lambda: Two()):
        assert float(replica_share(tf.constant(6.0), "sum", True)) == 6.0  # shares add up to the global sum
        assert float(replica_share(tf.constant(6.0), "sum", False)) == 3.0  # Keras' mean over replicas
        assert float(replica_share(tf.constant(6.0), "sum_over_batch_size", True)) == 3.0  # mean over B rows
        assert float(replica_share(tf.constant(6.0), "none", True)) == 6.0
