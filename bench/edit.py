"""One server's weight edited through the admin API in a config of many services (1,000 x 10
servers by default, some of them terminating TLS), timed from the client: the request, the diff,
the validation, the new generation and the swap. Also counts the certificate loads the edits
caused (`fulcrum_tls_certificate_loads_total`), which must be none: an edit rebuilds only the
service it names, and that one's certificates are read again only when their files changed.

No traffic flows; the servers need not exist (their checks are off)."""

import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ADMIN_PORT = 19190
FIRST_PORT = 20000


def config(services, servers, tls, cert, key):
    out = ["allow_root = true", "", "[admin]", f'listen = "127.0.0.1:{ADMIN_PORT}"', ""]
    for i in range(services):
        out += ["[[service]]", f'name = "s{i}"', f'listen = "127.0.0.1:{FIRST_PORT + i}"', 'mode = "http"', "[service.health]", 'kind = "none"']
        if i < tls:
            out += ["[service.tls]", "[[service.tls.certificate]]", f'cert = "{cert}"', f'key = "{key}"']
        for j in range(servers):
            out += ["[[service.server]]", f'address = "127.{1 + i // 250}.{i % 250}.{1 + j}:80"']
        out.append("")
    return "\n".join(out)


def api(method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", ADMIN_PORT, timeout=60)
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read().decode()
    c.close()
    return r.status, data


def loads():
    _, text = api("GET", "/metrics")
    for line in text.splitlines():
        if line.startswith("fulcrum_tls_certificate_loads_total "):
            return int(float(line.split()[1]))
    sys.exit("no fulcrum_tls_certificate_loads_total in /metrics")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--services", type=int, default=1000)
    p.add_argument("--servers", type=int, default=10)
    p.add_argument("--tls", type=int, default=100, help="services that terminate TLS")
    p.add_argument("--edits", type=int, default=50)
    p.add_argument("--save")
    a = p.parse_args()
    work = tempfile.mkdtemp(prefix="fulcrum-edit-")
    cert, key = os.path.join(work, "cert.pem"), os.path.join(work, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", cert, "-days", "30", "-subj", "/CN=edit.test", "-addext", "subjectAltName=DNS:edit.test"], check=True, capture_output=True)
    path = os.path.join(work, "fulcrum.toml")
    with open(path, "w") as f:
        f.write(config(a.services, a.servers, a.tls, cert, key))
    proc = subprocess.Popen([os.environ["FULCRUM_BIN"], "--log", "warn", "run", path], stderr=open(os.path.join(work, "fulcrum.log"), "w"))
    try:
        started = time.monotonic()
        while True:
            try:
                if api("GET", "/ready")[0] == 200:
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() - started > 120:
                sys.exit(f"fulcrum did not start: see {work}/fulcrum.log")
            time.sleep(0.1)
        print(f"{a.services} services x {a.servers} servers ({a.tls} with TLS) up in {time.monotonic() - started:.1f} s")
        before = loads()
        took = []
        for n in range(a.edits):
            i = (n * 37) % a.services
            address = f"127.{1 + i // 250}.{i % 250}.1:80"
            t = time.perf_counter()
            status, body = api("POST", f"/api/services/s{i}/servers/{address}/weight", {"weight": 2 + n % 2})
            took.append((time.perf_counter() - t) * 1000)
            if status != 200:
                sys.exit(f"edit {n} refused: {status} {body}")
        reloaded = loads() - before
        took.sort()
        lines = [
            f"# One weight edit in {a.services} services x {a.servers} servers ({a.tls} with TLS)",
            "",
            "| edits | median | p90 | max | certificate loads caused |",
            "|---|---|---|---|---|",
            f"| {a.edits} | {statistics.median(took):.1f} ms | {took[int(len(took) * 0.9) - 1]:.1f} ms | {took[-1]:.1f} ms | {reloaded} |",
            "",
            "Timed from the client over loopback: the API request, the diff, the validation, the new",
            "generation and the swap. Goal: under 20 ms, and no certificate read again.",
        ]
        report = "\n".join(lines)
        print(report)
        if a.save:
            with open(os.path.join("bench", "results", f"{a.save}-edit.md"), "w") as f:
                f.write(report + "\n")
        ok = statistics.median(took) < 20 and reloaded == 0
        print("goal met" if ok else "goal NOT met")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
