#!/usr/bin/python3
"""Time-to-accuracy on real data: scikit-learn's bundled digits (1797 8x8 images, no download), a small
CNN trained with PyTorch DDP on gloo over WORLD CPU processes, its gradients reduced by
ciuic.torch.comm_hook with a one-rule profile per configuration: uncompressed (fp32, and the
transport's fp16/bf16 reduction) and every codec the tuner offers (tuner/plan_space.cc) on the algorithm
the tuner would run it with. Several seeds each; every seed draws its own initial weights and
shuffling, the same for every configuration.

For each configuration: test accuracy and loss (the 450-image held-out split) and training loss against
the step and against wall-clock time (training only: evaluation is not counted), final accuracy over
seeds (mean, min, max), the step and time at which the seed-mean accuracy first reaches 95% of the
uncompressed final accuracy, and whether the final accuracy is within 1 point of uncompressed. With
--gate, each codec's verdict from ciuic's accuracy gate (`ciuic-tune gate`), and how often the two agree.

Writes OUT/digits_tta.csv (every evaluation point), OUT/digits_tta.json (summary, with host, cores and
commit), OUT/digits_tta.md (the table) and OUT/digits_tta.png (accuracy vs step and vs time, drawn by
scripts/plot.py as `ciuic-tune plot tta OUT` draws it; needs python3-matplotlib).

Needs Debian's python3-torch, python3-sklearn, python3-numpy (/usr/bin/python3) and a built libciuic
(build/lib/libciuic.so, or CIUIC_LIBRARY). Exits 77 when torch or sklearn cannot be imported.

    scripts/digits_tta.py                        # the full run: 4 processes, 5 seeds, 15 configurations
    scripts/digits_tta.py --smoke OUT            # CI: 2 processes, 1 seed, 5 configurations, short
    scripts/digits_tta.py --gate build/bin/ciuic-tune --out bench/results/DATE-digits-tta
"""
import argparse
import datetime
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
except ImportError as e:
    print(f"digits_tta: {e}: skipped (needs Debian's python3-torch and python3-sklearn under /usr/bin/python3)")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "python"))
import ciuic.torch  # noqa: E402

sys.path.insert(0, HERE)
import plot  # noqa: E402  (scripts/plot.py: the time-to-accuracy picture)
import tta_common  # noqa: E402

BUCKET = 32 << 10  # bytes: the model's 150 KiB of fp32 gradients go as 5 DDP buckets

# (name, algo, codec, precision): the tuner's codec dimension, each on the algorithm the tuner runs it
# with (plan_space.cc RuntimeAlgo), and the transport's own reduction in 16 bits.
CONFIGS = [
    ("none", "nccl", "none", "fp32"),
    ("none@bf16", "nccl", "none", "bf16"),
    ("none@fp16", "nccl", "none", "fp16"),
    ("bf16", "ring", "bf16", "fp32"),
    ("fp16", "ring", "fp16", "fp32"),
    ("fp8e4m3", "ring", "fp8e4m3", "fp32"),
    ("int8", "ring", "int8", "fp32"),
    ("int4", "ring", "int4", "fp32"),
    ("sign1", "sign2", "sign1", "fp32"),
    ("randomk:0.01", "ring", "randomk:0.01", "fp32"),
    ("topk:0.01", "sparse", "topk:0.01", "fp32"),
    ("topk:0.001", "sparse", "topk:0.001", "fp32"),
    ("powersgd:16", "powersgd", "powersgd:16", "fp32"),
    ("powersgd:4", "powersgd", "powersgd:4", "fp32"),
    ("powersgd:1", "powersgd", "powersgd:1", "fp32"),
]
SMOKE_CONFIGS = ("none", "none@bf16", "int8", "sign1", "topk:0.001")


def profile_for(algo, codec, precision, world, device="cpu"):
    return tta_common.one_rule_profile(algo, codec, precision, world, BUCKET, device=device)


class Net(torch.nn.Module):
    """A small CNN: 2 conv layers on the 8x8 image, one hidden dense layer (38,282 parameters)."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(1, 16, 3, padding=1)
        self.c2 = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.f1 = torch.nn.Linear(32 * 4 * 4, 64)
        self.f2 = torch.nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.c1(x))
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        return self.f2(F.relu(self.f1(x.flatten(1))))


def data():
    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None, :, :]
    xtr, xte, ytr, yte = train_test_split(x, d.target, test_size=450, random_state=0, stratify=d.target)
    return (torch.from_numpy(xtr), torch.from_numpy(ytr).long(), torch.from_numpy(xte), torch.from_numpy(yte).long())


def evaluate(model, xte, yte):
    with torch.no_grad():
        z = model(xte)
        return float((z.argmax(1) == yte).float().mean()), float(F.cross_entropy(z, yte))


def train(cfg, seed, rank, world, a, xtr, ytr, xte, yte):
    name, algo, codec, precision = cfg
    torch.manual_seed(seed)
    model = Net().to(a.device)  # the same initial weights on every rank (and every configuration of this seed)
    prof = profile_for(algo, codec, precision, world, "gpu" if a.device == "cuda" else "cpu")
    extra = {"device_ids": [0]} if a.device == "cuda" else {}
    ddp = DDP(model, **ciuic.torch.ddp_kwargs(prof), **extra)
    # On CUDA the processes share the one GPU: NCCL refuses two ranks on one device, so the runtime's
    # transport is gloo with the buckets staged through host memory.
    state, hook = ciuic.torch.comm_hook(prof, module=model, transport="gloo" if a.device == "cuda" else None)
    ddp.register_comm_hook(state, hook)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    g = torch.Generator().manual_seed(seed)
    n = len(xtr)
    order = torch.randperm(n, generator=g)
    pos, epoch_steps = 0, n // (a.batch * world)
    points, elapsed, window = [], 0.0, []
    for step in range(1, a.steps + 1):
        if pos + a.batch * world > n:  # a new epoch: the same permutation on every rank, rank r takes slice r
            order, pos = torch.randperm(n, generator=g), 0
        idx = order[pos + rank * a.batch:pos + (rank + 1) * a.batch]
        pos += a.batch * world
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(ddp(xtr[idx]), ytr[idx])
        loss.backward()
        opt.step()
        elapsed += time.perf_counter() - t0
        window.append(float(loss))
        if step % a.eval_every == 0 or step == a.steps:
            acc, test_loss = evaluate(model, xte, yte)
            points.append({"config": name, "seed": seed, "step": step, "epoch": step / epoch_steps,
                           "seconds": elapsed, "train_loss": sum(window) / len(window), "test_loss": test_loss,
                           "test_acc": acc})
            window = []
            dist.barrier()  # every rank resumes the clock together
    nonfinite = state.nonfinite()
    state.close()
    return points, nonfinite


def worker(rank, world, a, tmp, init_file):
    err = os.open(os.path.join(tmp, f"stderr.{rank}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(err, 2)
    torch.set_num_threads(1)
    if a.device == "cuda":
        torch.cuda.set_device(0)
    dist._DEFAULT_FIRST_BUCKET_BYTES = BUCKET
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    xtr, ytr, xte, yte = (t.to(a.device) for t in data())
    out = []
    for cfg in [c for c in CONFIGS if c[0] in a.configs]:
        for seed in a.seed_list:
            points, nonfinite = train(cfg, seed, rank, world, a, xtr, ytr, xte, yte)
            if rank == 0:
                out += points
                last = points[-1]
                print(f"{cfg[0]:<13} seed {seed}: test acc {100 * last['test_acc']:.2f}%  loss {last['test_loss']:.4f}"
                      f"  {last['seconds']:.2f} s{'  (non-finite buckets: %d)' % nonfinite if nonfinite else ''}",
                      flush=True)
    if rank == 0:
        with open(os.path.join(tmp, "points.json"), "w") as f:
            json.dump(out, f)
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)  # torch 1.13's DDP teardown can deadlock at interpreter exit


def run_workers(a, tmp):
    tta_common.run_local(worker, a.world, a, tmp, os.path.join(tmp, "init"), a.deadline)
    with open(os.path.join(tmp, "points.json")) as f:
        return json.load(f)


def gate_verdicts(tune, codecs, seeds):
    """codec -> {"passed", "runs"} from `ciuic-tune gate --codecs ... --format json`."""
    r = subprocess.run([tune, "gate", "--codecs", ",".join(codecs), "--gate-seeds", str(seeds), "--format", "json"],
                       capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"ciuic-tune gate exited {r.returncode}: {r.stderr.strip()}")
    return {v["codec"]: v for v in json.loads(r.stdout)["verdicts"]}


def summarise(points, a):
    names = [c[0] for c in CONFIGS if c[0] in a.configs]
    by = {}
    for p in points:
        by.setdefault(p["config"], {}).setdefault(p["seed"], []).append(p)
    rows = {}
    for name in names:
        runs = [sorted(by[name][s], key=lambda p: p["step"]) for s in a.seed_list]
        final = np.array([r[-1]["test_acc"] for r in runs])
        steps = [p["step"] for p in runs[0]]
        mean_acc = np.mean([[p["test_acc"] for p in r] for r in runs], axis=0)
        mean_sec = np.mean([[p["seconds"] for p in r] for r in runs], axis=0)
        rows[name] = {"final_acc_mean": float(final.mean()), "final_acc_min": float(final.min()),
                      "final_acc_max": float(final.max()), "final_acc_std": float(final.std()),
                      "final_test_loss": float(np.mean([r[-1]["test_loss"] for r in runs])),
                      "seconds": float(mean_sec[-1]), "steps": steps, "mean_acc": mean_acc.tolist(),
                      "mean_seconds": mean_sec.tolist()}
    base = rows["none"]["final_acc_mean"]
    for name, r in rows.items():
        target = 0.95 * base
        hit = next((i for i, v in enumerate(r["mean_acc"]) if v >= target), None)
        r["steps_to_95"] = r["steps"][hit] if hit is not None else None
        r["seconds_to_95"] = r["mean_seconds"][hit] if hit is not None else None
        r["within_1_point"] = r["final_acc_mean"] >= base - 0.01
    return rows


def write_outputs(points, rows, gate, a, wall):
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "digits_tta.csv"), "w") as f:
        keys = ["config", "seed", "step", "epoch", "seconds", "train_loss", "test_loss", "test_acc"]
        f.write(",".join(keys) + "\n")
        for p in points:
            f.write(",".join(str(p[k]) if not isinstance(p[k], float) else f"{p[k]:.6g}" for k in keys) + "\n")
    base = rows["none"]
    where = "processes on GPU 0 (the runtime over gloo)" if a.device == "cuda" else "CPU processes"
    lines = [f"# digits time-to-accuracy ({datetime.date.today().isoformat()})", "",
             f"scikit-learn digits (1347 train / 450 test), CNN of {sum(p.numel() for p in Net().parameters())} "
             f"parameters, DDP on gloo, {a.world} {where}, batch {a.batch} per process, SGD lr {a.lr} "
             f"momentum 0.9, {a.steps} steps, seeds {','.join(map(str, a.seed_list))}, profile bucket "
             f"{BUCKET // 1024} KiB; seconds are training time on this machine ({os.cpu_count()} cores), "
             f"evaluation excluded; the whole run took {wall:.0f} s.", "",
             "| config | final test acc % (mean, min-max) | test loss | steps to 95% | s to 95% | s total |"
             " within 1 pt | gate | agree |", "|---|---|---|---|---|---|---|---|---|"]
    agree = counted = 0
    for name, r in rows.items():
        g = gate.get(name) if gate else None
        verdict = "-" if g is None else ("pass" if g["passed"] else "fail")
        ok = "-"
        if g is not None and name != "none":
            counted += 1
            same = g["passed"] == r["within_1_point"]
            agree += same
            ok = "yes" if same else "NO"
        s95 = "-" if r["steps_to_95"] is None else str(r["steps_to_95"])
        t95 = "-" if r["seconds_to_95"] is None else f"{r['seconds_to_95']:.2f}"
        lines.append(f"| {name} | {100 * r['final_acc_mean']:.2f} ({100 * r['final_acc_min']:.2f}-"
                     f"{100 * r['final_acc_max']:.2f}) | {r['final_test_loss']:.4f} | {s95} | {t95} | "
                     f"{r['seconds']:.2f} | {'yes' if r['within_1_point'] else 'no'} | {verdict} | {ok} |")
    if gate:
        lines += ["", f"gate vs digits: {agree} of {counted} codecs agree (pass = within 1 point of uncompressed "
                      f"{100 * base['final_acc_mean']:.2f}%)"]
    with open(os.path.join(a.out, "digits_tta.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    summary = {"world": a.world, "steps": a.steps, "batch": a.batch, "lr": a.lr, "seeds": a.seed_list,
               "host": socket.gethostname(), "cpus": os.cpu_count(), "git_commit": tta_common.git_commit(),
               "date": datetime.date.today().isoformat(),
               "rows": {k: {kk: vv for kk, vv in v.items() if kk not in ("steps", "mean_acc", "mean_seconds")}
                        for k, v in rows.items()},
               "gate": gate, "agree": agree if gate else None, "counted": counted if gate else None}
    with open(os.path.join(a.out, "digits_tta.json"), "w") as f:
        json.dump(summary, f, indent=1)
    # The picture is scripts/plot.py's (also `ciuic-tune plot tta OUT`), from the same rows.
    try:
        plot.draw_tta(rows, os.path.join(a.out, "digits_tta.png"), plot.tta_title(summary))
    except plot.Fail as e:
        print(f"digits_tta: {e}: no PNG")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--world", type=int, default=4)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--configs", default=",".join(c[0] for c in CONFIGS))
    p.add_argument("--gate", metavar="CIUIC_TUNE", help="compare with the accuracy gate of this ciuic-tune")
    p.add_argument("--gate-seeds", type=int, default=3, help="the gate's seeds (ciuic-tune gate --gate-seeds)")
    p.add_argument("--out", default=os.path.join(REPO, "results", "digits-tta"))
    p.add_argument("--deadline", type=int, default=3600, help="seconds before the run is given up")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cuda: every process on GPU 0 (the runtime over gloo, buckets staged through host memory)")
    p.add_argument("--smoke", metavar="OUT", help="a short CI run into OUT: 2 processes, 1 seed, 5 configurations")
    a = p.parse_args()
    if a.smoke:
        a.out, a.world, a.seeds, a.steps, a.eval_every, a.deadline = a.smoke, 2, 1, 120, 20, 240
        a.gate_seeds = 1
        a.configs = ",".join(SMOKE_CONFIGS)
    a.configs = a.configs.split(",")
    unknown = [c for c in a.configs if c not in {c[0] for c in CONFIGS}]
    if unknown or "none" not in a.configs:
        sys.exit(f"digits_tta: --configs: unknown {unknown} or 'none' missing (names: {[c[0] for c in CONFIGS]})")
    if a.world < 1 or a.seeds < 1 or a.steps < 1 or a.batch < 1 or a.eval_every < 1:
        sys.exit("digits_tta: --world, --seeds, --steps, --batch and --eval-every must be positive")
    a.seed_list = list(range(1, a.seeds + 1))
    gate = None
    if a.gate:
        gate = gate_verdicts(a.gate, [c for c in a.configs if c != "none"], a.gate_seeds)
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="ciuic-digits-") as tmp:
        points = run_workers(a, tmp)
    rows = summarise(points, a)
    write_outputs(points, rows, gate, a, time.time() - t0)
    if a.smoke:
        # The smoke run's own claims: uncompressed learns digits, and each configuration learned something.
        base = rows["none"]["final_acc_mean"]
        bad = [n for n, r in rows.items() if not r["final_acc_mean"] > 0.5]
        if base < 0.9 or bad:
            sys.exit(f"digits_tta: smoke: uncompressed {100 * base:.1f}% (< 90%?) or configurations below 50%: {bad}")


if __name__ == "__main__":
    main()
