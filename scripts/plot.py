#!/usr/bin/python3
"""ciuic's plots, PNG, drawn with matplotlib.

Run by `ciuic-bench plot KIND ...` (busbw) and `ciuic-tune plot KIND ...` (convergence, model, tta), or
directly as scripts/plot.py KIND ...  It must run under /usr/bin/python3: Debian's python3-matplotlib
and python3-numpy are installed for that interpreter only (a python3 earlier on PATH does not see them).

  busbw RUN... [--db FILE] [--metric busbw|algbw|time] [--inplace no|yes|both] [--logy]
        ciuic-bench runs (ciuic.bench/1 JSON files, or run ids / ranges A-B in --db) against the
        message size, one line per run, labelled by what differs between the runs
  convergence --db FILE [--study IDS]
        ciuic-tune's search: best score so far against the trial, one line per study, coloured by strategy
        (default: the newest study and every study of the same topology, workload, nodes and mode)
  model --db FILE [--all]
        the cost model's predicted time against the measured one: `ciuic-tune validate` rows (table
        validations; default: the newest validate run) and measured profile rules (best_configs)
  tta DIR|CSV
        time to accuracy (scripts/digits_tta.py's digits_tta.csv, and digits_tta.json beside it)

Every kind takes --out FILE.png (default KIND.png) and --title TEXT (a first title line of your own).
Bad input: one line on stderr, exit 1.
"""
import argparse
import csv
import json
import math
import os
import re
import sqlite3
import sys
import tempfile

DB_APPLICATION_ID = 0x43495543  # "CIUC", core/database.h kDatabaseApplicationId
BENCH_SCHEMA = "ciuic.bench/1"
KINDS = {"busbw": "ciuic-bench", "convergence": "ciuic-tune", "model": "ciuic-tune", "tta": "ciuic-tune"}


class Fail(Exception):
    """Bad input: the one line the tool prints before exiting 1."""


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise Fail(message)


# ---------------------------------------------------------------------------------------------------
# matplotlib, and what every plot shares


def pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise Fail(f"needs matplotlib for {sys.executable} (Debian: apt-get install python3-matplotlib): {e}")
    return plt


def size_label(b):
    """1024 -> '1K', 3 << 20 -> '3M', 1000 -> '1000' (binary units, as ciuic's size grammar)."""
    for unit, shift in (("T", 40), ("G", 30), ("M", 20), ("K", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift}{unit}"
    return f"{b:g}"


def log2_size_axis(ax, sizes, label="message size (bytes per rank, log2)"):
    """A log2 x axis over `sizes` with ticks on powers of two labelled 1K, 64K, 1M, ...; at most about 12
    labels (every 2nd or 4th power over wide ranges), the others as minor ticks."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter
    lo = math.floor(math.log2(min(sizes)))
    hi = math.ceil(math.log2(max(sizes)))
    step = 1
    while (hi - lo) / step > 12:
        step *= 2
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator([2.0 ** e for e in range(lo, hi + 1) if e % step == 0]))
    ax.xaxis.set_minor_locator(FixedLocator([2.0 ** e for e in range(lo, hi + 1)]))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: size_label(int(round(v)))))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlim(2.0 ** lo / 1.15, 2.0 ** hi * 1.15)
    ax.set_xlabel(label)


def time_label(us):
    """A time in microseconds as '5 us', '250 us', '1.5 ms', '2 s'."""
    for unit, scale in (("s", 1e6), ("ms", 1e3)):
        if us >= scale:
            return f"{us / scale:g} {unit}"
    return f"{us:g} us"


def log_time_axis(axis):
    from matplotlib.ticker import FuncFormatter
    axis.set_major_formatter(FuncFormatter(lambda v, _: time_label(v)))


def save(fig, path, tool):
    """Writes the PNG through a temporary file beside it, fsync'd and renamed over it, then fsyncs the
    folder (as core/files.cc does): never half a file, nor, after a crash, a renamed file whose data was
    still only in the page cache."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise Fail(f"--out {path}: folder '{folder}' does not exist")
    if os.path.isdir(path):
        raise Fail(f"--out {path}: is a folder")
    fd, tmp = tempfile.mkstemp(prefix=".plot-", suffix=".png", dir=folder)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # a new file's usual mode, not mkstemp's 0600
    try:
        fig.savefig(tmp, dpi=110)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as e:
        os.unlink(tmp)
        raise Fail(f"--out {path}: {e.strerror}")
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        pass  # the file is in place; a folder that cannot be opened cannot be synced either
    else:
        try:
            os.fsync(fd)
        except OSError:
            pass  # a file system without directory fsync still has the file
        finally:
            os.close(fd)
    print(f"{tool}: wrote {path}", file=sys.stderr)


def short_commit(c):
    """12 hex digits, and -dirty when the tree had changes (as the tools stamp it)."""
    c = c or "?"
    return c[:12] + ("-dirty" if c.endswith("-dirty") and len(c) > 12 else "")


def hosts_text(hosts):
    return ",".join(sorted(set(h for h in hosts if h))) or "?"


# ---------------------------------------------------------------------------------------------------
# the database (read only, as a ciuic database or not at all)


def open_db(path):
    if not path:
        raise Fail("--db FILE is required")
    if not os.path.isfile(path):
        raise Fail(f"--db {path}: no such file")
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        app = db.execute("PRAGMA application_id").fetchone()[0]
    except sqlite3.Error as e:
        raise Fail(f"--db {path}: not a SQLite database ({e})")
    if app != DB_APPLICATION_ID:
        raise Fail(f"--db {path}: not a ciuic database (application_id {app:#x})")
    db.row_factory = sqlite3.Row
    return db


def has_table(db, name):
    return db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone() is not None


MAX_IDS = 1000  # more lines than any plot can show


def id_list(text, what):
    """'3', '3,5', '2-6' -> [3], [3, 5], [2, 3, 4, 5, 6]: ids 1..2^63-1 (SQLite's), at most MAX_IDS."""
    out = []
    for item in text.split(","):
        m = re.fullmatch(r"(\d{1,19})(?:-(\d{1,19}))?", item)
        lo, hi = (int(m.group(1)), int(m.group(2) or m.group(1))) if m else (0, 0)
        if not m or hi < lo:
            raise Fail(f"{what} '{text}': use ids, ranges A-B, separated by commas")
        if lo < 1 or hi > 2 ** 63 - 1:
            raise Fail(f"{what} '{text}': an id is 1 to 9223372036854775807")
        if len(out) + hi - lo + 1 > MAX_IDS:
            raise Fail(f"{what} '{text}': more than {MAX_IDS} ids")
        out += list(range(lo, hi + 1))
    return out


# ---------------------------------------------------------------------------------------------------
# busbw: ciuic-bench runs against the size


def checked_rows(rows, where):
    """The rows of a run, refused in one line when a hand edit left a size that is not a positive whole
    number or a time or bandwidth that is negative, NaN or infinite (such a row was dropped unseen)."""
    for i, r in enumerate(rows):
        if isinstance(r["size"], bool) or not isinstance(r["size"], int) or r["size"] <= 0:
            raise Fail(f"{where}: row {i + 1}: size {r['size']!r} is not a positive whole number of bytes")
        for k in ("time_us", "p50_us", "algbw", "busbw"):
            v = r[k]
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise Fail(f"{where}: row {i + 1} ({r['size']} B): {k} {v!r} is not a finite number >= 0")
    return rows


def load_json_run(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        raise Fail(f"cannot read run '{path}': {e.strerror}")
    except ValueError as e:
        raise Fail(f"{path}: not valid JSON ({e})")
    if not isinstance(doc, dict) or doc.get("schema") != BENCH_SCHEMA:
        got = doc.get("schema") if isinstance(doc, dict) else None
        raise Fail(f"{path}: schema {got!r} is not {BENCH_SCHEMA} (ciuic-bench --format json)")
    try:
        c = doc["context"]
        rows = [{"size": r["size_bytes"], "inplace": bool(r["inplace"]), "time_us": r.get("time_us"),
                 "p50_us": r.get("time_p50_us"), "algbw": r.get("algbw_gbps"), "busbw": r.get("busbw_gbps")}
                for r in doc["results"]]
        ctx = {k: c[k] for k in ("collective", "backend", "algo", "codec", "dtype", "op", "world_size", "device",
                                 "git_commit", "start_time")}
    except (KeyError, TypeError, ValueError) as e:
        raise Fail(f"{path}: not a ciuic.bench/1 run ({type(e).__name__} {e})")
    checked_rows(rows, path)
    ctx["device_name"] = c.get("device_name") or ""
    ctx["hosts"] = hosts_text(c.get("hostnames") or [])
    return {"source": os.path.basename(path), "ctx": ctx, "rows": rows}


def load_db_runs(db, path, ids):
    out = []
    for i in ids:
        r = db.execute("SELECT * FROM bench_runs WHERE id = ?", (i,)).fetchone()
        if r is None:
            n, lo, hi = db.execute("SELECT COUNT(*), MIN(id), MAX(id) FROM bench_runs").fetchone()
            raise Fail(f"--db {path}: no run {i} ({'no runs' if not n else f'its runs: {n} from {lo} to {hi}'})")
        try:
            extra = json.loads(r["context_json"])
        except ValueError:
            extra = {}
        ctx = {"collective": r["collective"], "backend": r["backend"], "algo": r["algo"], "codec": r["codec"],
               "dtype": r["dtype"], "op": r["redop"], "world_size": r["world_size"], "device": r["device"],
               "git_commit": r["git_commit"], "start_time": r["start_time"],
               "device_name": extra.get("device_name") or "", "hosts": hosts_text(r["hostnames"].split(","))}
        rows = [{"size": s["size_bytes"], "inplace": bool(s["inplace"]), "time_us": s["time_us"],
                 "p50_us": s["time_p50_us"], "algbw": s["algbw_gbps"], "busbw": s["busbw_gbps"]}
                for s in db.execute("SELECT * FROM bench_rows WHERE run_id = ? AND error IS NULL ORDER BY rowid", (i,))]
        out.append({"source": f"run {i}", "ctx": ctx, "rows": checked_rows(rows, f"--db {path}: run {i}")})
    return out


def machine_text(ctx):
    name = ctx["device_name"] or ctx["device"]
    return f"{ctx['hosts']} ({name})" if name else ctx["hosts"]


# The context fields a run's label or the title is made of, in the order they read best.
LABEL_FIELDS = [
    ("backend", lambda c: c["backend"]),
    ("algo", lambda c: c["algo"] if c["algo"] not in ("native", "auto") else ""),
    ("codec", lambda c: f"codec {c['codec']}" if c["codec"] != "none" else ""),
    ("collective", lambda c: c["collective"]),
    ("dtype", lambda c: c["dtype"]),
    ("world_size", lambda c: f"{c['world_size']} ranks"),
    ("machine", machine_text),
    ("commit", lambda c: f"commit {short_commit(c['git_commit'])}"),
]


def run_labels(runs):
    """Labels made of the fields that differ between runs; the common ones are returned for the title."""
    common, varying = [], []
    for name, get in LABEL_FIELDS:
        values = [get(r["ctx"]) for r in runs]
        (common if len(set(values)) == 1 else varying).append((name, get))
    labels = []
    for r in runs:
        parts = [get(r["ctx"]) for _, get in varying]
        labels.append(" ".join(p for p in parts if p) or r["source"])
    if len(set(labels)) < len(labels):  # reruns of one setting: tell them apart by their source
        labels = [f"{l} [{r['source']}]" if len(runs) > 1 else l for l, r in zip(labels, runs)]
    return labels, common


def cmd_busbw(a):
    db = open_db(a.db) if a.db else None
    runs = []
    for src in a.runs:
        if re.fullmatch(r"\d+(-\d+)?(,\d+(-\d+)?)*", src) and not os.path.exists(src):
            if db is None:
                raise Fail(f"'{src}': run ids need --db FILE (no file of that name either)")
            runs += load_db_runs(db, a.db, id_list(src, "run"))
        else:
            runs.append(load_json_run(src))
    metric = a.metric
    if a.time == "p50":  # the bandwidths of the median time: one slow iteration cannot move them
        for run in runs:
            for r in run["rows"]:
                ok = all(isinstance(r[k], (int, float)) and r[k] > 0 for k in ("time_us", "p50_us"))
                for k in ("algbw", "busbw"):
                    r[k] = r[k] * r["time_us"] / r["p50_us"] if ok and isinstance(r[k], (int, float)) else None
                r["time_us"] = r["p50_us"]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(11, 6.2))
    labels, common = run_labels(runs)
    all_sizes, drawn = [], 0
    unit = {"busbw": "GB/s", "algbw": "GB/s", "time": "us"}[metric]
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"] if len(runs) <= 10 else \
        [plt.get_cmap("tab20")(i % 20) for i in range(20)]
    for i, (run, label) in enumerate(zip(runs, labels)):
        places = {"no": [False], "yes": [True], "both": [False, True]}[a.inplace]
        have = {r["inplace"] for r in run["rows"]}
        if a.inplace == "no" and False not in have:
            places = [True]  # a run of in-place rows only
        for inplace in places:
            key = {"busbw": "busbw", "algbw": "algbw", "time": "time_us"}[metric]
            pts = sorted((r["size"], r[key]) for r in run["rows"]
                         if r["inplace"] == inplace and isinstance(r[key], (int, float)) and r[key] > 0)
            if not pts:
                continue
            xs, ys = zip(*pts)
            all_sizes += xs
            text = label + (" (in-place)" if inplace and (a.inplace != "no" or len(places) > 1) else "")
            if metric != "time":
                peak = max(pts, key=lambda p: p[1])
                text += f"  peak {peak[1]:.2f} {unit} at {size_label(peak[0])}"
            ax.plot(xs, ys, marker="o", ms=3.5, lw=1.6, ls="--" if inplace and len(places) > 1 else "-",
                    color=cycle[i % len(cycle)], label=text)
            drawn += 1
    if not drawn:
        raise Fail(f"no {metric} values to draw in {', '.join(r['source'] for r in runs)}"
                   + (" (busbw is 0 by definition on one rank: try --metric algbw)" if metric == "busbw" else ""))
    log2_size_axis(ax, all_sizes)
    if metric == "time" or a.logy:
        ax.set_yscale("log")
        if metric == "time":
            log_time_axis(ax.yaxis)
    else:
        ax.set_ylim(bottom=0)
    of = "mean" if a.time == "mean" else "median"
    ax.set_ylabel({"busbw": f"bus bandwidth busbw (GB/s, 1 GB = 1e9 B; {of} time)",
                   "algbw": f"algorithm bandwidth algbw = size / {of} time (GB/s)",
                   "time": f"time per call ({of} over iterations)"}[metric])
    ax.grid(True, which="major", alpha=0.35)
    ax.grid(True, which="minor", axis="x", alpha=0.12)
    ax.legend(fontsize=8, loc="best")
    c0 = runs[0]["ctx"]
    what = " ".join(get(c0) for name, get in common if name in ("collective", "dtype", "backend", "algo", "codec")
                    and get(c0))
    where = ", ".join(get(c0) for name, get in common if name in ("world_size", "machine", "commit") and get(c0))
    op = f" {c0['op']}" if c0.get("op") not in (None, "", "-") and all(r["ctx"]["op"] == c0["op"] for r in runs) else ""
    title = f"{what}{op}: {metric} vs message size" + (f"\n{where}" if where else "")
    place = {"no": "out-of-place", "yes": "in-place", "both": "out-of-place solid, in-place dashed"}[a.inplace]
    title += f"  ({place})"
    ax.set_title(((a.title + "\n") if a.title else "") + title, fontsize=11)
    fig.tight_layout()
    save(fig, a.out or "busbw.png", a.tool)


# ---------------------------------------------------------------------------------------------------
# convergence: ciuic-tune studies, best score so far against the trial


def cmd_convergence(a):
    db = open_db(a.db)
    if not has_table(db, "studies"):
        raise Fail(f"--db {a.db}: holds no ciuic-tune studies (an older database)")
    if a.study:
        ids = id_list(a.study, "--study")
        studies = []
        for i in ids:
            s = db.execute("SELECT * FROM studies WHERE id = ?", (i,)).fetchone()
            if s is None:
                raise Fail(f"--db {a.db}: no study {i}")
            studies.append(s)
    else:
        last = db.execute("SELECT * FROM studies ORDER BY id DESC LIMIT 1").fetchone()
        if last is None:
            raise Fail(f"--db {a.db}: no studies (ciuic-tune run --db {a.db} stores them)")
        studies = db.execute("SELECT * FROM studies WHERE topology = ? AND workload = ? AND nodes = ? AND mode = ? "
                             "ORDER BY strategy, seed, id",
                             (last["topology"], last["workload"], last["nodes"], last["mode"])).fetchall()
    plt = pyplot()
    fig, (ax, excess) = plt.subplots(1, 2, figsize=(15, 7.5))
    strategies = sorted({s["strategy"] for s in studies})
    colours = dict(zip(strategies, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    styles = ["-", "--", ":", "-."]
    scale, unit = 1.0, "us"
    scores = [r[0] for r in db.execute(
        f"SELECT score_us FROM trials WHERE study_id IN ({','.join('?' * len(studies))}) AND score_us IS NOT NULL",
        [s["id"] for s in studies])]
    if not scores:
        raise Fail(f"--db {a.db}: studies {', '.join(str(s['id']) for s in studies)} have no scored trials")
    if min(scores) >= 1e4:
        scale, unit = 1e-3, "ms"
    curves = []  # (study, trial numbers, best so far, every scored trial, trials in the study)
    for s in studies:
        trials = db.execute("SELECT idx, score_us FROM trials WHERE study_id = ? ORDER BY idx", (s["id"],)).fetchall()
        xs, best, dots, b = [], [], [], math.inf
        for t in trials:
            if t["score_us"] is not None:
                dots.append((t["idx"] + 1, t["score_us"] * scale))
                b = min(b, t["score_us"] * scale)
            if b < math.inf:
                xs.append(t["idx"] + 1)
                best.append(b)
        if xs:
            curves.append((s, xs, best, dots, len(trials)))
    overall = min(c[2][-1] for c in curves)
    # The lines' range, padded: trials far above it (infeasible-ish configurations) would flatten the lines.
    top = max(c[2][0] for c in curves)
    pad = max(top - overall, overall * 0.002) * 0.08
    seen = {}
    floor = 1e-3  # % : an excess of 0 (the best itself) is drawn on this line of the log axis
    for s, xs, best, dots, n in curves:
        k = seen.get(s["strategy"], 0)
        seen[s["strategy"]] = k + 1
        first = next(x for x, v in zip(xs, best) if v <= overall * 1.01)
        label = (f"{s['strategy']} seed {s['seed']} (study {s['id']}): best {best[-1]:.4g} {unit}, within 1% at "
                 f"trial {first} of {n}")
        kw = dict(drawstyle="steps-post", color=colours[s["strategy"]], ls=styles[k % len(styles)],
                  lw=2.4 - 0.6 * (k % 2))
        ax.plot(xs, best, label=label, **kw)
        ax.scatter(*zip(*dots), s=8, color=colours[s["strategy"]], alpha=0.3, lw=0)
        excess.plot(xs, [max(100 * (v / overall - 1), floor) for v in best], **kw)
    above = sum(1 for c in curves for d in c[3] if d[1] > top + pad)
    ax.set_ylim(overall - pad, top + pad)
    ax.set_title(f"best so far (lines) and each trial (dots; {above} trial(s) above the top edge)", fontsize=10)
    ax.set_ylabel(f"score: {'predicted' if studies[0]['mode'] == 'model' else 'measured'} step time ({unit})")
    excess.set_yscale("log")
    excess.set_ylim(floor / 1.5, None)
    excess.axhline(1, color="grey", lw=0.8, ls=":")
    excess.set_title(f"best so far above the best any study found ({overall:.4g} {unit}); "
                     f"{floor:g}% = the best itself", fontsize=10)
    excess.set_ylabel("excess over the overall best (%, log)")
    from matplotlib.ticker import FuncFormatter
    excess.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}%"))
    lengths = [c[4] for c in curves]
    for axis in (ax, excess):
        if max(lengths) > 3 * min(lengths):  # a grid of hundreds beside searches of tens
            axis.set_xscale("log")
            axis.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_xlabel("trial (evaluations in search order" + (", log)" if max(lengths) > 3 * min(lengths) else ")"))
        axis.grid(True, alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=2 if len(labels) > 1 else 1,
               bbox_to_anchor=(0.5, 0.0))
    legend_rows = (len(labels) + 1) // 2
    s0 = studies[0]
    commits = sorted({short_commit(s["git_commit"]) for s in studies})
    mode = "cost model, no hardware timed" if s0["mode"] == "model" else "measured on this host's ranks"
    title = (f"ciuic-tune convergence: topology {s0['topology']} ({s0['nodes']} node(s)), workload {s0['workload']}\n"
             f"mode {s0['mode']} ({mode}), commit {', '.join(commits)}, {s0['created'][:10]}")
    fig.suptitle(((a.title + "\n") if a.title else "") + title, fontsize=11)
    fig.tight_layout(rect=(0, 0.015 + 0.028 * legend_rows, 1, 1))
    save(fig, a.out or "convergence.png", a.tool)


# ---------------------------------------------------------------------------------------------------
# model: predicted against measured


def cmd_model(a):
    db = open_db(a.db)
    points = []  # (label, ranks, bytes, measured, predicted)
    devices, dates = set(), set()
    if has_table(db, "validations"):
        rows = db.execute("SELECT * FROM validations ORDER BY id").fetchall()
        if rows and not a.all:
            newest = rows[-1]["created"]
            rows = [r for r in rows if r["created"] == newest]
        for r in rows:
            points.append((f"{r['codec']} ({r['algo']})", r["ranks"], r["bytes"], r["measured_us"], r["predicted_us"]))
            devices.add(r["device"])
            dates.add(r["created"][:16].replace("T", " "))
    rules = []
    if has_table(db, "best_configs"):
        rules = db.execute("SELECT b.*, s.nodes, s.topology, s.git_commit FROM best_configs b JOIN studies s ON "
                           "s.id = b.study_id WHERE b.measured_us IS NOT NULL AND b.predicted_us IS NOT NULL").fetchall()
    if not points and not rules:
        raise Fail(f"--db {a.db}: nothing both predicted and measured (run ciuic-tune validate --db {a.db}, or "
                   "ciuic-tune run --mode measure)")
    plt = pyplot()
    fig, (ax, err) = plt.subplots(1, 2, figsize=(14, 6.2))
    labels = sorted({p[0] for p in points}, key=lambda l: (l != "none (ring)", l))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"] * 3
    marks = {r: m for r, m in zip(sorted({p[1] for p in points}), "osD^v")}
    for i, label in enumerate(labels):
        for ranks, mark in marks.items():
            pts = sorted((p[2], p[3], p[4]) for p in points if p[0] == label and p[1] == ranks)
            if not pts:
                continue
            sizes, meas, pred = zip(*pts)
            name = f"{label}, {ranks} ranks" if len(marks) > 1 else label
            ax.scatter(meas, pred, color=colours[i], marker=mark, s=28, label=name, zorder=3)
            err.plot(sizes, [100 * (p / m - 1) for p, m in zip(pred, meas)], color=colours[i], marker=mark, ms=4,
                     ls="-" if ranks == min(marks) else "--", label=name)
    if rules:
        meas = [r["measured_us"] for r in rules]
        pred = [r["predicted_us"] for r in rules]
        ax.scatter(meas, pred, color="black", marker="x", s=36, label=f"tuned profile rules (measure mode)", zorder=4)
        err.plot([max(r["min_bytes"], 1) for r in rules], [100 * (p / m - 1) for p, m in zip(pred, meas)], "kx",
                 ms=6, label="tuned profile rules")
    every = [p[3] for p in points] + [p[4] for p in points] + [r["measured_us"] for r in rules] + \
            [r["predicted_us"] for r in rules]
    lo, hi = min(every) / 1.6, max(every) * 1.6
    ax.plot([lo, hi], [lo, hi], color="grey", lw=1, label="predicted = measured")
    ax.fill_between([lo, hi], [lo * 0.75, hi * 0.75], [lo * 1.25, hi * 1.25], color="grey", alpha=0.12,
                    label="within 25%")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_aspect("equal")
    log_time_axis(ax.xaxis)
    log_time_axis(ax.yaxis)
    ax.set_xlabel("measured time (ciuic-bench median)")
    ax.set_ylabel("predicted time (cost model)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7.5, loc="upper left")
    sizes = [p[2] for p in points] + [max(r["min_bytes"], 1) for r in rules]
    log2_size_axis(err, sizes)
    err.axhline(0, color="grey", lw=1)
    err.axhspan(-25, 25, color="grey", alpha=0.12)
    err.set_ylabel("error: predicted / measured - 1 (%)")
    err.grid(True, which="major", alpha=0.3)
    err.legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="grey band: within 25%" + (
        f"\nsolid {min(marks)} ranks, dashed more" if len(marks) > 1 else ""), title_fontsize=7.5)
    errors = sorted(abs(p[4] / p[3] - 1) for p in points)
    median = errors[len(errors) // 2] if len(errors) % 2 else (sum(errors[len(errors) // 2 - 1:len(errors) // 2 + 1]) / 2
                                                                 if errors else float("nan"))
    err.set_title(f"median |error| {100 * median:.1f}% over {len(errors)} validate rows" if errors else
                  "tuned profile rules", fontsize=10)
    ax.set_title("each point: one (codec, ranks, size)", fontsize=10)
    machine = ", ".join(sorted(d.replace("cpu:", "CPU ").replace("cuda:", "GPU ") for d in devices)) or \
        ", ".join(sorted({r["topology"] for r in rules}))
    commits = sorted({short_commit(r["git_commit"]) for r in rules})
    title = (f"ciuic-tune: the cost model's predicted allreduce time vs the measured one\n{machine}"
             + (f", validate run {', '.join(sorted(dates))}" if dates else "")
             + (f", commit {', '.join(commits)}" if commits else ", commit not recorded by validate"))
    fig.suptitle(((a.title + "\n") if a.title else "") + title, fontsize=11)
    fig.tight_layout()
    save(fig, a.out or "model.png", a.tool)


# ---------------------------------------------------------------------------------------------------
# tta: time to accuracy (scripts/digits_tta.py)


def tta_rows(points):
    """Per configuration, in first-seen order: steps, seed-mean accuracy and seconds at each evaluation."""
    by = {}
    for p in points:
        by.setdefault(p["config"], {}).setdefault(int(p["seed"]), []).append(p)
    rows = {}
    for name, seeds in by.items():
        runs = [sorted(r, key=lambda p: int(p["step"])) for r in seeds.values()]
        n = min(len(r) for r in runs)
        rows[name] = {"steps": [int(runs[0][i]["step"]) for i in range(n)],
                      "mean_acc": [sum(float(r[i]["test_acc"]) for r in runs) / len(runs) for i in range(n)],
                      "mean_seconds": [sum(float(r[i]["seconds"]) for r in runs) / len(runs) for i in range(n)],
                      "seeds": len(runs)}
        rows[name]["final_acc_mean"] = rows[name]["mean_acc"][-1]
    return rows


def tta_title(meta):
    """The title of a digits_tta.json summary: the run's setting, machine and commit (older summaries
    did not record the last two)."""
    machine = meta.get("host") or "machine not recorded"
    if meta.get("cpus"):
        machine += f", {meta['cpus']} cores"
    commit = short_commit(meta["git_commit"]) if meta.get("git_commit") else "not recorded"
    return (f"time to accuracy: scikit-learn digits, DDP on gloo, {meta.get('world', '?')} CPU processes, "
            f"{len(meta.get('seeds') or [])} seed(s), ciuic codecs vs uncompressed\n{machine}, commit {commit}"
            + (f", {meta['date']}" if meta.get("date") else ""))


def draw_tta(rows, path, title, tool="digits_tta", target_fraction=0.95):
    """Accuracy against the step and against training seconds, one line per configuration (uncompressed
    solid, codecs dashed), the 95%-of-uncompressed target marked. Shared by digits_tta.py and `tta`."""
    plt = pyplot()
    fig, ax = plt.subplots(1, 2, figsize=(15, 6.2), sharey=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    base = rows["none"]["final_acc_mean"] if "none" in rows else max(r["final_acc_mean"] for r in rows.values())
    target = 100 * target_fraction * base
    for i, (name, r) in enumerate(rows.items()):
        # Ten colours; the uncompressed runs solid, codecs dashed, and past ten colours dash-dotted.
        style = "-" if name.startswith("none") else "--" if i < len(colours) else "-."
        acc = [100 * v for v in r["mean_acc"]]
        kw = dict(color=colours[i % len(colours)], ls=style, lw=2.2 if name == "none" else 1.4)
        ax[0].plot(r["steps"], acc, **kw)
        ax[1].plot(r["mean_seconds"], acc, label=f"{name}: {acc[-1]:.1f}%", **kw)
    for x, label in ((ax[0], "training step"), (ax[1], "training time (s, evaluation excluded)")):
        x.set_xlabel(label)
        x.axhline(target, color="black", lw=0.8, ls=":",
                  label=f"target {target:.1f}% (95% of uncompressed)" if x is ax[1] else None)
        x.grid(alpha=0.3)
    ax[0].set_ylabel("held-out test accuracy (%, mean over seeds)")
    low = min(min(r["mean_acc"]) for r in rows.values())
    ax[0].set_ylim(max(0, 100 * low - 2), 100.5)
    ax[1].legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="config: final accuracy",
                 title_fontsize=8)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    save(fig, path, tool)


def cmd_tta(a):
    path = a.input
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    csv_path = os.path.join(path, "digits_tta.csv") if os.path.isdir(path) else path
    try:
        with open(csv_path, newline="") as f:
            points = list(csv.DictReader(f))
    except OSError as e:
        raise Fail(f"cannot read '{csv_path}': {e.strerror}")
    need = {"config", "seed", "step", "seconds", "test_acc"}
    if not points or not need <= set(points[0]):
        raise Fail(f"{csv_path}: not a digits_tta.csv (needs columns {', '.join(sorted(need))})")
    try:
        rows = tta_rows(points)
    except ValueError as e:
        raise Fail(f"{csv_path}: {e}")
    meta = {}
    summary = os.path.join(folder, "digits_tta.json")
    if os.path.isfile(summary):
        with open(summary) as f:
            meta = json.load(f)
    meta.setdefault("seeds", list(range(max(r["seeds"] for r in rows.values()))))
    draw_tta(rows, a.out or "tta.png", ((a.title + "\n") if a.title else "") + tta_title(meta), a.tool)


# ---------------------------------------------------------------------------------------------------


def main(argv):
    tool = "plot.py"
    if len(argv) >= 2 and argv[0] == "--tool":
        tool, argv = argv[1], argv[2:]
    kinds = [k for k, t in KINDS.items() if tool in (t, "plot.py")]
    p = Parser(prog=f"{tool} plot" if tool != "plot.py" else "plot.py",
               description=__doc__.split("\n\n")[0] + " Kinds here: " + ", ".join(kinds) + ".")
    sub = p.add_subparsers(dest="kind", metavar="KIND", parser_class=Parser)
    common = Parser(add_help=False)
    common.add_argument("--out", metavar="FILE.png", help="the PNG to write (default KIND.png)")
    common.add_argument("--title", help="a first title line of your own")
    if "busbw" in kinds:
        s = sub.add_parser("busbw", parents=[common], help="ciuic-bench runs: busbw (or algbw, time) vs size")
        s.add_argument("runs", nargs="+", metavar="RUN", help="a ciuic.bench/1 JSON file, or run ids (3, 2-5, 1,4) in --db")
        s.add_argument("--db", help="the SQLite database the run ids are in (ciuic-bench --db)")
        s.add_argument("--metric", choices=["busbw", "algbw", "time"], default="busbw")
        s.add_argument("--inplace", choices=["no", "yes", "both"], default="no",
                       help="rows drawn: out-of-place (default), in-place or both (in-place dashed)")
        s.add_argument("--logy", action="store_true", help="logarithmic bandwidth axis")
        s.add_argument("--time", choices=["mean", "p50"], default="mean",
                       help="the time bandwidths come from: mean (as the table reports) or p50 (the median)")
    if "convergence" in kinds:
        s = sub.add_parser("convergence", parents=[common], help="ciuic-tune studies: best score vs trial")
        s.add_argument("--db", required=True, help="the database ciuic-tune run stored its studies in")
        s.add_argument("--study", help="study ids (3, 2-5, 1,4); default: the newest and its siblings")
    if "model" in kinds:
        s = sub.add_parser("model", parents=[common], help="the cost model: predicted vs measured time")
        s.add_argument("--db", required=True, help="a database with ciuic-tune validate rows or measured studies")
        s.add_argument("--all", action="store_true", help="every validate run stored, not only the newest")
    if "tta" in kinds:
        s = sub.add_parser("tta", parents=[common], help="time to accuracy (scripts/digits_tta.py output)")
        s.add_argument("input", metavar="DIR|CSV", help="a folder holding digits_tta.csv (and .json), or the CSV")
    try:
        a = p.parse_args(argv)
        if not a.kind:
            raise Fail(f"missing KIND ({', '.join(kinds)}; --help)")
        a.tool = tool
        if a.out is not None and not a.out:
            raise Fail("--out '': give a file name")
        try:
            {"busbw": cmd_busbw, "convergence": cmd_convergence, "model": cmd_model, "tta": cmd_tta}[a.kind](a)
        except Fail:
            raise
        except (ArithmeticError, AttributeError, KeyError, LookupError, StopIteration, TypeError, ValueError,
                sqlite3.Error) as e:
            # Stored values no ciuic tool writes (a database or file edited by hand): one line, not a trace.
            where = getattr(a, "db", None) or getattr(a, "input", None) or ", ".join(getattr(a, "runs", []) or [])
            raise Fail(f"cannot plot {where}: it holds values ciuic does not write ({type(e).__name__}: {e})")
    except Fail as e:
        line = " ".join(str(e).split())
        print(f"{tool}: plot: {line}"[:1000], file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
