"""The one exception type kitm raises for bad data, flags and files."""


class KitmDataError(ValueError):
    """Bad input data: a missing, corrupt or foreign file, record or field. The message names it."""
