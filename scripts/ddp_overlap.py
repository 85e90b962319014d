#!/usr/bin/env python3
"""Does the ciuic DDP hook overlap backward? A real DDP job on gloo (2 and 4 CPU processes; an MLP of
8 x Linear(1024, 1024), 8.4 M parameters, 33.6 MB of fp32 gradients in DDP buckets of 4 MiB) timed per
configuration, all in the same processes, in turn:

  no comm       a hook that returns its bucket untouched at once: the step without communication
  ddp default   DDP's own allreduce (no hook registered)
  ciuic CODEC   ciuic.torch.comm_hook with a one-rule profile of the job's world (pieces of 4 MiB:
                the whole DDP bucket), the C++ runtime on its own thread

Per configuration: the median step time (forward, backward, optimizer; DDP waits for every bucket's
Future before backward returns), and per bucket the time inside the hook call against the time from
the call to its Future's completion (medians over the timed steps). Rounds alternate the order of the
configurations; the table gives the median over rounds.

Needs Debian's python3-torch: run with /usr/bin/python3, PYTHONPATH=python and CIUIC_LIBRARY naming
build/lib/libciuic.so (or a build in build/).
    /usr/bin/python3 scripts/ddp_overlap.py [--worlds 2,4] [--steps 8] [--rounds 3] [--out FILE.md]
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))
import ciuic.torch  # noqa: E402

BUCKET_MB = 4
CODECS = [("none", "nccl"), ("fp16", "ring"), ("int8", "ring"), ("topk:0.01", "sparse"), ("sign1", "sign2"),
          ("powersgd:4", "powersgd")]


def profile(world, codec, algo):
    d = json.load(open(os.path.join(REPO, "profiles", "dgx_a100.profile.json")))
    rule = dict(d["rules"][0])
    rule.update(min_bytes=0, max_bytes=0, algo=algo, codec=codec, precision="fp32", bucket_bytes=BUCKET_MB << 20,
                hierarchy_depth=1, streams=1, gate="n/a" if codec == "none" else "passed")
    d["rules"] = [rule]
    d["topology"].update(name="cpu_local", device="cpu", ranks=world, nodes=1)
    return d


def model():
    torch.manual_seed(0)
    layers = []
    for _ in range(8):
        layers += [torch.nn.Linear(1024, 1024), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


class Timing:
    """Per bucket: seconds inside the hook call and from the call to the Future's completion."""

    def __init__(self):
        self.calls, self.done = [], []

    def wrap(self, hook):
        def timed(state, bucket):
            t0 = time.perf_counter()
            fut = hook(state, bucket)
            t1 = time.perf_counter()
            self.calls.append(t1 - t0)

            def finished(f):
                self.done.append(time.perf_counter() - t0)
                return f.value()
            return fut.then(finished)
        return timed


def no_comm(_state, bucket):
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def run_config(name, world, steps, rank):
    m = model()
    ddp = DDP(m, bucket_cap_mb=BUCKET_MB)
    timing = Timing()
    state = None
    if name == "no comm":
        ddp.register_comm_hook(None, timing.wrap(no_comm))
    elif name != "ddp default":
        codec, algo = dict((f"ciuic {c}", (c, a)) for c, a in CODECS)[name]
        state, hook = ciuic.torch.comm_hook(profile(world, codec, algo), module=m, native="runtime")
        ddp.register_comm_hook(state, timing.wrap(hook))
    opt = torch.optim.SGD(m.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(16, 1024, generator=g), torch.randn(16, 1024, generator=g)
    times = []
    for step in range(steps + 2):  # two warm-up steps: DDP's bucket rebuild, the runtime's buffers
        dist.barrier()
        if step == 2:
            timing.calls.clear()
            timing.done.clear()
        t0 = time.perf_counter()
        opt.zero_grad()
        ((ddp(x) - y) ** 2).mean().backward()
        opt.step()
        if step >= 2:
            times.append(time.perf_counter() - t0)
    buckets = len(timing.calls) // steps if timing.calls else 0
    out = {"step": statistics.median(times), "buckets": buckets,
           "call": statistics.median(timing.calls) if timing.calls else None,
           "done": statistics.median(timing.done) if timing.done else None}
    if state is not None:
        state.close()
    return out


def worker(rank, world, steps, rounds, out_file, init_file):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=300))
    names = ["no comm", "ddp default"] + [f"ciuic {c}" for c, _ in CODECS]
    results = {n: [] for n in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else list(reversed(names))):
            results[name].append(run_config(name, world, steps, rank))
    if rank == 0:
        torch.save(results, out_file)
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)  # torch 1.13's DDP teardown can deadlock at interpreter exit


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worlds", default="2,4")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", help="also write the table (markdown) here")
    a = p.parse_args()
    worlds = [int(w) for w in a.worlds.split(",")]
    if any(w < 1 for w in worlds) or a.steps < 1 or a.rounds < 1:
        sys.exit("ddp_overlap: --worlds, --steps and --rounds must be positive")
    lines = [f"DDP on gloo, 8 x Linear(1024, 1024) (33.6 MB of fp32 gradients), batch 16 per process, DDP buckets "
             f"of {BUCKET_MB} MiB, one torch thread per process, {a.steps} timed steps x {a.rounds} rounds "
             f"(medians); libciuic {ciuic.library_path()}",
             "",
             "| configuration | processes | step ms | vs no comm | vs DDP default | buckets/step | hook call ms "
             "| call to Future done ms | call / done |",
             "|---|---|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for world in worlds:
            out = os.path.join(tmp, f"res.{world}")
            mp.start_processes(worker, args=(world, a.steps, a.rounds, out, os.path.join(tmp, f"init.{world}")),
                               nprocs=world, start_method="fork")
            res = torch.load(out)
            med = {n: statistics.median(x["step"] for x in v) for n, v in res.items()}
            for name, v in res.items():
                calls = [x["call"] for x in v if x["call"] is not None]
                dones = [x["done"] for x in v if x["done"] is not None]
                call = statistics.median(calls) * 1e3 if calls else None
                done = statistics.median(dones) * 1e3 if dones else None
                lines.append(
                    f"| {name} | {world} | {med[name] * 1e3:.1f} | {med[name] / med['no comm']:.2f}x | "
                    f"{med[name] / med['ddp default']:.2f}x | {v[0]['buckets'] if v[0]['buckets'] else '-'} | "
                    f"{'-' if call is None else f'{call:.3f}'} | {'-' if done is None else f'{done:.1f}'} | "
                    f"{'-' if call is None or not done else f'{call / done:.3f}'} |")
            print("\n".join(lines[-len(res):]), flush=True)
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
