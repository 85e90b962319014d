"""ciuic for Python: libciuic's codecs, codec states and profile reader through ctypes, and
`ciuic.torch` (imported on its own) with a PyTorch DDP communication hook that applies a tuned profile.

    import ciuic
    c = ciuic.Codec("int8"); st = ciuic.CodecState(c, n)
    wire, step = c.encode(x, st); y = c.decode(wire, n, step)

The library is $CIUIC_LIBRARY, else the installed prefix's, else <repo>/build/lib/libciuic.so, else the one
beside a ciuic-bench on PATH (the order and details: ciuic._lib).
"""
from ciuic._lib import library_path
from ciuic.codec import Codec, CodecState
from ciuic.errors import CiuicError, InputError, RuntimeFailure, UsageError
from ciuic.profile import Profile, Rule

__all__ = ["Codec", "CodecState", "Profile", "Rule", "CiuicError", "UsageError", "InputError", "RuntimeFailure",
           "library_path"]
