"""Tables of run.sh's output: busbw per size and round, the ring / same-round sendrecv, medians."""
import glob
import re
import statistics
import sys

d = sys.argv[1] if len(sys.argv) > 1 else "."


def rows(path):
    out = {}
    for line in open(path):
        f = line.split()
        if len(f) > 12 and re.fullmatch(r"\d+", f[0]):
            out[int(f[0]) >> 20] = (float(f[7]), float(f[11]))
    return out


rounds = len(glob.glob(f"{d}/sendrecv-round*.txt"))
sr = [rows(f"{d}/sendrecv-round{k}.txt") for k in range(1, rounds + 1)]
rb = [rows(f"{d}/ring-before-round{k}.txt") for k in range(1, rounds + 1)]
ra = [rows(f"{d}/ring-after-round{k}.txt") for k in range(1, rounds + 1)]
print("| size | sendrecv | ring oop before | after | ring in place before | after | oop/sendrecv before | after |")
print("|---|---|---|---|---|---|---|---|")
ratios = {"b": [], "a": []}
for mib in sorted(sr[0]):
    cell = lambda xs: " / ".join(f"{x:.2f}" for x in xs)
    s = [r[mib][0] for r in sr]
    bo, ao = [r[mib][0] for r in rb], [r[mib][0] for r in ra]
    bi, ai = [r[mib][1] for r in rb], [r[mib][1] for r in ra]
    qb = [x / y for x, y in zip(bo, s)]
    qa = [x / y for x, y in zip(ao, s)]
    ratios["b"] += qb
    ratios["a"] += qa
    med = lambda xs: f" (median {statistics.median(xs):.2f})"
    print(f"| {mib} MiB | {cell(s)}{med(s)} | {cell(bo)}{med(bo)} | {cell(ao)}{med(ao)} | {cell(bi)}{med(bi)} | "
          f"{cell(ai)}{med(ai)} | {cell(qb)}{med(qb)} | {cell(qa)}{med(qa)} |")
for k, name in (("b", "before"), ("a", "after")):
    q = ratios[k]
    print(f"oop/sendrecv {name}: {min(q):.2f}-{max(q):.2f}, median {statistics.median(q):.2f}, "
          f">= 0.85 in {sum(x >= 0.85 for x in q)} of {len(q)}")
