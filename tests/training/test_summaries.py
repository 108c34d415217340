"""kitm.training.summaries: flag values become the hparams plugin's types."""

from kitm.training.summaries import hparam_value


def test_hparam_values_become_plugin_types():
    assert hparam_value(["0.2", "0.01"]) == "0.2,0.01" and hparam_value(None) == ""
    assert hparam_value(True) is True and hparam_value(3) == 3 and hparam_value(float("inf")) == "inf"
