#!/usr/bin/env python3
"""Kernels at the memory roofline on the GPU (step h of gpu-check.sh): the element codecs' encode,
decode and decode-accumulate (`ciuic-bench compress`), the fused kernels (`ciuic-bench kernel all`:
EF-quantise, decode-accumulate, the ring's decode-add-encode hop, flatten/unflatten of 256 tensors),
each as a percentage of the same run's device-to-device copy (bytes read + written), at 64 and 256 MiB;
then sampled top-k against torch.topk on the same GPU. Needs the GPU machine's python3 (PyTorch, CUDA).

    roofline.py CIUIC_BENCH LOGDIR        (writes LOGDIR/roofline.txt and the benches' JSON beside it)
"""
import json
import os
import subprocess
import sys

GOALS = {"encode": 85, "decode": 85, "decode-acc": 85, "decode-accumulate": 85, "decode-add-encode": 85,
         "ef-quantize": 85, "ef-quantize sign1": 80, "flatten": 80, "unflatten": 80}


def run(bench, logs, args, name):
    out = os.path.join(logs, name + ".json")
    with open(os.path.join(logs, name + ".txt"), "w") as f:
        rc = subprocess.run([bench] + args + ["--format", "json", "--out", out], stdout=f, stderr=subprocess.STDOUT,
                            check=False).returncode
    if rc != 0:
        print(f"{name}: ciuic-bench exited {rc} (see {name}.txt)")
        return []
    return json.load(open(out))["results"]


def main():
    bench, logs = sys.argv[1:3]
    rows, failed = [], 0
    for codec in ("fp16", "bf16", "int8", "fp8e4m3", "int4", "sign1"):
        for r in run(bench, logs, ["compress", "--device", "cuda", "--codec", codec, "--sizes", "64M,256M",
                                   "--data", "normal"], f"compress-{codec}"):
            for k, key in (("encode", "enc"), ("decode", "dec"), ("decode-acc", "acc")):
                rows.append((k, codec, r["size"], r[f"{key}_us"], r[f"{key}_pct_traffic"]))
    for codec in ("fp16", "int8", "fp8e4m3", "sign1"):
        for r in run(bench, logs, ["kernel", "all", "--device", "cuda", "--codec", codec, "--sizes", "64M,256M"],
                     f"kernel-{codec}"):
            if r["kernel"] in ("flatten", "unflatten") and codec != "int8":
                continue  # codec-independent: once
            if r["kernel"] in ("unscale", "clip"):
                continue
            rows.append((r["kernel"], codec, r["size"], r["time_us"], r["pct_traffic"]))
    lines = [f"{'kernel':<20} {'codec':<8} {'size':>10} {'us':>9} {'% copy r+w':>10} {'goal':>5}"]
    for k, codec, size, us, pct in rows:
        goal = GOALS.get(f"{k} {codec}", GOALS.get(k, 0))
        miss = pct < goal
        failed += miss
        lines.append(f"{k:<20} {codec:<8} {size >> 20:>8}Mi {us:>9.1f} {pct:>10.0f} {goal:>5}{'  below' if miss else ''}")
    topk = run(bench, logs, ["compress", "--device", "cuda", "--codec", "topk:0.01", "--sizes", "64M,256M",
                             "--data", "normal"], "compress-topk")
    text = "\n".join(lines)
    if topk:
        r = subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "topk_vs_torch.py"),
                            os.path.join(logs, "compress-topk.json")], capture_output=True, text=True, check=False)
        text += "\n\nsampled top-k (k = 1%) against torch.topk on the same GPU:\n" + r.stdout + r.stderr
    print(text)
    open(os.path.join(logs, "roofline.txt"), "w").write(text + "\n")
    print(f"{failed} of {len(rows)} kernel rows below their goal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
