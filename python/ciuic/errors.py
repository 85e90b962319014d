"""Exceptions for the statuses of the C API (ciuic_status_t)."""


class CiuicError(RuntimeError):
    """A failing ciuic call; `status` is its ciuic_status_t."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class UsageError(CiuicError, ValueError):
    """CIUIC_ERR_USAGE: a bad argument (unknown codec, mismatched sizes)."""


class InputError(CiuicError, ValueError):
    """CIUIC_ERR_INPUT: bad data (NaN/Inf in a gradient, state bytes of another codec or size, a bad profile)."""


class RuntimeFailure(CiuicError):
    """CIUIC_ERR_RUNTIME: a transport or device failure."""
