#!/usr/bin/env python3
"""Sampled top-k (ciuic, from a `ciuic-bench compress --codec topk:0.01 --device cuda` JSON) against
torch.topk on the same GPU and the same sizes. Needs PyTorch with CUDA (the GPU machine's python3)."""
import json
import sys

import torch


def torch_topk_us(n, k, reps=20):
    x = torch.randn(n, device="cuda") * 1e-3
    for _ in range(3):
        torch.topk(x.abs(), k, sorted=False)
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    times = []
    for _ in range(reps):
        ev[0].record()
        torch.topk(x.abs(), k, sorted=False)
        ev[1].record()
        torch.cuda.synchronize()
        times.append(ev[0].elapsed_time(ev[1]) * 1000)
    times.sort()
    return times[len(times) // 2]


def main():
    rows = json.load(open(sys.argv[1]))["results"]
    print(f"{'size':>12} {'k':>9} {'ciuic encode us':>16} {'torch.topk us':>14} {'speed-up':>9}")
    for r in rows:
        n = r["size"] // 4
        k = max(1, -(-n // 100))
        t = torch_topk_us(n, k)
        print(f"{r['size']:>12} {k:>9} {r['enc_us']:>16.1f} {t:>14.1f} {t / r['enc_us']:>8.1f}x")


if __name__ == "__main__":
    main()
