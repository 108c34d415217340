"""The evaluation settings declared once (kitm.eval.options): keywords and an options object give the same
figures, twins pass the object on, an unknown or misplaced setting is refused by name."""

import numpy as np
import pytest

from kitm.eval import MetricOptions, ReportOptions, build_report, build_report_per_query, evaluate, n_way_recall
from kitm.eval.evaluation import evaluate_per_query
from kitm.eval.nway import n_way_recall_per_query


@pytest.fixture(scope="module")
def scores():
    rng = np.random.default_rng(0)
    sims = rng.normal(size=(20, 40))
    relevance = rng.random((40, 20))
    return sims, relevance


def test_keywords_and_options_object_give_the_same_figures(scores):
    sims, relevance = scores
    by_keywords = evaluate(sims, relevance=relevance, captions_per_image=2, ks=(1, 3), include_gt=True)
    options = MetricOptions(captions_per_image=2, ks=(1, 3), include_gt=True)
    assert evaluate(sims, relevance=relevance, options=options) == by_keywords
    # keywords override the object's fields
    assert evaluate(sims, relevance=relevance, options=MetricOptions(captions_per_image=2, ks=(1, 5)),
                    ks=(1, 3), include_gt=True) == by_keywords
    assert evaluate_per_query(sims, relevance=relevance, options=options)[0] == by_keywords
    report = build_report(sims, relevance=relevance, captions_per_image=2, ks=(1, 3), cs_ks=(5,), fold_images=10)
    same = build_report_per_query(sims, relevance=relevance,
                                  options=ReportOptions(captions_per_image=2, ks=(1, 3), cs_ks=(5,),
                                                        fold_images=10))[0]
    assert report == same and report["cs_ks"] == [5] and "folds" in report
    assert report["all"]["i2t"]["recall"] == evaluate(sims, relevance=relevance, captions_per_image=2,
                                                      ks=(1, 3))["i2t"]["recall"]


def test_unknown_or_misplaced_settings_are_refused_by_name(scores):
    sims, _ = scores
    with pytest.raises(TypeError, match="'kss'.*the settings are captions_per_image, ks"):
        evaluate(sims, captions_per_image=2, kss=(1,))
    with pytest.raises(TypeError, match="'cs_ks'"):  # a report setting, not evaluate's
        evaluate(sims, captions_per_image=2, cs_ks=(5,))
    with pytest.raises(TypeError, match="must be a ReportOptions"):
        build_report(sims, options=MetricOptions(captions_per_image=2))


def test_n_way_recall_takes_its_twins_arguments(scores):
    sims, _ = scores
    per_query = n_way_recall_per_query(sims, 5, captions_per_image=2, seed=3, repeats=2)
    figures = n_way_recall(sims, 5, captions_per_image=2, seed=3, repeats=2)
    assert figures == {d: pytest.approx(float(np.mean(v))) for d, v in per_query.items()}
    with pytest.raises(TypeError, match="seeds"):
        n_way_recall(sims, 5, seeds=3)
