#!/usr/bin/env python3
"""Per build and layer: the median over every run and repetition of ns per call, and each layer's
cost over the transport measured beside it (same process, same run). Usage: summarise.py RAW_DIR"""
import csv
import glob
import os
import statistics as st
import sys
from collections import defaultdict

for side in ("before", "after"):
    t = defaultdict(list)
    over = defaultdict(list)
    for path in sorted(glob.glob(os.path.join(sys.argv[1], side + "-r*.csv"))):
        rows = [r for r in csv.reader(open(path)) if r and r[0].startswith("Overhead/")]
        # Rows come in rounds of 12 (6 layers x 2 sizes): compare each layer with the transport of its round.
        for i in range(0, len(rows), 12):
            block = rows[i:i + 12]
            base = {r[0].split("/")[2]: float(r[2]) for r in block if r[0].split("/")[1] == "Transport"}
            for r in block:
                layer, size = r[0].split("/")[1:3]
                t[(layer, size)].append(float(r[2]))
                over[(layer, size)].append(float(r[2]) - base[size])
    print(side)
    for (layer, size), v in t.items():
        o = over[(layer, size)]
        print(f"  {layer:13} {size:>5} B  median {st.median(v):7.1f} ns ({min(v):.0f}-{max(v):.0f})"
              f"  over the transport: median {st.median(o):+7.1f} ns ({min(o):+.0f} to {max(o):+.0f})")
