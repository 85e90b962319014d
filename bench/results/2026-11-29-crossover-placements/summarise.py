#!/usr/bin/env python3
"""Summarises the crossover tables in raw/: per file, placement and size, auto against the library
(time difference below 4 KiB, library/auto from 4 KiB) and auto/best. Usage: summarise.py RAW_DIR"""
import glob
import os
import re
import sys

rows = {}
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.txt"))):
    name = os.path.basename(path)[:-4]
    place = None
    for line in open(path):
        if line.startswith("# crossover table"):
            place = "in place" if "in place" in line else "out of place"
        elif place and re.match(r"\s+\d+\s", line):
            p = line.split()
            rows.setdefault((name, place), []).append(
                dict(size=int(p[0]), lib=float(p[1]), auto=float(p[-4]), chose=p[-3], best=float(p[-2]),
                     lib_auto=float(p[-1])))
for (name, place), rs in rows.items():
    small = [r for r in rs if r["size"] < 4096]
    big = [r for r in rs if r["size"] >= 4096]
    d = [r["auto"] - r["lib"] for r in small]
    la = [r["lib_auto"] for r in big]
    ab = [r["best"] for r in rs]
    below = [f'{r["size"]}:{r["lib_auto"]:.2f}' for r in big if r["lib_auto"] < 0.95]
    worst = [f'{r["size"]}:{r["best"]:.2f}({r["chose"]})' for r in rs if r["best"] < 0.9]
    print(f"{name:22} {place:12} <4K auto-lib {min(d):+.2f}..{max(d):+.2f} us | >=4K lib/auto "
          f"{min(la):.2f}..{max(la):.2f} below 0.95: {' '.join(below) or '-'} | auto/best<0.9: {' '.join(worst) or '-'}")
