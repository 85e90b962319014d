#!/usr/bin/env python3
"""ciuic.torch.comm_hook under real PyTorch DDP (Debian's python3-torch, gloo on CPU), 2 and 4 processes.

For every configuration (a profile of one rule: codec none in fp32, fp16 and bf16; int8, int4, fp8e4m3,
fp16, bf16 on the compressed ring; topk on sparse; randomk; sign1 on two-phase sign2; powersgd; int8 on
hier across two "nodes"; int8 keyed by shapes with find_unused_parameters) a small MLP trains with
SGD + momentum for 6 steps, the hook recording what it reduced, and a checkpoint taken after step 3:

  (a) after every step every rank's parameters are bitwise identical (hashes compared);
  (b) step 1's averaged gradient against the exact mean of the ranks' gradients, within the bound the
      codec and algorithm give (derived in `bound_check`), and the same check applied to a broken hook
      (zeros; rank 0's gradient alone) must fail; codec none equals DDP without a hook bit for bit;
      the ring, sparse, sign2 and randomk results equal the ciuic runtime's own (ciuic_local_run,
      thread ranks) on the same gradients, bit for bit;
  (c) error feedback over 4 steps: decoded contribution + new residual = gradient + old residual on
      every rank (and summed over ranks) to float rounding; the results follow from the contributions
      (the sum in rank order; sign2's server keeps the same invariant); DDP's bucket rebuild after
      step 1 moves every residual value to the new layout, none lost;
  (d) fresh processes load model, optimizer and hook state and train the same 3 steps: parameters
      equal the uninterrupted run's bit for bit (DDP's first iteration there reduces one bucket of every
      parameter, which the hook must cut into the saved buckets); without the hook state they differ;
  (e) a NaN gradient on one rank reaches every rank as NaN (no hang, no silent encoding) and leaves
      the codec state as it was.
Under mpiexec (when present and libciuic has MPI), transport="mpi" (the ciuic runtime itself) gives
the same bits as the gloo path.

Needs Debian's python3-torch (/usr/bin/python3); exits 77 (skipped) without it.
    comm_hook_test.py            (CIUIC_LIBRARY names libciuic.so; PYTHONPATH holds python/)
"""
import datetime
import hashlib
import json
import os
import shutil
import subprocess
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

BUCKET = 8192          # profile bucket_bytes = DDP's bucket cap = the first bucket (set below): several buckets
STEPS_BEFORE, STEPS_AFTER = 3, 3
RECORDED = 4           # steps whose hook records are kept (the first is DDP's one-bucket iteration)
BASE_PROFILE = os.path.join(REPO, "profiles", "dgx_a100.profile.json")


class Config:
    def __init__(self, name, algo, codec, precision="fp32", named=True, find_unused=False, hier=False):
        self.name, self.algo, self.codec, self.precision = name, algo, codec, precision
        self.named, self.find_unused, self.hier = named, find_unused, hier

    def profile(self):
        d = json.load(open(BASE_PROFILE))
        rule = dict(d["rules"][0])
        rule.update(min_bytes=0, max_bytes=0, algo=self.algo, codec=self.codec, precision=self.precision,
                    bucket_bytes=BUCKET, hierarchy_depth=2 if self.hier else 1,
                    gate="n/a" if self.codec == "none" else "passed")
        d["rules"] = [rule]
        return d


CONFIGS = [
    Config("none", "nccl", "none"),
    Config("none@fp16", "nccl", "none", precision="fp16"),
    Config("none@bf16", "nccl", "none", precision="bf16"),
    Config("int8/ring", "ring", "int8"),
    Config("int4/ring", "ring", "int4"),
    Config("fp8e4m3/ring", "ring", "fp8e4m3"),
    Config("fp16/ring", "ring", "fp16"),
    Config("bf16/ring", "ring", "bf16"),
    Config("topk/sparse", "sparse", "topk:0.05"),
    Config("randomk/ring", "ring", "randomk:0.1"),
    Config("sign1/sign2", "sign2", "sign1"),
    Config("powersgd", "powersgd", "powersgd:2"),
    Config("int8/hier", "hier", "int8", hier=True),
    Config("int8/ring shapes", "ring", "int8", named=False, find_unused=True),
]
# The runtime's algorithm for each configuration compared with ciuic_local_run (bit for bit).
RUNTIME_ALGO = {"int8/ring": "ring", "int4/ring": "ring", "fp8e4m3/ring": "ring", "fp16/ring": "ring",
                "bf16/ring": "ring", "topk/sparse": "sparse", "randomk/ring": "ring", "sign1/sign2": "sign2"}


def make_model(seed):
    torch.manual_seed(seed)
    # 5722 parameters: DDP's first iteration reduces them as one bucket (3 pieces of 2048), then two.
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 48), torch.nn.Tanh(),
                               torch.nn.Linear(48, 10))


def params_of(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()]).numpy().copy()


def train_step(ddp, opt, ci, step, rank):
    g = torch.Generator().manual_seed(1000003 * ci + 1009 * step + rank)
    x, y = torch.randn(16, 32, generator=g), torch.randn(16, 10, generator=g)
    opt.zero_grad()
    ((ddp(x) - y) ** 2).mean().backward()
    opt.step()
    return hashlib.sha1(params_of(ddp.module).tobytes()).hexdigest()


def build(cfg, ci, rank, world, seed, transport="process_group"):
    model = make_model(seed)
    prof = cfg.profile()
    ddp = DDP(model, find_unused_parameters=cfg.find_unused, **ciuic.torch.ddp_kwargs(prof))
    state, hook = ciuic.torch.comm_hook(prof, module=model if cfg.named else None, transport=transport,
                                        ranks_per_node=world // 2 if cfg.hier else 0)
    ddp.register_comm_hook(state, hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return model, ddp, state, opt


def run_config(cfg, ci, rank, world, phase, tmp):
    ckpt = os.path.join(tmp, f"ckpt.{world}.{ci}.{rank}.pt")
    out = {"hashes": []}
    if phase == "train":
        model, ddp, state, opt = build(cfg, ci, rank, world, seed=0)
        state.record = True
        for step in range(STEPS_BEFORE):
            out["hashes"].append(train_step(ddp, opt, ci, step, rank))
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "ciuic": state.state_dict()}, ckpt)
        for step in range(STEPS_BEFORE, STEPS_BEFORE + STEPS_AFTER):
            out["hashes"].append(train_step(ddp, opt, ci, step, rank))
            if step + 1 == RECORDED:
                state.record = False
        out["records"] = [r for r in state.records if r["iteration"] < RECORDED]
        out["entries"] = sorted(state.entries)
    else:
        model, ddp, state, opt = build(cfg, ci, rank, world, seed=1234)  # other weights: the load must matter
        saved = torch.load(ckpt)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        state.load_state_dict(saved["ciuic"])
        for step in range(STEPS_BEFORE, STEPS_BEFORE + STEPS_AFTER):
            out["hashes"].append(train_step(ddp, opt, ci, step, rank))
            if step == STEPS_BEFORE:  # no layout of its own: the one-bucket iteration went through the saved ones
                out["new_keys"] = sorted(set(state.entries) - set(saved["ciuic"]["buckets"]))
        out["final"] = params_of(model)
        if cfg.codec != "none":  # the same, without the hook state: must differ
            model, ddp, state, opt = build(cfg, ci, rank, world, seed=1234)
            model.load_state_dict(saved["model"])
            opt.load_state_dict(saved["optimizer"])
            for step in range(STEPS_BEFORE, STEPS_BEFORE + STEPS_AFTER):
                train_step(ddp, opt, ci, step, rank)
            out["final_without_state"] = params_of(model)
        return out
    out["final"] = params_of(model)
    return out


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
    if phase == "train":  # DDP without a hook on the data of config "none"
        model = make_model(0)
        ddp = DDP(model, **ciuic.torch.ddp_kwargs(CONFIGS[0].profile()))
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        results["plain"] = {"hashes": [train_step(ddp, opt, 0, s, rank) for s in range(STEPS_BEFORE + STEPS_AFTER)]}
    results["_times"] = times
    torch.save(results, os.path.join(tmp, f"{phase}.{world}.{rank}.pt"))
    dist.barrier()
    # torch 1.13's DDP teardown can deadlock at interpreter exit (see ddp_export_test.py).
    sys.stdout.flush()
    os._exit(0)


def snapshot(state):
    """Worker residuals and server residuals of every bucket."""
    return {k: (e.residual(), [p.server.residual() if p.server is not None else None for p in e.pieces])
            for k, e in state.entries.items()}


def same(a, b):
    return (a is None and b is None) or (a is not None and b is not None and np.array_equal(a, b))


def nan_check(rank, world):
    """(e): rank 0's gradient turns NaN at step 3. Per codec: (every hook result all NaN on this rank,
    this rank's worker residuals unchanged by that step, its server residuals unchanged, counted)."""
    out = {}
    for cfg in (CONFIGS[3], CONFIGS[8], CONFIGS[10]):  # int8/ring (element codec), topk/sparse, sign1/sign2
        model, ddp, state, opt = build(cfg, 0, rank, world, seed=0)
        for step in range(3):
            opt.zero_grad()
            g = torch.Generator().manual_seed(77 + 10 * step + rank)
            x, y = torch.randn(16, 32, generator=g), torch.randn(16, 10, generator=g)
            loss = ((ddp(x) - y) ** 2).mean()
            if step == 2:
                before = snapshot(state)
                state.record = True
                if rank == 0:
                    loss = loss * float("nan")
            loss.backward()
        results = [r["result"] for r in state.records]
        after = snapshot(state)
        keys = set(before) == set(after)
        worker = keys and all(same(before[k][0], after[k][0]) for k in before)
        server = keys and all(same(x, y) for k in before for x, y in zip(before[k][1], after[k][1]))
        out[cfg.name] = (bool(results) and all(np.isnan(r).all() for r in results), worker, server, state.nonfinite > 0)
    return out


def run_phase(world, phase, tmp):
    init = os.path.join(tmp, f"init.{phase}.{world}")
    t0 = time.time()
    # fork: the children start with torch imported (seconds per process on this machine otherwise).
    ctx = mp.start_processes(worker, args=(world, phase, tmp, init), nprocs=world, start_method="fork", join=False)
    deadline = time.time() + 150

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
                sys.exit(f"{phase} with {world} ranks did not finish in 150 s")
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
    if kind in ("randomk", "powersgd"):
        codec = ciuic.Codec(cfg.codec)
        approx = []
        for g in grads:
            w, s = codec.encode(g, ciuic.CodecState(codec, g.size))
            approx.append(codec.decode(w, g.size, s))
        want = sum(a.astype(np.float64) for a in approx) / P
        tol = 2.0 ** -20 * sum(np.abs(a.astype(np.float64)) for a in approx) / P + 1e-30
        r = float((np.abs(out - want) / tol).max())
        return r <= 1, r, "P·out = Σ_r decode(encode(g_r)), to fp32 rounding"
    return None, 0.0, "checked against the ciuic runtime's bits"


def check_ef(cfg, recs_by_rank, world, world_tag):
    """(c): the error-feedback invariant per rank and summed, the results from the contributions, and
    the residuals carried over DDP's bucket rebuild. Returns the worst invariant deviation / tolerance."""
    worst = 0.0
    tol_rel = 1e-5 if cfg.codec.startswith("powersgd") else 2.0 ** -22
    by_call = {}
    for r, recs in enumerate(recs_by_rank):
        for i, rec in enumerate(recs):
            by_call.setdefault((rec["iteration"], rec["key"], rec["piece"], i), [None] * world)[r] = rec
    ef_active = False
    for (it, key, piece, _), recs in sorted(by_call.items(), key=lambda kv: kv[0][3]):
        if any(x is None for x in recs):
            expect(False, f"{world_tag} {cfg.name}: ranks reduced different pieces at iteration {it}")
            continue
        if "residual_before" not in recs[0]:
            continue
        lhs_sum, rhs_sum, scale_sum = 0.0, 0.0, 0.0
        for rec in recs:
            q = rec["contribution"].astype(np.float64)
            lhs = q + rec["residual_after"]
            rhs = rec["grad"].astype(np.float64) + rec["residual_before"]
            scale = np.abs(rec["grad"]) + np.abs(rec["residual_before"]) + np.abs(rec["residual_after"]) + np.abs(q)
            dev = float((np.abs(lhs - rhs) / (tol_rel * scale + 1e-30)).max())
            worst = max(worst, dev)
            lhs_sum, rhs_sum, scale_sum = lhs_sum + lhs, rhs_sum + rhs, scale_sum + scale
            ef_active |= bool(np.any(rec["residual_after"] != 0))
        dev = float((np.abs(lhs_sum - rhs_sum) / (tol_rel * scale_sum + 1e-30)).max())
        worst = max(worst, dev)
        # The result from the contributions.
        contrib = [rec["contribution"] for rec in recs]
        out = recs[0]["result"]
        inv_p = np.float32(1) / np.float32(world)
        if recs[0]["plan"] in ("sparse", "allgather"):
            expect(np.array_equal(out, seq_sum32(contrib) * inv_p),
                   f"{world_tag} {cfg.name} it {it}: the result is not the rank-order sum of the contributions")
        elif recs[0]["plan"] == "randomk":
            want = seq_sum32(contrib) * inv_p
            ok = np.all(np.abs(out - want) <= 2.0 ** -21 * sum(np.abs(c) for c in contrib) + 1e-30)
            expect(ok, f"{world_tag} {cfg.name} it {it}: the result is not the sum of the contributions")
        elif recs[0]["plan"] == "sign2":
            codec = ciuic.Codec("sign1")
            for c, rec in enumerate(recs):
                b, e = codec.chunk(out.size, world, c)
                expect(np.array_equal(rec["server_sum"], seq_sum32([x[b:e] for x in contrib])),
                       f"{world_tag} sign2 it {it}: rank {c}'s server sum is not the sum of the workers' chunks")
                sl = rec["server_decoded"].astype(np.float64) + rec["server_after"]
                sr = rec["server_sum"].astype(np.float64) + rec["server_before"]
                sc = np.abs(rec["server_sum"]) + np.abs(rec["server_before"]) + np.abs(rec["server_after"])
                worst = max(worst, float((np.abs(sl - sr) / (tol_rel * sc + 1e-30)).max(initial=0)))
                expect(np.array_equal(out[b:e], rec["server_decoded"] * inv_p),
                       f"{world_tag} sign2 it {it}: chunk {c} of the result is not its server's wire decoded")
        elif recs[0]["plan"] == "ring" and cfg.codec in ("int8", "fp16", "bf16"):
            total = sum(c.astype(np.float64) for c in contrib)
            if cfg.codec == "int8":
                bound = world * sum(block_max(c) for c in contrib) / 254 * 1.01
            else:
                u = 2.0 ** -11 if cfg.codec == "fp16" else 2.0 ** -8
                bound = world * (u * sum(np.abs(c) for c in contrib) + 2.0 ** -25) * 1.01
            expect(np.all(np.abs(out * world - total) <= bound + 2.0 ** -22 * np.abs(total) + 1e-30),
                   f"{world_tag} {cfg.name} it {it}: the ring's hops moved the sum beyond their re-encoding bound")
    if any("residual_before" in rec for rec in recs_by_rank[0]):
        expect(ef_active, f"{world_tag} {cfg.name}: every residual stayed zero (no error feedback)")
    # DDP rebuilds its buckets after iteration 0: every residual value moves to the new layout.
    for r, recs in enumerate(recs_by_rank):
        after0 = [x["residual_after"] for x in recs if x["iteration"] == 0 and "residual_after" in x]
        before1 = [x["residual_before"] for x in recs if x["iteration"] == 1 and "residual_before" in x]
        if after0 and before1 and cfg.named:
            a, b = np.sort(np.concatenate(after0)), np.sort(np.concatenate(before1))
            expect(np.array_equal(a, b), f"{world_tag} {cfg.name} rank {r}: residuals lost or changed in "
                                         "DDP's bucket rebuild")
    return worst


def runtime_result(algo, codec, bucket_bytes, inputs):
    """The ciuic runtime's averaged allreduce of inputs[r] on len(inputs) thread ranks (ciuic_local_run)."""
    import ctypes

    lib = ciuic._lib.lib()
    outs = [np.array(x, dtype=np.float32, copy=True) for x in inputs]
    errors = []

    @ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
    def body(comm, _arg):
        try:
            r = lib.ciuic_comm_rank(comm)
            rt = ctypes.c_void_p()
            ciuic._lib.call("ciuic_runtime_create", comm, algo.encode(), codec.encode(), bucket_bytes, ctypes.byref(rt))
            try:
                ciuic._lib.call("ciuic_allreduce", rt, outs[r].ctypes.data_as(ctypes.c_void_p), outs[r].size, 1, 1)
            finally:
                lib.ciuic_runtime_destroy(rt)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(str(e))

    ciuic._lib.call("ciuic_local_run", len(inputs), ctypes.cast(body, ctypes.c_void_p), None)
    if errors:
        raise RuntimeError("; ".join(errors))
    return outs


def analyse(world, train, resume, report):
    tag = f"P={world}"
    for name in train[0]["_nan"]:
        for r, res in enumerate(train):
            nan, worker, server, counted = res["_nan"][name]
            # The NaN rank keeps its residual (its blocks were not encoded); topk's bucket went uncompressed
            # on every rank; every server's sum held NaN; finite ranks of the ring update theirs as usual.
            want_worker = r == 0 or name == "topk/sparse"
            expect(nan and (worker or not want_worker) and server and counted,
                   f"{tag} {name} rank {r}: a NaN gradient on rank 0 gave: all NaN {nan}, residual unchanged "
                   f"{worker}, server residual unchanged {server}, counted {counted}")
    for cfg in CONFIGS:
        tr = [res[cfg.name] for res in train]
        rs = [res[cfg.name] for res in resume]
        # (a) identical parameters on every rank after every step, in both runs.
        for step in range(STEPS_BEFORE + STEPS_AFTER):
            expect(len({t["hashes"][step] for t in tr}) == 1, f"{tag} {cfg.name}: ranks differ after step {step + 1}")
        for step in range(STEPS_AFTER):
            expect(len({t["hashes"][step] for t in rs}) == 1,
                   f"{tag} {cfg.name}: resumed ranks differ after step {STEPS_BEFORE + step + 1}")
        # (d) the resumed run continues bit for bit.
        same = all(np.array_equal(a["final"], b["final"]) for a, b in zip(tr, rs))
        expect(same and rs[0]["hashes"] == tr[0]["hashes"][STEPS_BEFORE:],
               f"{tag} {cfg.name}: the run resumed from the checkpoint differs from the uninterrupted one")
        row = report.setdefault(cfg.name, {})
        row[f"resume{world}"] = "equal" if same else "DIFFERS"
        if cfg.named:
            expect(all(not r["new_keys"] for r in rs),
                   f"{tag} {cfg.name}: the resumed first iteration made bucket layouts of its own: {rs[0]['new_keys']}")
        if "final_without_state" in rs[0]:
            expect(not all(np.array_equal(a["final"], b["final_without_state"]) for a, b in zip(tr, rs)),
                   f"{tag} {cfg.name}: resuming without the hook state gives the same parameters (state unused?)")
        if cfg.name == "none":
            expect(tr[0]["hashes"] == train[0]["plain"]["hashes"],
                   f"{tag} none: the hook's parameters differ from DDP's default allreduce")
            row[f"b{world}"] = "= DDP default" if tr[0]["hashes"] == train[0]["plain"]["hashes"] else "DIFFERS"
            continue
        recs = [t["records"] for t in tr]
        # (b) step 1, every piece of every bucket (one bucket of every parameter unless find_unused).
        first = {}
        for r, rr in enumerate(recs):
            for rec in rr:
                if rec["iteration"] == 0:
                    first.setdefault((rec["key"], rec["piece"]), [None] * world)[r] = rec
        worst, bounded = 0.0, None
        for piece, prs in sorted(first.items()):
            grads = [p["grad"] for p in prs]
            out = prs[0]["result"]
            expect(all(np.array_equal(out, p["result"]) for p in prs), f"{tag} {cfg.name}: results differ by rank")
            ok, ratio, what = bound_check(cfg, grads, out, world)
            if ok is None:
                continue
            bounded = what
            worst = max(worst, ratio)
            expect(ok, f"{tag} {cfg.name} piece {piece}: error {ratio:.3g} x the bound {what}")
            for name, broken in (("zeros", np.zeros_like(out)), ("rank 0's gradient", grads[0].copy())):
                bad_ok, bad_ratio, _ = bound_check(cfg, grads, broken, world)
                expect(not bad_ok, f"{tag} {cfg.name}: a broken hook returning {name} passes the bound")
                row[f"neg{world}"] = min(row.get(f"neg{world}", np.inf), bad_ratio)
        if bounded:
            row[f"b{world}"] = f"{worst:.3f}"
            row["bound"] = bounded
        # ... and the ciuic runtime's own bits on the same gradients.
        if cfg.name in RUNTIME_ALGO:
            equal = True
            for key in sorted({k for k, _ in first}):
                pieces = sorted(p for k, p in first if k == key)
                inputs = [np.concatenate([first[key, p][r]["grad"] for p in pieces]) for r in range(world)]
                mine = np.concatenate([first[key, p][0]["result"] for p in pieces])
                theirs = runtime_result(RUNTIME_ALGO[cfg.name], cfg.codec, BUCKET, inputs)
                if cfg.name == "randomk/ring" and world > 2:
                    # the k values are summed by gloo's allreduce and the runtime's ring, each in its own order
                    tol = 2.0 ** -21 * sum(np.abs(i) for i in inputs) / world + 1e-30
                    equal &= all(np.all(np.abs(mine - t) <= tol) for t in theirs)
                    exact = "≤ fp32 rounding"
                else:
                    equal &= all(np.array_equal(mine, t) for t in theirs)
                    exact = "bits equal"
            expect(equal, f"{tag} {cfg.name}: the hook's result differs from the ciuic runtime's")
            row[f"rt{world}"] = exact if equal else "DIFFERS"
        # (c) error feedback over the recorded steps.
        if cfg.codec != "none":
            dev = check_ef(cfg, recs, world, tag)
            row[f"ef{world}"] = f"{dev:.3f}"
            expect(dev <= 1, f"{tag} {cfg.name}: error-feedback invariant off by {dev:.3g} x float rounding")


def mpi_transport(tmp):
    """transport="mpi" under mpiexec: the ciuic runtime gives the gloo path's bits. None when skipped."""
    mpiexec = shutil.which("mpiexec")
    if not mpiexec:
        return "skipped: no mpiexec"
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    cmd = [mpiexec, "-n", "2", "--oversubscribe", sys.executable, __file__, "--mpi-worker", tmp]
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        expect(False, "mpi transport: the mpiexec run did not finish in 120 s")
        return "FAILED"
    lines = p.stdout.strip().splitlines() or [""]
    if p.returncode == 77:
        return "skipped: " + lines[-1]
    if not expect(p.returncode == 0, f"mpi transport: exit {p.returncode}\n{p.stdout[-2000:]}{p.stderr[-2000:]}"):
        return "FAILED"
    return lines[-1]


def mpi_worker(tmp):
    rank, world = int(os.environ.get("OMPI_COMM_WORLD_RANK", -1)), int(os.environ.get("OMPI_COMM_WORLD_SIZE", 0))
    if rank < 0:
        print("not under Open MPI's mpiexec")
        sys.exit(77)
    import ctypes

    if ciuic._lib.lib().ciuic_mpi_init(ctypes.byref(ctypes.c_int())) != 0:
        print("libciuic has no MPI")
        sys.exit(77)
    torch.set_num_threads(1)
    dist._DEFAULT_FIRST_BUCKET_BYTES = BUCKET
    dist.init_process_group("gloo", init_method=f"file://{tmp}/init.mpi", rank=rank, world_size=world)
    # Buckets keyed by shapes and never rebuilt (find_unused_parameters): the runtime keeps error feedback
    # per bucket key itself and carries none over a rebuild.
    names, bad = [], []
    for algo, codec in (("ring", "int8"), ("sign2", "sign1"), ("sparse", "topk:0.05"), ("ring", "fp16")):
        c = Config(f"{codec}/{algo}", algo, codec, named=False, find_unused=True)
        hashes = {}
        for transport in ("process_group", "mpi"):
            model, ddp, state, opt = build(c, 0, rank, world, seed=0, transport=transport)
            hashes[transport] = [train_step(ddp, opt, 0, s, rank) for s in range(4)]
            if transport == "mpi":
                expect(state._mpi is not None, f"{c.name}: transport mpi did not use the ciuic runtime")
                state.close()
        hs = [None] * world
        dist.all_gather_object(hs, hashes["mpi"])
        expect(all(h == hs[0] for h in hs), f"{c.name}: ranks differ over the ciuic runtime")
        (names if hashes["mpi"] == hashes["process_group"] else bad).append(c.name)
    ciuic.torch.finalize()
    print(f"bits differ from the gloo path: {', '.join(bad)}" if bad or failures else
          f"bits equal to the gloo path over 4 steps, 2 ranks: {', '.join(names)}")
    sys.stdout.flush()
    os._exit(1 if bad or failures else 0)


def main():
    t_start = time.time()
    try:
        lib = ciuic.library_path()
    except OSError as e:
        sys.exit(f"cannot load libciuic: {e}")
    print(f"libciuic: {lib}")
    report = {}
    timings = {}
    with tempfile.TemporaryDirectory() as tmp:
        for world in (2, 4):
            train, t_train = run_phase(world, "train", tmp)
            resume, t_resume = run_phase(world, "resume", tmp)
            timings[world] = (t_train, t_resume)
            t0 = time.time()
            analyse(world, train, resume, report)
            timings[world] += (time.time() - t0,)
        t0 = time.time()
        mpi = mpi_transport(tmp)
        t_mpi = time.time() - t0
    print(f"{'configuration':<18} {'bound (b)':<58} {'err/bound P=2':>13} {'P=4':>7} {'broken/bound':>12} "
          f"{'EF dev P=2':>10} {'P=4':>6} {'runtime P=2':>12} {'P=4':>11} {'resume':>7}")
    for cfg in CONFIGS:
        r = report.get(cfg.name, {})
        neg = min(r.get("neg2", np.inf), r.get("neg4", np.inf))
        print(f"{cfg.name:<18} {r.get('bound', '-'):<58} {r.get('b2', '-'):>13} {r.get('b4', '-'):>7} "
              f"{'' if neg == np.inf else f'{neg:.3g}':>12} {r.get('ef2', '-'):>10} {r.get('ef4', '-'):>6} "
              f"{r.get('rt2', '-'):>12} {r.get('rt4', '-'):>11} "
              f"{'equal' if r.get('resume2') == r.get('resume4') == 'equal' else 'DIFFERS':>7}")
    print(f"mpi transport (ciuic runtime under mpiexec): {mpi}")
    for world, (a, b, c) in timings.items():
        print(f"P={world}: train {a:.1f} s, resume {b:.1f} s, checks {c:.1f} s")
    print(f"mpi: {t_mpi:.1f} s; total {time.time() - t_start:.1f} s")
    if failures:
        sys.exit(f"{len(failures)} check(s) failed")
    print("comm_hook_test: all checks passed")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--mpi-worker":
        mpi_worker(sys.argv[2])
    else:
        main()
