"""Error kinds the `optimusnic` command turns into one clear line and a non-zero exit."""


class OptimusError(Exception):
    """Base of every error the toolkit raises on purpose; its message says what to do."""


class UserError(OptimusError, ValueError):
    """Bad input: a spec value, a file, a number out of range."""


class ToolMissing(OptimusError, RuntimeError):
    """A tool or device the operation needs is not here (simulator, Vitis, a card, XRT)."""


class Invalid(UserError):
    """A data file does not match its schema; the message names the file, the field and what is allowed."""
