"""What bench/run and bench/scale read of the processes they measure, the one way both drive
idle keep-alive connections, and how both start, await and clean up what they run: shared so
that both count CPU and memory alike."""
import os
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def family(pid):
    """A process and its children (nginx or haproxy workers, if any)."""
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [pid] + [int(x) for x in out]


def cpu_seconds(pids):
    """utime + stime of processes (all their threads), in seconds."""
    total = 0
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (FileNotFoundError, IndexError):
            pass
    return total / TICK


def rss_bytes(pids):
    total = 0
    for p in pids:
        try:
            m = re.search(r"^Rss:\s+(\d+) kB", Path(f"/proc/{p}/smaps_rollup").read_text(), re.M)
            total += int(m.group(1)) * 1024
        except (FileNotFoundError, AttributeError):
            pass
    return total


def settled_rss(pids, limit=30):
    """RSS once it has stopped moving (the allocators give pages back over a few seconds): three
    readings a second apart within 64 KiB, or the last one at `limit` seconds."""
    last, same, deadline = rss_bytes(pids), 0, time.time() + limit
    while time.time() < deadline and same < 3:
        time.sleep(1)
        now = rss_bytes(pids)
        same = same + 1 if abs(now - last) < 64 * 1024 else 0
        last = now
    return last


def exchange(socks, sel, what, request, limit=30):
    """Sends `request` on every socket and reads every response whole (a page ending in
    `</html>`); exits the bench with `what` when one is refused, cut or late."""
    pending = {}
    for s in socks:
        s.sendall(request)
        pending[s.fileno()] = (s, b"")
        sel.register(s, selectors.EVENT_READ)
    deadline = time.time() + limit
    while pending and time.time() < deadline:
        for key, _ in sel.select(timeout=1):
            s, got = pending[key.fd]
            data = s.recv(65536)
            if not data:
                raise SystemExit(f"bench: {what}: a connection was closed instead of answered")
            got += data
            if b"</html>\n" in got:
                if not got.startswith(b"HTTP/1.1 200"):
                    raise SystemExit(f"bench: {what}: answered {got[:40]!r}")
                sel.unregister(s)
                del pending[key.fd]
            else:
                pending[key.fd] = (s, got)
    if pending:
        raise SystemExit(f"bench: {what}: {len(pending)} requests were not answered within {limit} s")


def start(started, work, cmd, name, cores=None):
    """Starts `cmd` in a session of its own (so a kill of its group takes its children), its
    output in work/NAME.log, pinned to `cores` when given; appended to `started`."""
    log = open(work / f"{name}.log", "w")
    p = subprocess.Popen((["taskset", "-c", cores] if cores else []) + cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    started.append(p)
    return p


def wait_port(port, what, work, limit=30.0, host="127.0.0.1"):
    """Returns once something listens on host:port; ends the bench with the tail of
    work/WHAT.log (when there is one) after `limit` seconds."""
    deadline = time.time() + limit
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex((host, port)) == 0:
                return
        time.sleep(0.05)
    log = work / f"{what}.log"
    tail = log.read_text()[-2000:] if log.exists() else ""
    raise SystemExit(f"bench: {what} did not listen on {host}:{port} within {limit:.0f} s; logs in {work}\n{tail}")


def cleanup_on_exit(started, work):
    """The cleanup of a bench run: kills every process in `started` (the list the bench appends
    to; each was started in a session of its own, so with its children) and removes `work`.
    Also run on SIGINT and SIGTERM, then the bench exits. Returns it for the bench's own end."""
    def cleanup(*_):
        for p in started:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(work, ignore_errors=True)

    signal.signal(signal.SIGINT, lambda *a: (cleanup(), sys.exit(130)))
    signal.signal(signal.SIGTERM, lambda *a: (cleanup(), sys.exit(143)))
    return cleanup
