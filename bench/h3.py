#!/usr/bin/env python3
"""HTTP/3 against HTTP/2 and HTTP/1.1 over TLS: Fulcrum's own CPU (utime + stime of its process,
all threads) per 10,000 requests, one service with `http3` in front of one real server, the same
client machine for all three, Fulcrum on the last core and the clients on the others.

- HTTP/1.1 over TLS: wrk -t1 -c50 (keep-alive), for --seconds;
- HTTP/2 over TLS: h2load, 10 connections of 10 streams;
- HTTP/3: bench/h3_load.py (aioquic: h2load here has no HTTP/3), 10 connections of 10 streams.

Rounds are interleaved (one of each, then the next), and the medians reported; the client's
speed differs between the three (aioquic is Python), which changes the rate, not the balancer's
CPU per request. Writes a markdown table to stdout and with --save NAME to bench/results/NAME.md.

Usage: bench/h3.py [--rounds 3] [--requests 20000] [--seconds 10] [--save NAME]
FULCRUM_BIN=path picks the binary (default: target/release/fulcrum, built if missing)."""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, limit=20):
    import socket
    end = time.time() + limit
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"nothing listens on {port}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--requests", type=int, default=20000)
    p.add_argument("--seconds", type=int, default=10)
    p.add_argument("--save")
    a = p.parse_args()
    exe = Path(os.environ.get("FULCRUM_BIN", ROOT / "target/release/fulcrum"))
    if not exe.exists():
        subprocess.run(["cargo", "build", "--release", "-p", "fulcrum"], cwd=ROOT, check=True)
    cores = os.cpu_count() or 1
    balancer_core, client_cores = str(cores - 1), (f"0-{cores - 2}" if cores > 1 else "0")
    work = Path(tempfile.mkdtemp(prefix="fulcrum-h3-bench-"))
    cert, key = work / "cert.pem", work / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "2", "-subj", "/CN=bench", "-addext", "subjectAltName=DNS:bench,IP:127.0.0.1"], check=True, capture_output=True)
    server_port, port = free_port(), free_port()
    backend = subprocess.Popen(["taskset", "-c", client_cores, str(exe), "--log", "warn", "backend", "--listen", f"127.0.0.1:{server_port}", "--name", "b1"],
                               stdout=subprocess.DEVNULL)
    wait_port(server_port)
    (work / "fulcrum.toml").write_text(
        f'allow_root = true\nworkers = 1\n[[service]]\nname = "bench"\nlisten = "127.0.0.1:{port}"\nmode = "http"\nclient_timeout = "10m"\nserver_timeout = "10m"\n'
        f'[service.http]\naccess_log = "off"\nhead_timeout = "10m"\nkeepalive_idle = "10m"\nhttp3 = true\nquic_retry_above = 100000\n'
        f'[service.tls]\n[[service.tls.certificate]]\ncert = "{cert}"\nkey = "{key}"\n'
        f'[service.health]\nkind = "none"\n[[service.server]]\naddress = "127.0.0.1:{server_port}"\n')
    fulcrum = subprocess.Popen(["taskset", "-c", balancer_core, str(exe), "--log", "error", "run", str(work / "fulcrum.toml")])
    wait_port(port)
    time.sleep(0.5)
    url = f"https://127.0.0.1:{port}/name"

    def h1():
        out = subprocess.run(["taskset", "-c", client_cores, "wrk", "-t1", "-c50", f"-d{a.seconds}s", url], capture_output=True, text=True, check=True).stdout
        return int(re.search(r"(\d+) requests in", out).group(1))

    def h2():
        out = subprocess.run(["taskset", "-c", client_cores, "h2load", "-n", str(a.requests), "-c10", "-m10", url], capture_output=True, text=True, check=True).stdout
        return int(re.search(r"(\d+) succeeded", out).group(1))

    def h3():
        out = subprocess.run(["taskset", "-c", client_cores, sys.executable, str(ROOT / "bench/h3_load.py"), "127.0.0.1", str(port), "/name", str(a.requests)],
                             capture_output=True, text=True, check=True).stdout
        return json.loads(out)["ok"]

    cases = {"HTTP/1.1 over TLS (wrk)": h1, "HTTP/2 over TLS (h2load)": h2, "HTTP/3 (aioquic)": h3}
    results = {name: [] for name in cases}
    try:
        for _ in range(a.rounds):
            for name, run in cases.items():
                before, began = cpu_seconds(fulcrum.pid), time.monotonic()
                done = run()
                took = time.monotonic() - began
                used = cpu_seconds(fulcrum.pid) - before
                results[name].append((used / done * 10000, done / took))
    finally:
        fulcrum.terminate()
        backend.terminate()
        fulcrum.wait()
        backend.wait()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    lines = [f"# HTTP/3 against HTTP/2 and HTTP/1.1 over TLS ({time.strftime('%Y-%m-%d')}, commit {commit})", "",
             f"`bench/h3.py --rounds {a.rounds} --requests {a.requests} --seconds {a.seconds}`, binary `{exe.name}`, {cores} cores: Fulcrum on core "
             f"{balancer_core}, clients and the real server on {client_cores}. Medians of {a.rounds} interleaved rounds.", "",
             "| protocol | Fulcrum CPU s / 10k requests | requests/s (client-bound) |", "| --- | ---: | ---: |"]
    for name, rows in results.items():
        lines.append(f"| {name} | {statistics.median(r[0] for r in rows):.3f} | {statistics.median(r[1] for r in rows):,.0f} |")
    report = "\n".join(lines) + "\n"
    print(report)
    if a.save:
        (ROOT / "bench/results" / f"{a.save}.md").write_text(report)


if __name__ == "__main__":
    main()
