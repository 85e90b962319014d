#!/usr/bin/env python3
"""A rank that dies in a DDP job whose buckets ciuic.torch.comm_hook reduces (Debian's python3-torch,
gloo on CPU, 3 processes): the survivors' training step fails with an error naming the dead rank.

torch.distributed's store cannot tell who is gone, and gloo itself names only a socket address; the
runtime's world keeps a TCP store of its own on rank 0 for that (collectives/backends/gloo). Cases,
each a fresh job of 3 ranks training a small MLP with the ring (int8) under a one-rule profile:
  - rank 2 SIGKILLs itself at step 3: ranks 0 and 1 each raise, within the deadline, an error that
    says "rank 2 is gone" and names no other rank as gone;
  - rank 1 calls os._exit(1) at step 3 (a crash without clean-up): ranks 0 and 2 name rank 1;
  - rank 0 SIGKILLs itself at step 3: ranks 1 and 2 say that rank 0, which served that store, ended;
  - rank 1 SIGSTOPs itself at step 3 (its connections stay open): at gloo's timeout ranks 0 and 2
    raise an error that says "rank 1 silent for" (the runtime's watchdog beats in that store);
  - rank 2 SIGSTOPs itself, the runtime's deadline (CIUIC_TIMEOUT=6) before gloo's (30 s): ranks 0
    and 1 end with exit 2 and a line naming rank 2 silent.
Every other case pins CIUIC_TIMEOUT=60, so that gloo's timeout comes first whatever the caller set.

Needs Debian's python3-torch (/usr/bin/python3); exits 77 (skipped) without it.
    hook_death_test.py            (CIUIC_LIBRARY names libciuic.so; PYTHONPATH holds python/)
"""
import datetime
import json
import os
import shutil
import signal
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

import ciuic.torch  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUCKET = 8192
WORLD = 3
TIMEOUT = 10  # seconds: gloo's rendezvous and calls in the runtime's world
DEATH_STEP = 3


def profile():
    d = json.load(open(os.path.join(REPO, "profiles", "dgx_a100.profile.json")))
    rule = dict(d["rules"][0])
    rule.update(min_bytes=0, max_bytes=0, algo="ring", codec="int8", precision="fp32", bucket_bytes=BUCKET,
                hierarchy_depth=1, gate="passed")
    d["rules"] = [rule]
    d["topology"].update(name="cpu_local", device="cpu", ranks=WORLD, nodes=1)
    return d


RUNTIME_DEADLINE = 6  # seconds: CIUIC_TIMEOUT in the "stop-deadline" case, where gloo's is 30 s


def worker(rank, victim, how, tmp, init_file):
    os.environ["CIUIC_TIMEOUT"] = str(RUNTIME_DEADLINE if how == "stop-deadline" else 60)
    gloo_timeout = 30 if how == "stop-deadline" else TIMEOUT
    err = os.open(os.path.join(tmp, f"stderr.{rank}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(err, 2)
    torch.set_num_threads(1)
    dist._DEFAULT_FIRST_BUCKET_BYTES = BUCKET
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=60))
    torch.manual_seed(7)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    ddp = DDP(model, **ciuic.torch.ddp_kwargs(profile()))
    state, hook = ciuic.torch.comm_hook(profile(), native="runtime", timeout=gloo_timeout)
    ddp.register_comm_hook(state, hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    outcome = "trained"
    started = time.time()
    try:
        for step in range(1, 8):
            if rank == victim and step == DEATH_STEP:
                sys.stderr.flush()
                if how == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                if how.startswith("stop"):
                    os.kill(os.getpid(), signal.SIGSTOP)  # killed by the test once the others ended
                os._exit(1)
            g = torch.Generator().manual_seed(1009 * step + rank)
            x, y = torch.randn(16, 32, generator=g), torch.randn(16, 10, generator=g)
            opt.zero_grad()
            loss = ((ddp(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            started = time.time()
    except Exception as e:  # noqa: BLE001 - what the survivor's training loop sees
        outcome = " ".join(str(e).split())
    with open(os.path.join(tmp, f"outcome.{rank}"), "w") as f:
        f.write(f"{time.time() - started:.2f} {outcome}")
    sys.stdout.flush()
    os._exit(0)  # torch 1.13's DDP teardown can deadlock at interpreter exit (see ddp_export_test.py)


def run_case(victim, how):
    tmp = tempfile.mkdtemp(prefix="ciuic-hook-death-")
    try:
        return check_case(victim, how, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def check_case(victim, how, tmp):
    ctx = mp.start_processes(worker, args=(victim, how, tmp, os.path.join(tmp, "init")), nprocs=WORLD,
                             start_method="fork", join=False)
    deadline = time.time() + 120
    started = time.time()
    # The survivors first: a stopped victim stays until it is killed.
    for r in [r for r in range(WORLD) if r != victim] + [victim]:
        p = ctx.processes[r]
        p.join(timeout=0 if r == victim and how.startswith("stop") else max(0.0, deadline - time.time()))
        if p.is_alive():
            p.kill()
            p.join()
    survivors_took = time.time() - started
    problems = []
    if victim == 0:
        want = "rank 0, which served the job's store, has ended"
    elif how.startswith("stop"):
        want = f"rank {victim} silent for"
    else:
        want = f"rank {victim} is gone: its connection to the job's store closed"
    for r in range(WORLD):
        if r == victim:
            continue
        if how == "stop-deadline":
            # The runtime's watchdog ends the process: exit 2 and one line on stderr.
            with open(os.path.join(tmp, f"stderr.{r}"), errors="replace") as f:
                err = f.read()
            # CIUIC_TIMEOUT, not the hook's timeout, is the runtime's deadline when set.
            line = next((ln for ln in err.splitlines() if f"no progress in {RUNTIME_DEADLINE} s" in ln), "")
            code = ctx.processes[r].exitcode
            others = [f"rank {o} silent" for o in range(WORLD) if o != victim]
            if code != 2 or want not in line or any(o in line for o in others):
                problems.append(f"rank {r}: expected exit 2 and a line with '{want}', got exit {code}: {err[-600:]!r}")
            elif survivors_took > 4 * RUNTIME_DEADLINE + 10:
                problems.append(f"rank {r}: the job took {survivors_took:.1f} s (deadline {RUNTIME_DEADLINE} s)")
            else:
                print(f"hook_death_test: {how} rank {victim}: rank {r} exit 2: {line[-200:]}")
            continue
        path = os.path.join(tmp, f"outcome.{r}")
        if not os.path.exists(path):
            with open(os.path.join(tmp, f"stderr.{r}"), errors="replace") as f:
                problems.append(f"rank {r} left no outcome (stderr: {f.read()[-800:]!r})")
            continue
        took, _, outcome = open(path).read().partition(" ")
        others = [f"rank {o} {w}" for o in range(WORLD) if o != victim for w in ("is gone", "silent")]
        if "Unable to cast" in outcome:
            problems.append(f"rank {r}: the error reached DDP as a value, not as an error: {outcome[:300]}")
        elif want not in outcome or any(o in outcome for o in others):
            problems.append(f"rank {r}: expected '{want}', got: {outcome[:600]}")
        elif float(took) > 2 * TIMEOUT:
            problems.append(f"rank {r}: the error came {took} s after its last step (deadline {TIMEOUT} s)")
        else:
            said = outcome[outcome.find("ciuic runtime:"):].split(" At: ")[0]
            print(f"hook_death_test: {how} rank {victim}: rank {r} raised after {took} s: {said[:60]} ... {said[-150:]}")
    return problems


def main():
    failures = []
    for victim, how in ((2, "kill"), (1, "exit"), (0, "kill"), (1, "stop"), (2, "stop-deadline")):
        failures += run_case(victim, how)
    for f in failures:
        print("FAIL:", f)
    if failures:
        return 1
    print("hook_death_test: every survivor named the dead or stopped rank")
    return 0


if __name__ == "__main__":
    sys.exit(main())
