#!/usr/bin/env python3
"""Runs one command and prints "WALL_S PEAK_RSS_KIB WRITE_BYTES" on one line.

The command runs under GNU time (/usr/bin/time), a small C program: its %M is the peak
RSS of the command alone (a Python parent's pages, inherited through fork until exec,
would set a floor of ~14 MB under ru_maxrss). WALL_S: from just before the fork to
time's exit (monotonic clock), so Python's start is not in it. WRITE_BYTES: write_bytes
of /proc/PID/io of time, read once it has exited but before it is reaped (waitid
WNOWAIT): the bytes the command (time reaped it, and any children it reaped) made the
kernel send to storage, page-cache writes included. The command's stdout and stderr are
discarded; a non-zero exit prints its stderr and exits 1.

    bench/probe.py CMD [ARG...]
"""
import os
import subprocess
import sys
import tempfile
import time

with tempfile.TemporaryFile() as err, tempfile.NamedTemporaryFile(mode="r") as rss:
    command = ["/usr/bin/time", "-f", "%M", "-o", rss.name, "--", *sys.argv[1:]]
    start = time.monotonic()
    p = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err)
    os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)
    wall = time.monotonic() - start
    with open(f"/proc/{p.pid}/io") as f:
        io = dict(line.split(": ") for line in f.read().splitlines())
    if p.wait() != 0:
        err.seek(0)
        sys.stderr.write(err.read().decode(errors="replace"))
        sys.exit(f"probe.py: command failed (exit {p.returncode}): {' '.join(sys.argv[1:])}")
    peak = rss.read().split()[-1]
print(f"{wall:.6f} {peak} {int(io['write_bytes'])}")
