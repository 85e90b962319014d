#!/usr/bin/env python3
"""A parser of nccl-tests' output, the way people write one for their logs, reads ciuic-bench's table
unchanged (issue 15, item 5).

    nccl_tests_parser_test.py FIXTURE CIUIC_BENCH

FIXTURE is an all_reduce_perf block in nccl-tests' layout (tests/data/nccl_tests/); the parser below
knows nothing of ciuic: it skips '#' lines, splits on whitespace, reads the 13 columns by position
and the "Avg bus bandwidth" / "Out of bounds values" lines. It must get the same fields, with
consistent values, from the fixture and from a real ciuic-bench run (plain and with -d/-o sweeps).
Plain python3, standard library only.
"""
import subprocess
import sys


def expect(condition, what="check failed"):
    """An assertion that `python3 -O` (PYTHONOPTIMIZE) cannot remove."""
    if not condition:
        raise AssertionError(what)


def parse_nccl_tests(text):
    """Rows and summary of an nccl-tests *_perf log."""
    rows, avg_busbw, oob = [], None, None
    for line in text.splitlines():
        if line.startswith("#"):
            if "Avg bus bandwidth" in line:
                avg_busbw = float(line.split(":")[1].split()[0])
            elif "Out of bounds values" in line:
                oob = int(line.split(":")[1].split()[0])
            continue
        f = line.split()
        if len(f) < 13:
            continue
        rows.append({
            "size": int(f[0]), "count": int(f[1]), "type": f[2], "redop": f[3], "root": int(f[4]),
            "oop_time": float(f[5]), "oop_algbw": float(f[6]), "oop_busbw": float(f[7]), "oop_wrong": int(f[8]),
            "ip_time": float(f[9]), "ip_algbw": float(f[10]), "ip_busbw": float(f[11]), "ip_wrong": int(f[12]),
        })
    return rows, avg_busbw, oob


def check(name, text, ranks, factor, types, redops):
    rows, avg, oob = parse_nccl_tests(text)
    expect(rows, f"{name}: no rows parsed")
    expect(avg is not None and oob is not None, f"{name}: no closing lines")
    expect(oob == 0, f"{name}: out of bounds {oob}")
    expect({r["type"] for r in rows} == set(types), (name, {r["type"] for r in rows}))
    expect({r["redop"] for r in rows} == set(redops), (name, {r["redop"] for r in rows}))
    busbws = []
    for r in rows:
        elem = {"float": 4, "half": 2, "int32": 4, "int8": 1, "double": 8}[r["type"]]
        expect(r["count"] == r["size"] // elem, (name, r))
        expect(r["root"] == -1 and r["oop_wrong"] == 0 and r["ip_wrong"] == 0, (name, r))
        for p in ("oop", "ip"):
            t, alg, bus = r[p + "_time"], r[p + "_algbw"], r[p + "_busbw"]
            expect(t > 0, (name, r))
            # algbw = size / time (GB = 1e9 B) and busbw = algbw * 2(n-1)/n, within the 2 printed decimals
            expect(abs(alg - r["size"] / (t * 1e-6) / 1e9) <= 0.006 + 0.002 * alg, (name, p, r))
            expect(abs(bus - alg * factor) <= 0.011 + 0.002 * bus, (name, p, r))
            busbws.append(bus)
    # The average bus bandwidth is the mean busbw over every row and placement.
    mean = sum(busbws) / len(busbws)
    expect(abs(avg - mean) <= 0.006 + 0.002 * mean, (name, avg, mean))
    return rows


def main():
    fixture, bench = sys.argv[1], sys.argv[2]
    ref = check("nccl-tests fixture", open(fixture).read(), 8, 2 * 7 / 8, ["float"], ["sum"])
    expect(len(ref) == 25 and ref[0]["size"] == 8 and ref[-1]["size"] == 128 << 20, len(ref))

    runs = [
        (["allreduce", "--backend", "local", "--ranks", "2", "-b", "1K", "-e", "64K", "-f", "4", "-n", "5", "-w", "1"],
         ["float"], ["sum"], 4),
        (["allreduce", "--backend", "local", "--ranks", "2", "-b", "4K", "-e", "8K", "-f", "2", "-n", "3", "-w", "1",
          "-d", "float,half,int32", "-o", "sum,max"], ["float", "half", "int32"], ["sum", "max"], 2 * 3 * 2),
    ]
    for args, types, redops, nrows in runs:
        out = subprocess.run([bench] + args, capture_output=True, text=True, timeout=120)
        expect(out.returncode == 0, (args, out.stderr))
        rows = check("ciuic-bench " + " ".join(args), out.stdout, 2, 1.0, types, redops)
        expect(len(rows) == nrows, (args, len(rows), out.stdout))
        expect(set(rows[0]) == set(ref[0]), "the same fields")
    print("ok: the nccl-tests parser reads the fixture and ciuic-bench's table alike")


if __name__ == "__main__":
    main()
