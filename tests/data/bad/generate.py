#!/usr/bin/env python3
"""Writes tests/data/bad/: the bad-input corpus that tests/scripts/bad_inputs.sh (ctest
unit.bad_inputs) runs, and its manifest cases.tsv.

    tests/data/bad/generate.py            # (re)write the corpus and cases.tsv
    tests/data/bad/generate.py --check    # exit 1 if the committed files differ from what this writes

Standard library only (any python3). The generated files are committed: the test never runs this.

The promise under test (README.md and docs/ciuic-bench.md: exit codes): bad input of any kind gets exactly one line on stderr
naming the bad option, JSON path or file, and exit 1: never a crash, a signal, a hang, exit 2, more
lines, a silently accepted value, a file written, or a file the user pointed at changed.

cases.tsv, one case a line, tab-separated:
    id  category  expect  setup  command
  category  bench-cli tune-cli sizes profile topology workload state db output
  expect    what the one stderr line must contain: a literal, or A&&B (all of them), or A||B (one of
            them); placeholders allowed
  setup     a shell snippet run in the case's empty work folder first ('-': none): mkfifo, ln -s, cp
  command   bash, run in the case's work folder with stdin from /dev/null; placeholders:
            {bench} {tune} {driver} (ciuic-bench, ciuic-tune, tests/c/state_load_driver)
            {case_dir} (a scratch copy of this folder) {work} (the case's own empty folder)
            {profiles} (a scratch copy of profiles/, also $CIUIC_PROFILES_DIR)
            {own:REL} (a private copy of the corpus file REL: a database a case may damage)

Each bad JSON, state or database file is one good file with one thing wrong, so the expected
substring pins the refusal to that thing: a JSON path ("profile.rules[2].bucket_bytes"), a state-file
field ("record 1 (tensor 7, bucket 1) count"), or the database's file name. Good files lie beside the
bad ones (profile/good.profile.json, topology/good.json, workload/good.json, state/good-*.state; the
test adds db/good.db, made by ciuic-bench) and must stay byte-identical.
"""
import copy
import hashlib
import json
import os
import re
import shlex
import shutil
import sqlite3
import struct
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))

# ---- the cases ------------------------------------------------------------------------------------

def check(ok, *what):
    """The generator's own rules, kept under python -O (where a bare assert is removed)."""
    if not ok:
        sys.exit("generate.py: " + " ".join(str(w) for w in what))


CASES = []  # (id, category, expect, setup, command)
FILES = {}  # relative path -> bytes
_counts = {}


# A bad value a CLI case gives after its option: the message must name it too (the reason, not only the
# option). Where the reason is not the value (an option for another backend or subcommand, an unknown
# option), the case says what the message must carry instead (`reason`).
SIMPLE_VALUE = re.compile(r"[A-Za-z0-9._:+-]+")


def value_after(command, option):
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    found = None
    for i, w in enumerate(words[:-1]):
        if w == option:
            found = words[i + 1]  # the last one: a case may repeat an option to give the bad value
    return found


# An option's name alone (or A||B of option names) passes for any line that names the option, whatever
# it says: a case needs the reason too (reason=, or the simple value above). Where the product's line
# gives a wrong or vague reason, the case keeps its loose expectation and says why (defect=) until the
# product is fixed: the reason is not pinned to a wrong one.
OPTION_NAME = re.compile(r"-{1,2}[A-Za-z][A-Za-z0-9-]*")


def case(category, expect, command, setup="-", reason=None, defect=None):
    """Adds a case; returns its id."""
    if reason:
        expect = f"{expect}&&{reason}"
    elif category in ("sizes", "bench-cli", "tune-cli") and re.fullmatch(r"--[A-Za-z0-9-]+", expect):
        value = value_after(command, expect)
        if value and SIMPLE_VALUE.fullmatch(value) and not value.startswith("--"):
            expect = f"{expect}&&{value}"
    _counts[category] = _counts.get(category, 0) + 1
    cid = f"{category}-{_counts[category]:03d}"
    loose = "&&" not in expect and any(OPTION_NAME.fullmatch(a) for a in expect.split("||"))
    if loose != bool(defect):
        check(False, cid, expect, "an option's name without the reason" if loose else
              "defect= on a case that pins its reason")
    for text in (expect, command, setup):
        check("\t" not in text and "\n" not in text, cid, text)
    CASES.append((cid, category, expect, setup, command))
    return cid


def next_id(category):
    return f"{category}-{_counts.get(category, 0) + 1:03d}"


def put(rel, data):
    check(rel not in FILES, rel, "written twice")
    FILES[rel] = data if isinstance(data, bytes) else data.encode()


def dump(obj):
    return json.dumps(obj, indent=1) + "\n"


def sq(text):
    """A shell word for text (single quotes; $'..' where it has a newline or a quote)."""
    if "\n" in text or "'" in text:
        return "$'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"
    return "'" + text + "'"


BENCH = "{bench} allreduce --backend local --sizes 4K --iters 1 --warmup 0"
CIUIC = "{bench} allreduce --backend ciuic --transport local --sizes 4K --iters 1 --warmup 0"
TUNE_DB = "--db {work}/t.db --out {work}/p.json"
GOOD_PROFILE = "{case_dir}/profile/good.profile.json"
GOOD_TOPOLOGY = "{case_dir}/topology/good.json"
GOOD_WORKLOAD = "{case_dir}/workload/good.json"
GOOD_DB = "{case_dir}/db/good.db"  # made by the test (ciuic-bench --db), so always the current schema

# Deeply nested JSON: the readers must refuse it with one line (the value's text is quoted in the
# message), not overflow the stack. 100000 levels, 200 KB.
DEEP = 100_000
put("json/deep.json", '{"schema": ' + "[" * DEEP + "]" * DEEP + "}\n")


# ---- sizes: the size grammar everywhere it is read ------------------------------------------------

BAD_SIZES = [
    "0", "0K", "-1", "-1K", "0:1K", "1K:0", "1K:-2K", "2K:1K", "1G:1K", "1K:1G:x1", "1K:1G:x0",
    "1K:1G:x", "1K:1G:+0", "1K:1G:+", "1K:1G:+-1K", "1K:1G:y2", "1K:1G:2", "1K:1G:x2:3", "1K::1G",
    ":1K", "1K:", "", " ", "1K,", ",1K", "1K,,2K", "1K,2K:4K", "1X", "1Q", "1KK", "1KiBB", "1 K",
    "1.5K", "1e3", "0x10", "K", "+1K", "18446744073709551616", "99999999999999999999999",
    "16777216T", "17179869184G", "1K:1T:+1", "1:4097:+1", "abc", "1K;2K", "1K 2K",
    "1K:1G:x99999999999999999999999", "1K:1G:x-2", "\uff11K", "1K\n2K",
]
# The reason for the specs the message cannot simply echo (not SIMPLE_VALUE: empty, a space, a comma...).
SIZE_REASONS = {
    "": "bad size list '': empty", " ": "expected a number", "1K,": "empty item", ",1K": "empty item",
    "1K,,2K": "empty item", "1K,2K:4K": "mix of ',' and ':'", "1 K": "unknown unit ' K'",
    "1K;2K": "unknown unit 'K;2K'", "1K 2K": "unknown unit 'K 2K'", "\uff11K": "expected a number",
    "1K\n2K": "unknown unit 'K?2K'",  # one line: the newline echoed as '?'
}
for spec in BAD_SIZES:
    case("sizes", "--sizes", f"{BENCH.replace('--sizes 4K ', '')} --sizes {sq(spec)}", reason=SIZE_REASONS.get(spec))
# Sizes that parse but cannot be run: bigger than memory, smaller than one element.
case("sizes", "--sizes", f"{BENCH.replace('--sizes 4K ', '')} --sizes 1T")
case("sizes", "--sizes", f"{BENCH.replace('--sizes 4K ', '')} --sizes 1K:1T")
case("sizes", "--sizes", "{bench} allreduce --ranks 2 --sizes 1T --iters 1 --warmup 0")
case("sizes", "--sizes", "{bench} allreduce --sizes 1T --iters 1 --warmup 0")  # the default start
case("sizes", "--sizes", f"{BENCH.replace('--sizes 4K ', '')} --sizes 2 --dtype fp64")
case("sizes", "--sizes", f"{BENCH.replace('--sizes 4K ', '')} --sizes 3 --dtype fp32")
for spec in ["0", "1K:0", "1Q", "1K:1G:x1", "18446744073709551616", "", "2", "1T"]:
    case("sizes", "--sizes", f"{{bench}} compress --codec int8 --sizes {sq(spec)}", reason=SIZE_REASONS.get(spec))
for spec in ["0", "2K:1K", "1K:1G:+0", "1e3", "", "1K:1T:+1"]:
    case("sizes", "--sizes", f"{{tune}} model --topology dgx_a100 --sizes {sq(spec)}", reason=SIZE_REASONS.get(spec))
for spec in ["0", "1Q", "1K:1G:x1"]:
    case("sizes", "--sizes", f"{{tune}} calibrate --sizes {sq(spec)} --db {{work}}/c.db")
for spec in ["0", "abc"]:
    case("sizes", "--sizes", f"{{tune}} validate --sizes {sq(spec)} --db {GOOD_DB}")
for spec in ["0", "1K:1G:x0"]:
    case("sizes", "--kernel-sizes", f"{{tune}} validate --kernel-sizes {sq(spec)} --db {GOOD_DB}")
for opt, spec in [("bucket", "abc"), ("bucket", "1"), ("bucket", "2T"), ("bucket", "-5"), ("bucket", ""),
                  ("bucket", "1K:2K"), ("piece", "1K"), ("piece", "0"), ("piece", "2T"), ("piece", "1MB2")]:
    case("sizes", f"--{opt}", f"{CIUIC} --{opt} {sq(spec)}", reason="'': empty" if spec == "" else None)
for spec, why in [("busbw>=1@0", "bad size '0': must be positive"), ("busbw>=1@", "bad size '': empty"),
                  ("busbw>=1@1Q", "bad size '1Q': unknown unit 'Q'"), ("busbw>=1@-4K", "bad size '-4K': negative")]:
    case("sizes", "--expect", f"{BENCH} --expect {sq(spec)}", reason=f"SIZE after '@': {why}")


# ---- ciuic-bench's command line --------------------------------------------------------------------

def bc(expect, args, base=BENCH, setup="-", reason=None, defect=None):
    case("bench-cli", expect, f"{base} {args}".rstrip(), setup, reason, defect)


case("bench-cli", "OP", "{bench}")
case("bench-cli", "OP", "{bench} --sizes 4K")
case("bench-cli", "frobnicate", "{bench} frobnicate --sizes 4K")
case("bench-cli", "ALLREDUCE", "{bench} ALLREDUCE --sizes 4K")
case("bench-cli", "extra", f"{BENCH} extra")
bc("--no-such-flag", "--no-such-flag", reason="unknown option")
bc("-z", "-z", reason="needs a value")  # nccl-tests' -z (blocking) is an option now: without its value
bc("--Sizes", "--Sizes 4K", reason="unknown option")
bc("--iters", "--iters", base="{bench} allreduce --backend local --sizes 4K", reason="needs a value")
bc("--sizes", "--sizes", base="{bench} allreduce --backend local", reason="needs a value")
for v in ["bogus", "MPI", "", "tcp"]:
    bc("--backend", f"--backend {sq(v)}", base="{bench} allreduce --sizes 4K --iters 1 --warmup 0",
       reason={"": "unknown backend"}.get(v))
bc("--transport", "--transport local", base="{bench} allreduce --backend local --sizes 4K",
   reason="applies to --backend ciuic")
# NCCL's own variables for a run: NCCL only, NCCL's names, a protocol with its algorithm.
for flag, v in [("--nccl-algo", "ring"), ("--nccl-proto", "ll"), ("--nccl-channels", "4")]:
    bc(flag, f"{flag} {v}", base="{bench} allreduce --backend local --sizes 4K", reason="applies to NCCL")
    bc(flag, f"{flag} {v}", base="{bench} allreduce --backend ciuic --transport local --sizes 4K", reason="applies to NCCL")
for flags, expect in [("--nccl-algo Ring", "--nccl-algo"), ("--nccl-algo ''", "--nccl-algo"),
                      ("--nccl-algo ring --nccl-proto LL", "--nccl-proto"), ("--nccl-proto simple", "--nccl-proto"),
                      ("--nccl-algo nvls --nccl-proto ll", "--nccl-proto"), ("--nccl-channels 0", "--nccl-channels"),
                      ("--nccl-channels 65", "--nccl-channels"), ("--nccl-channels 8x", "--nccl-channels"),
                      ("--nccl-channels ''", "--nccl-channels")]:
    bc(expect, flags, base="{bench} allreduce --backend nccl --sizes 4K",
       reason={"--nccl-proto simple": "needs --nccl-algo", "--nccl-algo ''": "use one of ring, tree",
               "--nccl-channels ''": "use a whole number in 1..64"}.get(flags))
bc("--transport", "--transport ciuic", base="{bench} allreduce --backend ciuic --sizes 4K")
bc("--transport", "--transport bogus", base="{bench} allreduce --backend ciuic --sizes 4K")
# A build without NCCL (the sanitizer stage's) says that first.
bc("--backend nccl", "--backend nccl --device cpu", base="{bench} allreduce --sizes 4K --iters 1 --warmup 0",
   reason="needs --device cuda||this build has no NCCL")
bc("--backend mpi", "--backend mpi --device cuda", base="{bench} allreduce --sizes 4K", reason="use --device cpu")
for v in ["gpu", "", "CPU"]:
    bc("--device", f"--device {sq(v)}", reason={"": "use cpu or cuda"}.get(v))
for v in ["fp4", "", "float33", "fp32 "]:
    bc("--dtype", f"--dtype {sq(v)}", reason={"": "empty", "fp32 ": "unknown dtype 'fp32 '"}.get(v))
for v in ["xor", "", "mean"]:
    bc("--op", f"--op {sq(v)}", reason={"": "empty"}.get(v))
for v in ["-1", "4096", "abc", "1.5"]:
    bc("--root", f"--root {v}", base="{bench} broadcast --backend local --sizes 4K --iters 1 --warmup 0")
bc("--root", "--root 2", base="{bench} broadcast --backend local --ranks 2 --sizes 4K --iters 1 --warmup 0")
bc("--root", "--root 3", base="{bench} reduce --backend local --ranks 3 --sizes 4K --iters 1 --warmup 0")
bc("--root", "--root 2", base="{bench} broadcast --sizes 4K --iters 1 --warmup 0")  # the default start
for v in ["0", "-1", "abc", "1.5", "99999999999", "10000001", ""]:
    bc("--iters", f"--iters {sq(v)}", base="{bench} allreduce --backend local --sizes 4K --warmup 0",
       reason={"": "not a number"}.get(v))
for v in ["-1", "abc", "10000001"]:
    bc("--warmup", f"--warmup {v}", base="{bench} allreduce --backend local --sizes 4K --iters 1")
for v in ["-1", "abc", "10000001"]:
    bc("--check", f"--check {v}")
for v in ["mean", "", "MAX"]:
    bc("--average", f"--average {sq(v)}", reason="expected avg, max, min or rank0")
for v in ["maybe", "YES", ""]:
    bc("--inplace", f"--inplace {sq(v)}", reason={"": "use yes, no or both"}.get(v))
for v in ["xml", "", "JSON", "x\ny"]:
    bc("--format", f"--format {sq(v)}", reason={"": "use table, csv or json", "x\ny": "x?y: use table, csv or json"}.get(v))
for v in ["0", "-1", "4097", "abc", "1.5"]:
    bc("--ranks", f"--ranks {v}")
for v in ["-1", "nan", "inf", "abc", ""]:
    bc("--timeout", f"--timeout {sq(v)}", reason={"-1": "non-negative", "": "not a number"}.get(v))
for v in ["abc", "-5", "nan", "inf"]:
    case("bench-cli", f"CIUIC_TIMEOUT={v}", f"env CIUIC_TIMEOUT={v} {BENCH}",
         reason="expected a non-negative number of seconds")
for v in ["busbw>1", "busbw>=", "busbw>=-1", "busbw>=abc", "busbw>=nan", "busbw>=inf", "algbw>=1", ""]:
    bc("--expect", f"--expect {sq(v)}", reason="use busbw>=GBPS[@SIZE]" if v in ("busbw>1", "algbw>=1", "")
       else "GBPS must be a non-negative number")
for v in ["-1", "abc", "18446744073709551616", "1.5"]:
    bc("--seed", f"--seed {v}")
# --debug-corrupt RANK:INDEX (a test hook): a rank or index that does not exist damages nothing.
for v in ["abc", "1", "1:", ":1", "-1:0", "9:0", "0:-1", "0:99999999999"]:
    bc("--debug-corrupt", f"--debug-corrupt {sq(v)}")
# The runtime's knobs given to a backend that is not the runtime.
for knob in ["--streams 4", "--bucket 1M", "--codec int8", "--algo ring", "--precision bf16", "--block 64",
             "--rounding stochastic", "--prescale 0.5", "--piece 1M", f"--profile {GOOD_PROFILE}",
             "--profile-override", "--ranks-per-node 2"]:
    flag = knob.split()[0]
    reason = {"--precision": "casts around"}.get(flag, "applies to --backend ciuic") if flag in (
        "--streams", "--bucket", "--precision", "--block", "--rounding", "--prescale", "--piece",
        "--ranks-per-node", "--profile", "--profile-override") else None
    bc(flag, knob, reason=reason)
bc("--algo", "--algo ring", base="{bench} allreduce --backend mpi --sizes 4K --iters 1 --warmup 0")
bc("--codec", "--codec int8", base="{bench} allgather --sizes 4K --iters 1 --warmup 0")
# The runtime's knobs out of range.
for v in ["0", "65", "-1", "abc", "1.5"]:
    bc("--streams", f"--streams {v}", base=CIUIC)
for v in ["0", "48", "65568", "-1", "abc", "4294967296"]:
    bc("--block", f"--block {v}", base=CIUIC)
for v in ["up", "", "Nearest"]:
    bc("--rounding", f"--rounding {sq(v)}", base=CIUIC, reason={"": "unknown rounding ''"}.get(v))
for v in ["0", "-1", "nan", "inf", "abc", "1e39"]:
    bc("--prescale", f"--prescale {v}", base=CIUIC)
for v in ["int9", "topk:0", "topk:1.5", "topk:abc", "topk:", "randomk:0", "powersgd:0", "powersgd:-1",
          "powersgd:abc", "", "none:1", "int8 "]:
    bc("--codec", f"--codec {sq(v)}", base=CIUIC,
       reason={"": "unknown codec ''", "int8 ": "unknown codec 'int8 '"}.get(v))
for v in ["bogus", "", "RING"]:
    bc("--algo", f"--algo {sq(v)}", base=CIUIC, reason={"": "unknown algorithm ''"}.get(v))
for v in ["fp8", "", "int8"]:
    bc("--precision", f"--precision {sq(v)}", base=CIUIC + " --algo native",
       reason={"": "unknown reduction precision ''"}.get(v))
bc("--precision", "--precision bf16", base=CIUIC + " --algo ring")
bc("--algo native --codec int8", "--algo native --codec int8", base=CIUIC, reason="does not take codec int8")
bc("--algo sparse --codec int8", "--algo sparse --codec int8", base=CIUIC, reason="does not take codec int8")
bc("--algo powersgd --codec topk:0.1", "--algo powersgd --codec topk:0.1", base=CIUIC,
   reason="does not take codec topk:0.1")
RPN_REASONS = {"2,x": "use R or R,G", "2,0": "R,G needs R in 1..4096 and G in 1..4096",
               "0,2": "R,G needs R in 1..4096 and G in 1..4096", "": "use R or R,G", "1,2,3": "use R or R,G"}
for v in ["-1", "x", "2,x", "2,0", "0,2", "5000", "", "1,2,3"]:
    bc("--ranks-per-node", f"--algo hier --ranks-per-node {sq(v)}", base=CIUIC, reason=RPN_REASONS.get(v))
bc("--ranks-per-node", "--algo hier --ranks-per-node 3", base=CIUIC)
bc("--ranks-per-node", "--ranks 6 --algo hier --ranks-per-node 4", base=CIUIC)
bc("--ranks-per-node", "--ranks 6 --algo hier --ranks-per-node 2,2", base=CIUIC,
   reason="3 nodes do not split into groups of 2")
bc("--backend ciuic", "--dtype fp64", base=CIUIC, reason="reduces fp32 (not fp64)")
bc("--backend ciuic", "--op max", base=CIUIC, reason="reduces with sum or avg (not max)")
bc("--backend", "", base="{bench} allgather --backend ciuic --transport local --sizes 4K")
bc("cannot read profile", "--profile {work}/missing.profile.json", base=CIUIC,
   reason="missing.profile.json': No such file or directory")
bc("cannot read profile", "--profile {work}", base=CIUIC, reason="a directory, not a regular file")
bc("--profile", f"--profile {GOOD_PROFILE}", base=CIUIC,  # tuned for 16 ranks, this run has 2
   reason="tuned for dgx_h100 (16 rank(s) on 2 node(s)), this run has 2 rank(s)")
bc("--profile", f"--profile {GOOD_PROFILE} --profile-override --algo ring", base=CIUIC,
   reason="chooses algorithm and codec per size: drop --algo/--codec")
bc("--profile", f"--profile {GOOD_PROFILE} --profile-override --codec int8", base=CIUIC,
   reason="chooses algorithm and codec per size: drop --algo/--codec")
bc("--profile", f"--profile {GOOD_PROFILE} --profile-override --precision bf16", base=CIUIC,
   reason="chooses the precision per size: drop --precision")
# auto's crossover table (--crossover, --crossover-out, --crossover-table).
bc("--crossover", "--crossover measure", reason="applies to --backend ciuic")
bc("--crossover-table", "--crossover-table", reason="applies to --backend ciuic")
AUTO_ONLY = "applies to --algo auto, uncompressed fp32, without --profile"
bc("--crossover", "--crossover measure --codec int8", base=CIUIC, reason=AUTO_ONLY)
bc("--crossover-table", "--crossover-table --algo ring", base=CIUIC, reason=AUTO_ONLY)
bc("--crossover", f"--crossover measure --profile {GOOD_PROFILE} --profile-override", base=CIUIC, reason=AUTO_ONLY)
bc("--crossover-out", "--crossover-out {work}/crossover.json", base=CIUIC, reason="give --crossover measure")
bc("--crossover", "--crossover ''", base=CIUIC, reason="db, builtin, measure or a crossover file")
bc("cannot read crossover", "--crossover {work}/missing.json", base=CIUIC,
   reason="missing.json': No such file or directory")
for name, text, expect in [
        ("not-json", "{", "not JSON"),
        ("version", '{"format":"ciuic-crossover","version":2}', "version: expected 1"),
        ("sparse", '{"format":"ciuic-crossover","version":1,"ranks":2,"transport":"mpi",'
                   '"bands":[{"below_bytes":null,"algo":"sparse"}]}', "bands[0].algo: auto chooses among"),
        ("descending", '{"format":"ciuic-crossover","version":1,"ranks":2,"transport":"mpi","bands":['
                       '{"below_bytes":100,"algo":"ring"},{"below_bytes":50,"algo":"rd"},'
                       '{"below_bytes":null,"algo":"native"}]}',
         "bands[1].below_bytes: expected a byte count above the previous band's"),
        ("last-not-null", '{"format":"ciuic-crossover","version":1,"ranks":2,"transport":"mpi",'
                          '"bands":[{"below_bytes":100,"algo":"ring"}]}', "bands[0].below_bytes: the last band is null")]:
    put(f"crossover/{name}.json", text.encode())
    bc(f"crossover '&&{name}.json': {expect}", f"--crossover {{case_dir}}/crossover/{name}.json", base=CIUIC)
# --crossover db: the calibration database's table for this world (ciuic-tune calibrate --ranks N).
bc("--crossover db&&no calibration database&&missing.db", "--crossover db --db {work}/missing.db", base=CIUIC)
# The data folder's database when --db is not given; an empty file holds nothing yet.
case("bench-cli", "--crossover db&&holds no crossover&&2 ranks over local",
     "CIUIC_DATA_DIR={work} " + CIUIC + " --crossover db", setup="touch ciuic.db")
for bad_db in ("other_app", "corrupt_page", "newer_v99"):
    bc(f"{bad_db}.db", f"--crossover db --db {{own:db/{bad_db}.db}}", base=CIUIC)
bc("--crossover-rounds", "--crossover measure --crossover-rounds 0", base=CIUIC)
bc("--crossover-rounds", "--crossover measure --crossover-rounds 101", base=CIUIC)
bc("--crossover-slot-ms", "--crossover measure --crossover-slot-ms 0.1", base=CIUIC)
bc("--crossover-slot-ms", "--crossover measure --crossover-slot-ms nan", base=CIUIC)
bc("--crossover-rounds&&--crossover measure", "--crossover-rounds 5", base=CIUIC)
bc("--crossover-rounds&&--backend ciuic", "--crossover-rounds 5")
bc("--algo auto", "--crossover measure --crossover-slot-ms 20 --algo ring", base=CIUIC)
# compress and kernel: their own option table.
COMPRESS = "{bench} compress --codec int8 --sizes 4K --iters 1"
for opt, v in [("codec", "int9"), ("codec", "topk:0"), ("codec", ""), ("rounding", "up"), ("select", "best"),
               ("ef", "maybe"), ("data", "uniform"), ("iters", "0"), ("iters", "abc"), ("tensors", "0"),
               ("tensors", "1000001"), ("format", "xml"), ("device", "gpu"), ("block", "48"), ("block", "-1"),
               ("prescale", "0"), ("prescale", "nan"), ("seed", "-1")]:
    case("bench-cli", f"--{opt}", f"{COMPRESS.replace('--codec int8 ', '') if opt == 'codec' else COMPRESS} --{opt} {sq(v)}",
         reason={("codec", ""): "unknown codec ''"}.get((opt, v)))
case("bench-cli", "extra", f"{COMPRESS} extra")
case("bench-cli", "--clip", f"{COMPRESS} --clip=yes", reason="a flag takes no value")
case("bench-cli", "NAME", "{bench} kernel --codec int8 --sizes 4K")
case("bench-cli", "bogus", "{bench} kernel bogus --codec int8 --sizes 4K")
# training kernels (bench/train_kernel_bench.cc)
for shape in ["0x5", "10", "4x", "x4", "5x5x5", "4xK", "99999999x99999999", "1000000x2000"]:
    case("bench-cli", "--shape", f"{{bench}} kernel add-ln --shape {shape} --iters 1 --torch no")
case("bench-cli", "--dtype", "{bench} kernel bias-gelu --shape 4x4 --dtype int8 --torch no")
case("bench-cli", "--dtype", "{bench} kernel bias-gelu --shape 4x4 --dtype fp32,, --torch no", reason="unknown dtype ''")
for p in ["1", "-0.1", "x", "nan", "0.99999999", "1e-46"]:
    case("bench-cli", "--dropout", f"{{bench}} kernel ln-dropout-gelu --shape 4x4 --dropout {p} --torch no")
case("bench-cli", "--iters", "{bench} kernel add-ln --shape 4x4 --iters 0 --torch no")
case("bench-cli", "--torch", "{bench} kernel add-ln --shape 4x4 --torch maybe")
case("bench-cli", "--device", "{bench} kernel add-ln --shape 4x4 --device tpu --torch no")
case("bench-cli", "--format", "{bench} kernel add-ln --shape 4x4 --format xml --torch no")
case("bench-cli", "--out", "{bench} kernel add-ln --shape 4x4 --torch no --out /nonexistent-dir/k.csv",
     reason="directory '/nonexistent-dir' does not exist")
case("bench-cli", "--codec", "{bench} kernel ef-quantize --codec topk:0.1 --sizes 4K --iters 1")
case("bench-cli", "--nope", "{bench} list --nope", reason="unknown option")
# --backend gloo (issue 16): --algo picks gloo's allreduce algorithm and nothing else; --gloo-store and
# --gloo-iface belong to gloo; an interface this host lacks is refused before any rank starts.
GLOO = "{bench} allreduce --backend gloo --sizes 4K --iters 1 --warmup 0"
MPI = "{bench} allreduce --backend mpi --sizes 4K --iters 1 --warmup 0"
bc("--algo", "--algo bcube", base=MPI)
for v in ["nonsense", "", "rd", "native", "Ring", "halving_doubling"]:
    bc("--algo", f"--algo {sq(v)}", base=GLOO, reason={"": "unknown gloo allreduce algorithm ''"}.get(v))
bc("--algo", "--algo ring", base="{bench} allgather --backend gloo --sizes 4K --iters 1 --warmup 0")
bc("--gloo-iface", "--gloo-iface nosuchif0", base=GLOO)
bc("--gloo-iface", "--gloo-iface ''", base=GLOO, reason="'': no such network interface")
bc("GLOO_SOCKET_IFNAME", "", base="env GLOO_SOCKET_IFNAME=nosuchif0 " + GLOO, reason="no such network interface")
# (over the local backend, which every build has: a build without MPI refuses --backend mpi first)
LOCAL = "{bench} allreduce --backend local --sizes 4K --iters 1 --warmup 0"
bc("--gloo-iface", "--gloo-iface lo", base=LOCAL)
bc("--gloo-store", "--gloo-store {work}", base=LOCAL, reason="applies to --backend gloo")
bc("--gloo-store", "--gloo-store {work}/missing", base=GLOO, reason="/missing: not a directory")
bc("--gloo-store", "--gloo-store ''", base=GLOO, reason="'': not a directory")
bc("--transport", "--transport tcp", base="{bench} allreduce --backend ciuic --sizes 4K --iters 1 --warmup 0")


# ---- ciuic-tune's command line: every subcommand ---------------------------------------------------

def tc(expect, command, setup="-", reason=None, defect=None):
    case("tune-cli", expect, command, setup, reason, defect)


RUN = "{tune} run --topology dgx_a100 --workload " + GOOD_WORKLOAD + " " + TUNE_DB
tc("SUBCOMMAND", "{tune}")
tc("bogus", "{tune} bogus")
tc("RUN", "{tune} RUN --topology dgx_a100")
tc("--topology", "{tune} run " + TUNE_DB, reason="is required")
tc("--topology", "{tune} model --sizes 1K", reason="is required")
tc("--profile", "{tune} export --format json", reason="is required")
tc("extra", RUN + " extra")
tc("--no-such", RUN + " --no-such 1", reason="unknown option")
tc("--budget", RUN + " --budget", reason="needs a value")
tc("nonexistent", "{tune} run --topology nonexistent " + TUNE_DB)
tc("topology", "{tune} run --topology '' " + TUNE_DB)
tc("nonexistent", "{tune} model --topology nonexistent")
for v in ["0", "-1", "abc", "100001", "1.5"]:
    tc("--nodes", f"{RUN} --nodes {v}")
tc("--nodes", "{tune} model --topology dgx_a100 --nodes 0")
tc("--nodes", "{tune} topologies --nodes -2")
for v in ["foo", "", "GRID"]:
    tc("--strategy", f"{RUN} --strategy {sq(v)}", reason={"": "use grid, random, cd or bayes"}.get(v))
for v in ["0", "-1", "abc", "1000001"]:
    tc("--budget", f"{RUN} --budget {v}")
for v in ["-1", "abc"]:
    tc("--patience", f"{RUN} --patience {v}")
for v in ["foo", ""]:
    tc("--mode", f"{RUN} --mode {sq(v)}", reason={"": "use model or measure"}.get(v))
tc("--mode", RUN + " --mode measure")  # measure runs on the target hardware: this is not a DGX
tc("--nodes 2", "{tune} run --topology cpu_local --nodes 2 --mode measure " + TUNE_DB,
   reason="topology 'cpu_local' has no NICs between nodes")
for v in ["-1", "abc", "18446744073709551616"]:
    tc("--seed", f"{RUN} --seed {v}")
for v in ["-0.1", "2", "nan", "abc"]:
    tc("--gate-tolerance", f"{RUN} --gate-tolerance {v}")
for v in ["-1", "inf", "nan", "abc", "1e7"]:
    tc("--state-memory", f"{RUN} --state-memory {v}", reason="must be in 0.." if v == "1e7" else None)
tc("nonexistent", "{tune} run --topology dgx_a100 --workload nonexistent " + TUNE_DB)
tc("workload", "{tune} run --topology dgx_a100 --workload '' " + TUNE_DB)
tc("--calibration", RUN + " --calibration {work}/missing.db", reason="missing.db': no such database file")
tc("--calibration", RUN + " --calibration {work}", reason="is a folder, not a database file")
tc("extra", "{tune} show extra --db " + GOOD_DB)
tc("missing.db", "{tune} show --db {work}/missing.db")
tc("--db", "{tune} show --db ''", reason="an empty path")
tc("--format", "{tune} export --profile " + GOOD_PROFILE + " --format foo")
tc("--format", "{tune} export --profile " + GOOD_PROFILE + " --format ''",
   reason="use json, nccl-env, nccl-tuner, ddp, deepspeed or horovod")
tc("missing.profile.json", "{tune} export --profile {work}/missing.profile.json")
tc("{work}", "{tune} export --profile {work}")
tc("extra", "{tune} export extra --profile " + GOOD_PROFILE)
for v in ["gpu", "", "CPU"]:
    tc("--device", f"{{tune}} calibrate --device {sq(v)} --sizes 64K --db {{work}}/c.db",
       reason={"": "use cpu or cuda"}.get(v))
for v in ["maybe", ""]:
    tc("--train-kernels", f"{{tune}} calibrate --train-kernels {sq(v)} --sizes 64K --db {{work}}/c.db",
       reason={"": "use yes or no"}.get(v))
for v in ["-1", "4097", "abc"]:
    tc("--concurrency", f"{{tune}} calibrate --concurrency {v} --sizes 64K --db {{work}}/c.db")
for v in ["0", "100", "abc"]:
    tc("--rounds", f"{{tune}} calibrate --rounds {v} --sizes 64K --db {{work}}/c.db")
# The reasons for comma lists the message cannot simply echo.
LIST_REASONS = {"": "an empty list", "2,,3": "an empty item in a comma list", ",": "an empty item in a comma list",
                "2,": "an empty item in a comma list", "int8,": "an empty item in a comma list",
                ",int8": "an empty item in a comma list", "2,x": "a comma list of whole numbers"}
for v in ["1", "0", "abc", "2,,3", ",", "2,x", "5000", "", "2,"]:
    tc("--ranks", f"{{tune}} calibrate --ranks {sq(v)} --sizes 64K --db {{work}}/c.db", reason=LIST_REASONS.get(v))
tc("--link-sizes&&--ranks", "{tune} calibrate --link-sizes 4K --sizes 64K --db {work}/c.db")
for v in ["0", "abc", "4K:1K"]:
    tc("--link-sizes", f"{{tune}} calibrate --ranks 2 --link-sizes {sq(v)} --sizes 64K --db {{work}}/c.db")
for v in ["1", "abc", "2,,3"]:
    tc("--ranks", f"{{tune}} validate --ranks {sq(v)} --db {GOOD_DB}", reason=LIST_REASONS.get(v))
for v in ["int9", "", "int8,", ",int8", "topk:0"]:
    tc("--codecs", f"{{tune}} validate --codecs {sq(v)} --db {GOOD_DB}", reason=LIST_REASONS.get(v))
for v in ["0", "21", "abc"]:
    tc("--repeat", f"{{tune}} validate --repeat {v} --db {GOOD_DB}")
tc("--kernels", "{tune} validate --kernels foo --db " + GOOD_DB)
for v in ["-1", "101", "nan", "abc"]:
    tc("--max-error", f"{{tune}} validate --max-error {v} --db {GOOD_DB}")
# The same refusals with a database that does not exist yet: nothing may be created.
tc("--ranks", "{tune} validate --ranks 1 --db {work}/v.db")
tc("--codecs", "{tune} validate --codecs int9 --db {work}/v.db")
tc("cannot read published figures", "{tune} topologies --published {work}/missing.json",
   reason="missing.json': No such file or directory")
tc("bad.published.json", "{tune} topologies --published {work}/bad.published.json",
   setup="printf '{}' > bad.published.json")
tc("extra", "{tune} topologies extra")
# Options of another subcommand, with bad values: refused, not silently ignored.
tc("--budget", "{tune} show --budget -5 --db " + GOOD_DB, reason="is not an option of")
tc("--strategy", "{tune} model --topology dgx_a100 --sizes 1K --strategy foo", reason="is not an option of")
tc("--budget", "{tune} export --profile " + GOOD_PROFILE + " --budget 0", reason="is not an option of")
tc("--device", "{tune} export --profile " + GOOD_PROFILE + " --device quantum", reason="is not an option of")
tc("--ranks", "{tune} model --topology dgx_a100 --sizes 1K --ranks 1", reason="is not an option of")
tc("--mode", "{tune} show --mode foo --db " + GOOD_DB, reason="is not an option of")
tc("--workload", "{tune} model --topology dgx_a100 --sizes 1K --workload nonexistent", reason="is not an option of")
tc("--codecs", "{tune} calibrate --codecs int9 --sizes 64K --db {work}/c.db", reason="is not an option of")
# A folder variable naming no folder is itself the error (it once blamed the topology looked up in it).
tc("CIUIC_PROFILES_DIR&&none': no such folder",
   "env CIUIC_PROFILES_DIR={work}/none {tune} model --topology dgx_a100 --sizes 1K")


# ---- profile JSON ---------------------------------------------------------------------------------

GOOD_PROFILE_JSON = json.load(open(os.path.join(ROOT, "profiles", "dgx_h100.profile.json")))
check(len(GOOD_PROFILE_JSON["rules"]) == 5, "profiles/dgx_h100.profile.json", "expected 5 rules")
put("profile/good.profile.json", dump(GOOD_PROFILE_JSON))


def json_case(category, root, good, edit, where, readers):
    """One bad file: `good` changed by `edit` (a function of the copy, or raw text when a str);
    `where` is the JSON path the refusal must name ('' for the file: syntax, emptiness)."""
    cid = next_id(category)
    ext = ".profile.json" if category == "profile" else ".json"
    name = cid + ext
    if isinstance(edit, (str, bytes)):
        text = edit
    else:
        j = copy.deepcopy(good)
        check(edit(j) is None, cid, "an edit changes the copy; raw text is passed as a str")
        text = dump(j)
    put(f"{category}/{name}", text)
    expect = f"{name}: {where}" if where else name
    path = "{case_dir}/" + f"{category}/{name}"
    case(category, expect, readers[0].replace("{path}", path))
    return path, expect


PROFILE_READERS = ["{tune} export --profile {path} --format json"]


def pr(edit, where):
    return json_case("profile", "profile", GOOD_PROFILE_JSON, edit, where, PROFILE_READERS)


def setk(path, value):
    """An edit that sets j[path...] = value (path: keys and indexes)."""
    def edit(j):
        o = j
        for k in path[:-1]:
            o = o[k]
        o[path[-1]] = value
    return edit


def delk(path):
    def edit(j):
        o = j
        for k in path[:-1]:
            o = o[k]
        del o[path[-1]]
    return edit


def jpath(root, path):
    """The JSON path as core/json_reader.cc spells it: .key, [index], ["odd.key"]."""
    s = root
    for k in path:
        if isinstance(k, int):
            s += f"[{k}]"
        elif k and all(c.isascii() and (c.isalnum() or c == "_") for c in k):
            s += f".{k}"
        else:
            s += "[" + json.dumps(k) + "]"
    return s


def pset(path, value):
    return pr(setk(path, value), jpath("profile", path))


def pdel(path):
    return pr(delk(path), jpath("profile", path))


# Not JSON, or not one object.
pr("", "not valid JSON")
pr("  \n\t\n", "not valid JSON")
pr(dump(GOOD_PROFILE_JSON)[:700], "not valid JSON")
pr(dump(GOOD_PROFILE_JSON) + "x\n", "not valid JSON")
pr(dump(GOOD_PROFILE_JSON).replace('"rules"', "// rules\n \"rules\"", 1), "not valid JSON")
pr(dump(GOOD_PROFILE_JSON).replace('"fp32"', "NaN", 1), "not valid JSON")
pr(dump(GOOD_PROFILE_JSON).replace('"streams": 1', '"streams": 1e400', 1), "not valid JSON")
pr(dump(GOOD_PROFILE_JSON).replace('"allreduce"', '"allre\xffduce"', 1).encode("latin-1"), "not valid JSON")
pr("[]\n", "profile:")
pr('"profile"\n', "profile:")
pr("null\n", "profile:")
# schema
pdel(["schema"])
pset(["schema"], "ciuic.profile/2")
pset(["schema"], "ciuic.profile/0")
pset(["schema"], "ciuic.topology/1")
pset(["schema"], "")
pset(["schema"], 1)
pset(["schema"], None)
pset(["extra"], 1)
pset(["Schema"], "ciuic.profile/1")
# topology
pdel(["topology"])
pset(["topology"], [])
pset(["topology", "speed"], 1)
pset(["topology", "name"], "")
pdel(["topology", "name"])
pset(["topology", "name"], 5)
pset(["topology", "fingerprint"], None)
for v in [0, -1, 1.5, "2", 100001, 1e20]:
    pset(["topology", "nodes"], v)
pr(setk(["topology", "ranks"], 15), "profile.topology.ranks")
pset(["topology", "ranks"], 0)
pset(["topology", "ranks"], -16)
pset(["topology", "ranks"], 409600001)
# workload
pset(["workload"], "")
pdel(["workload"])
pset(["workload"], 5)
# provenance
pdel(["provenance"])
pset(["provenance", "host"], "vm")
pset(["provenance", "tool_version"], 1)
pset(["provenance", "study_id"], -1)
pset(["provenance", "study_id"], 1.5)
pset(["provenance", "mode"], "simulate")
pset(["provenance", "strategy"], "sa")
pset(["provenance", "seed"], -1)
pset(["provenance", "seed"], 1.5)
pset(["provenance", "seed"], "1")
pset(["provenance", "seed"], 18446744073709551616)
pset(["provenance", "seed"], 18446744073709551616.0)  # 2^64 as a float: one above the range
pset(["provenance", "study_id"], 9223372036854775808.0)  # 2^63 as a float: one above the range
pset(["provenance", "budget"], -1)
pset(["provenance", "budget"], 2147483648)
# step
pset(["step", "predicted_us"], -1)
pset(["step", "predicted_us"], "x")
pset(["step", "predicted_us"], 1e13)
pset(["step", "predicted_us"], None)
pdel(["step", "baseline_us"])
pset(["step", "extra_us"], 1)
# rules
pset(["rules"], {})
pset(["rules"], [])
pset(["rules"], "x")
pset(["rules"], None)
pset(["rules", 1], 5)
pset(["rules", 3, "speed"], 1)
for v in ["allgather", "", None]:
    pset(["rules", 0, "op"], v)
for v in [-1, 1.5, "0", 18446744073709551616, 1e19]:
    pset(["rules", 0, "min_bytes"], v)
pset(["rules", 0, "max_bytes"], 2 ** 60)
pr(setk(["rules", 2, "max_bytes"], 1048576), "profile.rules[2].max_bytes")  # == min_bytes
for v in ["tree", "", "NCCL"]:
    pset(["rules", 0, "algo"], v)
for v in ["int9", "topk:0", "topk:2", "powersgd:0", "", 5, "randomk:-1"]:
    pset(["rules", 0, "codec"], v)
for v in [0, 65, 2.5, "4", None]:
    pset(["rules", 1, "streams"], v)
for v in [-5, 0, 1, 2 ** 50, 1.5, "1M"]:
    pset(["rules", 2, "bucket_bytes"], v)
for v in [0, 4]:
    pset(["rules", 0, "hierarchy_depth"], v)
pr(setk(["rules", 0, "hierarchy_depth"], 2), "profile.rules[0].hierarchy_depth")  # depth 2 is hier's
pr(lambda j: j["rules"][0].update(algo="hier"), "profile.rules[0].hierarchy_depth")  # hier needs 2 or 3
pset(["rules", 0, "precision"], "fp8")
pr(lambda j: j["rules"][0].update(precision="bf16", codec="int8"), "profile.rules[0].precision")
pr(lambda j: j["rules"][0].update(precision="fp16", algo="ring"), "profile.rules[0].precision")
pset(["rules", 0, "predicted_us"], -3)
pset(["rules", 0, "measured_us"], -1)
pset(["rules", 0, "measured_us"], "x")
pset(["rules", 0, "gate"], "maybe")
pr(setk(["rules", 2, "min_bytes"], 512 * 1024), "profile.rules[2]")  # overlaps rules[1]
pr(lambda j: j["rules"].append(copy.deepcopy(j["rules"][0])), "profile.rules[5]")  # the same band twice
pr(lambda j: j["rules"].__setitem__(4, dict(j["rules"][4], max_bytes=0, min_bytes=1 << 20)), "profile.rules[4]")
# A key twice: the readers must not keep one value silently.
pr(dump(GOOD_PROFILE_JSON).replace('"bucket_bytes": ', '"bucket_bytes": -5, "bucket_bytes": ', 1),
   "profile.rules[0].bucket_bytes")
# The same readers through ciuic-bench --profile.
for edit, where in [("", "not valid JSON"), (setk(["rules", 2, "bucket_bytes"], -5), "profile.rules[2].bucket_bytes"),
                    (setk(["schema"], "ciuic.profile/2"), "profile.schema"),
                    (setk(["rules", 1, "streams"], 65), "profile.rules[1].streams"),
                    (setk(["rules", 0, "codec"], "int9"), "profile.rules[0].codec"),
                    (setk(["topology", "ranks"], 15), "profile.topology.ranks")]:
    json_case("profile", "profile", GOOD_PROFILE_JSON, edit, where,
              [CIUIC + " --profile {path} --profile-override"])
case("profile", "deep.json: profile.schema", "{tune} export --profile {case_dir}/json/deep.json")
case("profile", "cannot read profile", "{tune} export --profile {work}/", reason="a directory, not a regular file")
# hier depth 3's group size (nodes_per_group): required at depth 3, several whole groups of the
# profile's nodes, refused at any other depth.
def depth3(**rule):
    return lambda j: j["rules"][0].update(dict(algo="hier", hierarchy_depth=3, **rule))


pr(depth3(), "profile.rules[0].nodes_per_group")  # missing
for v in [0, 1, 1.5, "2", None]:
    pr(depth3(nodes_per_group=v), "profile.rules[0].nodes_per_group")
pr(depth3(nodes_per_group=2), "profile.rules[0].nodes_per_group")  # the profile's 2 nodes: one group
pr(lambda j: depth3(nodes_per_group=3)(j) or j["topology"].update(nodes=4, ranks=32),
   "profile.rules[0].nodes_per_group")  # 4 nodes do not divide into groups of 3
pr(setk(["rules", 0, "nodes_per_group"], 2), "profile.rules[0].nodes_per_group")  # depth 1
pr(lambda j: j["rules"][0].update(algo="hier", hierarchy_depth=2, nodes_per_group=2),
   "profile.rules[0].nodes_per_group")  # depth 2

# NCCL's own settings of a band (rules[i].nccl) and rules for other communicator sizes.
NCCL_OK = {"algo": "ring", "proto": "simple", "channels": 8, "chunk_bytes": 0, "measured": True,
           "measured_us": 120.5, "default_us": 130.0}


def nccl(**change):
    return lambda j: j["rules"][1].update(nccl=dict(NCCL_OK, **change))


for key, v in [("algo", "Ring"), ("algo", "nvlstree"), ("algo", 3), ("proto", "LL"), ("proto", "ll256"),
               ("channels", 0.5), ("channels", 65), ("channels", -1), ("chunk_bytes", -4), ("measured", "yes"),
               ("measured", None), ("measured_us", -1), ("default_us", "fast")]:
    pr(nccl(**{key: v}), f"profile.rules[1].nccl.{key}")
pr(nccl(algo=None), "profile.rules[1].nccl.proto")  # a protocol without its algorithm
pr(nccl(algo="nvls", proto="ll128"), "profile.rules[1].nccl.proto")  # NVLS runs Simple only
pr(nccl(algo=None, proto=None, channels=0), "profile.rules[1].nccl.measured")  # measured nothing
pr(nccl(measured_us=None), "profile.rules[1].nccl.measured_us")  # measured without a time
pr(lambda j: j["rules"][1].update(nccl=dict(NCCL_OK, extra=1)), "profile.rules[1].nccl")
pr(lambda j: j["rules"][1].update(codec="int8", nccl=NCCL_OK), "profile.rules[1].nccl")  # not NCCL's to run
pdel_nccl = [k for k in NCCL_OK]
for k in pdel_nccl:
    pr(lambda j, k=k: j["rules"][1].update(nccl={x: v for x, v in NCCL_OK.items() if x != k}),
       f"profile.rules[1].nccl.{k}")


def comms(*entries):
    return lambda j: j.update(communicators=list(entries))


TP_RULE = {"op": "allreduce", "min_bytes": 0, "max_bytes": 0, "algo": "nccl", "codec": "none", "streams": 1,
           "bucket_bytes": 4096, "hierarchy_depth": 1, "precision": "fp32", "predicted_us": 1.0,
           "measured_us": None, "baseline_us": None, "gate": "n/a", "nccl": NCCL_OK}
pr(comms({"ranks": 16, "nodes": 2, "rules": [TP_RULE]}), "profile.communicators[0].ranks")  # the world's size
pr(comms({"ranks": 8, "nodes": 1, "rules": [TP_RULE]}, {"ranks": 8, "nodes": 1, "rules": [TP_RULE]}),
   "profile.communicators[1].ranks")  # twice
pr(comms({"ranks": 9, "nodes": 2, "rules": [TP_RULE]}), "profile.communicators[0].ranks")
pr(comms({"ranks": 8, "nodes": 0, "rules": [TP_RULE]}), "profile.communicators[0].nodes")
pr(comms({"ranks": 8, "nodes": 1, "rules": []}), "profile.communicators[0].rules")
pr(comms({"ranks": 8, "nodes": 1}), "profile.communicators[0].rules")
pr(comms({"ranks": 8, "nodes": 1, "rules": [TP_RULE], "comm_id": 5}), "profile.communicators[0]")
pr(comms({"ranks": 8, "nodes": 1, "rules": [{k: v for k, v in dict(TP_RULE, algo="ring").items() if k != "nccl"}]}),
   "profile.communicators[0].rules[0].algo")  # ciuic's runtime does not run there
pr(comms({"ranks": 8, "nodes": 1, "rules": [TP_RULE, dict(TP_RULE, min_bytes=1024)]}),
   "profile.communicators[0].rules[1]")  # overlapping bands
pr(comms({"ranks": 8, "nodes": 1, "rules": [dict(TP_RULE, nccl=dict(NCCL_OK, proto="fast"))]}),
   "profile.communicators[0].rules[0].nccl.proto")
pset(["communicators"], {})


# ---- topology JSON --------------------------------------------------------------------------------

GOOD_TOPOLOGY_JSON = json.load(open(os.path.join(ROOT, "profiles", "topologies", "dgx_a100.json")))
put("topology/good.json", dump(GOOD_TOPOLOGY_JSON))
TOPOLOGY_READERS = ["{tune} model --topology {path} --sizes 1K"]


def tp(edit, where, readers=None):
    return json_case("topology", "topology", GOOD_TOPOLOGY_JSON, edit, where, readers or TOPOLOGY_READERS)


def tset(path, value, readers=None):
    return tp(setk(path, value), jpath("topology", path), readers)


def tdel(path):
    return tp(delk(path), jpath("topology", path))


tp("", "not valid JSON")
tp(dump(GOOD_TOPOLOGY_JSON)[:300], "not valid JSON")
tp(dump(GOOD_TOPOLOGY_JSON).replace(",\n", "\n", 1), "not valid JSON")
tp("[1, 2]\n", "topology:")
tdel(["schema"])
tset(["schema"], "ciuic.topology/2")
tset(["schema"], "ciuic.workload/1")
tset(["schema"], 1)
tset(["published"], [])
tset(["comment"], "x")
tset(["name"], "")
tdel(["name"])
for v in [0, -1, 1.5, "1", 100001]:
    tset(["nodes"], v)
for v in [0, 4097, None]:
    tset(["devices_per_node"], v)
tdel(["device"])
tset(["device"], "A100")
tset(["device", "tdp_w"], 400)
tset(["device", "name"], "")
for key, v in [("memory_gib", 0), ("memory_gib", -1), ("memory_gib", 1e7), ("memory_gib", "80"),
               ("memory_bw_gbps", 0), ("memory_bw_gbps", -5), ("peak_tflops_bf16", 0), ("peak_tflops_bf16", True)]:
    tset(["device", key], v)
tdel(["intra"])
tset(["intra", "links"], 12)
for v in ["ethernet", "", 5, "NVSWITCH"]:
    tset(["intra", "fabric"], v)
for key, v in [("bw_gbps_per_device", 0), ("bw_gbps_per_device", 1e6), ("latency_us", -1),
               ("latency_us", 1e7), ("nvls", "yes"), ("nvls", 1), ("nvls", None)]:
    tset(["intra", key], v)
tdel(["nics"])
for key, v in [("count", -1), ("count", 65), ("count", 1.5), ("gbps", -1), ("gbps", 1e6), ("latency_us", -1),
               ("rail_optimized", "true")]:
    tset(["nics", key], v)
tset(["nics", "vendor"], "x")
tdel(["sources"])
tset(["sources"], [])
tset(["sources", "intra.latency_us"], "")
tset(["sources", "intra.latency_us"], 5)
tp(delk(["sources", "device.memory_bw_gbps"]), "topology.sources")  # a number without its source
tp(delk(["sources", "nics.gbps"]), "topology.sources")
def nvls_without_source(j):
    j["intra"]["nvls"] = True
    del j["sources"]["intra.nvls"]


tp(nvls_without_source, "topology.sources")  # NVLS changes the model: it needs its source
tp(lambda j: j.update(nodes=2) or j["nics"].update(count=0), "topology.nics.count")
tp(dump(GOOD_TOPOLOGY_JSON).replace('"nodes": 1', '"nodes": 0, "nodes": 1', 1), "topology.nodes")
# The same reader through run, and its name as the default profile's file name.
RUN_T = "{tune} run --topology {path} --workload " + GOOD_WORKLOAD + " " + TUNE_DB
tset(["nodes"], 0, [RUN_T])
tset(["intra", "fabric"], "ethernet", [RUN_T])
tp("", "not valid JSON", [RUN_T])
RUN_T_NO_OUT = "{tune} run --topology {path} --workload " + GOOD_WORKLOAD + " --db {work}/t.db"
for name in ["../evil", "a/b", ".hidden", "a\nb", "x" * 200]:
    cid = next_id("topology")
    j = copy.deepcopy(GOOD_TOPOLOGY_JSON)
    j["name"] = name
    put(f"topology/{cid}.json", dump(j))
    case("topology", f"{cid}.json: name", RUN_T_NO_OUT.replace("{path}", "{case_dir}/topology/" + cid + ".json"))
case("topology", "deep.json: topology.schema", "{tune} model --topology {case_dir}/json/deep.json --sizes 1K")
# A FIFO nobody writes: refused (not a regular file) or read to no end, never waited on forever.
case("topology", "cannot read topology", "{tune} model --topology {work}/t.json --sizes 1K", setup="mkfifo t.json",
     reason="t.json': a FIFO, not a regular file")
case("topology", "cannot read topology", "{tune} model --topology {work}/ --sizes 1K",
     reason="a directory, not a regular file")
case("topology", "cannot read topology", "{tune} model --topology {work}/sub.json --sizes 1K", setup="mkdir sub.json",
     reason="sub.json': a directory, not a regular file")
# The optional third level (spine): strict like the rest, every number with its source.
SPINE = {"nodes_per_group": 2, "gbps_per_node": 25, "latency_us": 3.0}
SPINE_SOURCES = {"spine." + k: "the bad-input corpus" for k in SPINE}


def with_spine(nodes=4, **change):
    def edit(j):
        j["nodes"] = nodes
        j["spine"] = dict(SPINE, **change)
        j["sources"].update(SPINE_SOURCES)
    return edit


tp(lambda j: with_spine()(j) or j.update(spine="rack"), "topology.spine")
tp(with_spine(oversubscription=4), "topology.spine")
for key, v in [("nodes_per_group", 1), ("nodes_per_group", 0), ("nodes_per_group", 1.5), ("nodes_per_group", "2"),
               ("gbps_per_node", 0), ("gbps_per_node", -1), ("gbps_per_node", 1e6), ("latency_us", -1),
               ("latency_us", None)]:
    tp(with_spine(**{key: v}), f"topology.spine.{key}")
tp(lambda j: with_spine()(j) or delk(["spine", "gbps_per_node"])(j), "topology.spine.gbps_per_node")
tp(lambda j: with_spine()(j) or delk(["sources", "spine.latency_us"])(j), "topology.sources")
tp(with_spine(nodes=6, nodes_per_group=4), "topology.spine.nodes_per_group")  # 6 nodes, groups of 4
# NICs at 0 Gb/s across 2 nodes: every inter-node time would be infinite (was accepted).
tp(lambda j: j.update(nodes=2) or j["nics"].update(gbps=0), "topology.nics.gbps")
# --nodes that splits a group of a built-in with a spine.
case("topology", "--nodes 3", "{tune} model --topology cluster_lab_racks --nodes 3 --sizes 1K",
     reason="groups its nodes 2 per spine group")


# ---- workload JSON --------------------------------------------------------------------------------

GOOD_WORKLOAD_JSON = {
    "schema": "ciuic.workload/1",
    "name": "tiny_mlp",
    "source": "a three-layer MLP written for the bad-input corpus (tests/data/bad/generate.py)",
    "flops_note": "per sample",
    "dtype": "fp32",
    "parameters": 10 + 10 * 64 + 64 + 64 * 32,
    "forward_flops_per_sample": 2 * (10 * 64 + 64 * 32),
    "default_batch_per_device": 64,
    "order": "backward",
    "tensors": [
        {"name": "fc2.bias", "shape": [10], "forward_flops": 10},
        {"name": "fc2.weight", "shape": [10, 64], "forward_flops": 1280},
        {"name": "fc1.bias", "shape": [64], "forward_flops": 64},
        {"name": "fc1.weight", "shape": [64, 32], "forward_flops": 4096},
    ],
}
put("workload/good.json", dump(GOOD_WORKLOAD_JSON))
WORKLOAD_READERS = ["{tune} run --topology dgx_a100 --workload {path} " + TUNE_DB]


def wl(edit, where):
    return json_case("workload", "workload", GOOD_WORKLOAD_JSON, edit, where, WORKLOAD_READERS)


def wset(path, value):
    return wl(setk(path, value), jpath("workload", path))


def wdel(path):
    return wl(delk(path), jpath("workload", path))


wl("", "not valid JSON")
wl(dump(GOOD_WORKLOAD_JSON)[:200], "not valid JSON")
wl("{'schema': 'ciuic.workload/1'}\n", "not valid JSON")
wl("42\n", "workload:")
wdel(["schema"])
wset(["schema"], "ciuic.workload/9")
wset(["schema"], "ciuic.profile/1")
wset(["layers"], [])
wdel(["order"])
wset(["order"], "forward")
wset(["dtype"], "fp16")
wdel(["dtype"])
wset(["source"], 5)
wset(["flops_note"], None)
wset(["name"], "")
wdel(["name"])
for v in [0, -1, 1.5, "2762", 10 ** 14]:
    wset(["parameters"], v)
wl(setk(["parameters"], 2763), "workload.parameters")  # the tensors hold 2762
for v in [-1, "x"]:
    wset(["forward_flops_per_sample"], v)
for v in [0, 2 ** 21, 1.5, None]:
    wset(["default_batch_per_device"], v)
wdel(["tensors"])
wset(["tensors"], {})
wl(setk(["tensors"], []), "workload.tensors")
wset(["tensors", 1], 5)
wset(["tensors", 0, "dims"], [10])
wset(["tensors", 0, "name"], "")
wdel(["tensors", 0, "name"])
wset(["tensors", 2, "name"], 5)
wl(setk(["tensors", 0, "shape"], []), "workload.tensors[0].shape")
for v in [[0], [-1], [1.5], ["3"], {}, None]:
    wset(["tensors", 1, "shape"], v)
wl(lambda j: j["tensors"][1].update(shape=[10 ** 13, 10 ** 13]), "workload.tensors[1].shape")
good_tf = {"hidden": 64, "sequence": 8, "layers": 2, "ffn": 256}
wset(["transformer"], 5)
for key, v in [("hidden", 0), ("hidden", 1.5), ("sequence", -1), ("layers", "2"), ("ffn", None), ("ffn", 2 ** 23)]:
    wl(setk(["transformer"], {**good_tf, key: v}), f"workload.transformer.{key}")
wl(setk(["transformer"], {k: v for k, v in good_tf.items() if k != "ffn"}), "workload.transformer")
wl(setk(["transformer"], {**good_tf, "heads": 4}), "workload.transformer")
wdel(["tensors", 3, "shape"])
for v in [-1, "x", 1e19]:
    wset(["tensors", 3, "forward_flops"], v)
wdel(["tensors", 3, "forward_flops"])
case("workload", "deep.json: workload.schema",
     "{tune} run --topology dgx_a100 --workload {case_dir}/json/deep.json " + TUNE_DB)
case("workload", "cannot read workload", "{tune} run --topology dgx_a100 --workload {work}/sub.json " + TUNE_DB,
     setup="mkdir sub.json", reason="sub.json': a directory, not a regular file")


# ---- runtime error-feedback state files -----------------------------------------------------------
# Format 1 (collectives/runtime.cc): magic "CIUICEFS", u32 version, world size, rank, u64 codec-name
# length + name, u64 record count; per record u64 tensor id, bucket, step, count and three buffers
# (residual, server residual, Q), each a u64 float count + the floats; little-endian here.

MAGIC = b"CIUICEFS"
BUCKET = 400  # bytes: 100 floats, as fuzz/state_shapes.h
SHAPES = {  # name: (algo, codec)
    "int8": ("ring", "int8"),
    "powersgd": ("powersgd", "powersgd:2"),
    "sign2": ("sign2", "sign1"),
    "topk": ("sparse", "topk:0.1"),
}


def floats(n, salt):
    return [((i * 37 + salt * 11) % 101 - 50) * 1e-4 for i in range(n)]


def cols(n):
    c = 1
    while c * c < n:
        c += 1
    return c


def records_of(shape):
    out = []
    keys = [(7, 0, 100), (7, 1, 100), (7, 2, 50)]
    if shape == "topk":
        keys.append((20, (1 << 63) | 2, 70))  # a bucket of two tensors (AllReduceTensors)
    for tid, bucket, n in keys:
        server = floats(n, 2) if shape == "sign2" else []
        q = floats(cols(n) * 2, 3) if shape == "powersgd" else []
        out.append({"id": tid, "bucket": bucket, "step": 3, "count": n, "buffers": [floats(n, 1), server, q]})
    return out


def state_bytes(codec, records, version=1, world=1, rank=0, codec_len=None, record_count=None, raw_buffers=None):
    name = codec.encode() if isinstance(codec, str) else codec
    b = MAGIC + struct.pack("<III", version, world, rank)
    b += struct.pack("<Q", len(name) if codec_len is None else codec_len) + name
    b += struct.pack("<Q", len(records) if record_count is None else record_count)
    for r in records:
        b += struct.pack("<QQQQ", r["id"], r["bucket"], r["step"], r["count"])
        for buf in r["buffers"]:
            if isinstance(buf, bytes):
                b += buf
            else:
                b += struct.pack("<Q", len(buf)) + struct.pack(f"<{len(buf)}f", *buf)
    return b


def state_checksum(b):
    """collectives/state_reader.h StateChecksum: FNV-1a's step over 8-byte little-endian words (a
    xorshift after each whole one), the last partial word zero-padded, then the length."""
    m, p = 2 ** 64 - 1, 0x100000001b3
    h = 0xcbf29ce484222325
    whole = len(b) // 8 * 8
    for i in range(0, whole, 8):
        h = ((h ^ int.from_bytes(b[i:i + 8], "little")) * p) & m
        h ^= h >> 29
    if len(b) > whole:
        h = ((h ^ int.from_bytes(b[whole:] + bytes(8 - (len(b) - whole)), "little")) * p) & m
    return ((h ^ len(b)) * p) & m


def state_v2(body):
    """Format 2: format 1's bytes with the version set to 2 and the checksum appended."""
    b = body[:8] + struct.pack("<I", 2) + body[12:]
    return b + struct.pack("<Q", state_checksum(b))


def good_state(shape):
    return state_bytes(SHAPES[shape][1], records_of(shape))


for shape in SHAPES:
    put(f"state/good-{shape}.state", good_state(shape))
put("state/good-int8-v2.state", state_v2(good_state("int8")))


def st(data, expect, shape="int8", runtime=None, setup="-", path=None):
    """A bad state file loaded into a 1-rank runtime of `runtime` (algo, codec, bucket bytes)."""
    cid = next_id("state")
    algo, codec = SHAPES[shape]
    bucket = BUCKET
    if runtime:
        algo, codec, bucket = runtime
    if path is None:
        put(f"state/{cid}.state", data)
        path = "{case_dir}/state/" + cid + ".state"
        expect = "&&".join([f"{cid}.state'"] + ([expect] if expect else []))
    case("state", expect, f"{{driver}} {algo} {codec} {bucket} {path}", setup)


def recs(shape="int8"):
    return records_of(shape)


G = good_state("int8")
HEAD = len(MAGIC) + 12 + 8 + len(b"int8") + 8  # bytes before the first record: 40
st(b"", "is not a ciuic state file")
st(b"CIUICEF", "is not a ciuic state file")
st(b"CIUICEFX" + G[8:], "is not a ciuic state file")
st(b"\0" * 64, "is not a ciuic state file")
st(b"hello, world\n", "is not a ciuic state file")
st(dump(GOOD_PROFILE_JSON).encode(), "is not a ciuic state file")
st(MAGIC, "format version")
st(G[:10], "format version")
st(state_bytes("int8", recs(), version=0), "format version 0")
st(state_bytes("int8", recs(), version=3), "format 3")
st(state_bytes("int8", recs(), version=0xFFFFFFFF), "format 4294967295")
# Format 2 closes the file with a checksum: damage the structure cannot see is refused by it.
V2 = state_v2(good_state("int8"))
st(V2[:-8], "truncated: checksum")
st(V2[:-1], "truncated: checksum")
st(V2[:-8] + struct.pack("<Q", state_checksum(V2[:-8]) ^ 1), "checksum mismatch")
# One bit of record 0's first residual float (magic 8, version/world/rank 12, name 8 + 4, records 8,
# the record's ids 32, the residual's length 8: its floats from byte 80).
st(V2[:82] + bytes([V2[82] ^ 0x01]) + V2[83:], "checksum mismatch")
st(V2 + b"\0", "1 byte follow")
st(G[:14], "world size")
st(state_bytes("int8", recs(), world=2), "saved by 2 ranks")
st(state_bytes("int8", recs(), world=0), "saved by 0 ranks")
st(state_bytes("int8", recs(), world=0xFFFFFFFF), "saved by 4294967295 ranks")
st(G[:18], "rank")
st(state_bytes("int8", recs(), rank=1), "rank 1")
st(state_bytes("int8", recs(), rank=0xFFFFFFFF), "rank 4294967295")
st(G[:24], "codec name length")
st(state_bytes("int8", recs(), codec_len=257), "codec name length 257")
st(state_bytes("int8", recs(), codec_len=2 ** 64 - 1), "codec name length 18446744073709551615")
st(state_bytes("int8", [], codec_len=250), "codec name")
st(G[:30], "codec name")
st(state_bytes("int4", recs()), "codec int4")
st(state_bytes("INT8", recs()), "codec INT8")
st(state_bytes("int8\n", recs()), "codec int8\\x0a")
st(state_bytes("", recs()), "codec , the runtime uses int8")
st(G[:HEAD - 3], "record count")
st(state_bytes("int8", recs(), record_count=2 ** 64 - 1), "record count 18446744073709551615")
st(state_bytes("int8", recs(), record_count=4), "record")
st(state_bytes("int8", recs(), record_count=2), "follow the last of 2 records")
REC2 = HEAD + 2 * (32 + 8 + 400 + 16)  # records 0 and 1 whole: the record count still fits
st(G[:HEAD + 4], "record count 3 cannot fit")
st(G[:REC2 + 4], "record 2 tensor id")
st(G[:REC2 + 20], "record 2 (tensor 7, bucket 2) step")
r = recs(); r[0], r[1] = r[1], r[0]
st(state_bytes("int8", r), "record 1 (tensor 7, bucket 0)")
r = recs(); r.insert(1, copy.deepcopy(r[0]))
st(state_bytes("int8", r), "record 1 (tensor 7, bucket 0)")
r = recs(); r[1]["count"] = 101
st(state_bytes("int8", r), "record 1 (tensor 7, bucket 1) count 101")
r = recs(); r[1]["count"] = 2 ** 64 - 1
st(state_bytes("int8", r), "record 1 (tensor 7, bucket 1) count 18446744073709551615")
r = recs(); r[0]["count"] = 0
st(state_bytes("int8", r), "record 0 (tensor 7, bucket 0) residual")
r = recs(); r[1]["buffers"][0] = r[1]["buffers"][0][:99]
st(state_bytes("int8", r), "record 1 (tensor 7, bucket 1) residual")
r = recs(); r[1]["buffers"][0] = struct.pack("<Q", 2 ** 64 - 1)
st(state_bytes("int8", r), "record 1 (tensor 7, bucket 1) residual")
r = recs(); r[2]["buffers"][0] = struct.pack("<Q", 50) + b"\0" * 20
st(state_bytes("int8", r), "record 2 (tensor 7, bucket 2) residual")
r = recs(); r[0]["buffers"][1] = floats(100, 9)
st(state_bytes("int8", r), "record 0 (tensor 7, bucket 0) server residual")
r = recs(); r[0]["buffers"][2] = floats(20, 9)
st(state_bytes("int8", r), "record 0 (tensor 7, bucket 0) Q")
for idx, value in [(5, float("nan")), (0, float("inf")), (49, float("-inf"))]:
    r = recs(); r[2]["buffers"][0][idx] = value
    st(state_bytes("int8", r), f"record 2 (tensor 7, bucket 2) residual[{idx}]")
st(G + b"\0", "1 byte follow")
st(G + b"\xab" * 4096, "4096 bytes follow")
st(G[:-1], "truncated")
st(G[:len(G) // 2], "truncated")
# Shapes with a server residual, a Q, a bucket of several tensors.
for shape in ["powersgd", "sign2", "topk"]:
    g = good_state(shape)
    st(g[:-2], "truncated", shape)
    st(g + b"\0" * 8, "8 bytes follow", shape)
    r = recs(shape); r[0]["count"] = 101
    st(state_bytes(SHAPES[shape][1], r), "record 0 (tensor 7, bucket 0) count 101", shape)
    st(state_bytes("int8", recs(shape)), "codec int8", shape)
r = recs("powersgd"); r[1]["buffers"][2] = r[1]["buffers"][2][:19]
st(state_bytes("powersgd:2", r), "record 1 (tensor 7, bucket 1) Q", "powersgd")
r = recs("powersgd"); r[2]["buffers"][2][3] = float("nan")
st(state_bytes("powersgd:2", r), "record 2 (tensor 7, bucket 2) Q[3]", "powersgd")
r = recs("sign2"); r[1]["buffers"][1] = r[1]["buffers"][1][:99]
st(state_bytes("sign1", r), "record 1 (tensor 7, bucket 1) server residual", "sign2")
r = recs("sign2"); r[0]["buffers"][1][0] = float("inf")
st(state_bytes("sign1", r), "record 0 (tensor 7, bucket 0) server residual[0]", "sign2")
r = recs("topk"); r[3]["buffers"][0] = r[3]["buffers"][0][:69]
st(state_bytes("topk:0.1", r), "record 3 (tensor 20, a bucket of 2 tensors) residual", "topk")
r = recs("topk"); r[3]["count"] = 2 ** 40
st(state_bytes("topk:0.1", r), "record 3 (tensor 20, a bucket of 2 tensors) count", "topk")
# Good files of another runtime: another bucket size, codec, rank of PowerSGD, algorithm.
GOOD = "{case_dir}/state/good-"
st(None, "good-int8.state'&&record 0 (tensor 7, bucket 0) count 100", runtime=("ring", "int8", 200),
   path=GOOD + "int8.state")
st(None, "good-int8.state'&&codec int8, the runtime uses none", runtime=("ring", "none", BUCKET), path=GOOD + "int8.state")
st(None, "good-powersgd.state'&&codec powersgd:2", runtime=("powersgd", "powersgd:4", BUCKET),
   path=GOOD + "powersgd.state")
st(None, "good-sign2.state'&&server residual", runtime=("ring", "sign1", BUCKET), path=GOOD + "sign2.state")
st(None, "good-topk.state'&&codec topk:0.1", runtime=("sparse", "topk:0.01", BUCKET), path=GOOD + "topk.state")
# Paths that are not a state file.
st(None, "missing.state", path="{work}/missing.state")
st(None, "sub", path="{work}/sub", setup="mkdir sub")
st(None, "fifo.state", path="{work}/fifo.state", setup="mkfifo fifo.state")
st(None, "/dev/null", path="/dev/null")
st(None, "state file ''", path="''")
st(None, "loop.state", path="{work}/loop.state", setup="ln -s loop.state loop.state")
st(None, "dangling.state", path="{work}/dangling.state", setup="ln -s nowhere dangling.state")
st(None, "missing", path="$'{work}/new\\nline/missing.state'")


# ---- SQLite database files -------------------------------------------------------------------------
# The schema as core/database.cc's migrations make it (v1..v4), for files that are almost ours.

MIGRATIONS = [
    """
CREATE TABLE IF NOT EXISTS bench_runs (
  id INTEGER PRIMARY KEY, start_time TEXT NOT NULL, tool_version TEXT NOT NULL, git_commit TEXT NOT NULL,
  collective TEXT NOT NULL, backend TEXT NOT NULL, device TEXT NOT NULL, world_size INTEGER NOT NULL,
  dtype TEXT NOT NULL, redop TEXT NOT NULL, codec TEXT NOT NULL, algo TEXT NOT NULL, hostnames TEXT NOT NULL,
  context_json TEXT NOT NULL, peak_busbw_gbps REAL, total_wrong INTEGER);
CREATE TABLE IF NOT EXISTS bench_rows (
  run_id INTEGER NOT NULL REFERENCES bench_runs(id) ON DELETE CASCADE, size_bytes INTEGER NOT NULL,
  count INTEGER NOT NULL, inplace INTEGER NOT NULL, root INTEGER NOT NULL, iters INTEGER NOT NULL,
  time_us REAL, time_p50_us REAL, time_p99_us REAL, algbw_gbps REAL, busbw_gbps REAL, wrong INTEGER, error TEXT);
CREATE INDEX IF NOT EXISTS bench_rows_run ON bench_rows(run_id);
""",
    """
CREATE TABLE IF NOT EXISTS studies (
  id INTEGER PRIMARY KEY, created TEXT NOT NULL, tool_version TEXT NOT NULL, git_commit TEXT NOT NULL,
  topology TEXT NOT NULL, topology_fingerprint TEXT NOT NULL, nodes INTEGER NOT NULL, workload TEXT NOT NULL,
  strategy TEXT NOT NULL, budget INTEGER NOT NULL, seed INTEGER NOT NULL, mode TEXT NOT NULL,
  status TEXT NOT NULL, best_score_us REAL, best_config TEXT, profile_path TEXT);
CREATE TABLE IF NOT EXISTS trials (
  study_id INTEGER NOT NULL REFERENCES studies(id) ON DELETE CASCADE, idx INTEGER NOT NULL,
  config TEXT NOT NULL, score_us REAL, mode TEXT NOT NULL, status TEXT NOT NULL, elapsed_s REAL NOT NULL,
  PRIMARY KEY (study_id, idx));
CREATE TABLE IF NOT EXISTS best_configs (
  topology_fingerprint TEXT NOT NULL, op TEXT NOT NULL, min_bytes INTEGER NOT NULL, max_bytes INTEGER NOT NULL,
  config TEXT NOT NULL, predicted_us REAL, measured_us REAL, study_id INTEGER NOT NULL, updated TEXT NOT NULL,
  PRIMARY KEY (topology_fingerprint, op, min_bytes));
CREATE TABLE IF NOT EXISTS calibrations (
  id INTEGER PRIMARY KEY, created TEXT NOT NULL, device TEXT NOT NULL, kernel TEXT NOT NULL,
  codec TEXT NOT NULL, gbps REAL NOT NULL);
CREATE TABLE IF NOT EXISTS gate_results (
  codec TEXT NOT NULL, config TEXT NOT NULL, final_loss REAL NOT NULL, baseline_loss REAL NOT NULL,
  passed INTEGER NOT NULL, created TEXT NOT NULL, PRIMARY KEY (codec, config));
""",
    """
ALTER TABLE calibrations ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE calibrations ADD COLUMN ranks INTEGER NOT NULL DEFAULT 1;
ALTER TABLE studies ADD COLUMN constraints TEXT NOT NULL DEFAULT '';
CREATE TABLE IF NOT EXISTS validations (
  id INTEGER PRIMARY KEY, created TEXT NOT NULL, device TEXT NOT NULL, ranks INTEGER NOT NULL,
  codec TEXT NOT NULL, algo TEXT NOT NULL, bytes INTEGER NOT NULL, measured_us REAL NOT NULL,
  predicted_us REAL NOT NULL);
""",
    """
ALTER TABLE trials ADD COLUMN reason TEXT NOT NULL DEFAULT '';
""",
]
CIUIC_APP_ID = 0x43495543  # "CIUC"
PAGE = 512


def pseudo_random(n, seed):
    out = b""
    i = 0
    while len(out) < n:
        out += hashlib.sha256(f"{seed}:{i}".encode()).digest()
        i += 1
    return out[:n]


def sqlite_file(build):
    """Runs build(connection) on a fresh file; returns its bytes (header's writer version pinned)."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "x.db")
        c = sqlite3.connect(path, isolation_level=None)
        c.execute(f"PRAGMA page_size={PAGE}")  # small pages keep the corpus small
        build(c)
        c.close()
        data = bytearray(open(path, "rb").read())
    data[96:100] = struct.pack(">I", 3040001)  # SQLITE_VERSION_NUMBER of the writer: informational
    return bytes(data)


def ciuic_db(version=4, app_id=CIUIC_APP_ID, user_version=None, rows=0, after=None):
    def build(c):
        for sql in MIGRATIONS[:version]:
            c.executescript(sql)
        for i in range(rows):
            c.execute("INSERT INTO bench_runs VALUES (NULL,'2026-11-23T00:00:00Z','0.1.0','abc','allreduce','local',"
                      "'cpu',2,'fp32','sum','none','native','vm',?,1.0,0)", ("{" + "x" * 400 + "}",))
        if after:
            after(c)
        c.execute(f"PRAGMA application_id={app_id}")
        c.execute(f"PRAGMA user_version={version if user_version is None else user_version}")
    return sqlite_file(build)


def foreign_db(app_id=0, wal=False):
    def build(c):
        if wal:
            c.execute("PRAGMA journal_mode=WAL")
        c.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY, path TEXT)")
        c.execute("INSERT INTO photos VALUES (1, '/home/me/cat.jpg')")
        c.execute(f"PRAGMA application_id={app_id}")
    return sqlite_file(build)


def corrupt(data, page):
    """Page `page` (0-based) with its b-tree header and cell pointers overwritten."""
    b = bytearray(data)
    b[page * PAGE + 8:page * PAGE + 200] = pseudo_random(192, page)
    return bytes(b)


many = ciuic_db(rows=40)
DBS = [  # name, bytes
    ("text", b"this is not a database\n"),
    ("random", pseudo_random(8192, "random")),
    ("short", b"SQLite format 3\0" + b"\0" * 34),
    ("zero_page", b"\0" * 4096),
    ("header_only", ciuic_db()[:100]),
    ("other_app", foreign_db(app_id=0x12345678)),
    ("plain_sqlite", foreign_db(app_id=0)),
    ("plain_wal", foreign_db(app_id=0, wal=True)),
    ("newer_v6", ciuic_db(user_version=6)),  # the schema is v5 since 2026-11-23
    ("newer_v99", ciuic_db(user_version=99)),
    ("newer_max", ciuic_db(user_version=2 ** 31 - 1)),
    ("negative_version", ciuic_db(user_version=-1)),
    ("negative_min", ciuic_db(user_version=-2 ** 31)),
    ("missing_table", ciuic_db(after=lambda c: c.execute("DROP TABLE studies"))),
    ("missing_column", ciuic_db(after=lambda c: c.executescript(
        "CREATE TABLE t2 AS SELECT study_id, idx, config, score_us, mode, status, elapsed_s FROM trials;"
        "DROP TABLE trials; ALTER TABLE t2 RENAME TO trials;"))),
    ("v3_missing_column", ciuic_db(version=3, after=lambda c: c.executescript(
        "DROP TABLE validations;"))),
    ("v0_foreign_tables", ciuic_db(version=0, after=lambda c: c.execute("CREATE TABLE bench_runs (a, b)"))),
    ("v0_foreign_studies", ciuic_db(version=0, after=lambda c: c.execute("CREATE TABLE studies (x)"))),
    ("corrupt_page", corrupt(many, 1)),  # page 2: the root of bench_runs
    ("truncated", many[: len(many) // 2]),
]
for name, data in DBS:
    put(f"db/{name}.db", data)


def sqlite_verdict(data):
    """What SQLite itself says of a file: PRAGMA quick_check's first row, or the error."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "x.db")
        open(path, "wb").write(data)
        try:
            c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            return c.execute("PRAGMA quick_check").fetchone()[0]
        except sqlite3.DatabaseError as e:
            return str(e)


for name in ["corrupt_page", "truncated"]:  # damaged as SQLite sees it, not only as we think
    check(sqlite_verdict(dict(DBS)[name]) != "ok", name, "SQLite reads it as sound")

DB_COMMANDS = {
    "bench": BENCH + " --db {db}",
    "show": "{tune} show --db {db}",
    "run": RUN.replace(TUNE_DB, "--db {db} --out {work}/p.json"),
    "calibrate": "{tune} calibrate --sizes 64K --rounds 1 --db {db}",
    "validate": "{tune} validate --ranks 2 --sizes 256K --codecs none --repeat 1 --db {db}",
    "calibration": RUN + " --calibration {db}",
}
# Each case damages (if it does) its own copy ({own:...}): cases of one file stay independent.
for name, _ in DBS:
    for cmd in ["bench", "show", "run"]:
        path = "{own:db/" + name + ".db}"
        case("db", f"{name}.db", DB_COMMANDS[cmd].replace("{db}", path))
for name in ["text", "other_app", "newer_v99", "negative_version", "missing_column", "corrupt_page",
             "v0_foreign_tables"]:
    for cmd in ["calibrate", "validate", "calibration"]:
        path = "{own:db/" + name + ".db}"
        case("db", f"{name}.db", DB_COMMANDS[cmd].replace("{db}", path))
# The default start (mpiexec) refuses the file before any rank starts.
case("db", "text.db", "{bench} allreduce --sizes 4K --iters 1 --warmup 0 --db {own:db/text.db}")
case("db", "text.db", "{bench} allreduce --ranks 2 --sizes 4K --iters 1 --warmup 0 --db {own:db/text.db}")
# Not a regular file.
for cmd in ["bench", "show", "run"]:
    tmpl = DB_COMMANDS[cmd]
    case("db", "fifo.db", tmpl.replace("{db}", "{work}/fifo.db"), setup="mkfifo fifo.db")
    case("db", "/dev/null", tmpl.replace("{db}", "/dev/null"))
    case("db", "dir.db", tmpl.replace("{db}", "{work}/dir.db"), setup="mkdir dir.db")
# A trigger the user added (ciuic's schema has none) that refuses a row, RAISE(ABORT), or skips one,
# RAISE(IGNORE): the file's own rule, refused when it is opened, byte-identical (a skipped bench_runs
# row made the run's rows join an older run's id). Current schema (v5), so nothing is migrated first.
V5 = ("ALTER TABLE bench_rows ADD COLUMN time_min_us REAL; ALTER TABLE bench_rows ADD COLUMN time_max_us REAL;"
      "ALTER TABLE bench_rows ADD COLUMN time_stddev_us REAL;")


def with_trigger(table, action):
    return ciuic_db(user_version=5, after=lambda c: c.executescript(
        V5 + f"CREATE TRIGGER users_rule BEFORE INSERT ON {table} BEGIN SELECT {action}; END;"))


put("db/trigger_abort_runs.db", with_trigger("bench_runs", "RAISE(ABORT, 'this lab keeps no more runs')"))
put("db/trigger_ignore_runs.db", with_trigger("bench_runs", "RAISE(IGNORE)"))
put("db/trigger_ignore_rows.db", with_trigger("bench_rows", "RAISE(IGNORE)"))
put("db/trigger_fail_calibrations.db", with_trigger("calibrations", "RAISE(FAIL, 'calibrations are frozen')"))
case("db", "trigger 'users_rule' can refuse or skip the rows ciuic writes",
     DB_COMMANDS["bench"].replace("{db}", "{own:db/trigger_abort_runs.db}"))
case("db", "trigger 'users_rule' can refuse or skip",
     DB_COMMANDS["bench"].replace("{db}", "{own:db/trigger_ignore_runs.db}"))
case("db", "trigger 'users_rule' can refuse or skip",
     DB_COMMANDS["bench"].replace("{db}", "{own:db/trigger_ignore_rows.db}"))
case("db", "trigger 'users_rule' can refuse or skip",
     DB_COMMANDS["calibrate"].replace("{db}", "{own:db/trigger_fail_calibrations.db}"))


# ---- output paths ---------------------------------------------------------------------------------

def out(expect, command, setup="-", reason=None, defect=None):
    case("output", expect, command, setup, reason, defect)


# Why each kind of path cannot be written (the message's words; strerror's where it quotes the system).
MISSING = "does not exist"
FOLDER = "is a directory"
EMPTY = "an empty path; name a file"
PROC = "cannot create files in '/proc'"
SAME = "name the same file; give each its own"


LONG = "{work}/" + "/".join(["d" * 200] * 25) + "/x.json"  # > PATH_MAX
for name, path, setup, reason in [
    ("missing folder", "{work}/no/such/x.json", "-", MISSING),
    ("a folder", "{work}", "-", FOLDER),
    ("a folder with a slash", "{work}/", "-", FOLDER),
    ("a file as folder", GOOD_PROFILE + "/x.json", "-", "Not a directory"),
    ("a link to a folder", "{work}/link", "mkdir d && ln -s d link", FOLDER),
    ("no files in /proc", "/proc/x.json", "-", PROC),
    ("a read-only /proc file", "/proc/version", "-", PROC),
    ("empty", "''", "-", EMPTY),
    ("too long", LONG, "-", "File name too long"),
    ("component too long", "{work}/" + "n" * 300 + ".json", "-", "File name too long"),
    ("stdin", "/dev/fd/0", "-", "descriptor 0 is not open for writing"),
    ("a closed descriptor", "/dev/fd/99", "-", "descriptor 99 is not open"),
]:
    out("--out", f"{BENCH} --format json --out {path}", setup, reason,
        defect=None if reason else "the line is cut at 2000 characters inside the path, before any reason")
out("--out", "{bench} allreduce --sizes 4K --iters 1 --warmup 0 --out {work}/no/such/x.json",  # default start
    reason=MISSING)
for path, reason in [("{work}/no/such/x.db", MISSING), ("{work}", FOLDER), ("''", EMPTY), ("/proc/x.db", PROC),
                     ("/dev/fd/1", "is not a regular file")]:
    out("--db", f"{BENCH} --db {path}", reason=reason)
out("--out", BENCH + " --format json --out {work}/same --db {work}/same", reason="--db&&" + SAME)
for path, reason in [("{work}/no/such/x.csv", MISSING), ("{work}", FOLDER), ("''", EMPTY), ("/proc/x.csv", PROC)]:
    out("--out", f"{COMPRESS} --format csv --out {path}", reason=reason)
RUN_NO_IO = RUN.replace(" " + TUNE_DB, "")
for path, reason in [("{work}/no/such/p.json", MISSING), ("{work}", FOLDER), ("''", EMPTY), ("/proc/p.json", PROC),
                     (GOOD_PROFILE + "/p.json", "Not a directory")]:
    out("--out", f"{RUN_NO_IO} --db {{work}}/t.db --out {path}", reason=reason)
for path, reason in [("{work}/no/such/t.db", MISSING), ("{work}", FOLDER), ("''", EMPTY),
                     ("/dev/null", "is not a regular file"), ("/proc/t.db", PROC)]:
    out("--db", f"{RUN_NO_IO} --out {{work}}/p.json --db {path}", reason=reason)
out("--out", RUN_NO_IO + " --out {work}/same --db {work}/same", reason="--db&&" + SAME)
# The profile would overwrite the topology it was tuned from.
out("--out", "{tune} run --topology {work}/t.json --workload " + GOOD_WORKLOAD
    + " --db {work}/t.db --out {work}/t.json", setup="cp {case_dir}/topology/good.json t.json",
    reason="--topology&&" + SAME)
# Without --out the profile goes to the data folder's profiles/ ($CIUIC_DATA_DIR): there it cannot be
# created.
out("/proc/profiles", "env CIUIC_DATA_DIR=/proc {tune} run --topology " + GOOD_TOPOLOGY + " --workload "
    + GOOD_WORKLOAD + " --db {work}/t.db", reason="cannot create&&give --out")
for path, reason in [("{work}/no/such/c.db", MISSING), ("{work}", FOLDER), ("''", EMPTY)]:
    out("--db", f"{{tune}} calibrate --sizes 64K --db {path}", reason=reason)
out("--db", "{tune} validate --db {work}", reason=FOLDER)
out("{work}", "{tune} show --db {work}", reason="refusing database&&not a regular file")

# nccl-tests' JSON (-J FILE.json, --nccl-json) and its per-iteration records (-I 0|1, --per-iter): added
# after every other bench-cli and output case, so no earlier case id moves.
bc("-I 1", "-I 1", reason="needs -J FILE.json")
bc("-I 2", "-I 2 -J {work}/r.json", reason="must be in 0..1")
bc("-I yes", "-I yes -J {work}/r.json", reason="not a whole number")
bc("--per-iter", "--per-iter 1")
bc("--per-iter", "--per-iter 5 --nccl-json {work}/r.json")
bc("-J", "-J {work}/r.txt", reason="r.txt: must end in .json")
bc("-J", "-J {work}/r", reason="/r: must end in .json")
bc("-J", "-J", reason="needs a value")
bc("disagree", "-J {work}/a.json --nccl-json {work}/b.json")
bc("disagree", "-I 0 --per-iter 1 -J {work}/r.json")
for path, reason in [("{work}/no/such/r.json", MISSING), ("''", EMPTY), ("/proc/r.json", PROC)]:
    out("-J", f"{BENCH} -J {path}", reason=reason)
out("-J", BENCH + " -J {work}/d.json", setup="mkdir d.json", reason=FOLDER)
out("--nccl-json", BENCH + " --nccl-json {work}/no/such/r.json", reason=MISSING)
out("-J", BENCH + " --format json --out {work}/same.json -J {work}/same.json", reason="--out&&" + SAME)
# The measured crossover table's file (--crossover-out) is one more output: after the cases above.
XOVER = "{bench} allreduce --backend ciuic --transport local --ranks 2 --iters 1 --warmup 0 --sizes 4K --crossover measure"
out("--crossover-out", XOVER + " --format json --out {work}/same.json --crossover-out {work}/same.json",
    reason="--out&&" + SAME)
out("--crossover-out", XOVER + " --db {work}/same --crossover-out {work}/same", reason="--db&&" + SAME)
out("--crossover-out", XOVER + " -J {work}/same.json --crossover-out {work}/same.json", reason="-J '&&" + SAME)
out("--crossover-out", XOVER + " --trace {work}/same.json --crossover-out {work}/same.json",
    reason="--trace&&" + SAME)
# Kernel sizes that cannot fit in memory: refused before anything is measured (was std::bad_alloc).
tc("--sizes&&does not fit", "{tune} calibrate --sizes 1T --rounds 1 --concurrency 1 --db {work}/c.db")
tc("--kernel-sizes&&does not fit", "{tune} validate --kernel-sizes 1T --ranks 2 --db {work}/c.db")
# A key given twice in a crossover file and in the published figures (the last one won), and a folder
# given for either (read as empty JSON).
put("crossover/twice.json", b'{"format":"ciuic-crossover","version":1,"ranks":2,"transport":"mpi",'
    b'"bands":[{"below_bytes":null,"algo":"ring"}],"ranks":7}')
bc("crossover.ranks: given twice", "--crossover {case_dir}/crossover/twice.json", base=CIUIC)
bc("crossover '&&not a regular file", "--crossover {case_dir}/crossover", base=CIUIC)
put("published/twice.json", b'{"schema":"ciuic.published/1","schema":"ciuic.published/1"}')
tc("published.schema: given twice", "{tune} topologies --published {case_dir}/published/twice.json")
tc("published figures&&not a regular file", "{tune} topologies --published {case_dir}/published")
# A list item given twice (it ran twice, or once silently).
tc("--ranks&&given twice", "{tune} calibrate --ranks 2,02 --sizes 64K --db {work}/c.db")
tc("--codecs&&given twice", "{tune} validate --codecs int8,int8 --ranks 2 --db {work}/c.db")
# An option given twice (the last value won silently).
tc("--budget given twice", "{tune} run --topology " + GOOD_TOPOLOGY + " --workload " + GOOD_WORKLOAD
   + " --budget 3 --budget 4 --db {work}/t.db --out {work}/p.json")
bc("--sizes given twice", "--sizes 8K")
bc("-n given twice", "-n 2 -n 3")
# Knobs a --profile's rules set per size (they were silently replaced), and codec knobs with no codec.
bc("--bucket&&--profile sets it per size", f"--profile {GOOD_PROFILE} --profile-override --bucket 1M", base=CIUIC)
bc("--streams&&--profile sets it per size", f"--profile {GOOD_PROFILE} --profile-override --streams 7", base=CIUIC)
bc("--prescale&&applies to a compressing --codec", "--prescale 0.5", base=CIUIC)
bc("--block&&applies to a compressing --codec", "--block 64", base=CIUIC)
# A newline in a value ciuic-tune echoes: still one line ('?').
tc("unknown topology 'x?y'", "{tune} model --topology $'x\\ny'")
tc("x?y", "{tune} run --topology " + GOOD_TOPOLOGY + " --workload $'x\\ny' --db {work}/t.db --out {work}/p.json")
# Options that did nothing: list with a sweep's options, a root for a collective without one, and a
# CIUIC_PROGRESS value that is none of 0, 1 and stdout.
case("bench-cli", "list takes no options&&--sizes", "{bench} list --sizes 1K")
bc("--root 1: allreduce has no root", "--root 1")
bc("--root 0: sendrecv has no root", "--root 0", base="{bench} sendrecv --backend local --sizes 4K --iters 1 --warmup 0")
case("bench-cli", "CIUIC_PROGRESS=yes: expected 0", f"env CIUIC_PROGRESS=yes {BENCH}")
tc("CIUIC_PROGRESS=on: expected 0", "env CIUIC_PROGRESS=on {tune} model --topology dgx_a100 --sizes 1K")
# Message sizes only ciuic-bench can judge (its ranks' memory): asked of it (--dry-run) before anything
# is measured; they were refused by the child after the kernels, with exit 2.
tc("--sizes 1T: size 1T does not fit", "{tune} validate --ranks 2 --sizes 1T --db {work}/c.db")
tc("--link-sizes 1T: size 1T does not fit", "{tune} calibrate --ranks 2 --link-sizes 1T --db {work}/c.db")
# --register: the uncompressed fp32 ring (--algo ring, or auto where its table names the ring) is what
# reads registered buffers; a crossover file says "buffers": "registered" or nothing.
bc("--register&&use --algo ring or auto&&--algo rd", "--register yes --algo rd", base=CIUIC)
bc("--register&&--algo native --codec none --precision bf16", "--register yes --algo native --precision bf16", base=CIUIC)
put("crossover/buffers-pinned.json", b'{"format":"ciuic-crossover","version":1,"ranks":2,"transport":"local",'
    b'"buffers":"pinned","bands":[{"below_bytes":null,"algo":"ring"}]}')
bc("crossover&&buffers: expected", "--crossover {case_dir}/crossover/buffers-pinned.json --register yes", base=CIUIC)
# A crossover file's host count: a positive integer up to its ranks (or no key).
for name, hosts in [("hosts-zero", b"0"), ("hosts-above-ranks", b"3")]:
    put(f"crossover/{name}.json", b'{"format":"ciuic-crossover","version":1,"ranks":2,"transport":"local","hosts":'
        + hosts + b',"bands":[{"below_bytes":null,"algo":"ring"}]}')
    bc("crossover&&hosts: expected a positive integer up to ranks", f"--crossover {{case_dir}}/crossover/{name}.json",
       base=CIUIC)
# Found by the crossover fuzzer: a format that is not a string; a band before the last at the count
# reserved for the last (2^64 - 1), which the writer would have turned into null.
put("crossover/format-number.json", b'{"format":1}')
bc("crossover&&not a ciuic crossover (format)", "--crossover {case_dir}/crossover/format-number.json", base=CIUIC)
put("crossover/sentinel-band.json", b'{"format":"ciuic-crossover","version":1,"ranks":2,"transport":"local",'
    b'"bands":[{"below_bytes":18446744073709551615,"algo":"native"},{"below_bytes":null,"algo":"ring"}]}')
bc("crossover&&bands[0].below_bytes&&below 2^64 - 1", "--crossover {case_dir}/crossover/sentinel-band.json",
   base=CIUIC)

# A profile's bands of one op cover every size from 0: a size in a gap, or above a last band with an
# end, would fail mid-run ("no rule for N bytes"), not when the profile is read.
pr(setk(["rules", 1, "min_bytes"], 131072), "profile.rules[1]: band [131072, 1048576) leaves allreduce sizes from "
   "65536 to 131072 without a rule")
pr(setk(["rules", 4, "max_bytes"], 1 << 30), "profile.rules[4]: band [268435456, 1073741824) is allreduce's last")


# A crossover's out-of-place bands are checked as its bands are.
put("crossover/oop-last-not-null.json", b'{"format":"ciuic-crossover","version":1,"ranks":2,"transport":"local",'
    b'"bands":[{"below_bytes":null,"algo":"native"}],"bands_out_of_place":[{"below_bytes":100,"algo":"ring"}]}')
bc("crossover&&bands_out_of_place[0].below_bytes&&the last band is null",
   "--crossover {case_dir}/crossover/oop-last-not-null.json", base=CIUIC)
put("crossover/oop-empty.json", b'{"format":"ciuic-crossover","version":1,"ranks":2,"transport":"local",'
    b'"bands":[{"below_bytes":null,"algo":"native"}],"bands_out_of_place":[]}')
bc("crossover&&bands_out_of_place: expected a list", "--crossover {case_dir}/crossover/oop-empty.json", base=CIUIC)

# ---- writing ---------------------------------------------------------------------------------------

def manifest():
    lines = ["# id\tcategory\texpect\tsetup\tcommand  (tests/data/bad/generate.py writes this file)"]
    for c in CASES:
        lines.append("\t".join(c))
    return ("\n".join(lines) + "\n").encode()


def write(root):
    for rel, data in FILES.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    with open(os.path.join(root, "cases.tsv"), "wb") as f:
        f.write(manifest())


def generated_dirs():
    return sorted({rel.split("/")[0] for rel in FILES})


def same_database(a, b):
    """Whether two SQLite files hold the same schema and rows: another SQLite build may lay out the
    same database in other bytes. Files that are not (readable) databases compare by bytes alone."""
    if b is None or not a.startswith(b"SQLite format 3\0") or not b.startswith(b"SQLite format 3\0"):
        return False
    dumps = []
    with tempfile.TemporaryDirectory() as d:
        for i, data in enumerate((a, b)):
            path = os.path.join(d, f"{i}.db")
            with open(path, "wb") as f:
                f.write(data)
            try:
                c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
                dumps.append(list(c.iterdump()))
                c.close()
            except sqlite3.DatabaseError:
                return False
    return dumps[0] == dumps[1]


def main():
    if sys.argv[1:] == ["--check"]:
        with tempfile.TemporaryDirectory() as d:
            write(d)
            bad = []
            for rel in list(FILES) + ["cases.tsv"]:
                a = open(os.path.join(d, rel), "rb").read()
                try:
                    b = open(os.path.join(HERE, rel), "rb").read()
                except OSError:
                    b = None
                if a != b and not same_database(a, b):
                    bad.append(rel)
            for sub in generated_dirs():
                for name in os.listdir(os.path.join(HERE, sub)):
                    if f"{sub}/{name}" not in FILES:
                        bad.append(f"{sub}/{name} (not generated)")
        for rel in bad:
            print(f"generate.py --check: {rel} differs from what the generator writes")
        print(f"generate.py --check: {len(CASES)} cases, {len(FILES)} files, {len(bad)} differ")
        return 1 if bad else 0
    if sys.argv[1:]:
        print(__doc__)
        return 2
    for sub in generated_dirs():
        shutil.rmtree(os.path.join(HERE, sub), ignore_errors=True)
    write(HERE)
    per = {}
    for c in CASES:
        per[c[1]] = per.get(c[1], 0) + 1
    size = sum(len(d) for d in FILES.values())
    print(f"wrote {len(CASES)} cases ({', '.join(f'{k} {v}' for k, v in per.items())}) and {len(FILES)} files, "
          f"{size} bytes, to {HERE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
