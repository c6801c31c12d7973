#!/usr/bin/env python3
"""Runs one command and prints "WALL_S PEAK_RSS_KIB WRITE_BYTES" on one line.

WALL_S: from just before the fork to the process's exit (monotonic clock), so Python's
start is not in it. PEAK_RSS_KIB: ru_maxrss of the process (and of the children it
reaped: for `bash -c` chains, its largest one). WRITE_BYTES: write_bytes of
/proc/PID/io, read once the process has exited but before it is reaped (waitid
WNOWAIT): the bytes it (and the children it reaped) made the kernel send to storage,
page-cache writes included. stdout and stderr of the command are discarded; a non-zero
exit prints the command's stderr and exits 1.

    bench/probe.py CMD [ARG...]
"""
import os
import subprocess
import sys
import tempfile
import time

with tempfile.TemporaryFile() as err:
    start = time.monotonic()
    p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=err)
    os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)
    wall = time.monotonic() - start
    with open(f"/proc/{p.pid}/io") as f:
        io = dict(line.split(": ") for line in f.read().splitlines())
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        err.seek(0)
        sys.stderr.write(err.read().decode(errors="replace"))
        sys.exit(f"probe.py: command failed (exit {p.returncode}): {' '.join(sys.argv[1:])}")
print(f"{wall:.6f} {usage.ru_maxrss} {int(io['write_bytes'])}")
