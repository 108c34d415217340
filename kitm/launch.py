"""`python -m kitm.launch --flagfile=launch/demo.flags`: flags -> an experiment configuration -> `kitm.experiment.run`.

The only module of kitm that knows about absl flags, and all it does is translate them: its flags are generated
from the settings' declarations in `kitm.experiment.config` (one flag per setting, the same name, default and help;
`--helpfull` lists them), the flags given on the command line or in a flagfile are the settings given explicitly
(the dataset's presets fill the others), and the library's errors, a setting's bounds included, are shown with
their settings written as flags. What a run does and writes is described in `kitm.experiment.runner`.
"""

from __future__ import annotations

from kitm.tensorflow_logs import quiet_tensorflow_logs

quiet_tensorflow_logs()  # before TensorFlow is imported (by kitm.experiment below)

import contextlib  # noqa: E402
import sys  # noqa: E402

from absl import app, flags  # noqa: E402

from kitm.errors import KitmConfigError, KitmError  # noqa: E402
from kitm.experiment import config as experiment  # noqa: E402
from kitm.experiment import presets  # noqa: E402

FLAGS = flags.FLAGS


def _int_item(text: str) -> int:
    """An item of a list flag of whole numbers ("2" or "2.0")."""
    number = float(text)
    if not number.is_integer():
        raise ValueError(f"{text!r} is not a whole number")
    return int(number)


# A list flag's items, by the item type of its tuple setting.
_ITEM_PARSERS = {str: str, int: _int_item, float: float}


def _help(spec: experiment.Setting) -> str:
    """The setting's help, with its bounds (checked when the configuration is made, not by absl)."""
    notes = [f"values {experiment.bounds_text(spec)}"] if experiment.bounds_text(spec) else []
    notes += [spec.why] if spec.why else []
    return f"{spec.help} ({'; '.join(notes)})" if notes else spec.help


def define_setting_flags() -> None:
    """One flag per setting of kitm.experiment.config, generated from its declaration: the same name, default and
    help; enum flags for Literal choices, list flags for sequences. Bounds and finiteness are not absl's business:
    the configuration checks them when it is made, and `flag_errors` names the setting as a flag."""
    for spec in experiment.SETTINGS.values():
        if spec.choices is not None:
            flags.DEFINE_enum(spec.name, spec.default, list(spec.choices), _help(spec))
        elif spec.kind is tuple:
            flags.DEFINE_list(spec.name, [str(item) for item in spec.default], _help(spec))
        else:
            define = {bool: flags.DEFINE_bool, int: flags.DEFINE_integer, float: flags.DEFINE_float,
                      str: flags.DEFINE_string}[spec.kind]
            define(spec.name, spec.default, _help(spec))


define_setting_flags()
KITM_FLAG_NAMES = sorted(experiment.SETTINGS)


class LaunchError(KitmConfigError):
    """A problem with the flags or the data that stops the run before it starts (its message names the flags)."""


def _setting(name: str):
    value = FLAGS[name].value
    spec = experiment.SETTINGS[name]
    if spec.kind is tuple:
        try:
            return tuple(_ITEM_PARSERS[spec.item](item) for item in value)
        except ValueError as error:
            raise LaunchError(f"--{name}={','.join(value)}: {error}") from error
    return value


def experiment_config() -> experiment.ExperimentConfig:
    """The parsed flags as an experiment configuration: the flags given (command line or flagfile) are its explicit
    settings, the dataset's presets fill the rest."""
    given = {name: _setting(name) for name in KITM_FLAG_NAMES if FLAGS[name].present}
    dataset = given.pop("dataset", FLAGS.dataset)
    with flag_errors():
        return presets.experiment_config(dataset, **given)


@contextlib.contextmanager
def flag_errors():
    """Library errors raised inside, re-raised as LaunchError with their settings written as flags."""
    try:
        yield
    except LaunchError:
        raise
    except KitmError as error:
        raise LaunchError(error.for_flags()) from error


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    from absl import logging

    from kitm.experiment import run

    # absl's INFO lines (SavedModel writing, signature renaming) drown the run's own output.
    logging.set_verbosity(logging.WARNING)
    try:
        with flag_errors():
            run(experiment_config())
    except KitmError as error:
        print(f"kitm.launch: error: {error.for_flags()}", file=sys.stderr)
        sys.exit(2)


def run():
    """Console entry point (`kitm-launch`)."""
    app.run(main)


if __name__ == "__main__":
    run()
