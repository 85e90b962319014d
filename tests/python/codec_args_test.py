#!/usr/bin/env python3
"""ciuic's codec API (python/ciuic/codec.py over libciuic.so) refuses counts that C's size_t would
wrap and a codec spelling with a NUL byte, as Python errors, before anything reaches the library:
  - CodecState(codec, -1) and 2**64 + 5, wire_bytes(-1), decode(wire, -1): ValueError (they became
    2^64 - 1 and 5);
  - a float or a bool count: TypeError;
  - Codec("int8\\0junk"): ValueError (C read "int8" and dropped the rest);
  - decode(wire, 2**60) and a count the wire does not hold: UsageError before any allocation (it was
    a MemoryError for 4 EiB); chunk()'s C ints out of range or not whole: ValueError, TypeError;
and that the good calls still work (a state of 0 and of 1000 elements, int8's wire for 1000).

Needs numpy for /usr/bin/python3; exits 77 (skipped) without it.
    codec_args_test.py            (CIUIC_LIBRARY names libciuic.so; PYTHONPATH holds python/)
"""
import sys

try:
    import numpy as np
except ImportError:
    print("numpy not importable: skipped")
    sys.exit(77)

import ciuic  # noqa: E402


def expect(error, what, f):
    try:
        f()
    except error as e:
        print(f"codec_args_test: {what}: {type(e).__name__}: {e}")
        return []
    except Exception as e:  # noqa: BLE001 - any other outcome is the failure being reported
        return [f"{what}: expected {error.__name__}, got {type(e).__name__}: {e}"]
    return [f"{what}: expected {error.__name__}, nothing was raised"]


def main():
    c = ciuic.Codec("int8")
    wire = np.zeros(c.wire_bytes(1000), np.uint8)
    failures = []
    failures += expect(ValueError, "CodecState(c, -1)", lambda: ciuic.CodecState(c, -1))
    failures += expect(ValueError, "CodecState(c, 2**64 + 5)", lambda: ciuic.CodecState(c, 2 ** 64 + 5))
    failures += expect(TypeError, "CodecState(c, 10.0)", lambda: ciuic.CodecState(c, 10.0))
    failures += expect(TypeError, "CodecState(c, True)", lambda: ciuic.CodecState(c, True))
    failures += expect(ValueError, "wire_bytes(-1)", lambda: c.wire_bytes(-1))
    failures += expect(ValueError, "decode(wire, -1)", lambda: c.decode(wire, -1))
    failures += expect(ValueError, "Codec('int8\\0junk')", lambda: ciuic.Codec("int8\0junk"))
    # A count the wire cannot hold is refused before anything is allocated (it was a MemoryError).
    failures += expect(ciuic.UsageError, "decode(wire, 2**60)", lambda: c.decode(wire, 2 ** 60))
    failures += expect(ciuic.UsageError, "decode(wire, 999)", lambda: c.decode(wire, 999))
    failures += expect(ValueError, "chunk(1000, 2**32 + 2, 0)", lambda: c.chunk(1000, 2 ** 32 + 2, 0))
    failures += expect(ValueError, "chunk(-1, 2, 0)", lambda: c.chunk(-1, 2, 0))
    failures += expect(TypeError, "chunk(1000, 2.0, 0)", lambda: c.chunk(1000, 2.0, 0))
    if ciuic.CodecState(c, 0).n != 0 or ciuic.CodecState(c, np.int64(1000)).n != 1000:
        failures.append("a state of 0 or of numpy's 1000 elements was not made")
    if c.decode(wire, 1000).size != 1000:
        failures.append("decode of 1000 elements did not give 1000")
    for f in failures:
        print("FAIL:", f)
    if failures:
        return 1
    print("codec_args_test: every bad count and spelling refused, the good calls work")
    return 0


if __name__ == "__main__":
    sys.exit(main())
