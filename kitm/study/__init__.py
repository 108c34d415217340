"""kitm.study: multi-seed comparison of launcher configurations, with intervals, paired tests and claim verdicts.

``python -m kitm.study --spec=<file.toml>`` runs every (configuration, seed) of a spec as its own
``python -m kitm.launch`` process, scores each run with ``python -m kitm.eval``, and writes ``report.md``,
``report.json`` and ``plots/`` into the study folder. The modules, one job each:

- :mod:`kitm.study.spec`: the TOML spec format and its validation (:mod:`kitm.study.spec_checks`: its type checks;
  :mod:`kitm.study.claim_spec`: its ``[[claim]]`` tables);
- :mod:`kitm.study.tuning`: each arm's configuration chosen on validation by the spec's rule;
  :mod:`kitm.study.tuned`: configurations that train the arm another study chose;
- :mod:`kitm.study.commands`: the launcher and kitm.eval command lines, their environment, flag overrides;
- :mod:`kitm.study.runs`: a run's folder, status file and state; :mod:`kitm.study.runner`: running them;
  :mod:`kitm.study.collect`: bringing finished runs from another checkout; :mod:`kitm.study.provenance`: the git
  commit that trained a run;
- :mod:`kitm.study.results`: what each run left; :mod:`kitm.study.metrics`: its figures and their orientation;
- :mod:`kitm.study.statistics`: t intervals, paired t and Wilcoxon tests, their power (numpy/scipy only);
- :mod:`kitm.study.bootstrap`: the per-query paired bootstrap within runs (the test split's share of the spread);
  :mod:`kitm.study.per_query_files`: the compact per-query files it reads;
- :mod:`kitm.study.dose_response`, :mod:`kitm.study.validation_curves`, :mod:`kitm.study.agreement`: a gain
  over levels of the data, validation per epoch, relevance sources against the truth;
- :mod:`kitm.study.claims`: verdict rules (against 0, the tolerance, the paper's effect and a truth control); :mod:`kitm.study.analysis`: all the numbers of a report;
- :mod:`kitm.study.report` (report.md), :mod:`kitm.study.plots` and :mod:`kitm.study.claims_figure`,
  :mod:`kitm.study.report_files` (writes them and report.json): the report files; :mod:`kitm.study.cli`: the command.

Nothing here imports TensorFlow or absl: the training happens in the subprocesses.
"""

from kitm.study.bootstrap import paired_bootstrap
from kitm.study.claims import claim_outcome, claim_verdict, improves_verdict, keeps_verdict
from kitm.study.spec import SpecError, StudySpec, load_spec
from kitm.study.statistics import (
    Interval,
    PairedComparison,
    detectable_effect,
    paired_comparison,
    paired_t_power,
    seeds_needed,
    t_interval,
)

__all__ = [
    "Interval",
    "PairedComparison",
    "SpecError",
    "StudySpec",
    "claim_outcome",
    "claim_verdict",
    "detectable_effect",
    "improves_verdict",
    "keeps_verdict",
    "load_spec",
    "paired_bootstrap",
    "paired_comparison",
    "paired_t_power",
    "seeds_needed",
    "t_interval",
]
