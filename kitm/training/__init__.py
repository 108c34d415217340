"""kitm.training: training procedures that span several `fit` calls (seed 003's three phases). No imports here:
import the submodules (`kitm.training.center_phases`)."""
