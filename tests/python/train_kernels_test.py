#!/usr/bin/env python3
"""libciuic's training kernels (ciuic.kernels over collectives/ciuic.h) against PyTorch.

For ln_act_dropout, bias_act and add_layer_norm, forward and backward, in fp32, fp16 and bf16, with
act none/relu/gelu/gelu-tanh, on 5x37, 64x1024 and 33x1600, fresh random inputs (random non-zero gamma,
beta, bias; the seed is printed, CIUIC_TEST_SEED replays it): outputs and gradients against
torch.nn.functional (layer_norm, relu, gelu(approximate=...); dropout as OUR mask from dropout_mask with
torch's scaling x * (mask / (1 - p))), gradients by torch autograd in fp32. PyTorch 1.13 on CPU has no
fp16 LayerNorm/GELU: for 16-bit inputs the reference upcasts the same 16-bit inputs to fp32, computes,
and rounds to the 16-bit type (bf16 too, so both go one way). mean and rstd are checked against fp64.
Then dropout_mask itself (keep rate, determinism, offsets, prefixes) and the mask's identity between
forward and backward; and that each bound is tight enough to reject a wrong reference.

Tolerances (u = 2^-24, fp32's unit roundoff; all magnitudes below from an fp64 recomputation):
  * Both sides compute in fp32; they differ by summation order and by kernels/train_math.h's exp, tanh
    and erf (ErfF within 3e-7 abs, ErfcF within 4e-7 + 1.2e-7 x^2 relative, TanhF within 4e-7 abs, plus
    PyTorch's own ~1 ulp).
  * LayerNorm statistics: ours sums a row in 32 lanes then a 5-level tree, so its mean is within
    (ceil(cols/32) + 6) u mean|x| of the exact one and rstd within ((ceil(cols/32) + 12) / 2 + 2) u
    relative (checked against fp64 with these worst-case bounds: <= 3.4e-6 at 1600 columns). PyTorch's
    order is its own: worst case ~cols u (1e-4), typically ~sqrt(cols) u (2.4e-6). So R = 1e-5 bounds
    the relative error of a value derived from the statistics: xhat = (x - mean) rstd within
    R (|xhat| + mean|x| rstd) (a mean error moves xhat by mean|x|-scaled amounts), z = xhat gamma + beta
    within dz = R ((|xhat| + mean|x| rstd) |gamma| + |beta|).
  * Activations: forward within 3e-7 max(1, |z|) (train_math.h's stated agreement with PyTorch); erf-GELU
    derivative within 3e-7 + 4u |act'|; tanh-GELU derivative within 6e-7 (0.5 + |z| k (1 + 3c z^2))
    (a 5e-7 error of tanh enters through (1 - t^2), multiplied by that); |act'| <= 1.13, |act''| <= 0.85.
    Measured against fp64 on a 1e-5 grid over [-10, 10]: forward |ours - PyTorch| <= 2.1e-7 max(1, |z|);
    erf-GELU derivative ours within 2.3e-7 of exact, PyTorch's within 3.0e-7, their difference at most
    0.82 of the bound; tanh-GELU derivative at most 0.39 of it.
    relu at |z| <= dz may go either way in backward: such an element's whole dy is added to its error.
  * Outputs (y, dx): y = s act(z) (s = mask / (1 - p)) within s (1.13 dz + act error) + 2u|y|; dropped
    elements must be exactly 0 on both sides. LayerNorm's dx = rstd (g - mean(g) - xhat mean(g xhat)),
    g = dy s act'(z) gamma, is a cancellation: bounded by the errors of its terms, propagated, plus
    R rstd (|g| + mean|g| + |xhat| mean|g xhat|) — relative to the terms, not to dx.
  * 16-bit outputs: both sides round once from fp32 values within the fp32 bound, so they are at most
    the fp32 bound plus 1 ulp apart: 2^-10 |v| (fp16, + 2^-24 below its normals), 2^-7 |v| (bf16).
    sum = x + residual rounds the exact fp32 sum once on both sides: it must match bit for bit.
  * Column gradients (dgamma, dbeta, dbias: fp32 sums over rows in different orders): the sum of their
    terms' bounds plus (2 rows + 4) u times the sum of |terms|.
Each check prints its largest error / tolerance ("x/tol"); a check fails above 1.

Needs Debian's python3-torch (/usr/bin/python3); exits 77 (skipped) without it.
    CIUIC_LIBRARY=build/lib/libciuic.so PYTHONPATH=python /usr/bin/python3 tests/python/train_kernels_test.py
"""
import math
import os
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("torch not importable: skipped")
    sys.exit(77)

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))
import ciuic  # noqa: E402
from ciuic import kernels  # noqa: E402

U = 2.0 ** -24
R = 1e-5
EPS = 1e-5
GELU_K, GELU_C = math.sqrt(2.0 / math.pi), 0.044715
SHAPES = [(5, 37), (64, 1024), (33, 1600)]
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
ULP = {torch.float32: 0.0, torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7}
TINY = {torch.float32: 0.0, torch.float16: 2.0 ** -24, torch.bfloat16: 0.0}
ACTS = {"none": lambda t: t, "relu": F.relu, "gelu": F.gelu,
        "gelu-tanh": lambda t: F.gelu(t, approximate="tanh")}
D1 = {"none": 1.0, "relu": 1.0, "gelu": 1.13, "gelu-tanh": 1.13}   # max |act'|
D2 = {"none": 0.0, "relu": 0.0, "gelu": 0.85, "gelu-tanh": 0.85}   # max |act''| (relu: see ambiguity)

failures = []
summary = {}  # (kernel, what, dtype) -> (ratio, detail)


def expect(ok, message):
    if not ok:
        failures.append(message)
        print("FAIL:", message)
    return ok


# ---- fp64 models of the activations and their error bounds ----------------------------------------------
def act_grad64(act, z):
    if act == "none":
        return torch.ones_like(z)
    if act == "relu":
        return (z > 0).double()
    if act == "gelu":
        return 0.5 * (1 + torch.erf(z / math.sqrt(2))) + z * torch.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    t = torch.tanh(GELU_K * (z + GELU_C * z ** 3))
    return 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * GELU_K * (1 + 3 * GELU_C * z * z)


def act_err(act, z):
    """Bound on |ours - PyTorch| of act(z) for the same fp32 z."""
    return 3e-7 * z.abs().clamp(min=1) if act.startswith("gelu") else torch.zeros_like(z)


def act_grad_err(act, z):
    """Bound on |ours - PyTorch| of act'(z) for the same fp32 z (relu's z = 0 edge: see ambiguity)."""
    if act == "gelu":
        return 3e-7 + 4 * U * act_grad64(act, z).abs()
    if act == "gelu-tanh":
        return 6e-7 * (0.5 + z.abs() * GELU_K * (1 + 3 * GELU_C * z * z))
    return torch.zeros_like(z)


class Ln:
    """fp64 LayerNorm of fp32 values x (rows x cols): statistics, xhat, and the error bounds above."""

    def __init__(self, x32, gamma, beta):
        x = x32.double()
        self.cols = x.shape[1]
        self.mean = x.mean(1, keepdim=True)
        self.rstd = 1 / torch.sqrt(((x - self.mean) ** 2).mean(1, keepdim=True) + EPS)
        self.xh = (x - self.mean) * self.rstd
        self.g, self.b = gamma.double(), beta.double()
        self.z = self.xh * self.g + self.b
        self.absmean = x.abs().mean(1, keepdim=True)
        self.dxh = R * (self.xh.abs() + self.absmean * self.rstd)
        self.dz = self.dxh * self.g.abs() + R * self.b.abs()

    def stats_tol(self):
        k = math.ceil(self.cols / 32)
        mean_tol = (k + 6) * U * self.absmean
        rstd_tol = self.rstd * ((k + 12) / 2 * U + 2 * U + (mean_tol * self.rstd) ** 2)
        return mean_tol.flatten(), rstd_tol.flatten()

    def dx_tol(self, g, dg):
        """Bound on dx = rstd (g - mean(g) - xhat mean(g xhat)) given |g| and its error bound dg."""
        xh, m = self.xh.abs(), lambda t: t.mean(1, keepdim=True)
        prop = self.rstd * (dg + m(dg) + xh * m(dg * xh + g.abs() * self.dxh) + self.dxh * m((g * self.xh).abs()))
        return prop + R * self.rstd * (g.abs() + m(g.abs()) + xh * m(g.abs() * (xh + self.absmean * self.rstd)))

    def col_tols(self, dyln, ddyln):
        """Bounds on dgamma = sum_rows dyln xhat and dbeta = sum_rows dyln, dyln within ddyln."""
        n = 2 * dyln.shape[0] + 4
        dgamma = (ddyln * self.xh.abs() + dyln.abs() * self.dxh).sum(0) + n * U * (dyln * self.xh).abs().sum(0)
        dbeta = ddyln.sum(0) + n * U * dyln.abs().sum(0)
        return dgamma, dbeta


# ---- comparison -------------------------------------------------------------------------------------------
def ratios(ours, ref, tol, rounded=None):
    """Per element |ours - ref| / tol (inf where tol = 0 and they differ, or either is NaN), with 1 ulp of
    `rounded` (a 16-bit dtype) added to tol; and |diff|, tol."""
    o, r = ours.detach().double().flatten(), ref.detach().double().flatten()
    tol = tol.double().flatten().expand_as(o).clone()
    if rounded is not None:
        tol += ULP[rounded] * torch.maximum(o.abs(), r.abs()) + TINY[rounded]
    diff = (o - r).abs()
    q = torch.where(tol > 0, diff / tol.clamp(min=1e-300), torch.where(diff == 0, 0.0, math.inf))
    return torch.where(torch.isnan(q), torch.full_like(q, math.inf), q), diff, tol


def ratio(ours, ref, tol, rounded=None):
    """(max |ours - ref| / tol, its flat index, |diff| and tol there, elements over)."""
    q, diff, tol = ratios(ours, ref, tol, rounded)
    i = int(q.argmax())
    return float(q[i]), i, float(diff[i]), float(tol[i]), int((q > 1).sum())


def check(kernel, what, dtype, config, ours, ref, tol, rounded=None):
    q, i, d, t, n_bad = ratio(ours, ref, tol, rounded)
    cols = ours.shape[-1] if ours.dim() > 1 else None
    where = f"[{i // cols},{i % cols}]" if cols else f"[{i}]"
    o, r = float(ours.flatten()[i]), float(ref.flatten()[i])
    expect(q <= 1, f"{kernel} {dtype} {config}: {what}{where} = {o!r}, reference {r!r}: |diff| {d:.3g} > "
                   f"tol {t:.3g} ({n_bad} of {ours.numel()} elements over)")
    key = (kernel, what, dtype)
    if key not in summary or q > summary[key][0]:
        summary[key] = (q, f"{config} {what}{where} diff {d:.2g} tol {t:.2g}")


def grad(outputs, inputs, dy):
    return torch.autograd.grad(outputs, inputs, dy)


# ---- inputs -------------------------------------------------------------------------------------------------
class Draw:
    def __init__(self, seed):
        self.gen = torch.Generator().manual_seed(seed)

    def normal(self, *shape, scale=1.0, shift=0.0):
        return torch.randn(*shape, generator=self.gen, dtype=torch.float64) * scale + shift

    def x(self, rows, cols, dtype):
        """Rows of spread 1.5 around per-row offsets: mean|x| rstd ~ 1."""
        return self.normal(rows, cols, scale=1.5, shift=self.normal(rows, 1, scale=0.5)).to(dtype)

    def cols(self, cols, shift):
        return self.normal(cols, scale=0.5, shift=shift).float()

    def key(self):
        return int(torch.randint(0, 2 ** 62, (1,), generator=self.gen))


# ---- kernels --------------------------------------------------------------------------------------------------
def ln_act_dropout_case(draw, dname, dtype, rows, cols, act, p):
    config = f"{rows}x{cols} act={act} p={p}"
    x, dy = draw.x(rows, cols, dtype), draw.normal(rows, cols).to(dtype)
    gamma, beta = draw.cols(cols, 1.0), draw.cols(cols, 0.0)
    seed, offset = draw.key(), draw.key()
    y, mean, rstd = kernels.ln_act_dropout_forward(x, gamma, beta, EPS, act, p, seed, offset)
    dx, dgamma, dbeta = kernels.ln_act_dropout_backward(dy, x, gamma, beta, mean, rstd, act, p, seed, offset)
    keep = kernels.dropout_mask(rows * cols, p, seed, offset).view(rows, cols)

    xr, gr, br = (t.float().clone().requires_grad_() for t in (x, gamma, beta))
    yr = ACTS[act](F.layer_norm(xr, (cols,), gr, br, EPS)) * (keep.float() / (1 - p))
    dxr, dgr, dbr = grad(yr, (xr, gr, br), dy.float())
    rnd = None if dtype == torch.float32 else dtype

    ln = Ln(x.float(), gamma, beta)
    s = keep.double() / (1 - p)
    mt, rt = ln.stats_tol()
    check("ln_act_dropout", "mean", dname, config, mean, ln.mean.flatten(), mt)
    check("ln_act_dropout", "rstd", dname, config, rstd, ln.rstd.flatten(), rt)
    y_tol = s * (D1[act] * ln.dz + act_err(act, ln.z)) + 2 * U * yr.detach().double().abs()
    check("ln_act_dropout", "y", dname, config, y, yr.to(dtype), y_tol, rnd)

    dys = dy.double().abs() * s
    dyln = dy.double() * s * act_grad64(act, ln.z)
    ambiguous = (act == "relu") & (ln.z.abs() <= ln.dz)
    ddyln = dys * (D2[act] * ln.dz + act_grad_err(act, ln.z)) + dys * ambiguous + 3 * U * dyln.abs()
    g = dyln * ln.g
    dx_tol = ln.dx_tol(g, ddyln * ln.g.abs() + 2 * U * g.abs())
    check("ln_act_dropout", "dx", dname, config, dx, dxr.to(dtype), dx_tol, rnd)
    dg_tol, db_tol = ln.col_tols(dyln, ddyln)
    check("ln_act_dropout", "dgamma", dname, config, dgamma, dgr, dg_tol)
    check("ln_act_dropout", "dbeta", dname, config, dbeta, dbr, db_tol)
    return {"y": (y, yr, y_tol, x, gamma, beta, keep, p), "dx": (dx, dx_tol, dy, x, gamma, beta, keep, p, act)}


def bias_act_case(draw, dname, dtype, rows, cols, act, with_bias=True):
    config = f"{rows}x{cols} act={act}" + ("" if with_bias else " bias=None")
    x, dy = draw.normal(rows, cols, scale=2.0).to(dtype), draw.normal(rows, cols).to(dtype)
    bias = draw.cols(cols, 0.0) if with_bias else None
    y = kernels.bias_act_forward(x, bias, act)
    dx, dbias = kernels.bias_act_backward(dy, x, bias, act)

    xr = x.float().clone().requires_grad_()
    br = bias.clone().requires_grad_() if with_bias else None
    yr = ACTS[act](xr + br if with_bias else xr)
    grads = grad(yr, (xr, br) if with_bias else (xr,), dy.float())
    rnd = None if dtype == torch.float32 else dtype

    u = (x.float() + bias if with_bias else x.float()).double()  # fp32 on both sides: the same values
    check("bias_act", "y", dname, config, y, yr.to(dtype), act_err(act, u) + 2 * U * yr.detach().double().abs(), rnd)
    ddx = dy.double().abs() * act_grad_err(act, u) + 2 * U * grads[0].double().abs()
    check("bias_act", "dx", dname, config, dx, grads[0].to(dtype), ddx, rnd)
    if with_bias:
        tol = ddx.sum(0) + (2 * rows + 4) * U * grads[0].double().abs().sum(0)
        check("bias_act", "dbias", dname, config, dbias, grads[1], tol)
    else:
        expect(dbias is None, f"bias_act {dname} {config}: dbias returned without a bias")
    return y, yr, u, act


def add_ln_case(draw, dname, dtype, rows, cols, with_dsum=True):
    config = f"{rows}x{cols}" + ("" if with_dsum else " dsum=None")
    x, res = draw.x(rows, cols, dtype), draw.normal(rows, cols).to(dtype)
    dy = draw.normal(rows, cols).to(dtype)
    dsum = draw.normal(rows, cols, scale=0.5).to(dtype) if with_dsum else None
    gamma, beta = draw.cols(cols, 1.0), draw.cols(cols, 0.0)
    s, y, mean, rstd = kernels.add_layer_norm_forward(x, res, gamma, beta, EPS)
    dx, dgamma, dbeta = kernels.add_layer_norm_backward(dy, s, gamma, mean, rstd, dsum)

    sr = (x.float() + res.float()).to(dtype)
    s32, gr, br = (t.float().clone().requires_grad_() for t in (sr, gamma, beta))
    yr = F.layer_norm(s32, (cols,), gr, br, EPS)
    dsr, dgr, dbr = grad(yr, (s32, gr, br), dy.float())
    dxr = dsr + (dsum.float() if with_dsum else 0)
    rnd = None if dtype == torch.float32 else dtype

    check("add_layer_norm", "sum", dname, config, s, sr, torch.zeros(1))
    ln = Ln(sr.float(), gamma, beta)
    mt, rt = ln.stats_tol()
    check("add_layer_norm", "mean", dname, config, mean, ln.mean.flatten(), mt)
    check("add_layer_norm", "rstd", dname, config, rstd, ln.rstd.flatten(), rt)
    y_tol = ln.dz + 2 * U * yr.detach().double().abs()
    check("add_layer_norm", "y", dname, config, y, yr.to(dtype), y_tol, rnd)
    dyln = dy.double()
    g = dyln * ln.g
    dx_tol = ln.dx_tol(g, 2 * U * g.abs()) + 2 * U * dxr.double().abs()
    check("add_layer_norm", "dx", dname, config, dx, dxr.to(dtype), dx_tol, rnd)
    dg_tol, db_tol = ln.col_tols(dyln, torch.zeros_like(dyln))
    check("add_layer_norm", "dgamma", dname, config, dgamma, dgr, dg_tol)
    check("add_layer_norm", "dbeta", dname, config, dbeta, dbr, db_tol)
    return y, yr, y_tol, sr, gamma, beta


# ---- dropout mask -------------------------------------------------------------------------------------------
def mask_checks(draw):
    n = 1_000_000
    for p in (0.1, 0.5):
        seed, offset = draw.key(), draw.key()
        m = kernels.dropout_mask(n, p, seed, offset)
        kept, sigma = int(m.sum()), math.sqrt(n * p * (1 - p))
        z = (kept - n * (1 - p)) / sigma
        print(f"dropout_mask p={p}: kept {kept} of {n} (expected {n * (1 - p):.0f}, {z:+.2f} sigma)")
        expect(abs(z) <= 5, f"dropout_mask p={p}: kept {kept} of {n}, {z:+.2f} sigma from {n * (1 - p):.0f}")
        expect(torch.equal(m, kernels.dropout_mask(n, p, seed, offset)),
               f"dropout_mask p={p}: two calls with the same (seed, offset) differ")
        expect(torch.equal(m[:1001], kernels.dropout_mask(1001, p, seed, offset)),
               f"dropout_mask p={p}: the mask of n=1001 is not the first 1001 of n={n}")
        same = p * p + (1 - p) ** 2  # independent masks agree on this fraction
        for what, other in (("offset + 1", kernels.dropout_mask(n, p, seed, offset + 1)),
                            ("seed + 1", kernels.dropout_mask(n, p, seed + 1, offset))):
            agree = int((m == other).sum())
            za = (agree - n * same) / math.sqrt(n * same * (1 - same))
            expect(abs(za) <= 5, f"dropout_mask p={p}: {what} agrees on {agree} of {n} elements, {za:+.2f} sigma "
                                 f"from independent masks ({n * same:.0f})")
    expect(bool(kernels.dropout_mask(4096, 0.0, draw.key(), draw.key()).all()), "dropout_mask p=0 drops elements")


def mask_identity_checks(draw):
    """Forward drops exactly the mask's elements; backward's dropout stage counts exactly the kept ones."""
    rows, cols, p = 64, 1024, 0.3
    x = draw.x(rows, cols, torch.float32)
    gamma, beta = draw.cols(cols, 1.0), draw.cols(cols, 0.0)
    seed, offset = draw.key(), draw.key()
    keep = kernels.dropout_mask(rows * cols, p, seed, offset).view(rows, cols)
    a, _, _ = kernels.ln_act_dropout_forward(x, gamma, beta, EPS, "relu", 0.0, seed, offset)
    y, _, _ = kernels.ln_act_dropout_forward(x, gamma, beta, EPS, "relu", p, seed, offset)
    live = a != 0
    expect(bool((y[~keep] == 0).all()), f"ln_act_dropout relu p={p}: {int((y[~keep] != 0).sum())} dropped "
                                        f"elements are not 0")
    expect(torch.equal((y == 0) & live, ~keep & live),
           f"ln_act_dropout relu p={p}: y == 0 at {int(((y == 0) & live).sum())} live elements, the mask drops "
           f"{int((~keep & live).sum())} ({int(((y == 0) & live & keep).sum())} kept but zero, "
           f"{int(((y != 0) & ~keep).sum())} dropped but non-zero)")
    scale = np.float32(1) / (np.float32(1) - np.float32(p))
    expect(bool((y[keep] - a[keep] * float(scale)).abs().le(2 * U * (a[keep] * float(scale)).abs()).all()),
           f"ln_act_dropout relu p={p}: kept elements are not act * 1/(1-p)")
    print(f"mask identity (forward, relu, p={p}, {rows}x{cols}): {int((~keep & live).sum())} live elements "
          f"dropped, all exactly 0; {int(keep.sum())} kept, each act * 1/(1-p)")

    # act none, gamma 1, beta 0, dy 1: dbeta[c] = sum over rows of keep * 1/(1-p), added by the kernel's
    # column order (chunks of 32 rows, then the chunk partials) — exact in fp32, compared bit for bit.
    rows, cols = 80, 333
    for p in (0.3, 0.5):
        x = draw.x(rows, cols, torch.float32)
        ones, zeros = torch.ones(cols), torch.zeros(cols)
        seed, offset = draw.key(), draw.key()
        keep = kernels.dropout_mask(rows * cols, p, seed, offset).view(rows, cols).numpy()
        _, mean, rstd = kernels.ln_act_dropout_forward(x, ones, zeros, EPS, "none", p, seed, offset)
        dy = torch.ones(rows, cols)
        _, _, dbeta = kernels.ln_act_dropout_backward(dy, x, ones, zeros, mean, rstd, "none", p, seed, offset)
        scale = np.float32(1) / (np.float32(1) - np.float32(p))
        terms = np.where(keep, scale, np.float32(0)).astype(np.float32)
        total = np.zeros(cols, np.float32)
        for c0 in range(0, rows, 32):
            part = np.zeros(cols, np.float32)
            for r in range(c0, min(c0 + 32, rows)):
                part = (part + terms[r]).astype(np.float32)
            total = (total + part).astype(np.float32)
        bad = np.flatnonzero(dbeta.numpy() != total)
        expect(bad.size == 0, f"ln_act_dropout backward p={p} {rows}x{cols}: dbeta != sum of kept * 1/(1-p) at "
                              f"{bad.size} columns, first [{bad[:1]}]: {dbeta.numpy()[bad[:1]]} vs {total[bad[:1]]}")
        _, _, other = kernels.ln_act_dropout_backward(dy, x, ones, zeros, mean, rstd, "none", p, seed, offset + 1)
        expect(not torch.equal(other, dbeta), f"ln_act_dropout backward p={p}: dbeta independent of the offset")
    print("mask identity (backward, act none, gamma 1, beta 0, dy 1): dbeta == the fp32 sum of kept * 1/(1-p) "
          "in every column, p = 0.3 and 0.5")


def sensitivity_checks(ln_case, bias_case, add_case):
    """Each bound must reject a plausible wrong answer (it is not vacuous)."""
    y, yr, y_tol, x, gamma, beta, keep, p = ln_case["y"]
    z = F.layer_norm(x.float(), (x.shape[1],), gamma, beta, EPS)
    wrong = F.gelu(z, approximate="tanh") * (keep.float() / (1 - p))
    q = ratio(y, wrong, y_tol)[0]
    print(f"sensitivity: ln_act_dropout y (gelu) against a tanh-GELU reference: {q:.3g} x tol")
    expect(q > 1, "ln_act_dropout: the y bound accepts tanh-GELU in place of erf-GELU")

    dx, dx_tol, dy, x, gamma, beta, keep, p, act = ln_case["dx"]
    other = kernels.dropout_mask(keep.numel(), p, 1, 2).view(keep.shape)
    xr = x.float().clone().requires_grad_()
    yw = ACTS[act](F.layer_norm(xr, (x.shape[1],), gamma, beta, EPS)) * (other.float() / (1 - p))
    q = ratio(dx, grad(yw, (xr,), dy.float())[0], dx_tol)[0]
    print(f"sensitivity: ln_act_dropout dx against a reference with another dropout mask: {q:.3g} x tol")
    expect(q > 1, "ln_act_dropout: the dx bound accepts another dropout mask")

    y, yr, u, act = bias_case
    q = ratio(y, F.gelu(u.float(), approximate="tanh"), act_err(act, u) + 2 * U * yr.detach().double().abs())[0]
    print(f"sensitivity: bias_act y (gelu) against a tanh-GELU reference: {q:.3g} x tol")
    expect(q > 1, "bias_act: the y bound accepts tanh-GELU in place of erf-GELU")

    y, yr, y_tol, sr, gamma, beta = add_case
    q = ratio(y, F.layer_norm(sr.float(), (sr.shape[1],), gamma, beta, 1e-3), y_tol)[0]
    print(f"sensitivity: add_layer_norm y against a reference with eps 1e-3 (not 1e-5): {q:.3g} x tol")
    expect(q > 1, "add_layer_norm: the y bound accepts eps 1e-3 for 1e-5")


def c_api_refusals():
    """The C API's own checks, below the Python wrappers: each bad call is CIUIC_ERR_USAGE (1) with a message."""
    from ciuic import _lib
    L = _lib.lib()
    buf = torch.ones(16)
    ptr = buf.data_ptr()
    f32, relu = 0, 1
    cases = [
        ("dropout p 2", lambda: L.ciuic_dropout_mask(16, 2.0, 1, 0, ptr)),
        ("dropout p NaN", lambda: L.ciuic_dropout_mask(16, float("nan"), 1, 0, ptr)),
        ("activation 9", lambda: L.ciuic_bias_act_forward(f32, 4, 4, 9, ptr, None, ptr, None)),
        ("dtype 7", lambda: L.ciuic_bias_act_forward(7, 4, 4, relu, ptr, None, ptr, None)),
        ("null x", lambda: L.ciuic_bias_act_forward(f32, 4, 4, relu, None, None, ptr, None)),
        ("eps 0", lambda: L.ciuic_ln_act_dropout_forward(f32, 4, 4, relu, 0.0, 1, 0, ptr, ptr, ptr, 0.0, ptr, ptr,
                                                         ptr, None)),
        ("null mean", lambda: L.ciuic_ln_act_dropout_forward(f32, 4, 4, relu, 0.0, 1, 0, ptr, ptr, ptr, 1e-5, ptr,
                                                             None, ptr, None)),
        ("dgamma without dbeta", lambda: L.ciuic_add_layer_norm_backward(f32, 4, 4, ptr, None, ptr, ptr, ptr, ptr,
                                                                         ptr, ptr, None, None)),
    ]
    refused = 0
    for name, call in cases:
        status = call()
        message = L.ciuic_last_error().decode("utf-8", "replace")
        ok = status == 1 and bool(message)
        refused += ok
        expect(ok, f"C API {name}: status {status} (want 1, CIUIC_ERR_USAGE), message {message!r}")
    print(f"C API: {refused} of {len(cases)} bad calls refused with CIUIC_ERR_USAGE and a message")


def main():
    t0 = time.time()
    try:
        print(f"libciuic: {ciuic.library_path()}")
    except (OSError, AttributeError) as e:  # AttributeError: a library built before the training kernels
        sys.exit(f"cannot load libciuic with the training kernels: {e}")
    seed = int(os.environ.get("CIUIC_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; input seed {seed} (CIUIC_TEST_SEED "
          f"replays it)")
    print("fp16/bf16: PyTorch 1.13 on CPU has no fp16 LayerNorm/GELU; the reference upcasts the same 16-bit "
          "inputs to fp32, computes, and rounds the result to the 16-bit type")
    draw = Draw(seed)
    keep_for_sensitivity = {}
    for dname, dtype in DTYPES.items():
        for rows, cols in SHAPES:
            for act in ACTS:
                p = 0.0 if act == "none" else 0.1
                ln = ln_act_dropout_case(draw, dname, dtype, rows, cols, act, p)
                ba = bias_act_case(draw, dname, dtype, rows, cols, act)
                if (dname, rows, act) == ("fp32", 64, "gelu"):
                    keep_for_sensitivity.update(ln=ln, ba=ba)
            ad = add_ln_case(draw, dname, dtype, rows, cols)
            add_ln_case(draw, dname, dtype, rows, cols, with_dsum=False)
            if (dname, rows) == ("fp32", 64):
                keep_for_sensitivity["ad"] = ad
        bias_act_case(draw, dname, dtype, 64, 1024, "gelu", with_bias=False)
    mask_checks(draw)
    mask_identity_checks(draw)
    c_api_refusals()
    sensitivity_checks(keep_for_sensitivity["ln"], keep_for_sensitivity["ba"], keep_for_sensitivity["ad"])

    print(f"\n{'kernel':<16} {'value':<7} " + " ".join(f"{d:>6}" for d in DTYPES) + "   (max error / tolerance; "
          "worst case)")
    for kernel, what in dict.fromkeys((k, w) for k, w, _ in summary):
        cells = [summary.get((kernel, what, d)) for d in DTYPES]
        worst = max((c for c in cells if c), key=lambda c: c[0])
        print(f"{kernel:<16} {what:<7} " + " ".join(f"{c[0]:6.3f}" if c else f"{'-':>6}" for c in cells)
              + f"   {worst[1]}")
    print(f"total {time.time() - t0:.1f} s")
    if failures:
        sys.exit(f"{len(failures)} check(s) failed")
    print("train_kernels_test: all checks passed")


if __name__ == "__main__":
    main()
