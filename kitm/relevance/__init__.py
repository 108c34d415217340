"""kitm.relevance."""
