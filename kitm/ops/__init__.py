"""kitm.ops."""
