"""Finds and loads libciuic.so and declares the C API (collectives/ciuic.h) to ctypes.

The library is the one named by $CIUIC_LIBRARY, else the installed prefix's (cmake --install writes
ciuic/_installed.py with its folder relative to the package), else <repo>/build/lib/libciuic.so beside
this package (python/ciuic -> the repository root), else <prefix>/lib beside a ciuic-bench on PATH,
else one the dynamic loader finds ("ciuic"). Every
call returns a ciuic_status_t; `check` turns a failing one into the matching CiuicError subclass with
ciuic_last_error()'s message.
"""
import ctypes
import ctypes.util
import os
import pathlib
import shutil
import threading

from ciuic.errors import CiuicError, InputError, RuntimeFailure, UsageError

_lib = None
_lock = threading.Lock()

c_size_p = ctypes.POINTER(ctypes.c_size_t)
c_u64_p = ctypes.POINTER(ctypes.c_uint64)
c_u32_p = ctypes.POINTER(ctypes.c_uint32)
c_int_p = ctypes.POINTER(ctypes.c_int)
c_float_p = ctypes.POINTER(ctypes.c_float)
c_double_p = ctypes.POINTER(ctypes.c_double)
c_void_p = ctypes.c_void_p

CODEC_LOSSLESS, CODEC_SUMMABLE, CODEC_STATEFUL, CODEC_DECODE_ADD_ENCODE = 1, 2, 4, 8


class RuleStruct(ctypes.Structure):
    """ciuic_rule_t."""
    _fields_ = [("op", ctypes.c_char * 16), ("algo", ctypes.c_char * 16), ("codec", ctypes.c_char * 48),
                ("precision", ctypes.c_char * 8), ("gate", ctypes.c_char * 8),
                ("min_bytes", ctypes.c_uint64), ("max_bytes", ctypes.c_uint64), ("bucket_bytes", ctypes.c_uint64),
                ("streams", ctypes.c_int32), ("hierarchy_depth", ctypes.c_int32),
                ("predicted_us", ctypes.c_double), ("measured_us", ctypes.c_double)]


# name: (argument types); every function returns ciuic_status_t unless listed in _OTHER.
_STATUS_CALLS = {
    "ciuic_mpi_world": [c_void_p],
    "ciuic_runtime_create": [c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, c_void_p],
    "ciuic_allreduce": [c_void_p, c_void_p, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_int],
    "ciuic_runtime_save": [c_void_p, ctypes.c_char_p],
    "ciuic_runtime_load": [c_void_p, ctypes.c_char_p],
    "ciuic_runtime_set_timeout": [c_void_p, ctypes.c_double],
    "ciuic_runtime_counters": [c_void_p, c_double_p, c_double_p],
    "ciuic_local_run": [ctypes.c_int, c_void_p, c_void_p],
    "ciuic_mpi_init": [c_int_p],
    "ciuic_mpi_finalize": [],
    "ciuic_comm_create_store": [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, c_void_p, c_void_p,
                                c_void_p, ctypes.c_double, c_void_p],
    "ciuic_runtime_create_profile": [c_void_p, c_void_p, ctypes.c_uint32, ctypes.c_int, c_void_p],
    "ciuic_allreduce_async": [c_void_p, c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_uint64, ctypes.c_int,
                              c_void_p, c_void_p, c_void_p, c_void_p],
    "ciuic_request_test": [c_void_p, c_int_p],
    "ciuic_request_wait": [c_void_p],
    "ciuic_request_stream_wait": [c_void_p, c_void_p],
    "ciuic_runtime_residual": [c_void_p, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_int, c_void_p],
    "ciuic_runtime_set_residual": [c_void_p, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_int, c_void_p, c_int_p],
    "ciuic_runtime_forget": [c_void_p, ctypes.c_uint64],
    "ciuic_runtime_config_of": [c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t],
    "ciuic_runtime_nonfinite": [c_void_p, c_u64_p],
    "ciuic_codec_create": [ctypes.c_char_p, c_void_p],
    "ciuic_codec_name": [c_void_p, ctypes.c_char_p, ctypes.c_size_t],
    "ciuic_codec_flags": [c_void_p, c_u32_p],
    "ciuic_codec_wire_bytes": [c_void_p, ctypes.c_size_t, c_size_p],
    "ciuic_codec_chunk": [c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, c_size_p, c_size_p],
    "ciuic_codec_state_create": [c_void_p, ctypes.c_size_t, c_void_p],
    "ciuic_codec_state_info": [c_void_p, c_size_p, c_u64_p],
    "ciuic_codec_state_residual": [c_void_p, c_void_p, ctypes.c_size_t],
    "ciuic_codec_state_set_residual": [c_void_p, c_void_p, ctypes.c_size_t],
    "ciuic_codec_state_save": [c_void_p, c_void_p, ctypes.c_size_t, c_size_p],
    "ciuic_codec_state_load": [c_void_p, c_void_p, ctypes.c_size_t],
    "ciuic_codec_encode": [c_void_p, c_void_p, c_void_p, ctypes.c_size_t, c_void_p, ctypes.c_size_t, c_u64_p],
    "ciuic_codec_encode_chunks": [c_void_p, c_void_p, c_void_p, ctypes.c_size_t, ctypes.c_int, c_void_p,
                                  ctypes.c_size_t, c_u64_p],
    "ciuic_codec_decode": [c_void_p, c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_uint64, c_void_p],
    "ciuic_codec_decode_accumulate": [c_void_p, c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_uint64,
                                      c_void_p],
    "ciuic_codec_decode_add_encode": [c_void_p, c_void_p, c_void_p, ctypes.c_size_t, ctypes.c_uint64, c_void_p,
                                      ctypes.c_size_t],
    "ciuic_profile_load": [ctypes.c_char_p, c_void_p],
    "ciuic_profile_parse": [ctypes.c_char_p, ctypes.c_char_p, c_void_p],
    "ciuic_profile_info": [c_void_p, c_int_p, c_int_p, c_size_p],
    "ciuic_profile_rule_at": [c_void_p, ctypes.c_size_t, ctypes.POINTER(RuleStruct)],
    "ciuic_profile_rule_for": [c_void_p, ctypes.c_char_p, ctypes.c_uint64, ctypes.POINTER(RuleStruct)],
    # Training kernels: dtype, rows, cols[, act[, p, seed, offset]], then buffers (+ eps) and the stream.
    "ciuic_ln_act_dropout_forward": [ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int, ctypes.c_float,
                                     ctypes.c_uint64, ctypes.c_uint64, c_void_p, c_void_p, c_void_p, ctypes.c_float,
                                     c_void_p, c_void_p, c_void_p, c_void_p],
    "ciuic_ln_act_dropout_backward": [ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int, ctypes.c_float,
                                      ctypes.c_uint64, ctypes.c_uint64, c_void_p, c_void_p, c_void_p, c_void_p,
                                      c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p],
    "ciuic_bias_act_forward": [ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int, c_void_p, c_void_p,
                               c_void_p, c_void_p],
    "ciuic_bias_act_backward": [ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int, c_void_p, c_void_p,
                                c_void_p, c_void_p, c_void_p, c_void_p],
    "ciuic_add_layer_norm_forward": [ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t, c_void_p, c_void_p, c_void_p,
                                     c_void_p, ctypes.c_float, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p],
    "ciuic_add_layer_norm_backward": [ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t, c_void_p, c_void_p, c_void_p,
                                      c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p],
    "ciuic_dropout_mask": [ctypes.c_size_t, ctypes.c_float, ctypes.c_uint64, ctypes.c_uint64, c_void_p],
}
_OTHER = {
    "ciuic_status_string": (ctypes.c_char_p, [ctypes.c_int]),
    "ciuic_last_error": (ctypes.c_char_p, []),
    "ciuic_comm_destroy": (None, [c_void_p]),
    "ciuic_comm_rank": (ctypes.c_int, [c_void_p]),
    "ciuic_comm_size": (ctypes.c_int, [c_void_p]),
    "ciuic_runtime_destroy": (None, [c_void_p]),
    "ciuic_request_destroy": (None, [c_void_p]),
    "ciuic_comm_device": (ctypes.c_char_p, [c_void_p]),
    "ciuic_codec_destroy": (None, [c_void_p]),
    "ciuic_codec_state_destroy": (None, [c_void_p]),
    "ciuic_profile_destroy": (None, [c_void_p]),
}


def _candidates():
    env = os.environ.get("CIUIC_LIBRARY")
    if env:
        return [env], True
    here = pathlib.Path(__file__).resolve().parent
    found = []
    try:  # installed by cmake --install: the prefix's library folder, relative to this package
        from ciuic._installed import LIBRARY_DIR
        found.append(str((here / LIBRARY_DIR / "libciuic.so").resolve()))
    except ImportError:
        pass
    found.append(str(here.parents[1] / "build" / "lib" / "libciuic.so"))  # the source tree's build
    bench = shutil.which("ciuic-bench")  # an installed prefix on PATH: <prefix>/bin/../lib
    if bench:
        found.append(str(pathlib.Path(bench).resolve().parent.parent / "lib" / "libciuic.so"))
    system = ctypes.util.find_library("ciuic")
    if system:
        found.append(system)
    return found, False


def library_path():
    """The path of the libciuic.so this process uses (loading it if needed)."""
    return lib()._ciuic_path


def lib():
    """The loaded library (loaded on first use)."""
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        paths, from_env = _candidates()
        errors = []
        for path in paths:
            if not from_env and os.sep in path and not os.path.exists(path):
                errors.append(f"{path}: no such file")
                continue
            try:
                # RTLD_GLOBAL: an MPI-enabled build pulls in Open MPI, whose plugins resolve libmpi's
                # symbols globally; libciuic itself exports only ciuic_* (collectives/ciuic.map).
                handle = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            except OSError as e:
                errors.append(f"{path}: {e}")
                continue
            _declare(handle)
            handle._ciuic_path = path
            _lib = handle
            return _lib
        hint = ("$CIUIC_LIBRARY names a library that cannot be loaded" if from_env else
                "set CIUIC_LIBRARY=/path/to/libciuic.so or build it: cmake --build build --target ciuic")
        raise OSError(f"libciuic.so not loaded ({hint}): " + "; ".join(errors))


def _declare(handle):
    for name, args in _STATUS_CALLS.items():
        f = getattr(handle, name)
        f.restype = ctypes.c_int
        f.argtypes = args
    for name, (res, args) in _OTHER.items():
        f = getattr(handle, name)
        f.restype = res
        f.argtypes = args


_ERRORS = {1: UsageError, 2: RuntimeFailure, 3: InputError}


def check(status, what):
    """Raises the CiuicError for a failing status of call `what`."""
    if status == 0:
        return
    message = lib().ciuic_last_error().decode("utf-8", "replace")
    cls = _ERRORS.get(status, CiuicError)
    raise cls(status, f"{what}: {message}")


def call(name, *args):
    """lib().name(*args), raising on a failing status."""
    check(getattr(lib(), name)(*args), name)
