"""A study spec: a TOML file naming the launcher configurations, the seeds, the evaluation and the claims.

Parsed with the standard library's :mod:`tomllib` and validated here; every problem is a :class:`SpecError`
naming the file and the key (``studies/claims.toml: configuration[2].flags[0]: ...``). The format::

    name = "claims"                   # required; a title
    out_dir = "studies/claims"        # default studies/<name>; relative to the current directory; --out overrides
    seeds = [0, 1, 2]                 # required; distinct integers >= 0
    baseline = "triplet"              # default: the first configuration
    common_flags = ["--dataset=synthetic", "--synthetic_num_scenes=1500", "--epochs=8",
                    "--data_dir=tfrecords/synthetic_claims"]   # before every configuration's flags
    pinned_flags = ["--fused_update=false"]   # optional: settings whose launcher default changed after the study's
                                      # runs began, each at the value those runs had by default (below)
    tuned_by = "studies/claims_tuning.toml"  # optional: the study whose [[tuning]] choices the configurations
                                      # with a `tuned_arm` take (same common_flags and pinned_flags as this one)
    metrics = ["i2t_R@1", "t2i_NCS@10"]  # optional: the report's tables and plots (default: R@K, NCS@K, SR@K,
                                         # CS@K both ways and rsum, those the runs have; kitm.study.metrics)

    [evaluation]                      # how every run is scored: python -m kitm.eval --run_dir=<run> ...
    split = "test"                    # default test
    relevance = "truth"               # --relevance of kitm.eval (none, truth, cider, sbert, spice); default none
    extra_args = []                   # more kitm.eval arguments (not --run_dir, --out, --split, --relevance)

    [environment]                     # optional: variables set for every launcher and kitm.eval process
    CUDA_VISIBLE_DEVICES = ""

    [[configuration]]                 # one or more; name: letters, digits, '_', '-', '.' (it names a folder)
    name = "triplet"
    flags = ["--loss=triplet"]

    [[configuration]]
    name = "sam"
    flags = ["--flagfile=launch/sam.flags", "--dataset=synthetic", "--relevance=truth"]
    seeds = [0, 1]                    # optional: run only these of the study's seeds (a side arm that needs
                                      # fewer); default every seed. --seeds still narrows it.

    [[configuration]]                 # a configuration another study chose on validation (kitm.study.tuned):
    name = "w2.sam"
    tuned_arm = "sam"                 # an arm of the `tuned_by` spec's [[tuning]]: its chosen configuration's
    flags = ["--data_dir=tfrecords/w2"]  # flags, then these (a later flag overrides an earlier one)

    [[prepare]]                       # optional, any number: run once, in order, before any run, unless
    creates = "tfrecords/claims/dataset.json"   # this path exists (e.g. build the world every run then shares)
    command = ["-m", "kitm.data.build", "--dataset=synthetic", "--out=tfrecords/claims"]  # after the interpreter

    [agreement]                       # optional: Kendall tau-b of relevance sources against a reference
    data_dir = "tfrecords/claims"     # a built dataset (the study's world), read once (kitm.study.agreement)
    split = "test"                    # default test
    sources = ["cider", "sbert"]      # default these two
    reference = "truth"               # default truth

    [[dose_response]]                 # optional: a gain against a property of the data (kitm.study.dose_response)

    [[tuning]]                        # optional: choose an arm's configuration on validation by a fixed rule
    arm = "triplet"                   # (kitm.study.tuning; the report's "Tuning" section)
    configurations = ["triplet", "triplet_m0.1"]   # the arm's grid, its default first
    metric = "rsum"                   # default rsum
    keep_default_within = 0.5         # default 0.5: the default stays within this of the best mean

    [[claim]]                         # optional, any number
    name = "SAM improves semantic metrics while keeping R@K"
    configuration = "sam"
    baseline = "triplet"              # default: the study's baseline
    improves = ["i2t_NCS@10", "t2i_NCS@10"]
    keeps = ["i2t_R@1", "t2i_R@1"]
    keep_tolerance = 1.0              # in the metric's units (percent points); or one per metric:
                                      # keep_tolerance = {"i2t_R@1" = 1.0, "t2i_R@1" = 1.5} (quote keys with '@')
    paper_effect = {"i2t_NCS@10" = 3.1, "t2i_NCS@10" = 2.4}   # optional: the paper's own gain for (some of) the
                                      # 'improves' metrics, a number > 0 in the metric's units, as an improvement
                                      # (for medr/meanr: the fall in rank); fixed here before any run
    paper_effect_source = "Biten et al. 2022, Table 1"    # required with paper_effect: where the numbers come from
    truth_control = "sam_truth"       # optional: the same method trained on the world's exact relevance; if it
                                      # does not beat the claim's baseline, graded relevance cannot help here
    truth_control_metrics = ["i2t_NCS@10"]  # default: the claim's 'improves'

Verdicts on these keys: :mod:`kitm.study.claims`.

The launch command of a run is ``python -m kitm.launch <common_flags> <configuration flags> --seed=<s>
--run_dir=<out>/runs/<configuration>/seed_<s> --progress=false``. absl reads flags left to right, a later flag
overriding an earlier one, and expands ``--flagfile=`` in place: so a configuration's flagfile overrides the
common flags it repeats (``launch/sam.flags`` sets ``--dataset=f30k``: repeat ``--dataset=synthetic`` after it,
as above; :func:`kitm.study.commands.overridden_common_flags` warns about such overrides). ``--seed`` and
``--run_dir`` belong to the study and may not appear in the spec's flags. Flagfile paths are relative to the
current directory (normally the repository root), like the paths of the flags themselves.

``pinned_flags`` keep a study repeatable when a launcher default changes under it (kitm made its fastest correct
paths the defaults, issue 33): they go first in every launch command (so a configuration's own flags still
override them), and a run whose recorded command is the same without them is the same run, not stale, since it
ran when the pinned value was the default. Pin only the value the earlier runs really had by default.

Pin the synthetic world with a fresh ``--data_dir`` of the study's own. The launcher builds a world only where
none exists (``tfrecords/synthetic`` by default, whatever size an earlier run gave it: a 3000-scene demo world
silently replaces ``--synthetic_num_scenes=1500``), with the ``--seed`` of the first run that builds it; every
later run reuses it whatever its own seed. So a study's seeds vary training (data order, augmentation,
initialisation), not the world; the report names the world each run used and warns when the runs' worlds or
scene counts differ. A loss that needs other relevance rows (sentence embeddings, neighbours) needs a folder built
with them: put ``--data_dir`` in each configuration's flags then (same scene count; the same seed builds the same
scenes and captions), or leave it to the launcher, which picks ``tfrecords/synthetic_sbert`` and the like.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import tomllib
from collections.abc import Mapping

from kitm.eval.relevance_sources import RELEVANCE_SOURCES
from kitm.study.dose_response import DoseResponse, parse_dose_responses
from kitm.study.claim_spec import Claim, parse_claim
from kitm.study.spec_checks import SpecError, _Checker, _describe
from kitm.study.tuning import TuningArm, parse_tuning

# Flags the study sets on every launch and kitm.eval command; a spec that sets them would be silently overridden.
STUDY_LAUNCH_FLAGS = ("seed", "run_dir")
STUDY_EVAL_FLAGS = ("run_dir", "out", "split", "relevance", "progress", "no-progress", "sims")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_TOP_KEYS = {"name", "out_dir", "seeds", "baseline", "common_flags", "pinned_flags", "metrics", "evaluation",
             "environment", "configuration", "claim", "agreement", "prepare", "dose_response", "tuning", "tuned_by",
             "verdict_rules"}
_PREPARE_KEYS = {"creates", "command"}
_AGREEMENT_KEYS = {"data_dir", "split", "sources", "reference"}
_EVALUATION_KEYS = {"split", "relevance", "extra_args"}
_CONFIGURATION_KEYS = {"name", "flags", "seeds", "tuned_arm"}
_VERDICT_RULE_KEYS = {"collapse_threshold", "collapse_share", "random_effect"}


@dataclasses.dataclass(frozen=True)
class VerdictRules:
    """Rules a study registers beside the claims' own (the third claims study's, studies/claims_things.toml):

    - ``collapse_threshold`` (None: no rule): a run *collapsed* when its last epoch's mean pairwise cosine of the
      image embeddings (`collapse/image_cosine`, the collapse monitor's statistic in summary.json) is at least this;
      a claim whose configuration has collapsed in at least ``collapse_share`` of its runs (every world pooled)
      gets "does not hold: training collapses", its parts shown for information only;
    - ``random_effect``: beside each pooled verdict (the worlds as fixed blocks), the interval with the world as a
      random effect (the mean of the worlds' mean differences, a t interval on W - 1 degrees of freedom).
    """

    collapse_threshold: float | None = None
    collapse_share: float = 0.5
    random_effect: bool = False


@dataclasses.dataclass(frozen=True)
class Configuration:
    name: str
    flags: tuple[str, ...]
    seeds: tuple[int, ...] | None = None  # None: every seed of the study
    # An arm of the `tuned_by` study: until kitm.study.tuned resolves it, `flags` are only this configuration's
    # own; resolved, the chosen configuration's flags come first.
    tuned_arm: str | None = None

    def runs_seed(self, seed: int) -> bool:
        return self.seeds is None or seed in self.seeds


@dataclasses.dataclass(frozen=True)
class Evaluation:
    split: str = "test"
    relevance: str = "none"
    extra_args: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Prepare:
    creates: pathlib.Path
    command: tuple[str, ...]

    def as_dict(self) -> dict[str, object]:
        return {"creates": str(self.creates), "command": list(self.command)}


@dataclasses.dataclass(frozen=True)
class Agreement:
    data_dir: pathlib.Path
    split: str = "test"
    sources: tuple[str, ...] = ("cider", "sbert")
    reference: str = "truth"

    def as_dict(self) -> dict[str, object]:
        return {"data_dir": str(self.data_dir), "split": self.split, "sources": list(self.sources),
                "reference": self.reference}


@dataclasses.dataclass(frozen=True)
class StudySpec:
    path: pathlib.Path
    name: str
    out_dir: pathlib.Path
    seeds: tuple[int, ...]
    baseline: str
    common_flags: tuple[str, ...]
    evaluation: Evaluation
    configurations: tuple[Configuration, ...]
    claims: tuple[Claim, ...] = ()
    metrics: tuple[str, ...] | None = None
    environment: Mapping[str, str] = dataclasses.field(default_factory=dict)
    agreement: Agreement | None = None
    prepare: tuple[Prepare, ...] = ()
    dose_responses: tuple[DoseResponse, ...] = ()
    pinned_flags: tuple[str, ...] = ()
    tuning: tuple[TuningArm, ...] = ()
    tuned_by: pathlib.Path | None = None
    verdict_rules: VerdictRules = VerdictRules()

    def configuration(self, name: str) -> Configuration:
        for configuration in self.configurations:
            if configuration.name == name:
                return configuration
        raise KeyError(name)

    @property
    def configuration_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.configurations)

    def as_dict(self) -> dict[str, object]:
        return {"path": str(self.path), "name": self.name, "out_dir": str(self.out_dir), "seeds": list(self.seeds),
                "baseline": self.baseline, "common_flags": list(self.common_flags),
                "pinned_flags": list(self.pinned_flags),
                "evaluation": {"split": self.evaluation.split, "relevance": self.evaluation.relevance,
                               "extra_args": list(self.evaluation.extra_args)},
                "environment": dict(self.environment),
                "configurations": [{"name": c.name, "flags": list(c.flags),
                                    "seeds": None if c.seeds is None else list(c.seeds), "tuned_arm": c.tuned_arm}
                                   for c in self.configurations],
                "tuned_by": None if self.tuned_by is None else str(self.tuned_by),
                "claims": [claim.as_dict() for claim in self.claims],
                "agreement": None if self.agreement is None else self.agreement.as_dict(),
                "prepare": [step.as_dict() for step in self.prepare],
                "metrics": None if self.metrics is None else list(self.metrics),
                "dose_responses": [dose.as_dict() for dose in self.dose_responses],
                "tuning": [arm.as_dict() for arm in self.tuning]}


def load_spec(path: str | pathlib.Path) -> StudySpec:
    """Read and validate the study spec at `path`; raises SpecError naming the file and key of any problem."""
    path = pathlib.Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError(f"{path}: no such spec file.") from None
    except (OSError, UnicodeDecodeError) as error:
        raise SpecError(f"{path}: cannot be read: {error}") from None
    except tomllib.TOMLDecodeError as error:
        raise SpecError(f"{path}: not valid TOML: {error}") from None
    return parse_spec(raw, path)


def parse_spec(raw: Mapping[str, object], path: pathlib.Path) -> StudySpec:
    """Validate a parsed TOML document (see the module docstring); `path` names the file in errors."""
    check = _Checker(path)
    check.table(raw, "(top level)", _TOP_KEYS)
    check.require(raw, "", ("name", "seeds", "configuration"))
    name = check.string(raw["name"], "name")
    out_dir = pathlib.Path(check.string(raw.get("out_dir", f"studies/{name}"), "out_dir"))
    seeds = _parse_seeds(check, raw["seeds"])
    common_flags = check.flags(raw.get("common_flags", []), "common_flags", STUDY_LAUNCH_FLAGS)
    pinned_flags = check.flags(raw.get("pinned_flags", []), "pinned_flags", STUDY_LAUNCH_FLAGS + ("flagfile",))
    evaluation = _parse_evaluation(check, raw.get("evaluation", {}))

    environment_raw = raw.get("environment", {})
    environment_raw = check.table(environment_raw, "environment",
                                  set(environment_raw) if isinstance(environment_raw, Mapping) else set())
    environment = {str(key): _environment_value(check, key, value) for key, value in environment_raw.items()}

    configurations = _parse_configurations(check, raw["configuration"], seeds)
    names = [c.name for c in configurations]
    baseline = check.string(raw.get("baseline", names[0]), "baseline")
    if baseline not in names:
        raise check.fail("baseline", f"{baseline!r} is not a configuration (configurations: {', '.join(names)}).")

    metrics = None
    if "metrics" in raw:
        metrics = check.strings(raw["metrics"], "metrics")
        if not metrics:
            raise check.fail("metrics", "must list at least one metric (or be left out for the default list).")

    claims = tuple(parse_claim(check, i, entry, names, baseline) for i, entry in enumerate(raw.get("claim", [])))
    if len({claim.name for claim in claims}) != len(claims):
        raise check.fail("claim", "two claims have the same name.")
    agreement = _parse_agreement(check, raw["agreement"]) if "agreement" in raw else None
    prepare = _parse_prepare(check, raw.get("prepare", []))
    dose_responses = parse_dose_responses(check, raw.get("dose_response", []), names)
    tuning = parse_tuning(check, raw.get("tuning", []),
                          {c.name: frozenset(seeds if c.seeds is None else c.seeds) for c in configurations})
    _check_pairable(check, configurations, seeds, claims, dose_responses)
    tuned_by = pathlib.Path(check.string(raw["tuned_by"], "tuned_by")) if "tuned_by" in raw else None
    for i, configuration in enumerate(configurations):
        if configuration.tuned_arm is not None and tuned_by is None:
            raise check.fail(f"configuration[{i}].tuned_arm", "needs the top-level `tuned_by`: the spec of the "
                                                              "study whose [[tuning]] arm it names.")
    return StudySpec(path=path, name=name, out_dir=out_dir, seeds=tuple(seeds), baseline=baseline,
                     common_flags=common_flags, evaluation=evaluation, configurations=tuple(configurations),
                     claims=claims, metrics=metrics, environment=environment, agreement=agreement,
                     prepare=tuple(prepare), dose_responses=dose_responses, pinned_flags=pinned_flags,
                     tuning=tuning, tuned_by=tuned_by,
                     verdict_rules=_parse_verdict_rules(check, raw.get("verdict_rules", {})))


def _parse_verdict_rules(check: _Checker, raw: object) -> VerdictRules:
    """The optional [verdict_rules] table (`VerdictRules`): shares and thresholds in (0, 1], a bool."""
    raw = check.table(raw, "verdict_rules", _VERDICT_RULE_KEYS)
    values = {}
    for key in ("collapse_threshold", "collapse_share"):
        if key in raw:
            value = check.number(raw[key], f"verdict_rules.{key}")
            if not 0.0 < value <= 1.0:
                raise check.fail(f"verdict_rules.{key}", f"must be in (0, 1]; got {value}.")
            values[key] = float(value)
    if "random_effect" in raw:
        if not isinstance(raw["random_effect"], bool):
            raise check.fail("verdict_rules.random_effect",
                             f"must be true or false; got {_describe(raw['random_effect'])}.")
        values["random_effect"] = raw["random_effect"]
    return VerdictRules(**values)


def _parse_seeds(check: _Checker, seeds: object, key: str = "seeds") -> list[int]:
    """`seeds` (or the list at `key`): a non-empty list of distinct integers >= 0."""
    if not isinstance(seeds, list) or not seeds:
        raise check.fail(key, f"must be a non-empty list of integers >= 0; got {_describe(seeds)}.")
    for i, seed in enumerate(seeds):
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise check.fail(f"{key}[{i}]", f"must be an integer >= 0; got {_describe(seed)}.")
    if len(set(seeds)) != len(seeds):
        raise check.fail(key, f"repeats a seed: {seeds}.")
    return seeds


def _parse_evaluation(check: _Checker, entry: object) -> Evaluation:
    """The [evaluation] table: split, a relevance source, and extra flags of kitm.eval (not the study's own)."""
    evaluation_raw = check.table(entry, "evaluation", _EVALUATION_KEYS)
    relevance = check.string(evaluation_raw.get("relevance", "none"), "evaluation.relevance")
    if relevance not in RELEVANCE_SOURCES:
        raise check.fail("evaluation.relevance", f"{relevance!r} is not one of {', '.join(RELEVANCE_SOURCES)}.")
    return Evaluation(split=check.string(evaluation_raw.get("split", "test"), "evaluation.split"),
                      relevance=relevance,
                      extra_args=check.flags(evaluation_raw.get("extra_args", []), "evaluation.extra_args",
                                             STUDY_EVAL_FLAGS))


def _parse_configurations(check: _Checker, configurations_raw: object,
                          study_seeds: list[int]) -> list[Configuration]:
    """The [[configuration]] tables: each a distinct name, its launcher flags (not the study's own) and optionally
    the subset of the study's seeds it runs."""
    if not isinstance(configurations_raw, list) or not configurations_raw:
        raise check.fail("configuration", "must be one or more [[configuration]] tables.")
    configurations = []
    for i, entry in enumerate(configurations_raw):
        key = f"configuration[{i}]"
        entry = check.table(entry, key, _CONFIGURATION_KEYS)
        check.require(entry, key, ("name",))
        seeds = None
        if "seeds" in entry:
            seeds = _parse_seeds(check, entry["seeds"], f"{key}.seeds")
            outside = sorted(set(seeds) - set(study_seeds))
            if outside:
                # A seed the study never runs would sit in the spec unused: say so rather than ignore it.
                raise check.fail(f"{key}.seeds", f"seeds {outside} are not among the study's seeds {study_seeds}.")
        configuration = Configuration(name=check.string(entry["name"], f"{key}.name", pattern=_NAME),
                                      flags=check.flags(entry.get("flags", []), f"{key}.flags", STUDY_LAUNCH_FLAGS),
                                      seeds=None if seeds is None else tuple(seeds),
                                      tuned_arm=(check.string(entry["tuned_arm"], f"{key}.tuned_arm")
                                                 if "tuned_arm" in entry else None))
        if any(c.name == configuration.name for c in configurations):
            raise check.fail(f"{key}.name", f"{configuration.name!r} names two configurations.")
        configurations.append(configuration)
    return configurations


def _check_pairable(check: _Checker, configurations: list[Configuration], study_seeds: list[int],
                    claims: tuple[Claim, ...], dose_responses: tuple[DoseResponse, ...]) -> None:
    """Every comparison the spec asks for (a claim against its baseline and truth control, a dose-response arm at
    each level) must share two seeds, the fewest a paired interval needs (or the study's one): with
    configurations' own `seeds` it could otherwise never be decided, and would stay inconclusive without saying
    why."""
    own = {c.name: set(c.seeds if c.seeds is not None else study_seeds) for c in configurations}
    pairs = []
    for i, claim in enumerate(claims):
        pairs.append((f"claim[{i}]", claim.configuration, claim.baseline))
        pairs += [(f"claim[{i}].blocks[{j}]", c, b) for j, (_, c, b) in enumerate(claim.blocks)]
        if claim.truth_control is not None:
            pairs.append((f"claim[{i}].truth_control", claim.truth_control, claim.baseline))
    for i, block in enumerate(dose_responses):
        for j, arm in enumerate(block.arms):
            pairs += [(f"dose_response[{i}].arm[{j}]", c, b) for c, b in zip(arm.configurations, arm.baselines)]
    needed = min(2, len(study_seeds))  # a one-seed smoke study is the user's choice, not a spec error
    for key, configuration, baseline in pairs:
        shared = own[configuration] & own[baseline]
        if len(shared) < needed:
            raise check.fail(key, f"{configuration!r} and {baseline!r} share {len(shared)} seed(s) "
                                  f"({sorted(shared)}); a paired comparison needs 2 or more (their `seeds`).")


def _parse_agreement(check: _Checker, entry: object) -> Agreement:
    """The [agreement] table: the dataset whose split is compared, the relevance sources and their reference."""
    agreement_raw = check.table(entry, "agreement", _AGREEMENT_KEYS)
    check.require(agreement_raw, "agreement", ("data_dir",), ": the dataset whose split is compared")
    sources = check.strings(agreement_raw.get("sources", ["cider", "sbert"]), "agreement.sources")
    reference = check.string(agreement_raw.get("reference", "truth"), "agreement.reference")
    for key, value in [("reference", reference), *(("sources", source) for source in sources)]:
        if value not in RELEVANCE_SOURCES or value == "none":
            raise check.fail(f"agreement.{key}", f"{value!r} is not a relevance source "
                                                 f"({', '.join(s for s in RELEVANCE_SOURCES if s != 'none')}).")
    return Agreement(data_dir=pathlib.Path(check.string(agreement_raw["data_dir"], "agreement.data_dir")),
                     split=check.string(agreement_raw.get("split", "test"), "agreement.split"),
                     sources=sources, reference=reference)


def _parse_prepare(check: _Checker, entries: object) -> list[Prepare]:
    """The [[prepare]] tables: each the file it creates and the command (a non-empty list) that creates it."""
    prepare = []
    for i, entry in enumerate(entries):
        key = f"prepare[{i}]"
        entry = check.table(entry, key, _PREPARE_KEYS)
        check.require(entry, key, ("creates", "command"))
        command = check.strings(entry["command"], f"{key}.command")
        if not command:
            raise check.fail(f"{key}.command", "is empty.")
        prepare.append(Prepare(creates=pathlib.Path(check.string(entry["creates"], f"{key}.creates")),
                               command=command))
    return prepare


def _environment_value(check: _Checker, key: str, value: object) -> str:
    if not isinstance(value, str):
        raise check.fail(f"environment.{key}", f"must be a string; got {_describe(value)}.")
    return value
