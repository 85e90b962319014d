#!/usr/bin/env python3
"""ciuic.torch.comm_hook under real PyTorch DDP (Debian's python3-torch, gloo on CPU), 2 and 4 processes,
every bucket reduced by the C++ runtime (ciuic_runtime_create_profile + ciuic_allreduce_async).

For every algorithm x codec the tuner offers (plan_space.cc: the library's allreduce in fp32, fp16 and
bf16; rd; the ring with each of the 13 codecs, topk on sparse, sign1 on two-phase sign2, powersgd on its
two allreduces; hier across two "nodes" with the 6 element codecs), plus bf16 gradients and buckets keyed
by shapes with find_unused_parameters, a small MLP trains with SGD + momentum for 6 steps under a profile
of one rule tuned for the job's own world, and a checkpoint is taken after step 3:

  (a) after every step every rank's parameters are bitwise identical (hashes compared);
  (b) step 1's averaged gradient, piece by piece, against the exact mean of the ranks' gradients within
      the bound the codec and algorithm give (`bound_check`); a broken result (zeros, rank 0's gradient
      alone) must fail the same bound;
  (c) one code path: every bucket of step 1, reduced again through the C API directly (a fresh
      communicator and runtime from the same profile, the recorded inputs, the same tensor ids), gives
      the hook's bits;
  (d) DDP's bucket rebuild after step 1: the new layout's residual, read back from the runtime, holds
      each parameter's residual from the old layout (error feedback follows the parameters);
  (e) fresh processes load model, optimizer and hook state and train the same 3 steps: parameters equal
      the uninterrupted run's bit for bit (DDP's first iteration there reduces one bucket of every
      parameter, which the hook cuts into the saved buckets); without the hook state they differ;
  (f) a NaN gradient on one rank reaches every rank as NaN and leaves every residual as it was;
  (g) a profile tuned for 16 ranks is refused at comm_hook() naming both worlds (and taken with the
      override);
  (h) a 64 MiB bucket (int8 on the ring): the hook returns before its Future completes.

Needs Debian's python3-torch (/usr/bin/python3); exits 77 (skipped) without it.
    comm_hook_test.py            (CIUIC_LIBRARY names libciuic.so; PYTHONPATH holds python/)
"""
import ctypes
import datetime
import hashlib
import json
import os
import sys
import tempfile
import time

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP
except ImportError:
    print("torch not importable: skipped")
    sys.exit(77)

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))
import ciuic  # noqa: E402
import ciuic.torch  # noqa: E402
from ciuic import _lib  # noqa: E402

BUCKET = 8192          # profile bucket_bytes = DDP's bucket cap = the first bucket (set below): several buckets
PIECE = BUCKET // 4    # elements the runtime reduces at once (the rule's bucket_bytes)
STEPS_BEFORE, STEPS_AFTER = 3, 3
RECORDED = 2           # steps whose buckets are recorded (the first is DDP's one-bucket iteration)
BASE_PROFILE = os.path.join(REPO, "profiles", "dgx_a100.profile.json")


class Config:
    def __init__(self, name, algo, codec, precision="fp32", named=True, find_unused=False, hier=False,
                 dtype=torch.float32):
        self.name, self.algo, self.codec, self.precision = name, algo, codec, precision
        self.named, self.find_unused, self.hier, self.dtype = named, find_unused, hier, dtype

    def profile(self, world, ranks=None):
        """One rule for every size, tuned (by its topology keys) for this job's world."""
        d = json.load(open(BASE_PROFILE))
        rule = dict(d["rules"][0])
        rule.update(min_bytes=0, max_bytes=0, algo=self.algo, codec=self.codec, precision=self.precision,
                    bucket_bytes=BUCKET, hierarchy_depth=2 if self.hier else 1,
                    gate="n/a" if self.codec == "none" else "passed")
        d["rules"] = [rule]
        d["topology"].update(name="cpu_local", device="cpu", ranks=ranks or world, nodes=2 if self.hier else 1)
        return d

    @property
    def stateful(self):
        return self.codec not in ("none", "fp16", "bf16")


# The tuner's plan space (tuner/plan_space.cc: Offered, RuntimeAlgo) at this bucket size.
RING_CODECS = ["none", "bf16", "fp16", "fp8e4m3", "int8", "int4", "sign1", "randomk:0.01", "topk:0.01", "topk:0.001",
               "powersgd:16", "powersgd:4", "powersgd:1"]
RUNTIME_ALGO = {"sign1": "sign2", "topk": "sparse", "powersgd": "powersgd"}
CONFIGS = [Config("nccl none", "nccl", "none"), Config("nccl none@fp16", "nccl", "none", precision="fp16"),
           Config("nccl none@bf16", "nccl", "none", precision="bf16"), Config("rd none", "rd", "none")]
for c in RING_CODECS:
    algo = RUNTIME_ALGO.get(c.split(":")[0], "ring")
    CONFIGS.append(Config(f"{algo} {c}", algo, c))
for c in RING_CODECS[:6]:
    CONFIGS.append(Config(f"hier {c}", "hier", c, hier=True))
CONFIGS += [Config("ring int8 shapes", "ring", "int8", named=False, find_unused=True),
            Config("nccl none bf16-grads", "nccl", "none", dtype=torch.bfloat16),
            Config("ring int8 bf16-grads", "ring", "int8", dtype=torch.bfloat16)]


def make_model(seed, dtype=torch.float32):
    torch.manual_seed(seed)
    # 5722 parameters: DDP's first iteration reduces them as one bucket (3 pieces of 2048), then two.
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 48), torch.nn.Tanh(),
                               torch.nn.Linear(48, 10)).to(dtype)


def params_of(model):
    return torch.cat([p.detach().float().flatten() for p in model.parameters()]).numpy().copy()


def train_step(ddp, opt, ci, step, rank, dtype=torch.float32, nan=False):
    g = torch.Generator().manual_seed(1000003 * ci + 1009 * step + rank)
    x, y = torch.randn(16, 32, generator=g).to(dtype), torch.randn(16, 10, generator=g).to(dtype)
    opt.zero_grad()
    loss = ((ddp(x) - y) ** 2).mean()
    if nan:
        loss = loss * float("nan")
    loss.backward()
    opt.step()
    return hashlib.sha1(params_of(ddp.module).tobytes()).hexdigest()


def build(cfg, rank, world, seed):
    model = make_model(seed, cfg.dtype)
    import torch.nn.parallel.distributed as ddp_module
    sync = ddp_module._sync_module_states
    if cfg.dtype == torch.bfloat16:
        # torch 1.13's gloo cannot broadcast bf16 (DDP's start-up sync of the weights); every rank made the
        # same weights from one seed, so the sync is skipped instead.
        ddp_module._sync_module_states = lambda *args, **kwargs: None
    try:
        ddp = DDP(model, find_unused_parameters=cfg.find_unused, **ciuic.torch.ddp_kwargs(cfg.profile(world)))
    finally:
        ddp_module._sync_module_states = sync
    state, hook = ciuic.torch.comm_hook(cfg.profile(world), module=model if cfg.named else None,
                                        ranks_per_node=world // 2 if cfg.hier else 0, native="runtime")
    ddp.register_comm_hook(state, hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return model, ddp, state, opt


def watch_rebuild(state, log):
    """(d): wraps the take-over so each new layout's residual is compared with its parameters' old ones."""
    original = state._take_over

    def take_over(entry):
        old = {}
        for name in entry.ident:
            k = state.owner.get(name)
            if k is not None and k in state.entries:
                e = state.entries[k]
                res = state._residual(e)
                off = e.offsets[e.ident.index(name)]
                old[name] = res[off:off + e.sizes[e.ident.index(name)]].copy()
        original(entry)
        if old:
            now = state._residual(entry)
            moved = all(np.array_equal(now[o:o + s], old[n]) for n, o, s in zip(entry.ident, entry.offsets, entry.sizes)
                        if n in old)
            log.append((entry.key, moved, int(sum(np.count_nonzero(v) for v in old.values()))))

    state._take_over = take_over


def replay(cfg, world, records):
    """(c): the recorded buckets of step 1 through the C API directly: a communicator from the store,
    a runtime from the same profile, ciuic_allreduce_async + wait. True when every output's bits match."""
    lib = _lib.lib()
    store = ciuic.torch._Store(ciuic.torch._default_store(None))
    comm, rt = ctypes.c_void_p(), ctypes.c_void_p()
    _lib.call("ciuic_comm_create_store", dist.get_rank(), world, f"replay/{cfg.name}".encode(), b"cpu", store.set_fn,
              store.get_fn, None, 60.0, ctypes.byref(comm))
    prof = ciuic.Profile(cfg.profile(world))
    _lib.call("ciuic_runtime_create_profile", comm, prof._h, ciuic.torch.PROPAGATE_NONFINITE,
              world // 2 if cfg.hier else 0, ctypes.byref(rt))
    same = True
    try:
        for rec in records:
            if rec["iteration"] != 0:
                continue
            t = rec["input"].clone()
            req = ctypes.c_void_p()
            _lib.call("ciuic_allreduce_async", rt, ctypes.c_void_p(t.data_ptr()), t.numel(), ciuic.torch._DTYPES[t.dtype],
                      rec["tid"], 1, None, None, None, ctypes.byref(req))
            _lib.call("ciuic_request_wait", req)
            lib.ciuic_request_destroy(req)
            same &= torch.equal(t, rec["output"])
    finally:
        lib.ciuic_runtime_destroy(rt)
        lib.ciuic_comm_destroy(comm)
    return bool(same)


def run_config(cfg, ci, rank, world, phase, tmp):
    ckpt = os.path.join(tmp, f"ckpt.{world}.{ci}.{rank}.pt")
    out = {"hashes": []}
    if phase == "train":
        model, ddp, state, opt = build(cfg, rank, world, seed=0)
        state.record = True
        rebuild = []
        if cfg.named:
            watch_rebuild(state, rebuild)
        for step in range(STEPS_BEFORE):
            out["hashes"].append(train_step(ddp, opt, ci, step, rank, cfg.dtype))
            if step + 1 == RECORDED:
                state.record = False
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "ciuic": state.state_dict()}, ckpt)
        for step in range(STEPS_BEFORE, STEPS_BEFORE + STEPS_AFTER):
            out["hashes"].append(train_step(ddp, opt, ci, step, rank, cfg.dtype))
        out["records"] = [{k: (v.numpy() if isinstance(v, torch.Tensor) and k != "input" and k != "output" else v)
                           for k, v in r.items()} for r in state.records]
        out["rebuild"] = rebuild
        out["config"] = state.config_of(PIECE, cfg.dtype)
        out["replay"] = replay(cfg, world, state.records)
        out["final"] = params_of(model)
        state.close()
        return out
    model, ddp, state, opt = build(cfg, rank, world, seed=1234)  # other weights: the load must matter
    saved = torch.load(ckpt)
    model.load_state_dict(saved["model"])
    opt.load_state_dict(saved["optimizer"])
    state.load_state_dict(saved["ciuic"])
    for step in range(STEPS_BEFORE, STEPS_BEFORE + STEPS_AFTER):
        out["hashes"].append(train_step(ddp, opt, ci, step, rank, cfg.dtype))
        if step == STEPS_BEFORE:  # no layout of its own: the one-bucket iteration went through the saved ones
            out["new_keys"] = sorted(set(state.entries) - set(saved["ciuic"]["buckets"]))
    out["final"] = params_of(model)
    state.close()
    if cfg.stateful:  # the same, without the hook state: must differ
        model, ddp, state, opt = build(cfg, rank, world, seed=1234)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        for step in range(STEPS_BEFORE, STEPS_BEFORE + STEPS_AFTER):
            train_step(ddp, opt, ci, step, rank, cfg.dtype)
        out["final_without_state"] = params_of(model)
        state.close()
    return out


def nan_check(rank, world):
    """(f): rank 0's loss turns NaN at step 3. Per codec: (every bucket of that step all NaN on this rank,
    every residual unchanged by that step, counted by the runtime)."""
    out = {}
    for cfg in CONFIGS:
        if cfg.name not in ("ring int8", "sparse topk:0.01", "sign2 sign1"):
            continue
        model, ddp, state, opt = build(cfg, rank, world, seed=0)
        for step in range(3):
            if step == 2:
                before = {k: state.residual(k) for k in state.entries}
                state.record = True
            train_step(ddp, opt, 0, step, rank, nan=(step == 2 and rank == 0))
        outputs = [r["output"] for r in state.records]
        after = {k: state.residual(k) for k in state.entries}
        same = before.keys() == after.keys() and all(np.array_equal(before[k], after[k]) for k in before)
        out[cfg.name] = (bool(outputs) and all(torch.isnan(o).all().item() for o in outputs), same,
                         state.nonfinite() > 0, any(np.any(v) for v in before.values()))
        state.close()
    return out


def world_check(rank, world):
    """(g): (message of the refusal or None, whether the override was taken)."""
    cfg = CONFIGS[0]
    model = make_model(0)
    try:
        ciuic.torch.comm_hook(cfg.profile(world, ranks=16), module=model)
        refused = None
    except ciuic.UsageError as e:
        refused = str(e)
    state, _ = ciuic.torch.comm_hook(cfg.profile(world, ranks=16), module=model, allow_world_mismatch=True)
    state.close()
    return refused, True


def overlap_check(rank, world):
    """(h): a 64 MiB bucket (one Linear of 16M weights), int8 on the ring: (hook call s, completion s,
    done when the hook returned)."""
    cfg = Config("ring int8", "ring", "int8")
    prof = cfg.profile(world)
    prof["rules"][0]["bucket_bytes"] = 64 << 20
    torch.manual_seed(0)
    model = torch.nn.Linear(4096, 4096, bias=False)
    ddp = DDP(model, bucket_cap_mb=64)
    state, hook = ciuic.torch.comm_hook(prof, module=model)
    seen = []

    def timed(st, bucket):
        t0 = time.perf_counter()
        fut = hook(st, bucket)
        t1 = time.perf_counter()
        done_at_return = fut.done()

        def finished(f):
            seen.append((t1 - t0, time.perf_counter() - t0, done_at_return))
            return f.value()
        return fut.then(finished)

    ddp.register_comm_hook(state, timed)
    for step in range(2):
        ddp(torch.randn(8, 4096)).sum().backward()
    state.close()
    return seen[-1]


def delegation_check(rank, world):
    """(j): a lossless fp32 library rule with the default native="process_group": (buckets handed to the
    process group, buckets the runtime reduced, whether 3 steps end bit for bit where DDP's default hook
    ends with the same buckets)."""
    prof = Config("nccl none", "nccl", "none").profile(world)
    finals = []
    for with_hook in (True, False):
        model = make_model(0)
        ddp = DDP(model, **ciuic.torch.ddp_kwargs(prof))
        state = None
        if with_hook:
            state, hook = ciuic.torch.comm_hook(prof, module=model)
            state.record = True
            ddp.register_comm_hook(state, hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        for step in range(3):
            train_step(ddp, opt, 0, step, rank)
        finals.append(params_of(model))
        if state is not None:
            delegated, reduced = state.delegated, len(state.records)
            state.close()
    try:
        ciuic.torch.comm_hook(prof, module=make_model(0), native="elsewhere")
        refused = False
    except ciuic.UsageError:
        refused = True
    return delegated, reduced, bool(np.array_equal(finals[0], finals[1])), refused


def accumulation_check(rank, world):
    """(i): ciuic.torch.Accumulation(ddp, 2) on the ciuic hook: (hook calls and this rank's gradient after
    micro-batch 0, the same after micro-batch 1, the steps read from a profile's suggestion, the errors
    of misuse)."""
    cfg = Config("ring int8", "ring", "int8")
    prof = cfg.profile(world)
    model = make_model(0)
    ddp = DDP(model, bucket_cap_mb=BUCKET / 2**20)
    state, hook = ciuic.torch.comm_hook(prof, module=model)
    calls = []
    def counted(st, bucket):
        calls.append(1)
        return hook(st, bucket)

    ddp.register_comm_hook(state, counted)
    acc = ciuic.torch.Accumulation(ddp, 2)
    seen = []
    for i in range(2):
        torch.manual_seed(100 + 10 * rank + i)  # each rank its own micro-batches
        with acc.micro_batch(i):
            ddp(torch.randn(8, 32)).pow(2).mean().backward()
        seen.append((len(calls), np.concatenate([p.grad.detach().numpy().ravel() for p in model.parameters()]),
                     acc.sync_step(i)))
    state.close()
    prof["accumulation"] = {"suggested_steps": 4, "codec": "int8", "priced": "model",
                            "candidates": [{"steps": 1, "step_us": 100.0, "gate": "passed"},
                                           {"steps": 4, "step_us": 60.0, "gate": "passed"}]}
    from_profile = ciuic.torch.Accumulation(ddp, "profile", profile=prof).steps
    gain = ciuic.Profile(prof).accumulation.gain()
    del prof["accumulation"]
    none_suggested = ciuic.torch.Accumulation(ddp, "profile", profile=prof).steps
    errors = []
    for bad in ((model, 2), (ddp, 0), (ddp, 2.0), (ddp, "profile")):
        try:
            ciuic.torch.Accumulation(*bad)
            errors.append(None)
        except ciuic.UsageError as e:
            errors.append(str(e))
    return seen, from_profile, gain, none_suggested, errors


def blocks(n, block=256):
    return [(b, min(n, b + block)) for b in range(0, n, block)]


def block_max(g, block=256):
    """Per element: max |g| over its block (blocks from the piece start; the chunks align to them)."""
    out = np.empty(g.size)
    for b, e in blocks(g.size, block):
        out[b:e] = np.abs(g[b:e]).max()
    return out


def topk_kept(g, k):
    """g on the k largest |g| (ties: lower index), zeros elsewhere: an exact top-k, which the codec's
    sampled selection is for pieces of at most 4096 elements (its sample is then the whole piece)."""
    order = np.lexsort((np.arange(g.size), -np.abs(g.astype(np.float64))))
    kept = np.zeros_like(g)
    kept[order[:k]] = g[order[:k]]
    return kept


def seq_sum32(arrays):
    acc = arrays[0].astype(np.float32).copy()
    for a in arrays[1:]:
        acc = (acc + a.astype(np.float32)).astype(np.float32)
    return acc


def sign1_oracle(grads, world, codec):
    """Two-phase sign1 from its definition, in float64: every rank sends sign(g)·RMS(block) per chunk,
    the chunk's server sums them and sends sign(sum)·RMS(block of the sum); the result is that / P.
    Returns (expected, mask of elements whose server sum is too close to 0 to have a stable sign)."""
    n = grads[0].size
    exp, unstable = np.zeros(n), np.zeros(n, bool)
    for c in range(world):
        cb, ce = codec.chunk(n, world, c)
        s = np.zeros(ce - cb)
        for g in grads:
            part = g[cb:ce].astype(np.float64)
            for b, e in blocks(ce - cb):
                rms = np.sqrt(np.mean(part[b:e] ** 2))
                s[b:e] += np.where(np.signbit(part[b:e]), -rms, rms)
        for b, e in blocks(ce - cb):
            rms = np.sqrt(np.mean(s[b:e] ** 2))
            exp[cb + b:cb + e] = np.where(np.signbit(s[b:e]), -rms, rms) / world
            unstable[cb + b:cb + e] = np.abs(s[b:e]) <= 1e-5 * max(rms, 1e-30)
    return exp, unstable


def bound_check(cfg, grads, out, world):
    """(ok, worst error / bound, description): step 1 (residuals zero) of a piece; grads: the ranks'
    gradients, out: the averaged result. Bounds (P ranks, A_r = max |g_r| over an element's 256-block,
    S = sum_r |g_r|, u = the unit roundoff of a 16-bit format):
      int8/int4 ring and hier: every encode errs by at most half a quantisation step, absmax / (2 qmax);
        P contributions plus at most P re-encodes of partial sums (absmax <= sum_r A_r):
        |out - mean| <= (P + 1) sum_r A_r / (2 qmax P)
      fp16/bf16 ring: each of the 2P - 1 roundings (P contributions, P - 1 hop sums) errs by <= u |v|
        (+ 2^-25 absolute for fp16 subnormals), |v| <= S: |out - mean| <= (2P - 1)(u S + d) / P
      none@fp16/bf16 (cast after 1/P, the 16-bit sum): P casts and P - 1 sums: (2P - 1)(u S / P + d)
      topk: P out = sum_r topk(g_r) exactly (fp32 sums), so the error is what the ranks dropped:
        ||out - mean||_2 <= sum_r sqrt(||g_r||^2 - E_k(g_r)) / P, E_k = energy of the k largest
      sign1/sign2: out is the two-phase sign1 of its definition (sign1_oracle), to 1e-5 of the scale
      randomk, powersgd: P out = sum_r decode(encode(g_r)) of a fresh codec state (the codec's own
        approximation of each rank, summed), to fp32 rounding
    A broken hook's output (zeros, one rank's gradient) fails each of these."""
    P = world
    g64 = [g.astype(np.float64) for g in grads]
    mean = sum(g64) / P
    err = np.abs(out.astype(np.float64) - mean)
    S = sum(np.abs(g) for g in g64)
    kind = cfg.codec.split(":")[0]
    if cfg.codec in ("int8", "int4") and cfg.algo in ("ring", "hier"):
        qmax = 127 if cfg.codec == "int8" else 7
        A = sum(block_max(g) for g in grads)
        bound = (P + 1) * A / (2 * qmax * P) * (1 + 1e-3) + 1e-30
        r = float((err / bound).max())
        return r <= 1, r, f"(P+1)·ΣA/(2·{qmax}·P)"
    if cfg.codec in ("fp16", "bf16") or cfg.precision in ("fp16", "bf16"):
        f = cfg.codec if cfg.codec != "none" else cfg.precision
        u, d = (2.0 ** -11, 2.0 ** -25) if f == "fp16" else (2.0 ** -8, 0.0)
        if cfg.codec == "none":  # 1/P applied before the casts
            bound = (2 * P - 1) * (u * S / P + d) * 1.01 + 2.0 ** -23 * S / P
        else:
            bound = (2 * P - 1) * (u * S + d) / P * 1.01 + 2.0 ** -23 * S / P
        r = float((err / (bound + 1e-30)).max())
        return r <= 1, r, f"(2P-1)·(u·S+d)/P, u=2^{int(np.log2(u))}"
    if kind == "topk":
        codec = ciuic.Codec(cfg.codec)
        k = codec.wire_bytes(grads[0].size) // 8
        kept = [topk_kept(g, k) for g in grads]
        want = seq_sum32(kept) * (np.float32(1) / np.float32(P))
        tol = 2.0 ** -22 * sum(np.abs(x.astype(np.float64)) for x in kept) / P + 1e-30
        exact_r = float((np.abs(out.astype(np.float64) - want) / tol).max())
        dropped = sum(np.sqrt(max(0.0, float(np.sum(g ** 2) - np.sum(kk.astype(np.float64) ** 2))))
                      for g, kk in zip(g64, kept)) / P
        l2 = float(np.sqrt(np.sum((out.astype(np.float64) - mean) ** 2)))
        r = max(l2 / (dropped * (1 + 1e-5) + 1e-30), exact_r)
        return r <= 1, r, "‖err‖₂ ≤ Σ_r √(‖g_r‖² − E_k(g_r))/P; P·out = Σ_r topk(g_r)"
    if kind == "sign1":
        exp, unstable = sign1_oracle(grads, P, ciuic.Codec("sign1"))
        scale = np.abs(exp) + 1e-30
        dev = np.where(unstable, 0.0, np.abs(out - exp) / scale)
        r = float(dev.max()) / 1e-5
        return r <= 1, r, "two-phase sign1 by definition, to 1e-5 of the scale"
    if kind == "randomk":
        codec = ciuic.Codec(cfg.codec)
        approx = []
        for g in grads:
            w, s = codec.encode(g, ciuic.CodecState(codec, g.size))
            approx.append(codec.decode(w, g.size, s))
        want = sum(a.astype(np.float64) for a in approx) / P
        tol = 2.0 ** -20 * sum(np.abs(a.astype(np.float64)) for a in approx) / P + 1e-30
        r = float((np.abs(out - want) / tol).max())
        return r <= 1, r, "P·out = Σ_r decode(encode(g_r)), to fp32 rounding"
    if kind == "powersgd":
        # Two allreduces: P̂ = orth(Σ_r M_r Q0), out = P̂ (Σ_r M_rᵀ P̂)ᵀ / P = P̂ P̂ᵀ mean(M): the exact mean
        # projected onto an r-dimensional column space, which is out's own. So out must have rank r and
        # equal the projection of the mean onto its top r left singular vectors.
        rank = int(cfg.codec.split(":")[1])
        n = out.size
        cols = int(np.ceil(np.sqrt(n)))
        rows = -(-n // cols)

        def view(v):  # the runtime's matrix view: rows x cols, row-major, zero-padded past n
            m = np.zeros(rows * cols)
            m[:n] = v
            return m.reshape(rows, cols)
        k = min(rank, rows, cols)
        m = view(mean)
        # out's last row is cut at n (the view is zero-padded past it, the reconstruction is not): it lies
        # in the row space of the full rows, so its cut-off entries follow from the ones kept.
        full, tail = n // cols, n % cols
        o = out.astype(np.float64)
        rows_o = o[:full * cols].reshape(full, cols)
        if tail:
            v = np.linalg.svd(rows_o, full_matrices=False)[2][:k].T
            if tail < k:
                return None, 0.0, "checked against the ciuic runtime's bits"
            z = np.linalg.lstsq(v[:tail], o[full * cols:], rcond=None)[0]
            rows_o = np.vstack([rows_o, (v @ z)[None, :]])
        u, sv, _ = np.linalg.svd(rows_o, full_matrices=False)
        if sv[0] == 0 or sv[k - 1] <= 1e-6 * sv[0]:
            return False, float("inf"), "out = P̂P̂ᵀ·mean on rank-r P̂ (two allreduces)"
        uk = u[:, :k]
        proj = (uk @ (uk.T @ m)).reshape(-1)[:n]
        r = float(np.abs(proj - out).max() / (1e-4 * np.abs(mean).max() + 1e-30))
        return r <= 1, r, "out = P̂P̂ᵀ·mean on rank-r P̂ (two allreduces), 1e-4 of max|mean|"
    return None, 0.0, "checked against the ciuic runtime's bits"




def worker(rank, world, phase, tmp, init_file):
    # DDP's C++ notes (find_unused_parameters) and the hook's warnings go to a file, shown on failure.
    err = os.open(os.path.join(tmp, f"stderr.{phase}.{world}.{rank}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(err, 2)
    torch.set_num_threads(1)
    # DDP's first bucket (1 MiB by default) as small as the rest, so this small model has several.
    dist._DEFAULT_FIRST_BUCKET_BYTES = BUCKET
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    results, times = {}, {}
    for ci, cfg in enumerate(CONFIGS):
        t0 = time.time()
        results[cfg.name] = run_config(cfg, ci, rank, world, phase, tmp)
        times[cfg.name] = time.time() - t0
    if phase == "train":
        results["_nan"] = nan_check(rank, world)
        results["_world"] = world_check(rank, world)
        if world == 2:
            dist._DEFAULT_FIRST_BUCKET_BYTES = 64 << 20
            results["_overlap"] = overlap_check(rank, world)
            dist._DEFAULT_FIRST_BUCKET_BYTES = BUCKET
            results["_accum"] = accumulation_check(rank, world)
            results["_delegate"] = delegation_check(rank, world)
    results["_times"] = times
    torch.save(results, os.path.join(tmp, f"{phase}.{world}.{rank}.pt"))
    dist.barrier()
    # torch 1.13's DDP teardown can deadlock at interpreter exit (see ddp_export_test.py).
    sys.stdout.flush()
    os._exit(0)


def run_phase(world, phase, tmp):
    init = os.path.join(tmp, f"init.{phase}.{world}")
    t0 = time.time()
    # fork: the children start with torch imported (seconds per process on this machine otherwise).
    ctx = mp.start_processes(worker, args=(world, phase, tmp, init), nprocs=world, start_method="fork", join=False)
    limit = 400
    deadline = time.time() + limit

    def show_stderr():
        for r in range(world):
            with open(os.path.join(tmp, f"stderr.{phase}.{world}.{r}"), errors="replace") as f:
                print(f"--- rank {r} stderr ---\n{f.read()[-3000:]}")

    try:
        while not ctx.join(timeout=1):
            if time.time() > deadline:
                for p in ctx.processes:
                    p.kill()
                show_stderr()
                sys.exit(f"{phase} with {world} ranks did not finish in {limit} s")
    except Exception:
        show_stderr()
        raise
    results = [torch.load(os.path.join(tmp, f"{phase}.{world}.{r}.pt")) for r in range(world)]
    return results, time.time() - t0


# ---- checks -------------------------------------------------------------------------------------------
failures = []


def expect(ok, message):
    if not ok:
        failures.append(message)
        print("FAIL:", message)
    return ok


def exact_bound(cfg, grads, out, world):
    """Lossless fp32 (the library's sum, rd, the uncompressed ring and hier): P - 1 fp32 additions of
    |v| <= S and one scaling: |out - mean| <= P·2^-24·S/P, a broken result is far off."""
    g64 = [g.astype(np.float64) for g in grads]
    mean = sum(g64) / world
    S = sum(np.abs(g) for g in g64)
    bound = world * 2.0 ** -24 * S / world * 1.01 + 1e-30
    r = float((np.abs(out.astype(np.float64) - mean) / bound).max())
    return r <= 1, r, "P·2^-24·S/P (fp32 sums)"


def analyse(world, train, resume, report):
    tag = f"P={world}"
    for name in train[0]["_nan"]:
        for r, res in enumerate(train):
            nan, same, counted, had = res["_nan"][name]
            expect(nan and same and counted and had,
                   f"{tag} {name} rank {r}: a NaN gradient on rank 0 gave: all NaN {nan}, residuals unchanged "
                   f"{same}, counted {counted}, residuals non-zero before {had}")
    for r, res in enumerate(train):
        refused, taken = res["_world"]
        expect(refused is not None and "16" in refused and f"this job has {world} cpu ranks" in refused and taken,
               f"{tag} rank {r}: a 16-rank profile was not refused at comm_hook() naming both worlds: {refused}")
    if world == 2:
        for r, res in enumerate(train):
            call_s, done_s, done_at_return = res["_overlap"]
            expect(not done_at_return and call_s < done_s / 4,
                   f"{tag} rank {r}: the hook did not return before its 64 MiB bucket was reduced "
                   f"(call {call_s * 1e3:.2f} ms, done {done_s * 1e3:.1f} ms, done at return {done_at_return})")
            report.setdefault("_overlap", []).append((call_s, done_s))
        # Accumulation: micro-batch 0 under no_sync (no hook call, each rank its own gradient), micro-batch
        # 1 synchronises the sum of both (the hook runs, every rank ends with the same gradient).
        for r, res in enumerate(train):
            delegated, reduced, equal, refused = res["_delegate"]
            expect(delegated > 0 and reduced == 0 and equal and refused,
                   f"{tag} rank {r}: a lossless library rule: {delegated} buckets to the process group (want > 0), "
                   f"{reduced} through the runtime (want 0), the same bits as DDP's default hook {equal}, "
                   f"native='elsewhere' refused {refused}")
        accs = [res["_accum"] for res in train]
        (c0, g0, s0), (c1, g1, s1) = accs[0][0]
        (_, h0, _), (_, h1, _) = accs[1][0]
        expect(c0 == 0 and not s0 and s1 and c1 > 0,
               f"{tag} Accumulation(ddp, 2): hook calls after micro-batch 0 {c0} (want 0), after 1 {c1} (want > 0)")
        expect(not np.allclose(g0, h0), f"{tag} Accumulation: micro-batch 0 was synchronised (ranks agree)")
        expect(np.array_equal(g1, h1), f"{tag} Accumulation: after micro-batch 1 the ranks' gradients differ")
        for r, (_, from_profile, gain, none_suggested, errors) in enumerate(accs):
            expect(from_profile == 4 and abs(gain - 100 / 60) < 1e-9 and none_suggested == 1,
                   f"{tag} rank {r}: Accumulation from a profile: {from_profile} (want 4), gain {gain}, "
                   f"without a suggestion {none_suggested} (want 1)")
            expect(all(e is not None for e in errors), f"{tag} rank {r}: Accumulation misuse accepted: {errors}")
    for cfg in CONFIGS:
        tr = [res[cfg.name] for res in train]
        rs = [res[cfg.name] for res in resume]
        row = report.setdefault(cfg.name, {})
        row["config"] = tr[0]["config"]
        # (a) identical parameters on every rank after every step, in both runs.
        for step in range(STEPS_BEFORE + STEPS_AFTER):
            expect(len({t["hashes"][step] for t in tr}) == 1, f"{tag} {cfg.name}: ranks differ after step {step + 1}")
        for step in range(STEPS_AFTER):
            expect(len({t["hashes"][step] for t in rs}) == 1,
                   f"{tag} {cfg.name}: resumed ranks differ after step {STEPS_BEFORE + step + 1}")
        # (e) the resumed run continues bit for bit.
        same = all(np.array_equal(a["final"], b["final"]) for a, b in zip(tr, rs))
        expect(same and rs[0]["hashes"] == tr[0]["hashes"][STEPS_BEFORE:],
               f"{tag} {cfg.name}: the run resumed from the checkpoint differs from the uninterrupted one")
        row[f"resume{world}"] = "equal" if same else "DIFFERS"
        if cfg.named:
            expect(all(not r["new_keys"] for r in rs),
                   f"{tag} {cfg.name}: the resumed first iteration made bucket layouts of its own: {rs[0]['new_keys']}")
        if "final_without_state" in rs[0]:
            expect(not all(np.array_equal(a["final"], b["final_without_state"]) for a, b in zip(tr, rs)),
                   f"{tag} {cfg.name}: resuming without the hook state gives the same parameters (state unused?)")
        # (c) one code path: the C API on the same inputs gives the hook's bits.
        expect(all(t["replay"] for t in tr), f"{tag} {cfg.name}: the C API's result differs from the hook's")
        row[f"rt{world}"] = "bits equal" if all(t["replay"] for t in tr) else "DIFFERS"
        # (d) the rebuild carried every residual to the new layout.
        if cfg.named and cfg.stateful:
            moves = [m for t in tr for m in t["rebuild"]]
            expect(moves and all(ok for _, ok, _ in moves) and any(nz for _, _, nz in moves),
                   f"{tag} {cfg.name}: error feedback did not follow the parameters over DDP's rebuild: {moves}")
            row[f"move{world}"] = f"{sum(nz for _, _, nz in moves)} values" if moves else "-"
        if cfg.dtype != torch.float32:
            continue
        # (b) step 1, every piece of the one bucket of every parameter, against its bound.
        firsts = [[rec for rec in t["records"] if rec["iteration"] == 0] for t in tr]
        worst, bounded = 0.0, None
        for i in range(len(firsts[0])):
            ins = [f[i]["input"].numpy() for f in firsts]
            out = firsts[0][i]["output"].numpy()
            expect(all(np.array_equal(out, f[i]["output"].numpy()) for f in firsts),
                   f"{tag} {cfg.name}: results differ by rank")
            for b in range(0, out.size, PIECE):
                grads = [x[b:b + PIECE] for x in ins]
                piece = out[b:b + PIECE]
                if cfg.codec == "none" and cfg.precision == "fp32":
                    ok, ratio, what = exact_bound(cfg, grads, piece, world)
                else:
                    ok, ratio, what = bound_check(cfg, grads, piece, world)
                if ok is None:
                    continue
                bounded, worst = what, max(worst, ratio)
                expect(ok, f"{tag} {cfg.name} piece {b}: error {ratio:.3g} x the bound {what}")
                for name, broken in (("zeros", np.zeros_like(piece)), ("rank 0's gradient", grads[0].copy())):
                    bad_ok, bad_ratio, _ = (exact_bound if cfg.codec == "none" and cfg.precision == "fp32"
                                            else bound_check)(cfg, grads, broken, world)
                    expect(not bad_ok, f"{tag} {cfg.name}: a broken hook returning {name} passes the bound")
                    row[f"neg{world}"] = min(row.get(f"neg{world}", np.inf), bad_ratio)
        if bounded:
            row[f"b{world}"] = f"{worst:.3f}"
            row["bound"] = bounded


def main():
    t_start = time.time()
    try:
        lib = ciuic.library_path()
    except OSError as e:
        sys.exit(f"cannot load libciuic: {e}")
    print(f"libciuic: {lib}")
    report, timings = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for world in (2, 4):
            train, t_train = run_phase(world, "train", tmp)
            resume, t_resume = run_phase(world, "resume", tmp)
            timings[world] = (t_train, t_resume)
            analyse(world, train, resume, report)
    print(f"{'configuration':<22} {'runtime runs (2048 fp32)':<30} {'bound (b)':<44} {'err/bound P=2':>13} {'P=4':>7} "
          f"{'broken/bound':>12} {'C API P=2':>10} {'P=4':>10} {'rebuild P=2':>12} {'resume':>7}")
    for cfg in CONFIGS:
        r = report.get(cfg.name, {})
        neg = min(r.get("neg2", np.inf), r.get("neg4", np.inf))
        print(f"{cfg.name:<22} {r.get('config', '-'):<30} {r.get('bound', '-'):<44} {r.get('b2', '-'):>13} "
              f"{r.get('b4', '-'):>7} {'' if neg == np.inf else f'{neg:.3g}':>12} {r.get('rt2', '-'):>10} "
              f"{r.get('rt4', '-'):>10} {r.get('move2', '-'):>12} "
              f"{'equal' if r.get('resume2') == r.get('resume4') == 'equal' else 'DIFFERS':>7}")
    for call_s, done_s in report.get("_overlap", []):
        print(f"64 MiB int8 bucket, 2 ranks: hook call {call_s * 1e3:.2f} ms, Future done after {done_s * 1e3:.1f} ms")
    for world, (a, b) in timings.items():
        print(f"P={world}: train {a:.1f} s, resume {b:.1f} s")
    print(f"total {time.time() - t_start:.1f} s")
    if failures:
        sys.exit(f"{len(failures)} check(s) failed")
    print("comm_hook_test: all checks passed")


if __name__ == "__main__":
    main()
