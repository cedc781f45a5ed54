"""glassformer's error types, and nothing else (a GlassformerError is a mistake the user can fix, said in one line).

The checks that raise them live where the input enters: :mod:`glassformer.io.checks` for arguments,
:mod:`glassformer.models.inputs` for a model's tensors, each config's ``__post_init__`` for its fields."""


class GlassformerError(ValueError):
    """A user-facing error: bad input, a bad file or a bad config, named in the message."""


class UsageError(GlassformerError):
    """A command-line usage mistake (options that do not fit together, a missing file argument)."""


class ArgumentTypeError(GlassformerError, TypeError):
    """An argument of the wrong type (a float where ids belong, a list where a tensor belongs)."""


class MissingFileError(GlassformerError, FileNotFoundError):
    """A file or folder that was named does not exist (or lacks a file it must hold)."""


class BadFileError(GlassformerError):
    """A file that exists but cannot be used: malformed, corrupt, truncated, unsafe or inconsistent."""


class NotOursError(GlassformerError):
    """A path where glassformer would write holds something it did not write (or an input)."""


class MeasurementError(GlassformerError):
    """A user's measurement (``watch.measurements``, ``Microscope.add``) failed: raised, exited or returned too much."""


class OutOfMemoryError(GlassformerError):
    """What was asked cannot fit in the memory available (or in ``max_memory``); refused before allocating."""
