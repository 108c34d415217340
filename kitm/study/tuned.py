"""Configurations whose settings another study chose on validation: ``tuned_by`` and ``tuned_arm``.

A claims study should train each arm as it was tuned, and the registration should come before the choices are
known (otherwise the design could be bent to them). So the study that tests the claims names the tuning study
(``tuned_by = "studies/claims_tuning.toml"``) and, per configuration, the arm whose choice it trains
(``tuned_arm = "sam"``); its own ``flags`` come after the chosen configuration's (a later flag overrides an
earlier one: another world's ``--data_dir``, another relevance source)::

    [[configuration]]
    name = "w2.sam"
    tuned_arm = "sam"
    flags = ["--data_dir=tfrecords/claims_features_w2"]

:func:`resolve` reads the tuning study's runs (its ``out_dir``, as ``--report_only`` would) and applies its
``[[tuning]]`` rule (:func:`kitm.study.tuning.choose`). A configuration whose arm is not chosen yet (a run of the
grid missing) *waits*: the study neither runs nor reports it, judges no claim that compares it, and says so; it
runs on a later invocation, once the grid is complete. A choice cannot change afterwards unless the tuning study's results change, and then the runs
already made are refused as started by another command (kitm.study.runs, ``stale``).

The two studies must share ``common_flags`` and ``pinned_flags``: the chosen flags were tuned on top of the tuning
study's common flags, so on other common flags they would be another configuration than the one chosen.
"""

from __future__ import annotations

import dataclasses

from kitm.study.results import collect, values_by_configuration
from kitm.study.runs import plan_runs
from kitm.study.spec import SpecError, StudySpec, load_spec
from kitm.study.tuning import choices


@dataclasses.dataclass(frozen=True)
class TunedConfiguration:
    configuration: str
    arm: str
    tuned_by: str  # the tuning study's spec
    chosen: str | None  # the tuning study's configuration; None while the arm waits
    reason: str  # the tuning rule's reason, or why it waits

    @property
    def waiting(self) -> bool:
        return self.chosen is None

    def as_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def resolve(spec: StudySpec) -> tuple[StudySpec, tuple[TunedConfiguration, ...]]:
    """`spec` with each tuned configuration's flags resolved (the chosen configuration's, then its own), and a
    record per tuned configuration (module docstring). A spec without ``tuned_arm`` comes back unchanged."""
    tuned = [(i, c) for i, c in enumerate(spec.configurations) if c.tuned_arm is not None]
    if not tuned:
        return spec, ()
    try:
        tuning_spec = load_spec(spec.tuned_by)
    except SpecError as error:
        raise SpecError(f"{spec.path}: tuned_by: {error}") from None
    for key in ("common_flags", "pinned_flags"):
        if getattr(tuning_spec, key) != getattr(spec, key):
            raise SpecError(f"{spec.path}: tuned_by: {tuning_spec.path}'s {key} differ from this spec's "
                            f"({list(getattr(tuning_spec, key))} against {list(getattr(spec, key))}); its choices "
                            "were made on its own, so the two studies must share them.")
    arms = {arm.arm: arm for arm in tuning_spec.tuning}
    for i, configuration in tuned:
        if configuration.tuned_arm not in arms:
            raise SpecError(f"{spec.path}: configuration[{i}].tuned_arm: {configuration.tuned_arm!r} is not a "
                            f"[[tuning]] arm of {tuning_spec.path} (its arms: {', '.join(arms) or 'none'}).")
    plans = plan_runs(tuning_spec, tuning_spec.out_dir, tuning_spec.configuration_names, tuning_spec.seeds)
    results = [collect(plan, tuning_spec.evaluation.split) for plan in plans]
    found = {choice.arm.arm: choice for choice in
             choices(tuning_spec, values_by_configuration(results, tuning_spec.configuration_names))}
    configurations, records = list(spec.configurations), []
    for i, configuration in tuned:
        choice = found[configuration.tuned_arm]
        if choice.chosen is not None:
            chosen_flags = tuning_spec.configuration(choice.chosen).flags
            configurations[i] = dataclasses.replace(configuration, flags=(*chosen_flags, *configuration.flags))
            reason = choice.reason
        else:
            reason = f"waits for {tuning_spec.path}'s arm {configuration.tuned_arm!r}: {choice.reason}"
        records.append(TunedConfiguration(configuration.name, configuration.tuned_arm, str(tuning_spec.path),
                                          choice.chosen, reason))
    return dataclasses.replace(spec, configurations=tuple(configurations)), tuple(records)


def waiting(records: tuple[TunedConfiguration, ...]) -> frozenset[str]:
    """The configurations whose arm is not chosen yet."""
    return frozenset(record.configuration for record in records if record.waiting)


def tuned_markdown(records: tuple[TunedConfiguration, ...]) -> list[str]:
    """The report's section: each tuned configuration, the arm, what the tuning study chose and why."""
    if not records:
        return []
    lines = ["## Configurations chosen on validation by another study", "",
             f"Each configuration trains its arm's choice in {records[0].tuned_by} (its flags, then the "
             "configuration's own; kitm.study.tuned).", "",
             "| configuration | arm | chosen | why |", "|---|---|---|---|"]
    lines += [f"| {r.configuration} | {r.arm} | {r.chosen or '(waits)'} | {r.reason} |" for r in records]
    return lines + [""]
