"""Runs Fulcrum, HAProxy, NGINX and pen side by side in one run (see bench/README.md).

Real servers: four nginx processes on core 0. Each balancer is pinned to core 1 and runs round
robin over them, first in TCP mode (all four), then in HTTP mode (Fulcrum `mode = "http"`,
HAProxy `mode http` with `http-reuse always`, NGINX `proxy_pass` with upstream keepalive; pen has
no HTTP mode); the load generators run on core 0. CPU is read from /proc for the
balancer's processes, so "CPU s per 10k requests" is the balancer's own cost.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QUICK = "--quick" in sys.argv
DURATION = 3 if QUICK else 10          # wrk seconds per case
AB_REQUESTS = 5000 if QUICK else 30000
BULK_ROUNDS = 2 if QUICK else 5
CONC = 50
SERVERS = [19081, 19082, 19083, 19084]
PORTS = {"fulcrum": 19180, "haproxy": 19280, "nginx": 19380, "pen": 19480, "fulcrum-base": 19580, "direct": SERVERS[0]}
# FULCRUM_BASELINE=/path/to/an/older/fulcrum adds it as "fulcrum-base", run the same way right
# after this build, so a change is compared with what it changed in one run.
BASELINE = os.environ.get("FULCRUM_BASELINE")
ROOT = Path(__file__).resolve().parent.parent
TICK = os.sysconf("SC_CLK_TCK")

work = Path(tempfile.mkdtemp(prefix="fulcrum-bench-"))
procs = []


def cleanup(*_):
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    shutil.rmtree(work, ignore_errors=True)


signal.signal(signal.SIGINT, lambda *a: (cleanup(), sys.exit(130)))
signal.signal(signal.SIGTERM, lambda *a: (cleanup(), sys.exit(143)))


def port_free(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def wait_port(port, what, limit=10.0):
    deadline = time.time() + limit
    while time.time() < deadline:
        if not port_free(port):
            return
        time.sleep(0.05)
    log = work / f"{what}.log"
    tail = log.read_text()[-2000:] if log.exists() else ""
    raise SystemExit(f"bench: {what} did not start listening on 127.0.0.1:{port}\n{tail}")


def start(cmd, core, name):
    log = open(work / f"{name}.log", "w")
    p = subprocess.Popen(["taskset", "-c", str(core)] + cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    procs.append(p)
    return p


def cpu_seconds(pid):
    """utime + stime of a process and its children still running (nginx, haproxy workers)."""
    total = 0
    pids = [pid] + [int(x) for x in subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()]
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (FileNotFoundError, IndexError):
            pass
    return total / TICK


def nginx_server(port):
    d = work / f"real{port}"
    (d / "www").mkdir(parents=True)
    (d / "www" / "index.html").write_text("<html><body>TARGET " + "x" * 60 + "</body></html>\n")
    with open(d / "www" / "large", "wb") as f:
        f.truncate(64 << 20)
    (d / "nginx.conf").write_text(f"""daemon off; master_process off; worker_processes 1; user root root;
pid {d}/nginx.pid; error_log {d}/error.log warn;
events {{ worker_connections 16384; }}
http {{ access_log off; keepalive_requests 1000000; sendfile on;
  client_body_temp_path {d}/b; proxy_temp_path {d}/p; fastcgi_temp_path {d}/f; uwsgi_temp_path {d}/u; scgi_temp_path {d}/s;
  server {{ listen 127.0.0.1:{port} backlog=8192 reuseport; root {d}/www; }} }}
""")
    start(["nginx", "-p", str(d), "-c", str(d / "nginx.conf")], 0, f"real{port}")
    wait_port(port, f"real server {port}")


def balancer(name, http=False):
    """Starts one balancer on core 1; returns its process (None for `direct`)."""
    d = work / (name + ("-http" if http else ""))
    d.mkdir()
    port = PORTS[name]
    ups = "\n".join(f"127.0.0.1:{p}" for p in SERVERS)
    if name in ("fulcrum", "fulcrum-base"):
        exe = BASELINE if name == "fulcrum-base" else ROOT / "target" / "release" / "fulcrum"
        conf = d / "fulcrum.toml"
        mode = "mode = \"http\"\n[service.http]\naccess_log = \"off\"\n" if http else ""
        conf.write_text("workers = 1\n[[service]]\nname = \"bench\"\nlisten = \"127.0.0.1:%d\"\nalgorithm = \"round-robin\"\n%s[service.health]\nkind = \"tcp\"\n" % (port, mode)
                        + "".join(f"[[service.server]]\naddress = \"127.0.0.1:{p}\"\n" for p in SERVERS))
        p = start([str(exe), "--log", "warn", "run", str(conf)], 1, name)
    elif name == "haproxy":
        conf = d / "haproxy.cfg"
        conf.write_text(f"""global
  nbthread 1
  maxconn 8000
defaults
  mode {"http" if http else "tcp"}
  {"http-reuse always" if http else ""}
  {"option http-keep-alive" if http else ""}
  timeout http-keep-alive 60s
  timeout connect 2s
  timeout client 60s
  timeout server 60s
listen bench
  bind 127.0.0.1:{port}
  balance roundrobin
""" + "".join(f"  server s{i} 127.0.0.1:{p}\n" for i, p in enumerate(SERVERS)))
        p = start(["haproxy", "-db", "-f", str(conf)], 1, name)
    elif name == "nginx":
        conf = d / "nginx.conf"
        servers = "".join(f"server 127.0.0.1:{p};" for p in SERVERS)
        if http:
            conf.write_text(f"""daemon off; master_process off; worker_processes 1; user root root;
pid {d}/nginx.pid; error_log {d}/error.log warn;
events {{ worker_connections 16384; }}
http {{ access_log off; keepalive_requests 1000000;
  client_body_temp_path {d}/b; proxy_temp_path {d}/p; fastcgi_temp_path {d}/f; uwsgi_temp_path {d}/u; scgi_temp_path {d}/s;
  upstream real {{ {servers} keepalive 256; }}
  server {{ listen 127.0.0.1:{port} backlog=8192;
    location / {{ proxy_pass http://real; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; }} }} }}
""")
        else:
            conf.write_text(f"""load_module /usr/lib/nginx/modules/ngx_stream_module.so;
daemon off; master_process off; worker_processes 1; user root root;
pid {d}/nginx.pid; error_log {d}/error.log warn;
events {{ worker_connections 16384; }}
stream {{ upstream real {{ {servers} }} server {{ listen 127.0.0.1:{port} backlog=8192; proxy_pass real; }} }}
""")
        p = start(["nginx", "-p", str(d), "-c", str(conf)], 1, name)
    elif name == "pen" and not http:
        p = start(["pen", "-f", "-r", "-x", "8000", "-c", "8000", f"127.0.0.1:{port}"] + [f"127.0.0.1:{s}" for s in SERVERS], 1, name)
    else:
        return None
    wait_port(port, name)
    ok = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"http://127.0.0.1:{port}/index.html"], capture_output=True, text=True).stdout
    if ok != "200":
        raise SystemExit(f"bench: {name} answered {ok!r} instead of 200; log in {work}/{name}.log")
    return p


def measure(pid, cmd):
    before = cpu_seconds(pid) if pid else 0
    out = subprocess.run(["taskset", "-c", "0"] + cmd, capture_output=True, text=True, timeout=600).stdout
    return out, (cpu_seconds(pid) - before) if pid else 0.0


def wrk(port, pid):
    out, cpu = measure(pid, ["wrk", "-t1", f"-c{CONC}", f"-d{DURATION}s", "--latency", f"http://127.0.0.1:{port}/index.html"])
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    total = int(re.search(r"(\d+) requests in", out).group(1))
    def lat(q):
        m = re.search(rf"\s{q}%\s+([\d.]+)(us|ms|s)", out)
        v, unit = float(m.group(1)), m.group(2)
        return v / 1000 if unit == "us" else v * 1000 if unit == "s" else v
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"rps": rps, "p50_ms": lat(50), "p99_ms": lat(99), "cpu_s_per_10k": cpu / total * 10000, "requests": total,
            "errors": int(errors.group(1)) if errors else 0}


def ab(port, pid):
    out, cpu = measure(pid, ["ab", "-q", "-r", "-n", str(AB_REQUESTS), "-c", str(CONC), f"http://127.0.0.1:{port}/index.html"])
    rps = float(re.search(r"Requests per second:\s+([\d.]+)", out).group(1))
    failed = int(re.search(r"Failed requests:\s+(\d+)", out).group(1))
    def pct(q):
        return float(re.search(rf"^\s+{q}%\s+(\d+)", out, re.M).group(1))
    return {"rps": rps, "p50_ms": pct(50), "p99_ms": pct(99), "cpu_s_per_10k": cpu / AB_REQUESTS * 10000, "requests": AB_REQUESTS, "errors": failed}


def bulk(port, pid):
    speeds = []
    cpu = 0.0
    for _ in range(BULK_ROUNDS):
        out, c = measure(pid, ["curl", "-s", "-o", "/dev/null", "-w", "%{speed_download} %{size_download}", f"http://127.0.0.1:{port}/large"])
        speed, size = out.split()
        if int(size) != 64 << 20:
            raise SystemExit(f"bench: bulk download through port {port} was {size} bytes")
        speeds.append(float(speed) / 1e6)
        cpu += c
    speeds.sort()
    return {"mb_per_s": speeds[len(speeds) // 2], "cpu_s_per_gb": cpu / (BULK_ROUNDS * 64 / 1024)}


def main():
    for p in list(PORTS.values())[:-1] + SERVERS:
        if not port_free(p):
            raise SystemExit(f"bench: port 127.0.0.1:{p} is taken; stop what uses it and run again")
    for p in SERVERS:
        nginx_server(p)
    results = {"machine": {"cores": os.cpu_count(), "kernel": os.uname().release}, "quick": QUICK, "balancers": {}}
    versions = {
        "haproxy": subprocess.run(["haproxy", "-v"], capture_output=True, text=True).stdout.split("\n")[0],
        "nginx": subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip(),
        "pen": subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "pen"], capture_output=True, text=True).stdout.strip(),
        "fulcrum": subprocess.run([str(ROOT / "target/release/fulcrum"), "--version"], capture_output=True, text=True).stdout.strip(),
    }
    results["versions"] = versions
    base = ["fulcrum-base"] if BASELINE else []
    for name in ["direct", "haproxy", "fulcrum"] + base + ["nginx", "pen"]:
        print(f"bench: {name} ...", flush=True)
        p = balancer(name)
        pid = p.pid if p else None
        port = PORTS[name]
        r = {"bulk": bulk(port, pid)}
        if name != "direct":
            r["wrk_keepalive"] = wrk(port, pid)
            r["ab_per_connection"] = ab(port, pid)
        results["balancers"][name] = r
        if p:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    results["http"] = {}
    for name in ["haproxy", "fulcrum"] + base + ["nginx"]:
        print(f"bench: {name} (http) ...", flush=True)
        p = balancer(name, http=True)
        port = PORTS[name]
        results["http"][name] = {"wrk_keepalive": wrk(port, p.pid), "ab_per_connection": ab(port, p.pid), "bulk": bulk(port, p.pid)}
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    report = render(results)
    print(report)
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "latest.md").write_text(report)
    (out / "latest.json").write_text(json.dumps(results, indent=2))


def render(r):
    b = r["balancers"]
    hap = b["haproxy"]
    lines = ["# Side-by-side L4 benchmark" + (" (quick)" if r["quick"] else ""), "",
             "Each balancer pinned to one core, round robin over four nginx servers; clients on the other core.", "",
             "| balancer | workload | req/s | p50 ms | p99 ms | CPU s / 10k req | req/s vs HAProxy | CPU/req vs HAProxy | errors |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, res in b.items():
        for wl in ["wrk_keepalive", "ab_per_connection"]:
            if wl not in res:
                continue
            x, h = res[wl], hap[wl]
            lines.append(f"| {name} | {wl} | {x['rps']:.0f} | {x['p50_ms']:.2f} | {x['p99_ms']:.2f} | {x['cpu_s_per_10k']:.3f} | "
                         f"{x['rps'] / h['rps']:.2f} | {x['cpu_s_per_10k'] / h['cpu_s_per_10k']:.2f} | {x['errors']} |")
    lines += ["", "| balancer | bulk MB/s (64 MiB, median) | vs direct | CPU s / GB |", "|---|---:|---:|---:|"]
    direct = b["direct"]["bulk"]["mb_per_s"]
    for name, res in b.items():
        x = res["bulk"]
        lines.append(f"| {name} | {x['mb_per_s']:.0f} | {x['mb_per_s'] / direct:.2f} | {x['cpu_s_per_gb']:.3f} |")
    lines += ["", "# Side-by-side HTTP benchmark" + (" (quick)" if r["quick"] else ""), "",
              "HTTP mode, keep-alive to the servers (HAProxy http-reuse always, NGINX upstream keepalive); pen has no HTTP mode.", "",
              "| balancer | workload | req/s | p50 ms | p99 ms | CPU s / 10k req | req/s vs HAProxy | CPU/req vs HAProxy | p99 vs HAProxy | errors |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    hh = r["http"]["haproxy"]
    for name, res in r["http"].items():
        for wl in ["wrk_keepalive", "ab_per_connection"]:
            x, h = res[wl], hh[wl]
            lines.append(f"| {name} | {wl} | {x['rps']:.0f} | {x['p50_ms']:.2f} | {x['p99_ms']:.2f} | {x['cpu_s_per_10k']:.3f} | "
                         f"{x['rps'] / h['rps']:.2f} | {x['cpu_s_per_10k'] / h['cpu_s_per_10k']:.2f} | {x['p99_ms'] / max(h['p99_ms'], 0.001):.2f} | {x['errors']} |")
    lines += ["", "| balancer (http) | bulk MB/s (64 MiB, median) | CPU s / GB |", "|---|---:|---:|"]
    for name, res in r["http"].items():
        lines.append(f"| {name} | {res['bulk']['mb_per_s']:.0f} | {res['bulk']['cpu_s_per_gb']:.3f} |")
    lines += ["", "Versions: " + "; ".join(f"{k}: {v}" for k, v in r["versions"].items()), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    try:
        main()
    finally:
        cleanup()
