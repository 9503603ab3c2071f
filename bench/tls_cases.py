"""The TLS cases of bench/run (see bench/README.md): HAProxy, NGINX and Fulcrum terminating TLS in
HTTP mode in front of the same four nginx servers (plain HTTP/1.1 to them, kept alive), one worker
each on core 1, the clients on core 0, rounds interleaved and run again when another load
disturbed them, as in the TCP and HTTP cases.

- full handshakes, ECDSA P-256 and RSA 2048: `openssl s_time -new`, one connection after another,
  each a full TLS 1.3 handshake and one request; the balancer's CPU per handshake, and the
  handshakes per second one core of it would do at that cost;
- resumed handshakes: `openssl s_time -reuse` (TLS 1.3 session tickets), with the share of
  connections the balancer did resume;
- keep-alive requests over TLS: wrk `-t1 -c50` on https, CPU per 10k requests;
- HTTP/2 over TLS: h2load, 10 connections of 10 streams, CPU per 10k requests;
- bulk: a 64 MiB download over TLS with curl, MB/s and CPU s per GB.

Called by side_by_side.py with that module, whose helpers (start, measured, the clean-round
limits) it uses, so both parts measure the same way.
"""
import re
import statistics
import subprocess
import time

ANCHORS = ("haproxy", "nginx")
NAMES = ("haproxy", "nginx", "fulcrum")
KEYS = {"ecdsa": ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"], "rsa": ["-newkey", "rsa:2048"]}
H2_REQUESTS = 40000


def certificate(sbs, key):
    """A self-signed certificate for 127.0.0.1 of the key type; (cert, key, both in one file)."""
    d = sbs.work / f"cert-{key}"
    d.mkdir(exist_ok=True)
    cert, pem_key, both = d / "cert.pem", d / "key.pem", d / "both.pem"
    subprocess.run(["openssl", "req", "-x509", *KEYS[key], "-nodes", "-keyout", str(pem_key), "-out", str(cert), "-days", "2",
                    "-subj", "/CN=bench", "-addext", "subjectAltName=DNS:bench,IP:127.0.0.1"], check=True, capture_output=True)
    both.write_text(cert.read_text() + pem_key.read_text())
    return cert, pem_key, both


class TlsBalancer:
    """One balancer terminating TLS with one certificate; the interface side_by_side's helpers use."""

    def __init__(self, sbs, name, key, port, files):
        self.sbs, self.name, self.key, self.port, self.files = sbs, name, key, port, files
        self.mode, self.cores, self.proc = "tls", "1", None

    def config(self, d):
        cert, key, both = self.files
        servers = self.sbs.SERVERS
        if self.name == "fulcrum":
            (d / "fulcrum.toml").write_text(
                f'allow_root = true\nworkers = 1\n[[service]]\nname = "bench"\nlisten = "127.0.0.1:{self.port}"\nalgorithm = "round-robin"\n'
                f'client_timeout = "10m"\nserver_timeout = "10m"\nmode = "http"\n'
                f'[service.http]\naccess_log = "off"\nhead_timeout = "10m"\nkeepalive_idle = "10m"\n'
                f'[service.tls]\n[[service.tls.certificate]]\ncert = "{cert}"\nkey = "{key}"\n'
                '[service.health]\nkind = "tcp"\n' + "".join(f'[[service.server]]\naddress = "127.0.0.1:{p}"\n' for p in servers))
            return [str(self.sbs.FULCRUM), "--log", "warn", "run", str(d / "fulcrum.toml")]
        if self.name == "haproxy":
            (d / "haproxy.cfg").write_text(self.sbs.haproxy_config(1, "http", f"127.0.0.1:{self.port} ssl crt {both} alpn h2,http/1.1"))
            return ["haproxy", "-db", "-f", str(d / "haproxy.cfg")]
        if self.name == "nginx":
            ups = "".join(f"server 127.0.0.1:{p};" for p in servers)
            (d / "nginx.conf").write_text(f"""daemon off; master_process off; worker_processes 1; user root root;
pid {d}/nginx.pid; error_log {d}/error.log warn; worker_rlimit_nofile 19000;
events {{ worker_connections 16384; }}
http {{ access_log off; keepalive_requests 1000000; keepalive_timeout 10m;
  client_body_temp_path {d}/b; proxy_temp_path {d}/p; fastcgi_temp_path {d}/f; uwsgi_temp_path {d}/u; scgi_temp_path {d}/s;
  upstream real {{ {ups} keepalive 256; keepalive_timeout 10m; }}
  server {{ listen 127.0.0.1:{self.port} ssl http2 backlog=8192;
    ssl_protocols TLSv1.2 TLSv1.3; ssl_certificate {cert}; ssl_certificate_key {key};
    location / {{ proxy_pass http://real; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; }} }} }}
""")
            return ["nginx", "-p", str(d), "-c", str(d / "nginx.conf")]
        raise ValueError(self.name)

    def start(self):
        d = self.sbs.work / f"{self.name}-tls-{self.key}-{self.port}"
        d.mkdir()
        what = f"{self.name}-tls-{self.key}-{self.port}"
        self.proc = self.sbs.start(self.config(d), self.cores, what)
        self.sbs.wait_port(self.port, what)
        ok = subprocess.run(["curl", "-sk", "-o", "/dev/null", "-w", "%{http_code}", f"https://127.0.0.1:{self.port}/index.html"],
                            capture_output=True, text=True).stdout
        if ok != "200":
            raise SystemExit(f"bench: {self.name} (TLS, {self.key}) answered {ok!r} instead of 200; log in {d}")
        # Every balancer is measured in TLS 1.3 (nginx 1.22 offers only up to 1.2 unless told).
        hello = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{self.port}"], stdin=subprocess.DEVNULL,
                               capture_output=True, text=True).stdout
        if "TLSv1.3" not in hello:
            raise SystemExit(f"bench: {self.name} (TLS, {self.key}) did not negotiate TLS 1.3:\n{hello[-800:]}")

    def pids(self):
        return self.sbs.family(self.proc.pid) if self.proc else []

    def stop(self):
        self.sbs.os.killpg(self.proc.pid, self.sbs.signal.SIGKILL)
        self.proc.wait()

    def url(self, path="/index.html"):
        return f"https://127.0.0.1:{self.port}{path}"


def clean_round(sbs, b, cmd, servers):
    """A client run on core 0 that no other load disturbed (run again up to RETRIES times)."""
    rejected = []
    for _ in range(sbs.RETRIES):
        out, cpu = sbs.measured(b, cmd, servers)
        if cpu["foreign_core0"] <= sbs.FOREIGN_LIMIT and cpu["foreign_core1"] <= sbs.FOREIGN_LIMIT:
            break
        rejected.append({k: round(cpu[k], 3) for k in ("foreign_core0", "foreign_core1")})
        time.sleep(1)
    else:
        cpu["disturbed"] = True
    cpu["rejected"] = rejected
    return out, cpu


def s_time(sbs, b, how, servers, seconds):
    """Handshakes with `openssl s_time` (-new: full, -reuse: resumed), each with one request."""
    cmd = ["openssl", "s_time", "-connect", f"127.0.0.1:{b.port}", how, "-time", str(seconds), "-www", "/index.html"]
    out, cpu = clean_round(sbs, b, cmd, servers)
    counts = re.findall(r"(\d+) connections in [\d.]+ real seconds", out)
    if not counts:
        raise SystemExit(f"bench: s_time against {b.name} printed no count:\n{out[-1500:]}")
    n = int(counts[-1])
    # s_time prints one character per connection on a line of its own: 'r' when the session was
    # resumed, '*' when it was not.
    marks = "".join(re.findall(r"^[r*t3]+$", out, re.M))
    resumed = marks.count("r")
    return {"handshakes": n, "cpu_ms_per_handshake": cpu["balancer_cpu_s"] / n * 1000,
            "handshakes_per_core_s": n / max(cpu["balancer_cpu_s"], 1e-9), "resumed_share": resumed / n if how == "-reuse" else None,
            "rejected": cpu["rejected"], "disturbed": cpu.get("disturbed", False)}


def keep_alive(sbs, b, servers):
    cmd = ["wrk", "-t1", f"-c{sbs.CONC}", f"-d{sbs.DURATION}s", "--latency", b.url()]
    out, cpu = clean_round(sbs, b, cmd, servers)
    r = sbs.parse_wrk(out)
    r.update({"cpu_s_per_10k": cpu["balancer_cpu_s"] / r["requests"] * 10000, "rejected": cpu["rejected"], "disturbed": cpu.get("disturbed", False)})
    return r


def h2(sbs, b, servers):
    cmd = ["h2load", "-n", str(H2_REQUESTS), "-c", "10", "-m", "10", b.url()]
    out, cpu = clean_round(sbs, b, cmd, servers)
    done = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored", out)
    rps = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    proto = re.search(r"Application protocol: (\S+)", out)
    if not done or not rps or (proto and proto.group(1) != "h2"):
        raise SystemExit(f"bench: h2load against {b.name}:\n{out[-1500:]}")
    n = int(done.group(1))
    return {"requests": n, "failed": int(done.group(3)) + int(done.group(4)), "rps": float(rps.group(1)),
            "cpu_s_per_10k": cpu["balancer_cpu_s"] / max(n, 1) * 10000, "rejected": cpu["rejected"], "disturbed": cpu.get("disturbed", False)}


def bulk(sbs, b, servers):
    speeds, cpu = [], 0.0
    for _ in range(sbs.BULK_ROUNDS):
        out, c = sbs.measured(b, ["curl", "-sk", "-o", "/dev/null", "-w", "%{speed_download} %{size_download}", b.url("/large")], servers)
        speed, size = out.split()
        if int(size) != 64 << 20:
            raise SystemExit(f"bench: TLS bulk download through {b.name} was {size} bytes")
        speeds.append(float(speed) / 1e6)
        cpu += c["balancer_cpu_s"]
    return {"mb_per_s": statistics.median(speeds), "cpu_s_per_gb": cpu / (sbs.BULK_ROUNDS * 64 / 1024)}


def run(sbs, servers, ports):
    """Every TLS case, interleaved rounds; the results by balancer."""
    files = {k: certificate(sbs, k) for k in KEYS}
    balancers = {(n, k): TlsBalancer(sbs, n, k, next(ports), files[k]) for k in KEYS for n in NAMES}
    for b in balancers.values():
        b.start()
    seconds = 2 if sbs.QUICK else 4
    for b in balancers.values():
        sbs.measured(b, ["openssl", "s_time", "-connect", f"127.0.0.1:{b.port}", "-new", "-time", "1", "-www", "/index.html"], servers)
    rounds = {key: [] for key in [(n, c) for n in NAMES for c in ("full_ecdsa", "full_rsa", "resumed", "keep_alive", "h2")]}
    for r in range(sbs.ROUNDS):
        names = NAMES[r % len(NAMES):] + NAMES[: r % len(NAMES)]
        for n in names:
            ecdsa, rsa = balancers[(n, "ecdsa")], balancers[(n, "rsa")]
            rounds[(n, "full_ecdsa")].append(s_time(sbs, ecdsa, "-new", servers, seconds))
            rounds[(n, "full_rsa")].append(s_time(sbs, rsa, "-new", servers, seconds))
            rounds[(n, "resumed")].append(s_time(sbs, ecdsa, "-reuse", servers, seconds))
            rounds[(n, "keep_alive")].append(keep_alive(sbs, ecdsa, servers))
            rounds[(n, "h2")].append(h2(sbs, ecdsa, servers))
        sbs.say(f"TLS round {r + 1}/{sbs.ROUNDS} done")
    results = {}
    for n in NAMES:
        res = {}
        for case in ("full_ecdsa", "full_rsa", "resumed"):
            rs = rounds[(n, case)]
            res[case] = {k: statistics.median(x[k] for x in rs) for k in ("cpu_ms_per_handshake", "handshakes_per_core_s", "handshakes")}
            if case == "resumed":
                res[case]["resumed_share"] = statistics.median(x["resumed_share"] for x in rs)
            res[case]["rounds"] = rs
        for case, keys in (("keep_alive", ("cpu_s_per_10k", "rps", "p50_ms", "p99_ms")), ("h2", ("cpu_s_per_10k", "rps"))):
            rs = rounds[(n, case)]
            res[case] = {k: statistics.median(x[k] for x in rs) for k in keys}
            res[case]["errors"] = sum(x.get("errors", x.get("failed", 0)) for x in rs)
            res[case]["rounds"] = rs
        res["bulk"] = bulk(sbs, balancers[(n, "ecdsa")], servers)
        results[n] = res
    for b in balancers.values():
        b.stop()
    return results


def render(r, versions):
    if not r:
        return []
    def best(case, key, low=True):
        values = [r[n][case][key] for n in ANCHORS if n in r]
        return min(values) if low else max(values)

    def cell(case, key, fmt):
        return lambda n: f"{fmt.format(r[n][case][key])} ({r[n][case][key] / best(case, key):.2f}x)"

    lines = ["## TLS (HTTP mode, terminating)", "",
             f"HAProxy and NGINX with {versions.get('openssl', 'OpenSSL')}, Fulcrum with rustls (ring); TLS 1.3, one worker on core 1, "
             "plain HTTP/1.1 kept alive to the same four servers. Handshakes: `openssl s_time`, one connection after another, each "
             "a handshake and one request (`-new` full, `-reuse` resumed with a session ticket). Keep-alive: wrk over https. "
             f"HTTP/2: h2load, {H2_REQUESTS} requests on 10 connections of 10 streams. CPU is the balancer's own; ratios are to "
             "the best of HAProxy and NGINX.", "",
             "| balancer | full handshake ECDSA P-256, CPU ms | full handshake RSA 2048, CPU ms | resumed handshake, CPU ms (resumed) "
             "| keep-alive CPU / 10k | keep-alive p99 ms | HTTP/2 CPU / 10k | HTTP/2 req/s | bulk MB/s, CPU s / GB | errors |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for n in r:
        x = r[n]
        lines.append(
            f"| {n} | {cell('full_ecdsa', 'cpu_ms_per_handshake', '{:.3f}')(n)} ({x['full_ecdsa']['handshakes_per_core_s']:.0f}/s a core) "
            f"| {cell('full_rsa', 'cpu_ms_per_handshake', '{:.3f}')(n)} ({x['full_rsa']['handshakes_per_core_s']:.0f}/s a core) "
            f"| {cell('resumed', 'cpu_ms_per_handshake', '{:.3f}')(n)} ({x['resumed']['resumed_share']:.0%}) "
            f"| {cell('keep_alive', 'cpu_s_per_10k', '{:.3f}')(n)} | {x['keep_alive']['p99_ms']:.2f} "
            f"| {cell('h2', 'cpu_s_per_10k', '{:.3f}')(n)} | {x['h2']['rps']:.0f} "
            f"| {x['bulk']['mb_per_s']:.0f}, {x['bulk']['cpu_s_per_gb']:.3f} | {x['keep_alive']['errors'] + x['h2']['errors']} |")
    lines.append("")
    return lines
