"""libciuic's fused training kernels (kernels/train_kernels.h) over torch tensors, forward and backward.

    from ciuic import kernels
    y, mean, rstd = kernels.ln_act_dropout_forward(x, gamma, beta, 1e-5, "gelu", 0.1, seed, offset)
    dx, dgamma, dbeta = kernels.ln_act_dropout_backward(dy, x, gamma, beta, mean, rstd, "gelu", 0.1, seed, offset)

x-like tensors (x, y, dy, dx, residual, sum) are contiguous float32, float16 or bfloat16 of one dtype,
read as rows x cols with cols = the last dimension; gamma, beta, bias (cols) and mean, rstd (rows) are
contiguous float32. All on the CPU, or all on one CUDA device (run on torch's current stream there).
Outputs are new tensors; all arithmetic is fp32. act: "none", "relu", "gelu" (erf form, PyTorch's
default) or "gelu-tanh" (gelu(approximate="tanh")). Dropout keeps element row * cols + col by the
Philox stream of (seed, offset); the backward rebuilds the same mask from them (p = 0: no dropout).
"""
import ctypes

import torch

from ciuic._lib import call

_DTYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}  # ciuic_dtype_t
_ACTS = {"none": 0, "relu": 1, "gelu-tanh": 2, "gelu": 3}  # ciuic_activation_t


def _act(act):
    if act not in _ACTS:
        raise ValueError(f"act: {act!r}, expected one of {', '.join(_ACTS)}")
    return _ACTS[act]


def _tensor(t, name, device):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if not t.is_contiguous():
        raise ValueError(f"{name}: not contiguous")
    if t.device != device:
        raise ValueError(f"{name}: on {t.device}, expected {device} (the device of x)")
    if t.device.type not in ("cpu", "cuda"):
        raise ValueError(f"{name}: on {t.device}; only cpu and cuda tensors are supported")
    return ctypes.c_void_p(t.data_ptr())


def _rows(x, name="x"):
    """(dtype code, rows, cols) of an x-like tensor."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _DTYPES:
        raise TypeError(f"{name}: {x.dtype}, expected float32, float16 or bfloat16")
    if x.dim() < 1 or x.shape[-1] == 0:
        raise ValueError(f"{name}: shape {tuple(x.shape)}, expected (..., cols) with cols > 0")
    return _DTYPES[x.dtype], x.numel() // x.shape[-1], x.shape[-1]


def _like(t, name, x):
    """An x-like tensor: x's shape and dtype."""
    if isinstance(t, torch.Tensor) and (t.dtype != x.dtype or t.shape != x.shape):
        raise (TypeError if t.dtype != x.dtype else ValueError)(
            f"{name}: {t.dtype} {tuple(t.shape)}, expected x's {x.dtype} {tuple(x.shape)}")
    return _tensor(t, name, x.device)


def _f32(t, name, n, device):
    """An fp32 vector of n elements (one per column or per row), or None passed as null."""
    if t is None:
        return None
    if isinstance(t, torch.Tensor) and (t.dtype != torch.float32 or t.numel() != n):
        raise (TypeError if t.dtype != torch.float32 else ValueError)(
            f"{name}: {t.dtype} with {t.numel()} elements, expected float32 with {n}")
    return _tensor(t, name, device)


def _stream(device):
    if device.type != "cuda":
        return None
    return ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream)


def _run(name, device, *args):
    if device.type == "cuda":
        with torch.cuda.device(device):  # the C API works on the current CUDA device
            call(name, *args, _stream(device))
    else:
        call(name, *args, None)


def _stats(x):
    """mean and rstd for x: one fp32 per row."""
    return (torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device) for _ in range(2))


def _cols(x, cols):
    """dgamma and dbeta: one fp32 per column."""
    return (torch.empty(cols, dtype=torch.float32, device=x.device) for _ in range(2))


def ln_act_dropout_forward(x, gamma, beta, eps, act, p=0.0, seed=0, offset=0):
    """y = dropout(act(layer_norm(x))) -> (y, mean, rstd); mean, rstd: x.shape[:-1], fp32."""
    t, rows, cols = _rows(x)
    args = (_tensor(x, "x", x.device), _f32(gamma, "gamma", cols, x.device), _f32(beta, "beta", cols, x.device))
    if args[1] is None or args[2] is None:
        raise TypeError("gamma, beta: required")
    y = torch.empty_like(x)
    mean, rstd = _stats(x)
    _run("ciuic_ln_act_dropout_forward", x.device, t, rows, cols, _act(act), float(p), seed, offset, *args,
         float(eps), _tensor(y, "y", x.device), _tensor(mean, "mean", x.device), _tensor(rstd, "rstd", x.device))
    return y, mean, rstd


def ln_act_dropout_backward(dy, x, gamma, beta, mean, rstd, act, p=0.0, seed=0, offset=0, weight_grads=True):
    """-> (dx, dgamma, dbeta) of ln_act_dropout_forward with the same act, p, seed and offset (dgamma and
    dbeta None when weight_grads is False)."""
    t, rows, cols = _rows(x)
    d = x.device
    ins = (_like(dy, "dy", x), _tensor(x, "x", d), _f32(gamma, "gamma", cols, d), _f32(beta, "beta", cols, d),
           _f32(mean, "mean", rows, d), _f32(rstd, "rstd", rows, d))
    if None in ins:
        raise TypeError("gamma, beta, mean, rstd: required")
    dx = torch.empty_like(x)
    dgamma, dbeta = _cols(x, cols) if weight_grads else (None, None)
    _run("ciuic_ln_act_dropout_backward", d, t, rows, cols, _act(act), float(p), seed, offset, *ins,
         _tensor(dx, "dx", d), _f32(dgamma, "dgamma", cols, d), _f32(dbeta, "dbeta", cols, d))
    return dx, dgamma, dbeta


def bias_act_forward(x, bias, act):
    """y = act(x + bias) (bias None: act(x))."""
    t, rows, cols = _rows(x)
    y = torch.empty_like(x)
    _run("ciuic_bias_act_forward", x.device, t, rows, cols, _act(act), _tensor(x, "x", x.device),
         _f32(bias, "bias", cols, x.device), _tensor(y, "y", x.device))
    return y


def bias_act_backward(dy, x, bias, act):
    """-> (dx, dbias): dx = dy * act'(x + bias), dbias = its column sums in fp32 (None when bias is None)."""
    t, rows, cols = _rows(x)
    d = x.device
    ins = (_like(dy, "dy", x), _tensor(x, "x", d), _f32(bias, "bias", cols, d))
    dx = torch.empty_like(x)
    dbias = None if bias is None else torch.empty(cols, dtype=torch.float32, device=d)
    _run("ciuic_bias_act_backward", d, t, rows, cols, _act(act), *ins, _tensor(dx, "dx", d),
         _f32(dbias, "dbias", cols, d))
    return dx, dbias


def add_layer_norm_forward(x, residual, gamma, beta, eps):
    """sum = x + residual (in x's dtype), y = layer_norm(sum) -> (sum, y, mean, rstd)."""
    t, rows, cols = _rows(x)
    d = x.device
    ins = (_tensor(x, "x", d), _like(residual, "residual", x), _f32(gamma, "gamma", cols, d),
           _f32(beta, "beta", cols, d))
    if None in ins:
        raise TypeError("gamma, beta: required")
    s, y = torch.empty_like(x), torch.empty_like(x)
    mean, rstd = _stats(x)
    _run("ciuic_add_layer_norm_forward", d, t, rows, cols, *ins, float(eps), _tensor(s, "sum", d),
         _tensor(y, "y", d), _tensor(mean, "mean", d), _tensor(rstd, "rstd", d))
    return s, y, mean, rstd


def add_layer_norm_backward(dy, sum, gamma, mean, rstd, dsum=None):
    """-> (dx, dgamma, dbeta): dx, the gradient of both x and residual, is layer_norm's input gradient
    plus dsum (the gradient reaching `sum` from later layers; None: none)."""
    t, rows, cols = _rows(sum, "sum")
    d = sum.device
    ins = (_like(dy, "dy", sum), None if dsum is None else _like(dsum, "dsum", sum), _tensor(sum, "sum", d),
           _f32(gamma, "gamma", cols, d), _f32(mean, "mean", rows, d), _f32(rstd, "rstd", rows, d))
    if None in ins[3:]:
        raise TypeError("gamma, mean, rstd: required")
    dx = torch.empty_like(sum)
    dgamma, dbeta = _cols(sum, cols)
    _run("ciuic_add_layer_norm_backward", d, t, rows, cols, *ins, _tensor(dx, "dx", d),
         _tensor(dgamma, "dgamma", d), _tensor(dbeta, "dbeta", d))
    return dx, dgamma, dbeta


def dropout_mask(n, p, seed, offset):
    """The keep mask of elements [0, n) under (p, seed, offset), as a CPU torch.bool tensor (True: kept)."""
    if n < 0:
        raise ValueError(f"n: {n}, expected >= 0")
    keep = torch.empty(n, dtype=torch.uint8)
    call("ciuic_dropout_mask", n, float(p), seed, offset, ctypes.c_void_p(keep.data_ptr()))
    return keep.view(torch.bool)
