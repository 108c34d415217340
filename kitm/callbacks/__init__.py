"""kitm.callbacks."""
