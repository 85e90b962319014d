"""What the training scripts (scripts/digits_tta.py, scripts/train_tta.py) share: starting the local
ranks and reporting their failures, the source tree's commit, and a one-rule ciuic profile."""
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE_PROFILE = os.path.join(REPO, "profiles", "dgx_a100.profile.json")


def run_local(worker, world, a, tmp, init, deadline):
    """worker(rank, world, a, tmp, init) in `world` forked processes; each writes its stderr to
    tmp/stderr.RANK, which is shown when a rank fails or the run passes `deadline` seconds."""
    import torch.multiprocessing as mp
    ctx = mp.start_processes(worker, args=(world, a, tmp, init), nprocs=world, start_method="fork", join=False)
    end = time.time() + deadline
    try:
        while not ctx.join(timeout=1):
            if time.time() > end:
                for p in ctx.processes:
                    p.kill()
                raise RuntimeError(f"the training processes did not finish in {deadline} s")
    except Exception:
        for r in range(world):
            with open(os.path.join(tmp, f"stderr.{r}"), errors="replace") as f:
                sys.stderr.write(f"--- rank {r} stderr ---\n{f.read()[-3000:]}\n")
        raise


def git_commit():
    """The source tree's commit (12 hex digits), or None outside a git checkout."""
    r = subprocess.run(["git", "-C", REPO, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                       check=False)
    return r.stdout.strip() if r.returncode == 0 else None


def one_rule_profile(algo, codec, precision, world, bucket, nodes=1, device="cpu"):
    """One rule for every size, in a profile tuned (by its topology keys) for this job's world: `world`
    ranks (device "cpu" or "gpu") on `nodes` hosts."""
    d = json.load(open(BASE_PROFILE))
    name = "cpu_local" if nodes == 1 else "cluster_lab"
    if device == "gpu":
        name = "gpu_local"
    d["topology"].update(name=name, device=device, ranks=world, nodes=nodes)
    rule = dict(d["rules"][0])
    rule.update(min_bytes=0, max_bytes=0, algo=algo, codec=codec, precision=precision, bucket_bytes=bucket,
                hierarchy_depth=1, streams=1, gate="n/a" if codec == "none" else "passed")
    d["rules"] = [rule]
    return d
