#!/usr/bin/env python3
"""nccl-tests and `ciuic-bench --backend nccl` side by side on the same GPU (step h of gpu-check.sh):
all_reduce_perf / all_gather_perf / reduce_scatter_perf against ciuic-bench allreduce / allgather /
reducescatter, fp32, 4 B to 1 GiB by x4, the same iterations and warm-ups, out-of-place, with the same
-z on both sides: 0 (nccl-tests' default: the iterations back to back, one wait, the wall clock over the
count) and 1 (each op alone, the wall clock around it and its wait). With one GPU
both run NCCL at world size 1 (a one-rank communicator: a device copy). The goal: ciuic-bench's time per
size within 5% of nccl-tests' at >= 1 MiB and within 10% below.

    nccl_tests_side_by_side.py CIUIC_BENCH NCCL_TESTS_DIR LOGDIR   (writes LOGDIR/nccl-tests-side-by-side.txt)
"""
import json
import os
import subprocess
import sys

PAIRS = (("all_reduce_perf", "allreduce"), ("all_gather_perf", "allgather"), ("reduce_scatter_perf", "reducescatter"))
ITERS, WARMUP = 20, 5


def nccl_tests_times(exe, log, z):
    """size -> out-of-place time (us) from an nccl-tests table."""
    out = subprocess.run([exe, "-b", "4", "-e", "1G", "-f", "4", "-g", "1", "-n", str(ITERS), "-w", str(WARMUP),
                          "-z", str(z)],
                         capture_output=True, text=True, check=False)
    open(log, "w").write(out.stdout + out.stderr)
    times = {}
    for line in out.stdout.splitlines():
        f = line.split()
        if len(f) >= 6 and f[0].isdigit() and not line.lstrip().startswith("#"):
            # size count type redop root time algbw busbw #wrong ... (the out-of-place half first)
            try:
                times[int(f[0])] = float(f[5])
            except ValueError:
                pass
    return times, out.returncode


def ciuic_times(bench, coll, log, js, z):
    out = subprocess.run([bench, coll, "--backend", "nccl", "--device", "cuda", "--dtype", "fp32", "--sizes", "4:1G:x4",
                          "--inplace", "no", "-n", str(ITERS), "-w", str(WARMUP), "-z", str(z), "--format", "json",
                          "--out", js],
                         capture_output=True, text=True, check=False)
    open(log, "w").write(out.stdout + out.stderr)
    if out.returncode != 0:
        return {}, out.returncode
    return {r["size_bytes"]: r["time_us"] for r in json.load(open(js))["results"]}, 0


def main():
    bench, tests_dir, logs = sys.argv[1:4]
    lines = ["world size 1 (one GPU): NCCL's one-rank path; times are the mean of %d iterations, out-of-place" % ITERS,
             f"{'collective':<14} {'-z':>2} {'size':>11} {'nccl-tests us':>14} {'ciuic-bench us':>15} {'ratio':>7} "
             f"{'within':>6}"]
    bad = 0
    for z in (0, 1):
        for exe, coll in PAIRS:
            nt, rc1 = nccl_tests_times(os.path.join(tests_dir, exe), os.path.join(logs, f"nccl-tests-{exe}-z{z}.txt"), z)
            ci, rc2 = ciuic_times(bench, coll, os.path.join(logs, f"ciuic-{coll}-nccl-z{z}.txt"),
                                  os.path.join(logs, f"ciuic-{coll}-nccl-z{z}.json"), z)
            if rc1 or rc2 or not nt or not ci:
                lines.append(f"{coll:<14} {z:>2} nccl-tests exit {rc1} ({len(nt)} sizes), ciuic-bench exit {rc2} "
                             f"({len(ci)} sizes)")
                bad += 1
                continue
            for size in sorted(set(nt) & set(ci)):
                ratio = ci[size] / nt[size]
                tol = 0.05 if size >= 1 << 20 else 0.10
                miss = abs(ratio - 1) > tol
                bad += miss
                lines.append(f"{coll:<14} {z:>2} {size:>11} {nt[size]:>14.2f} {ci[size]:>15.2f} {ratio:>7.3f} "
                             f"{tol * 100:>5.0f}%{'  outside' if miss else ''}")
    text = "\n".join(lines)
    print(text)
    open(os.path.join(logs, "nccl-tests-side-by-side.txt"), "w").write(text + "\n")
    print(f"{bad} row(s) outside the goal or failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
