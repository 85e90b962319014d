#!/usr/bin/python3
"""Training inside a real job: a tuned ciuic profile against DDP's default hook and single codecs, with
PyTorch DDP on gloo, on two workloads:

  charlm   a character-level transformer language model trained on the Python standard library's
           sources that ship with Debian (a fixed list of files, no download); metric: validation bits
           per character (bpc)
  digits   scikit-learn's bundled digits (1797 8x8 images) with scripts/digits_tta.py's CNN, on a split
           and hyperparameters of its own (not the accuracy gate's, not digits_tta's): stratified
           70/15/15 with random_state 2026, AdamW, batch 32 per rank; metric: validation error (%)

Configurations (--configs, comma-separated), each optionally suffixed +kN (gradient accumulation:
gradients synchronised every N micro-batches through ciuic.torch.Accumulation, DDP's no_sync between;
--steps counts micro-batches, so every configuration sees the same samples):
  ddp            DDP's default hook (its own allreduce over gloo)
  codec:NAME     ciuic.torch.comm_hook with one rule for every size: codec NAME on the algorithm the
                 tuner runs it with (plan_space.cc RuntimeAlgo); none@bf16 is the 16-bit reduction
  profile:PATH   ciuic.torch.comm_hook with a tuned profile (ciuic-tune run --workload from
                 --write-workload, for this job's ranks)

Per configuration and seed: the validation metric against the micro-batch and against training time
(evaluation is not timed), the time per micro-batch, the time to the target and the final metric. The
summary gives seed means with 95% t-intervals. Every seed draws its own initial weights and batches,
the same for every configuration.

Writes OUT/train_tta.csv (every evaluation point), OUT/train_tta.json (summary, with the data's
SHA-256, host, cores and commit), OUT/train_tta.md (the table) and OUT/train_tta.png (the metric vs
micro-batch and vs seconds, mean and 95% interval per configuration; needs python3-matplotlib).

Launch: by default WORLD local processes (fork, gloo through a file). Under torchrun or the lab
(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set) this process is one rank of that job; rank 0 writes.

Needs Debian's python3-torch and python3-numpy (/usr/bin/python3; digits also python3-sklearn) and a
built libciuic (build/lib/libciuic.so, or CIUIC_LIBRARY) for the ciuic configurations. Exits 77 when
torch (or, for digits, sklearn) cannot be imported.

    scripts/train_tta.py --write-workload charlm.json          # the model's gradients for ciuic-tune
    scripts/train_tta.py --configs ddp,ddp+k4,codec:int8,profile:P --seeds 5 --out bench/results/DATE-charlm
    scripts/train_tta.py --workload digits --configs ddp,codec:int8 --out bench/results/DATE-digits
    scripts/train_tta.py --smoke OUT                           # CI: 2 processes, 1 seed, 40 micro-batches,
                                                               # k = 2 included, and OUT/charlm.workload.json
"""
import argparse
import datetime
import hashlib
import json
import math
import os
import socket
import sys
import tempfile
import time

# One BLAS thread per process: the ranks share this machine's cores (set before torch loads OpenBLAS).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

try:
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
except ImportError as e:
    print(f"train_tta: {e}: skipped (needs Debian's python3-torch under /usr/bin/python3)")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "python"))
sys.path.insert(0, HERE)
import tta_common  # noqa: E402

# The text: these files of Debian 12's libpython3.11-minimal/libpython3.11-stdlib, concatenated in
# this order (721,779 bytes in 3.11.2); the first 90% trains, the next 5% validates, the last 5% is
# held out for a test split nobody tunes on.
STDLIB = "/usr/lib/python3.11"
CORPUS = ["argparse.py", "collections/__init__.py", "dataclasses.py", "enum.py", "functools.py", "inspect.py",
          "pathlib.py", "subprocess.py", "textwrap.py", "typing.py"]

# The tuner's codec dimension, each on the algorithm it runs with (tuner/plan_space.cc RuntimeAlgo).
RUNTIME_ALGO = {"topk": "sparse", "sign1": "sign2", "powersgd": "powersgd"}

# Two-sided 95% t quantiles for 1..30 degrees of freedom.
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042]


def interval(values):
    """(mean, half-width of the 95% t-interval); half-width None for one value."""
    v = np.asarray(values, dtype=float)
    if len(v) < 2:
        return float(v.mean()), None
    t = T975[min(len(v) - 1, len(T975)) - 1]
    return float(v.mean()), float(t * v.std(ddof=1) / math.sqrt(len(v)))


def corpus():
    """The text as bytes, its SHA-256, and the train/validation/test splits (uint8 tensors)."""
    parts = []
    for name in CORPUS:
        path = os.path.join(STDLIB, name)
        if not os.path.isfile(path):
            sys.exit(f"train_tta: {path} is missing (the corpus is Debian 12's Python 3.11 standard library)")
        with open(path, "rb") as f:
            parts.append(f.read())
    text = b"".join(parts)
    data = torch.frombuffer(bytearray(text), dtype=torch.uint8).long()
    n = len(data)
    a, b = int(0.9 * n), int(0.95 * n)
    return hashlib.sha256(text).hexdigest(), data[:a], data[a:b], data[b:]


class Block(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(d)
        self.attn = torch.nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = torch.nn.LayerNorm(d)
        self.fc1 = torch.nn.Linear(d, 4 * d)
        self.fc2 = torch.nn.Linear(4 * d, d)

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class CharLM(torch.nn.Module):
    """A pre-LayerNorm causal transformer over bytes: embeddings, `layers` blocks, a LayerNorm and an
    untied output layer."""

    def __init__(self, d=128, heads=4, layers=2, context=64):
        super().__init__()
        self.context = context
        self.tok = torch.nn.Embedding(256, d)
        self.pos = torch.nn.Embedding(context, d)
        self.blocks = torch.nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.ln = torch.nn.LayerNorm(d)
        self.out = torch.nn.Linear(d, 256)
        self.register_buffer("mask", torch.triu(torch.full((context, context), float("-inf")), 1), persistent=False)

    def forward(self, x):
        t = x.shape[1]
        h = self.tok(x) + self.pos(torch.arange(t))
        for b in self.blocks:
            h = b(h, self.mask[:t, :t])
        return self.out(self.ln(h))


def windows(data, starts, context):
    idx = starts[:, None] + torch.arange(context + 1)[None, :]
    w = data[idx]
    return w[:, :-1], w[:, 1:]


def evaluate(model, val, context, count=64):
    """Mean cross-entropy over `count` fixed, evenly spaced windows of the validation text, in bits."""
    starts = torch.linspace(0, len(val) - context - 2, count).long()
    x, y = windows(val, starts, context)
    with torch.no_grad():
        z = model(x)
        return float(F.cross_entropy(z.reshape(-1, 256), y.reshape(-1))) / math.log(2)


class CharLMTask:
    """The language model: batches of `context`-byte windows, validation bpc on 64 fixed windows."""
    name, metric, unit = "charlm", "val_bpc", "validation bits per character"
    bucket = 256 << 10  # bytes: the model's ~1.8 MiB of fp32 gradients go as several DDP buckets
    defaults = {"steps": 400, "batch": 16, "lr": 3e-3, "eval_every": 20}

    def __init__(self, a):
        self.a = a
        self.sha, self.train, self.val, _ = corpus()

    def model(self):
        a = self.a
        return CharLM(a.d, a.heads, a.layers, a.context)

    def batch(self, g, rank, world):
        a = self.a
        # Every rank draws the world's batch with the same generator and takes its own slice.
        starts = torch.randint(0, len(self.train) - a.context - 1, (a.batch * world,), generator=g)
        return windows(self.train, starts[rank * a.batch:(rank + 1) * a.batch], a.context)

    report = 1 / math.log(2)  # the training loss is reported in bits (trained on in nats)

    def loss(self, out, y):
        return F.cross_entropy(out.reshape(-1, 256), y.reshape(-1))

    def evaluate(self, model):
        return evaluate(model, self.val, self.a.context)

    def target(self, final_mean):
        return 1.02 * final_mean  # 2% above the first configuration's final

    def describe(self, params):
        a = self.a
        return (f"Python 3.11 standard library sources ({len(CORPUS)} files, sha256 {self.sha[:16]}), byte-level "
                f"transformer of {params} parameters ({a.layers} layers, d {a.d}, {a.heads} heads, context "
                f"{a.context}), AdamW lr {a.lr}, batch {a.batch} windows per process per micro-batch")

    def example(self):
        return torch.zeros(self.a.batch, self.a.context, dtype=torch.long)

    def source(self):
        a = self.a
        return (f"scripts/train_tta.py CharLM (d {a.d}, {a.heads} heads, {a.layers} layers, context {a.context})",
                f"per window of {a.context} bytes; attention's score products are not counted (no parameter)")


class DigitsTask:
    """scikit-learn's digits with digits_tta's CNN, on its own split (stratified 70/15/15, random_state
    2026) and hyperparameters (AdamW, batch 32 per rank): validation error in percent."""
    name, metric, unit = "digits", "val_err", "validation error (%)"
    bucket = 32 << 10  # bytes: the CNN's 150 KiB of fp32 gradients go as 5 DDP buckets
    defaults = {"steps": 300, "batch": 32, "lr": 2e-3, "eval_every": 10}

    def __init__(self, a):
        try:
            from sklearn.datasets import load_digits
            from sklearn.model_selection import train_test_split
        except ImportError as e:
            print(f"train_tta: {e}: skipped (digits needs Debian's python3-sklearn under /usr/bin/python3)")
            sys.exit(77)
        import digits_tta
        self.net = digits_tta.Net
        self.a = a
        d = load_digits()
        x = (d.images / 16.0).astype(np.float32)[:, None, :, :]
        xtr, xrest, ytr, yrest = train_test_split(x, d.target, test_size=0.3, random_state=2026, stratify=d.target)
        xval, _, yval, _ = train_test_split(xrest, yrest, test_size=0.5, random_state=2026, stratify=yrest)
        self.sha = hashlib.sha256(x.tobytes() + d.target.astype(np.int64).tobytes()).hexdigest()
        self.xtr, self.ytr = torch.from_numpy(xtr), torch.from_numpy(ytr).long()
        self.xval, self.yval = torch.from_numpy(xval), torch.from_numpy(yval).long()

    def model(self):
        return self.net()

    def batch(self, g, rank, world):
        a = self.a
        idx = torch.randint(0, len(self.xtr), (a.batch * world,), generator=g)[rank * a.batch:(rank + 1) * a.batch]
        return self.xtr[idx], self.ytr[idx]

    report = 1.0

    def loss(self, out, y):
        return F.cross_entropy(out, y)

    def evaluate(self, model):
        with torch.no_grad():
            return 100.0 * float((model(self.xval).argmax(1) != self.yval).float().mean())

    def target(self, final_mean):
        return final_mean + 1.0  # one point of validation error above the first configuration's final

    def describe(self, params):
        a = self.a
        return (f"scikit-learn digits (sha256 {self.sha[:16]}), {len(self.xtr)} training and {len(self.xval)} "
                f"validation images (stratified, random_state 2026), scripts/digits_tta.py's CNN of {params} "
                f"parameters, AdamW lr {a.lr}, batch {a.batch} images per process per micro-batch")

    def example(self):
        return torch.zeros(self.a.batch, 1, 8, 8)

    def source(self):
        return "scripts/digits_tta.py Net (2 conv layers, 2 dense)", "per 8x8 image"


TASKS = {"charlm": CharLMTask, "digits": DigitsTask}


def split_config(cfg):
    """'profile:P+k4' -> ('profile:P', 4); no suffix: 1."""
    if "+k" in cfg:
        base, k = cfg.rsplit("+k", 1)
        if k.isdigit() and int(k) >= 1:
            return base, int(k)
    return cfg, 1


def one_rule_profile(codec, world, nodes, bucket):
    """codec NAME or none@bf16 on the algorithm the tuner runs it with, for every size."""
    precision = "fp32"
    if "@" in codec:
        codec, precision = codec.split("@")
    algo = "nccl" if codec == "none" else RUNTIME_ALGO.get(codec.split(":")[0], "ring")
    return tta_common.one_rule_profile(algo, codec, precision, world, bucket, nodes)


def train(cfg, seed, rank, world, nodes, a, task):
    import ciuic.torch
    base, k = split_config(cfg)
    torch.manual_seed(seed)
    model = task.model()  # the same initial weights on every rank
    state = None
    if base == "ddp":
        ddp = DDP(model, bucket_cap_mb=task.bucket / 2**20)
    else:
        prof = one_rule_profile(base[6:], world, nodes, task.bucket) if base.startswith("codec:") else base[8:]
        ddp = DDP(model, **ciuic.torch.ddp_kwargs(prof))
        state, hook = ciuic.torch.comm_hook(prof, module=model)
        ddp.register_comm_hook(state, hook)
    acc = ciuic.torch.Accumulation(ddp, k)  # k = 1: every micro-batch synchronised
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)
    # 20 warm-up micro-batches' worth of samples, whatever k is.
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) * k / 20))
    g = torch.Generator().manual_seed(1000 + seed)
    points, elapsed, window, step_times = [], 0.0, [], []
    opt.zero_grad()
    for step in range(1, a.steps + 1):
        x, y = task.batch(g, rank, world)
        t0 = time.perf_counter()
        with acc.micro_batch(step - 1):
            loss = task.loss(ddp(x), y)
            (loss / k).backward()
        if acc.sync_step(step - 1):
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
        dt = time.perf_counter() - t0
        elapsed += dt
        step_times.append(dt)
        window.append(float(loss) * task.report)
        if step % a.eval_every == 0 or step == a.steps:
            points.append({"config": cfg, "seed": seed, "step": step, "seconds": elapsed,
                           "train_loss": sum(window) / len(window), "val": task.evaluate(model)})
            window = []
            dist.barrier()  # every rank resumes the clock together
    nonfinite = 0
    if state is not None:
        nonfinite = state.nonfinite()
        state.close()
    return points, step_times, nonfinite


def worker(rank, world, a, tmp, init):
    if tmp is not None:
        err = os.open(os.path.join(tmp, f"stderr.{rank}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(err, 2)
    torch.set_num_threads(1)
    task = TASKS[a.workload](a)
    dist._DEFAULT_FIRST_BUCKET_BYTES = task.bucket
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=300))
    hosts = [None] * world
    dist.all_gather_object(hosts, socket.gethostname())
    nodes = len(set(hosts))  # the hosts the job spans (the lab: one per network namespace)
    out, steps = [], {}
    for cfg in a.configs:
        for seed in a.seed_list:
            points, step_times, nonfinite = train(cfg, seed, rank, world, nodes, a, task)
            if rank == 0:
                out += points
                steps[f"{cfg}|{seed}"] = step_times
                last = points[-1]
                print(f"{cfg:<24} seed {seed}: {task.metric} {last['val']:.4f}  {last['seconds']:.2f} s  "
                      f"{1e3 * last['seconds'] / a.steps:.1f} ms per micro-batch"
                      f"{'  (non-finite buckets: %d)' % nonfinite if nonfinite else ''}", flush=True)
    if rank == 0:
        with open(os.path.join(a.work, "points.json"), "w") as f:
            json.dump({"points": out, "step_times": steps, "hosts": hosts}, f)
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)  # torch 1.13's DDP teardown can deadlock at interpreter exit


def summarise(data, a, task):
    by = {}
    for p in data["points"]:
        by.setdefault(p["config"], {}).setdefault(p["seed"], []).append(p)
    finals = {c: [sorted(by[c][s], key=lambda p: p["step"])[-1]["val"] for s in a.seed_list] for c in a.configs}
    target = a.target if a.target else task.target(float(np.mean(finals[a.configs[0]])))
    rows = {}
    for c in a.configs:
        runs = [sorted(by[c][s], key=lambda p: p["step"]) for s in a.seed_list]
        times = [data["step_times"][f"{c}|{s}"] for s in a.seed_list]
        medians = [1e3 * float(np.median(t[5:] or t)) for t in times]
        means = [1e3 * float(np.mean(t[5:] or t)) for t in times]  # what accumulation changes: the mean
        spreads = [1e3 * float(np.subtract(*np.percentile(t, [75, 25]))) for t in times]
        to_target = []
        for r in runs:
            hit = next((p for p in r if p["val"] <= target), None)
            to_target.append(hit["seconds"] if hit else None)
        reached = [t for t in to_target if t is not None]
        rows[c] = {"accumulation": split_config(c)[1], "final": interval(finals[c]), "step_ms": interval(medians),
                   "micro_batch_ms": interval(means), "step_iqr_ms": float(np.mean(spreads)),
                   "seconds_to_target": interval(reached) if reached else (None, None),
                   "reached": f"{len(reached)}/{len(runs)}", "seconds": interval([r[-1]["seconds"] for r in runs]),
                   "curve_steps": [p["step"] for p in runs[0]],
                   "curve": [interval([r[i]["val"] for r in runs]) for i in range(len(runs[0]))],
                   "curve_seconds": [float(np.mean([r[i]["seconds"] for r in runs])) for i in range(len(runs[0]))]}
    return rows, target


def fmt_ci(mean_half, unit="", digits=3):
    mean, half = mean_half
    if mean is None:
        return "-"
    return f"{mean:.{digits}f}{unit}" + ("" if half is None else f" ± {half:.{digits}f}")


def write_outputs(data, rows, target, task, a, wall):
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "train_tta.csv"), "w") as f:
        keys = ["config", "seed", "step", "seconds", "train_loss", "val"]
        f.write(",".join(keys[:-1] + [task.metric]) + "\n")
        for p in data["points"]:
            f.write(",".join(str(p[k]) if not isinstance(p[k], float) else f"{p[k]:.6g}" for k in keys) + "\n")
    params = sum(p.numel() for p in task.model().parameters())
    lines = [f"# {task.name} time-to-target ({datetime.date.today().isoformat()})", "",
             f"{task.describe(params)}; DDP on gloo, {a.world} processes, {a.steps} micro-batches, seeds "
             f"{','.join(map(str, a.seed_list))}; target {target:.3f} ({task.unit}); seconds are training time on "
             f"{socket.gethostname()} ({os.cpu_count()} cores), evaluation excluded; the run took {wall:.0f} s.",
             "Means over seeds with 95% t-intervals. k: micro-batches per gradient synchronisation.", "",
             f"| config | k | ms per micro-batch (mean) | median; IQR | s to target (reached) | final {task.unit} "
             f"| s total |", "|---|---|---|---|---|---|---|"]
    digits = 3 if task.metric == "val_bpc" else 2
    for c, r in rows.items():
        base = split_config(c)[0]
        if base.startswith("profile:"):
            base = "profile:" + os.path.basename(base[8:])
        lines.append(f"| {base} | {r['accumulation']} | {fmt_ci(r['micro_batch_ms'], digits=1)} | "
                     f"{r['step_ms'][0]:.1f}; {r['step_iqr_ms']:.1f} | "
                     f"{fmt_ci(r['seconds_to_target'], digits=2)} ({r['reached']}) | {fmt_ci(r['final'], digits=digits)} | "
                     f"{fmt_ci(r['seconds'], digits=2)} |")
    with open(os.path.join(a.out, "train_tta.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    summary = {"workload": task.name, "metric": task.metric, "world": a.world, "steps": a.steps, "batch": a.batch,
               "lr": a.lr, "seeds": a.seed_list, "parameters": params, "data_sha256": task.sha,
               "target": target, "host": socket.gethostname(), "rank_hosts": data.get("hosts"),
               "cpus": os.cpu_count(), "git_commit": tta_common.git_commit(),
               "date": datetime.date.today().isoformat(), "rows": rows}
    if task.name == "charlm":
        summary["model"] = {"d": a.d, "heads": a.heads, "layers": a.layers, "context": a.context}
        summary["corpus"] = [os.path.join(STDLIB, c) for c in CORPUS]
    with open(os.path.join(a.out, "train_tta.json"), "w") as f:
        json.dump(summary, f, indent=1)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("train_tta: no matplotlib: no PNG")
        return
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for c, r in rows.items():
        mean = np.array([m for m, _ in r["curve"]])
        half = np.array([h or 0.0 for _, h in r["curve"]])
        for ax, x in ((axes[0], r["curve_steps"]), (axes[1], r["curve_seconds"])):
            ax.plot(x, mean, label=c)
            ax.fill_between(x, mean - half, mean + half, alpha=0.2)
    for ax, xl in ((axes[0], "micro-batch"), (axes[1], "training seconds")):
        ax.axhline(target, color="gray", linestyle=":", linewidth=1)
        ax.set_xlabel(xl)
        ax.set_ylabel(task.unit)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{task.name}, {a.world} processes, {len(a.seed_list)} seeds (mean and 95% interval)")
    fig.tight_layout()
    fig.savefig(os.path.join(a.out, "train_tta.png"), dpi=110)


def write_workload(path, a):
    from ciuic.workload import workload_from_module
    task = TASKS[a.workload](a)
    source, note = task.source()
    doc = workload_from_module(task.model(), task.example(), name=task.name, source=source, flops_note=note)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"train_tta: wrote {path}: {doc['parameters']} parameters in {len(doc['tensors'])} tensors")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", choices=sorted(TASKS), default="charlm")
    p.add_argument("--configs", default="ddp,codec:int8,codec:topk:0.01")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--steps", type=int, help="micro-batches per run (charlm 400, digits 300)")
    p.add_argument("--batch", type=int, help="samples per process per micro-batch (charlm 16, digits 32)")
    p.add_argument("--lr", type=float, help="AdamW's learning rate (charlm 3e-3, digits 2e-3)")
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--eval-every", type=int, help="micro-batches between evaluations (charlm 20, digits 10)")
    p.add_argument("--target", "--target-bpc", type=float, default=0.0,
                   help="the validation metric to reach (default: charlm 2%% above, digits 1 point above the first "
                        "configuration's seed-mean final)")
    p.add_argument("--out", default=os.path.join(REPO, "results", "train-tta"))
    p.add_argument("--deadline", type=int, default=7200, help="seconds before the run is given up")
    p.add_argument("--write-workload", metavar="FILE", help="write the model's ciuic.workload/1 file and stop")
    p.add_argument("--smoke", metavar="OUT", help="a short CI run into OUT: 2 processes, 1 seed, 4 configurations")
    a = p.parse_args()
    for key, value in TASKS[a.workload].defaults.items():
        if getattr(a, key) is None:
            setattr(a, key, value)
    if a.smoke:
        a.out, a.world, a.seeds, a.steps, a.eval_every, a.deadline = a.smoke, 2, 1, 40, 20, 300
        a.configs = "ddp,codec:none,codec:int8,ddp+k2"
    if min(a.world, a.seeds, a.steps, a.batch, a.eval_every, a.d, a.heads, a.layers, a.context) < 1 or a.d % a.heads:
        sys.exit("train_tta: --world, --seeds, --steps, --batch, --eval-every and the model sizes must be positive "
                 "(--d a multiple of --heads)")
    if a.write_workload:
        write_workload(a.write_workload, a)
        return
    a.configs = a.configs.split(",")
    for c in a.configs:
        base, k = split_config(c)
        if not (base == "ddp" or base.startswith("codec:") or (base.startswith("profile:") and os.path.isfile(base[8:]))):
            sys.exit(f"train_tta: --configs: {c!r} is not ddp, codec:NAME or profile:FILE (an existing file), "
                     "each optionally +kN")
        if a.steps % k:
            sys.exit(f"train_tta: --configs: {c!r}: --steps {a.steps} is not a multiple of {k} micro-batches")
    a.seed_list = list(range(1, a.seeds + 1))
    task = TASKS[a.workload](a)  # the data is there (and sklearn, for digits) before any rank starts
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="ciuic-train-") as tmp:
        a.work = tmp
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # torchrun / the lab: one rank of that job
            rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
            a.world = world
            if rank != 0:
                worker(rank, world, a, None, "env://")
            pid = os.fork()
            if pid == 0:
                worker(0, world, a, None, "env://")
            _, status = os.waitpid(pid, 0)
            if status != 0:
                sys.exit(f"train_tta: rank 0 ended with status {status}")
        else:
            tta_common.run_local(worker, a.world, a, tmp, "file://" + os.path.join(tmp, "init"), a.deadline)
        with open(os.path.join(tmp, "points.json")) as f:
            data = json.load(f)
    rows, target = summarise(data, a, task)
    write_outputs(data, rows, target, task, a, time.time() - t0)
    if a.smoke:
        write_workload(os.path.join(a.out, f"{task.name}.workload.json"), a)  # for ciuic-tune --workload
        bad = [c for c, r in rows.items() if not r["final"][0] < (5.0 if task.name == "charlm" else 50.0)]
        if bad:
            sys.exit(f"train_tta: smoke: configurations that did not learn (final {task.unit} at or above 5 bpc "
                     f"/ 50% error): {bad}")


if __name__ == "__main__":
    main()
