#!/usr/bin/env python3
"""ciuic.torch.comm_hook on CUDA buckets: DDP, 2 processes, the runtime's communicator made from the job's
store, in two set-ups: both processes on one GPU with the runtime over gloo (device buffers staged
through host memory), and over NCCL: with 2 GPUs one GPU each, with one GPU both processes on it, each
naming its own host (NCCL_HOSTID), which NCCL then joins through its socket transport (it refuses two
ranks of one host on one device). For the library's allreduce, int8 on the ring and topk on
sparse (one-rule profiles of this world: 2 gpu ranks, 1 node), a small MLP trains 4 steps; after every
step both ranks' parameters are bitwise identical, and the int8 run stays within 2% of the
uncompressed run's parameters. A 64 MiB bucket's hook returns before its Future completes, and a
bucket whose values the runtime reduced is what the next kernel on the caller's stream reads
(the parameters change by the averaged gradient, not by a stale buffer).

Exits 77 (skipped, and says why) without torch with CUDA or with a libciuic built without CUDA. Where
only one set-up can run (a libciuic without NCCL), that one runs and must pass, each one that could not
is printed as "SKIPPED: ..." and the exit is still 77: a partial run is reported as skipped, never as
passed (failures exit 1 either way).
    comm_hook_gpu_test.py        (CIUIC_LIBRARY names libciuic.so; PYTHONPATH holds python/)
"""
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
    print("skipped: torch not importable")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))


def skip(why):
    print(f"skipped: {why}")
    sys.exit(77)


def profile(codec, algo, bucket=1 << 20):
    d = json.load(open(os.path.join(REPO, "profiles", "dgx_a100.profile.json")))
    rule = dict(d["rules"][0])
    rule.update(min_bytes=0, max_bytes=0, algo=algo, codec=codec, precision="fp32", bucket_bytes=bucket,
                hierarchy_depth=1, streams=1, gate="n/a" if codec == "none" else "passed")
    d["rules"] = [rule]
    d["topology"].update(name="gpu_pair", device="gpu", ranks=2, nodes=1)
    return d


def worker(rank, tmp, init, setup):
    import ciuic.torch
    device = rank if setup == "nccl" else 0
    transport = "gloo" if setup == "gloo" else "nccl"
    if setup == "nccl-one-gpu":
        os.environ.update(NCCL_HOSTID=f"ciuic-hook-host-{rank}", NCCL_SOCKET_IFNAME="lo", NCCL_IB_DISABLE="1")
    torch.cuda.set_device(device)
    os.environ["LOCAL_RANK"] = str(device)
    dist.init_process_group(transport, init_method=f"file://{init}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=120))
    out = {}
    for codec, algo in (("none", "nccl"), ("int8", "ring"), ("topk:0.05", "sparse")):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
        ddp = DDP(model, device_ids=[device], bucket_cap_mb=0.25)
        state, hook = ciuic.torch.comm_hook(profile(codec, algo), module=model, transport=transport, native="runtime")
        ddp.register_comm_hook(state, hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        hashes = []
        for step in range(4):
            g = torch.Generator(device="cuda").manual_seed(100 * step + rank)
            x = torch.randn(32, 256, device="cuda", generator=g)
            opt.zero_grad()
            ddp(x).square().mean().backward()
            opt.step()
            flat = torch.cat([p.detach().flatten() for p in model.parameters()]).cpu()
            hashes.append(hashlib.sha1(flat.numpy().tobytes()).hexdigest())
        out[codec] = {"hashes": hashes, "params": flat}
        state.close()
    # The overlap: one 64 MiB bucket, int8 on the ring.
    model = torch.nn.Linear(4096, 4096, bias=False).cuda()
    ddp = DDP(model, device_ids=[device], bucket_cap_mb=64)
    state, hook = ciuic.torch.comm_hook(profile("int8", "ring", 64 << 20), module=model, transport=transport)
    seen = []

    def timed(st, bucket):
        t0 = time.perf_counter()
        fut = hook(st, bucket)
        seen.append((time.perf_counter() - t0, fut.done()))
        return fut

    ddp.register_comm_hook(state, timed)
    for _ in range(2):
        ddp(torch.randn(8, 4096, device="cuda")).sum().backward()
    torch.cuda.synchronize()
    out["overlap"] = seen[-1]
    state.close()
    torch.save(out, os.path.join(tmp, f"out.{setup}.{rank}"))
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


def check(setup, a, b, failures):
    for codec in ("none", "int8", "topk:0.05"):
        if a[codec]["hashes"] != b[codec]["hashes"]:
            failures.append(f"{setup} {codec}: the ranks' parameters differ")
    rel = float((a["int8"]["params"] - a["none"]["params"]).norm() / a["none"]["params"].norm())
    if not 0 < rel < 0.02:
        failures.append(f"{setup} int8: parameters {rel:.3g} away from the uncompressed run (0 < d < 0.02 expected)")
    for r, res in enumerate((a, b)):
        call_s, done = res["overlap"]
        if done:
            failures.append(f"{setup} rank {r}: the 64 MiB bucket was reduced before the hook returned "
                            f"({call_s * 1e3:.2f} ms)")
    print(f"{setup}: ranks equal; int8 vs none {rel:.3g}; 64 MiB hook call {a['overlap'][0] * 1e3:.2f} ms")


def main():
    if not torch.cuda.is_available():
        skip("no CUDA device (or a torch without CUDA)")
    import ctypes

    import ciuic.torch
    from ciuic import _lib
    lib = _lib.lib()
    # A one-rank communicator tells whether this libciuic has CUDA (and NCCL).
    store = ciuic.torch._Store(dist.HashStore())
    setups = []
    not_run = []
    for setup, device in (("gloo", b"cuda-gloo"), ("nccl", b"cuda")):
        comm = ctypes.c_void_p()
        status = lib.ciuic_comm_create_store(0, 1, b"probe-" + device, device, store.set_fn, store.get_fn, None, 30.0,
                                             ctypes.byref(comm))
        if status != 0:
            not_run.append(f"{setup}: libciuic cannot make a {device.decode()} communicator: "
                           f"{lib.ciuic_last_error().decode()}")
            print("SKIPPED:", not_run[-1])
            continue
        lib.ciuic_comm_destroy(comm)
        if setup == "nccl" and torch.cuda.device_count() < 2:
            setup = "nccl-one-gpu"  # both processes on GPU 0, two hosts to NCCL
        setups.append(setup)
    if not setups:
        skip("neither set-up can run here: " + "; ".join(not_run))
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for setup in setups:
            init = os.path.join(tmp, f"init.{setup}")
            mp.start_processes(worker, args=(tmp, init, setup), nprocs=2, start_method="spawn")
            a, b = (torch.load(os.path.join(tmp, f"out.{setup}.{r}")) for r in range(2))
            check(setup, a, b, failures)
    for f in failures:
        print("FAIL:", f)
    if failures:
        sys.exit(1)
    if not_run:
        for n in not_run:
            print("SKIPPED:", n)
        print(f"skipped: {len(not_run)} of {len(setups) + len(not_run)} set-ups did not run "
              f"({', '.join(setups)} ran and passed); a partial run is not a pass")
        sys.exit(77)
    sys.exit(0)


if __name__ == "__main__":
    main()
