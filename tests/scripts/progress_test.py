#!/usr/bin/env python3
"""The live progress line: drawn on a terminal, absent when piped.

Runs each tool twice: once with stderr (and stdout) on a pseudo-terminal, where the progress line
must appear ("\\r<tool>: <phase> N/M (P%)  <item>  <elapsed>, ETA ..." ending in an erase-line escape)
and must have been cleared before every line of real output; once with stdout and stderr piped, where
no progress byte may appear. Plain python3 (stdlib pty): no Debian packages needed.

usage: progress_test.py CIUIC_TUNE CIUIC_BENCH
"""
import os
import pty
import re
import subprocess
import sys
import tempfile

ERASE = b"\x1b[K"


def run_on_pty(argv, env):
    """Runs argv with stdin/stdout/stderr on one pseudo-terminal; returns (exit code, bytes seen)."""
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(argv[0], argv, env)
    seen = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), seen


def check(name, argv, phase, env):
    failures = []
    rc, seen = run_on_pty(argv, env)
    if rc != 0:
        failures.append(f"{name}: exit {rc} on a terminal:\n{seen.decode(errors='replace')[-2000:]}")
    lines = re.findall(rb"\r([^\r\n]*?)\x1b\[K", seen)
    drawn = [l for l in lines if re.search(rb": " + phase.encode() + rb" \d+/\d+ \(\d+%\)", l)]
    if not drawn:
        failures.append(f"{name}: no progress line for '{phase}' on a terminal:\n{seen[-1500:]!r}")
    elif not any(b"ETA" in l or b"done" in l for l in drawn):
        failures.append(f"{name}: the progress line has no ETA: {drawn[-1]!r}")
    # What the terminal shows at the end: the live line was erased before every line of real output
    # and when its phase ended, so no visible line holds progress text (with output after it, or left).
    for line in seen.replace(b"\r\n", b"\n").split(b"\n"):
        shown, col = bytearray(), 0
        for token in re.split(rb"(\r|\x1b\[K)", line):
            if token == b"\r":
                col = 0
            elif token == ERASE:
                del shown[col:]
            else:
                shown[col:col + len(token)] = token
                col += len(token)
        if re.search(rb": " + phase.encode() + rb" \d+/\d+", bytes(shown)):
            failures.append(f"{name}: a progress line left on the screen or mixed with output: {bytes(shown)!r}")
            break
    # Piped: not a byte of it.
    piped = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=600)
    if piped.returncode != 0:
        failures.append(f"{name}: exit {piped.returncode} piped: {piped.stderr.decode(errors='replace')[-1000:]}")
    for stream, data in (("stdout", piped.stdout), ("stderr", piped.stderr)):
        if ERASE in data or b"ETA" in data:
            failures.append(f"{name}: progress bytes in piped {stream}: {data[-500:]!r}")
    # CIUIC_PROGRESS=0 turns it off on a terminal too.
    rc, seen = run_on_pty(argv, dict(env, CIUIC_PROGRESS="0"))
    if ERASE in seen:
        failures.append(f"{name}: CIUIC_PROGRESS=0 still drew the line")
    return failures


def main():
    tune, bench = sys.argv[1], sys.argv[2]
    env = {k: v for k, v in os.environ.items() if k != "CIUIC_PROGRESS"}
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", TERM="xterm", COLUMNS="120")
    failures = []
    with tempfile.TemporaryDirectory() as d:
        failures += check("ciuic-tune calibrate",
                          [tune, "calibrate", "--sizes", "64K,256K", "--rounds", "3", "--train-kernels", "no", "--db", os.path.join(d, "c.db")],
                          "kernel calibration", env)
        failures += check("ciuic-bench sweep",
                          [bench, "allreduce", "--sizes", "1K:512K", "--iters", "3", "--warmup", "1", "--ranks", "2",
                           "--backend", "mpi"],
                          "sweep", env)
    for f in failures:
        print("FAIL", f)
    if failures:
        return 1
    print("progress: drawn on a terminal (ciuic-tune calibrate, ciuic-bench sweep), absent when piped or with "
          "CIUIC_PROGRESS=0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
