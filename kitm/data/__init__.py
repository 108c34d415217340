"""kitm.data."""
