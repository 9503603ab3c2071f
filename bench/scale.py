"""How Fulcrum's costs grow as the work grows (see bench/README.md, "Scale curves").

Curves (--curve NAME[,NAME]; all by default):
- config: resident memory, the time one weight edit takes through the API, and a full reload
  (POST /api/reload of the file with one weight changed), against config size: 10, 100, 1,000
  and 10,000 TCP services of 10 servers, and the same services with 1 server each, which splits
  the memory into a share per service and a share per server. Grows: the config; flat (goal):
  the edit's time, and memory per server and per service.
- cpu: Fulcrum's own CPU per 10,000 HTTP keep-alive requests against pool size (4, 64, 1,024,
  10,000 servers), for every algorithm HTTP mode serves; the Maglev table's build time printed
  beside it (crates/fulcrum/benches/maglev.rs). Grows: the pool; flat (goal): CPU per request.
- idle: resident memory against idle connections (each made one request), TCP and HTTP,
  Fulcrum beside HAProxy and NGINX, client addresses spread over 127.0.0.0/8. Grows: the
  connections; flat: memory per connection.
- latency: p99 against concurrent clients (100, 1,000, 10,000) at one fixed request rate, HTTP
  keep-alive, Fulcrum beside HAProxy and NGINX (h2load --rps, per-request log). Grows: clients;
  flat (goal): p99.

Real servers: nginx. For the CPU curve a pool of N servers is N distinct addresses on
127.0.0.0/8, served by four nginx processes that listen on all addresses (a port each): the
balancer keeps N servers' state, tables and connections; the servers behind are fewer, which
does not change the balancer's work per request.

Every loop is bounded in count and time. --quick runs small sizes to show the curves work.
"""
import http.client
import json
import os
import re
import resource
import selectors
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import svgplot  # noqa: E402
from procs import cleanup_on_exit, cpu_seconds, exchange, family, rss_bytes, settled_rss  # noqa: E402
from procs import start as procs_start, wait_port as procs_wait_port  # noqa: E402
import anchors  # noqa: E402


def arg(name, default):
    if name in sys.argv:
        return sys.argv[sys.argv.index(name) + 1]
    return default


QUICK = "--quick" in sys.argv
CURVES = arg("--curve", "config,cpu,idle,latency").split(",")
SAVE = arg("--save", None)
ROOT = Path(__file__).resolve().parent.parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
FULCRUM = Path(os.environ.get("FULCRUM_BIN", TARGET / "release" / "fulcrum"))
RESULTS = ROOT / "bench" / "results"
ADMIN = 19390
REAL = [19381, 19382, 19383, 19384]
BALANCER_PORT = 19400
REQUEST = b"GET /index.html HTTP/1.1\r\nHost: bench\r\n\r\n"

CONFIG_SIZES = [int(n) for n in arg("--services", "10,100" if QUICK else "10,100,1000,10000").split(",")]
POOL_SIZES = [4, 1024] if QUICK else [4, 64, 1024, 10000]
IDLE_POINTS = [500, 2000] if QUICK else [1000, 10000, 30000, 100000]
CLIENTS = [50, 200] if QUICK else [100, 1000, 10000]
RATE = 500 if QUICK else 2000            # requests per second, all clients together
LATENCY_S = 3 if QUICK else 10
CPU_REQUESTS = 20000 if QUICK else 200000
EDITS = 5 if QUICK else 15
RELOADS = 2 if QUICK else 3
ALGORITHMS = ["round-robin", "static-rr", "random", "least-conn", "source-hash", "passive-ratio", "p2c-ewma", "uri-hash", "header-hash", "cookie"]

work = Path(tempfile.mkdtemp(prefix="fulcrum-scale-"))
LIMIT = 0  # the descriptor limit in force, set by main()
procs = []


def say(*a):
    print("scale:", *a, flush=True)


cleanup = cleanup_on_exit(procs, work)


def raise_nofile():
    """The descriptor limit as high as this process may set it (the hard limit, or higher as
    root with CAP_SYS_RESOURCE); children inherit it. Returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for want in (1_048_576, 400_000, hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, want))
            return want
        except (ValueError, OSError):
            continue
    return soft


def start(cmd, name, cores=None):
    return procs_start(procs, work, cmd, name, cores)


def stop(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait()
    procs.remove(p)


def wait_port(port, what, limit=30.0, host="127.0.0.1"):
    procs_wait_port(port, what, work, limit, host)


def api(method, path, body=None, timeout=300):
    c = http.client.HTTPConnection("127.0.0.1", ADMIN, timeout=timeout)
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read().decode()
    c.close()
    return r.status, data


def wait_ready(p, what, limit):
    deadline = time.time() + limit
    while time.time() < deadline:
        if p.poll() is not None:
            raise SystemExit(f"scale: {what} exited; log in {work}")
        try:
            if api("GET", "/ready", timeout=5)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"scale: {what} not ready within {limit} s; log in {work}")


def real_servers(any_address=False):
    """Four nginx real servers (one process each) serving a small /index.html."""
    out = []
    for port in REAL:
        d = work / f"real{port}"
        (d / "www").mkdir(parents=True, exist_ok=True)
        (d / "www" / "index.html").write_text("<html><body>TARGET " + "x" * 60 + "</body></html>\n")
        listen = f"{port}" if any_address else f"127.0.0.1:{port}"
        (d / "nginx.conf").write_text(f"""daemon off; master_process off; worker_processes 1; user root root;
pid {d}/nginx.pid; error_log {d}/error.log warn; worker_rlimit_nofile {LIMIT};
events {{ worker_connections {LIMIT - 100}; }}
http {{ access_log off; keepalive_requests 10000000; keepalive_timeout 600s;
  client_body_temp_path {d}/b; proxy_temp_path {d}/p; fastcgi_temp_path {d}/f; uwsgi_temp_path {d}/u; scgi_temp_path {d}/s;
  server {{ listen {listen} backlog=8192 reuseport; root {d}/www; }} }}
""")
        out.append(start(["nginx", "-p", str(d), "-c", str(d / "nginx.conf")], f"real{port}", "0"))
        wait_port(port, f"real{port}")
    return out


# ---------------------------------------------------------------- config size


def config_text(services, servers, weight=1):
    out = ["allow_root = true", "", "[admin]", f'listen = "127.0.0.1:{ADMIN}"', ""]
    for i in range(services):
        out += ["[[service]]", f'name = "s{i}"', f'listen = "127.0.0.1:{20000 + i}"', 'mode = "tcp"',
                # Checks run (their tasks and state count), once a minute so their traffic does
                # not weigh on the edits timed.
                "[service.health]", 'kind = "tcp"', 'interval = "60s"']
        for j in range(servers):
            out += ["[[service.server]]", f'address = "{server_address(i, j)}:80"']
            if i == 0 and j == 0:
                out.append(f"weight = {weight}")
        out.append("")
    return "\n".join(out)


def server_address(i, j):
    """Server j of service i: an address of its own on 127.0.0.0/8."""
    return f"127.{1 + i // 250}.{i % 250}.{1 + j}"


def config_point(services, servers):
    path = work / f"config-{services}x{servers}.toml"
    path.write_text(config_text(services, servers))
    p = start([str(FULCRUM), "--log", "warn", "run", str(path)], f"config-{services}x{servers}")
    try:
        t0 = time.time()
        wait_ready(p, f"fulcrum with {services} x {servers}", 600)
        started = time.time() - t0
        rss = settled_rss([p.pid], 60)
        reloads = []
        for n in range(RELOADS):
            path.write_text(config_text(services, servers, weight=2 + n % 2))
            t = time.perf_counter()
            status, body = api("POST", "/api/reload")
            reloads.append((time.perf_counter() - t) * 1000)
            if status != 200:
                raise SystemExit(f"scale: reload refused: {status} {body[:300]}")
        edits = []
        for n in range(EDITS):
            i = (n * 37) % services
            t = time.perf_counter()
            status, body = api("POST", f"/api/services/s{i}/servers/{server_address(i, 0)}:80/weight", {"weight": 2 + n % 2})
            edits.append((time.perf_counter() - t) * 1000)
            if status != 200:
                raise SystemExit(f"scale: edit refused: {status} {body[:300]}")
        after = settled_rss([p.pid], 30)
    finally:
        stop(p)
    r = {"services": services, "servers_per_service": servers, "servers": services * servers, "start_s": round(started, 2),
         "rss_mib": rss / 2**20, "rss_after_edits_mib": after / 2**20,
         "edit_ms_median": statistics.median(edits), "edit_ms_max": max(edits), "edit_ms": edits,
         "reload_ms_median": statistics.median(reloads), "reload_ms": reloads}
    say(f"config {services} x {servers}: RSS {r['rss_mib']:.1f} MiB, edit {r['edit_ms_median']:.1f} ms, reload {r['reload_ms_median']:.0f} ms, up in {started:.1f} s")
    return r


def curve_config():
    base = config_point(1, 1)
    rows = {10: [], 1: []}
    capped = None
    for n in CONFIG_SIZES:
        # Fulcrum refuses a config whose own sockets leave room for fewer than 16 clients (two
        # descriptors a listener, one a checked server, 128 kept aside: docs/hardening.md); a
        # size it would refuse, or whose listeners and first checks leave the bench less than a
        # thousand, is left out.
        if 2 * n + 10 * n + 128 + 2 * 16 > LIMIT or 2 * n > LIMIT - 1000:
            capped = f"{n} services need more than the descriptor limit {LIMIT} allows (two a listener, one a checked server; not raised: no CAP_SYS_RESOURCE)"
            say(f"config: {capped}; left out")
            continue
        for servers in (10, 1):
            rows[servers].append(config_point(n, servers))
    # RSS(n services of 10) - base = n (S + 10 P); RSS(n of 1) - base = n (S + P).
    for ten, one in zip(rows[10], rows[1]):
        n = ten["services"]
        per_server = (ten["rss_mib"] - one["rss_mib"]) * 1024 / (9 * n)
        per_service = (one["rss_mib"] - base["rss_mib"]) * 1024 / n - per_server
        ten["kib_per_server"], ten["kib_per_service"] = per_server, per_service
        ten["kib_per_server_all_in"] = (ten["rss_mib"] - base["rss_mib"]) * 1024 / ten["servers"]
    heap = config_heap()
    return {"base": base, "ten_servers": rows[10], "one_server": rows[1], "heap": heap, "capped": capped,
            "note": "TCP services on 127.0.0.1, each server an address of its own on 127.0.0.0/8 where nothing listens; "
                    "TCP checks once a minute; RSS from smaps_rollup once settled; the edit is one server's weight "
                    "through POST /api/services/S/servers/A/weight, the reload POST /api/reload of the file with one "
                    "weight changed, both timed from the client over loopback."}


def config_heap():
    """The heap's breakdown at 1,000 x 10 (or 100 x 10 with --quick) and the 24 h history's share,
    from the counting allocator of crates/fulcrum/benches/config_size.rs."""
    n = "100" if QUICK else "1000"
    out = cargo_bench("config_size", [n, "10"])
    return json.loads(out.strip().splitlines()[-1]) if out else None


def cargo_bench(name, args):
    """Runs benches/NAME.rs: the release build's binary when there is one newer than the
    `fulcrum` binary measured (bench/scale builds both), else through cargo bench."""
    # The bench binary built beside the `fulcrum` measured (release, or another profile's directory).
    built = sorted((p for p in (FULCRUM.parent / "deps").glob(f"{name}-*") if p.suffix == "" and os.access(p, os.X_OK)),
                   key=lambda p: p.stat().st_mtime)
    cmd = [str(built[-1])] if built else ["cargo", "bench", "--locked", "-q", "-p", "fulcrum", "--bench", name, "--"]
    try:
        r = subprocess.run(cmd + args, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    except subprocess.TimeoutExpired:
        say(f"bench {name} took more than 30 minutes; left out")
        return None
    if r.returncode != 0:
        say(f"bench {name} failed: {r.stderr[-1500:]}")
        return None
    print(r.stdout, end="", flush=True)
    return r.stdout


def charts_config(c, name):
    ten, one = c["ten_servers"], c["one_server"]
    svg = svgplot.chart(
        "Resident memory against config size", "grows: services (10 servers each, or 1); flat (goal): KiB per server < 4, per service < 32",
        "services", "RSS, MiB",
        {"10 servers per service": [(r["services"], r["rss_mib"]) for r in ten], "1 server per service": [(r["services"], r["rss_mib"]) for r in one]})
    (RESULTS / f"{name}-config-memory.svg").write_text(svg)
    svg = svgplot.chart(
        "Apply time against config size", "grows: services (x 10 servers); flat (goal): one edit's time; a full reload grows with the file",
        "services", "ms (median)",
        {"one weight edit": [(r["services"], r["edit_ms_median"]) for r in ten], "full reload": [(r["services"], r["reload_ms_median"]) for r in ten]})
    (RESULTS / f"{name}-config-apply.svg").write_text(svg)


# ---------------------------------------------------------------- per-request CPU


def pool_config(algorithm, servers, port):
    out = ["allow_root = true", "[[service]]", 'name = "pool"', f'listen = "127.0.0.1:{port}"', 'mode = "http"', f'algorithm = "{algorithm}"']
    out += ["[service.http]", 'access_log = "off"']
    if algorithm == "header-hash":
        out.append('hash_header = "x-user"')
    out += ["[service.health]", 'kind = "none"']
    for k in range(servers):
        out += ["[[service.server]]", f'address = "127.1.{k // 250}.{k % 250 + 1}:{REAL[k % 4]}"']
    return "\n".join(out) + "\n"


def accepted(path):
    return subprocess.run([str(FULCRUM), "check", str(path)], capture_output=True).returncode == 0


def h2load_requests(port, n, clients=50):
    r = subprocess.run(["taskset", "-c", "0", "h2load", "--h1", "-t1", f"-c{clients}", f"-n{n}", "-H", "x-user: u1",
                        f"http://127.0.0.1:{port}/index.html"], capture_output=True, text=True, timeout=600)
    m = re.search(r"requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed", r.stdout)
    if not m or int(m.group(3)) != n:
        raise SystemExit(f"scale: h2load did not complete its requests:\n{r.stdout[-1500:]}{r.stderr[-500:]}")
    return int(m.group(3))


def curve_cpu():
    reals = real_servers(any_address=True)
    out = {"rows": [], "note": f"HTTP keep-alive, h2load -c50 on core 0, Fulcrum on core 1 with one worker, {CPU_REQUESTS} requests per point "
                               "after a warm-up; health checks off so only requests are counted; the pool's N servers are N addresses "
                               "on 127.0.0.0/8 in front of four nginx processes."}
    try:
        for algorithm in ALGORITHMS:
            for n in POOL_SIZES:
                path = work / f"pool-{algorithm}-{n}.toml"
                path.write_text(pool_config(algorithm, n, BALANCER_PORT))
                if not accepted(path):
                    say(f"cpu: {algorithm} not accepted by this build; left out")
                    break
                p = start([str(FULCRUM), "--log", "warn", "run", str(path)], f"pool-{algorithm}-{n}", "1")
                try:
                    wait_port(BALANCER_PORT, f"fulcrum {algorithm} {n}", 120)
                    h2load_requests(BALANCER_PORT, min(CPU_REQUESTS // 4, 20000))
                    c0 = cpu_seconds([p.pid])
                    done = h2load_requests(BALANCER_PORT, CPU_REQUESTS)
                    cpu = cpu_seconds([p.pid]) - c0
                finally:
                    stop(p)
                row = {"algorithm": algorithm, "servers": n, "requests": done, "cpu_s_per_10k": cpu / done * 10000}
                out["rows"].append(row)
                say(f"cpu {algorithm} {n} servers: {row['cpu_s_per_10k']:.3f} s per 10k")
    finally:
        for r in reals:
            stop(r)
    bench = cargo_bench("maglev", [str(n) for n in POOL_SIZES])
    out["maglev"] = json.loads(bench.strip().splitlines()[-1]) if bench else None
    return out


def charts_cpu(c, name):
    series = {}
    for r in c["rows"]:
        series.setdefault(r["algorithm"], []).append((r["servers"], r["cpu_s_per_10k"]))
    maglev = "; Maglev build " + ", ".join(f"{m['servers']}: {m['build_ms']:.1f} ms" for m in c["maglev"]) if c.get("maglev") else ""
    svg = svgplot.chart("Fulcrum CPU per request against pool size", f"grows: servers in the pool; flat (goal): CPU per request{maglev}",
                        "servers in the pool", "CPU s per 10k requests", series)
    (RESULTS / f"{name}-cpu.svg").write_text(svg)


# ---------------------------------------------------------------- idle connections


def balancer_config(name, mode, port, d, conns):
    ups = REAL
    http = mode == "http"
    if name == "fulcrum":
        text = (f'allow_root = true\nworkers = 1\n[[service]]\nname = "idle"\nlisten = "127.0.0.1:{port}"\nclient_timeout = "10m"\n'
                f'server_timeout = "10m"\n')
        if http:
            text += 'mode = "http"\n[service.http]\naccess_log = "off"\nhead_timeout = "10m"\nkeepalive_idle = "10m"\n'
        text += '[service.health]\nkind = "tcp"\n' + "".join(f'[[service.server]]\naddress = "127.0.0.1:{p}"\n' for p in ups)
        (d / "fulcrum.toml").write_text(text)
        return [str(FULCRUM), "--log", "warn", "run", str(d / "fulcrum.toml")]
    if name == "haproxy":
        (d / "haproxy.cfg").write_text(anchors.haproxy_config(1, mode, f"127.0.0.1:{port}", ups, min(conns + 1000, (LIMIT - 200) // 2), "idle"))
        return ["haproxy", "-db", "-f", str(d / "haproxy.cfg")]
    servers = "".join(f"server 127.0.0.1:{p};" for p in ups)
    head = f"""daemon off; master_process off; worker_processes 1; user root root;
pid {d}/nginx.pid; error_log {d}/error.log warn; worker_rlimit_nofile {min(LIMIT, conns * 2 + 1000)};
events {{ worker_connections {min(LIMIT, conns * 2 + 1000) - 100}; }}
"""
    if http:
        body = f"""http {{ access_log off; keepalive_requests 10000000; keepalive_timeout 10m;
  client_body_temp_path {d}/b; proxy_temp_path {d}/p; fastcgi_temp_path {d}/f; uwsgi_temp_path {d}/u; scgi_temp_path {d}/s;
  upstream real {{ {servers} keepalive 256; keepalive_timeout 10m; }}
  server {{ listen 127.0.0.1:{port} backlog=8192;
    location / {{ proxy_pass http://real; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; }} }} }}
"""
    else:
        head = "load_module /usr/lib/nginx/modules/ngx_stream_module.so;\n" + head
        body = f"stream {{ upstream real {{ {servers} }} server {{ listen 127.0.0.1:{port} backlog=8192; proxy_pass real; proxy_timeout 10m; }} }}\n"
    (d / "nginx.conf").write_text(head + body)
    return ["nginx", "-p", str(d), "-c", str(d / "nginx.conf")]


def client_address(k):
    """Client k's source address: spread over 127.0.0.0/8 (not 127.0.0.1), so no source address
    runs out of ports."""
    return f"127.{10 + k // 62500}.{(k // 250) % 250}.{k % 250 + 1}"


def idle_run(name, mode, points, port):
    d = work / f"idle-{name}-{mode}"
    d.mkdir()
    p = start(balancer_config(name, mode, port, d, points[-1]), f"idle-{name}-{mode}", "1")
    wait_port(port, f"{name} {mode}")
    rows = []
    socks = []
    sel = selectors.DefaultSelector()
    try:
        exchange([socket.create_connection(("127.0.0.1", port))], sel, f"{name} warm-up", REQUEST, 60)
        before = settled_rss(family(p.pid))
        for target in points:
            while len(socks) < target:
                wave = []
                for _ in range(min(500, target - len(socks))):
                    s = socket.socket()
                    s.bind((client_address(len(socks) + len(wave)), 0))
                    s.connect(("127.0.0.1", port))
                    wave.append(s)
                exchange(wave, sel, f"{name} {mode} idle", REQUEST, 60)
                socks += wave
            rss = settled_rss(family(p.pid), 40)
            rows.append({"connections": target, "rss_mib": rss / 2**20, "kib_per_connection": (rss - before) / target / 1024})
            say(f"idle {name} {mode} {target}: {rows[-1]['rss_mib']:.1f} MiB, {rows[-1]['kib_per_connection']:.2f} KiB per connection")
        # Alive afterwards: a sample answers again.
        exchange(socks[:: max(1, len(socks) // 100)], sel, f"{name} {mode} idle, afterwards", REQUEST, 60)
    finally:
        for s in socks:
            s.close()
        stop(p)
    return {"rss_before_mib": before / 2**20, "rows": rows}


def curve_idle():
    limit = LIMIT
    out = {"descriptor_limit": limit, "runs": {}}
    # A TCP connection holds two descriptors in the balancer, and Fulcrum's connection budget
    # counts two for an HTTP one too (docs/hardening.md: a client may need a server connection of
    # its own), so both modes stop where two a connection fit; the client holds one each.
    caps = {"tcp": (limit - 1000) // 2, "http": (limit - 1000) // 2}
    reals = real_servers()
    port = BALANCER_PORT
    try:
        for mode in ("tcp", "http"):
            points = [n for n in IDLE_POINTS if n <= caps[mode]]
            if len(points) < len(IDLE_POINTS):
                points.append(caps[mode] // 1000 * 1000)
                out["capped"] = f"descriptor limit {limit} (not raised: no CAP_SYS_RESOURCE): TCP up to {points[-1] if mode == 'tcp' else caps['tcp'] // 1000 * 1000}, HTTP up to {caps['http'] // 1000 * 1000} connections"
                say(f"idle: {out['capped']}")
            for name in ("fulcrum", "haproxy", "nginx"):
                port += 1
                out["runs"][f"{name} {mode}"] = idle_run(name, mode, points, port)
    finally:
        for r in reals:
            stop(r)
    return out


def charts_idle(c, name):
    for mode in ("tcp", "http"):
        series = {k.split()[0]: [(r["connections"], r["rss_mib"]) for r in v["rows"]] for k, v in c["runs"].items() if k.endswith(mode)}
        svg = svgplot.chart(f"Resident memory against idle connections, {mode.upper()}", "grows: idle keep-alive connections (one request each); flat: memory per connection",
                            "idle connections", "RSS, MiB", series)
        (RESULTS / f"{name}-idle-{mode}.svg").write_text(svg)


# ---------------------------------------------------------------- p99 against clients


def latency_point(port, clients):
    log = work / f"h2load-{port}-{clients}.log"
    rps = RATE / clients
    cmd = ["taskset", "-c", "0", "h2load", "--h1", "-t1", f"-c{clients}", f"--rps={rps:.4f}", f"-D{LATENCY_S}", "--warm-up-time=2",
           f"--log-file={log}", f"http://127.0.0.1:{port}/index.html"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=LATENCY_S + 120)
    lat, failed = [], 0
    for line in log.read_text().splitlines() if log.exists() else []:
        f = line.split("\t")
        if len(f) >= 3:
            if f[1] == "-1":
                failed += 1
            else:
                lat.append(int(f[2]) / 1000)
    if not lat:
        raise SystemExit(f"scale: h2load measured nothing:\n{r.stdout[-1500:]}{r.stderr[-500:]}")
    lat.sort()
    return {"clients": clients, "rate": RATE, "requests": len(lat), "failed": failed, "achieved_rps": len(lat) / LATENCY_S,
            "p50_ms": lat[len(lat) // 2], "p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))]}


def curve_latency():
    limit = LIMIT
    # Two descriptors a client, as the idle curve (Fulcrum's budget counts two in every mode).
    cap = (limit - 1000) // 2
    clients = [c for c in CLIENTS if c <= cap]
    if len(clients) < len(CLIENTS):
        clients.append(cap // 1000 * 1000)
    out = {"rate": RATE, "duration_s": LATENCY_S, "descriptor_limit": limit, "runs": {},
           "note": "HTTP keep-alive; h2load on core 0 with --rps per client so all clients together ask RATE requests a second, "
                   "connections opened during a 2 s warm-up; balancers on core 1, one worker each."}
    reals = real_servers()
    port = BALANCER_PORT + 50
    try:
        for name in ("fulcrum", "haproxy", "nginx"):
            port += 1
            d = work / f"lat-{name}"
            d.mkdir()
            p = start(balancer_config(name, "http", port, d, max(clients)), f"lat-{name}", "1")
            try:
                wait_port(port, f"{name} http")
                rows = []
                for c in clients:
                    rows.append(latency_point(port, c))
                    say(f"latency {name} {c} clients: p99 {rows[-1]['p99_ms']:.2f} ms at {rows[-1]['achieved_rps']:.0f} req/s")
                out["runs"][name] = rows
            finally:
                stop(p)
    finally:
        for r in reals:
            stop(r)
    return out


def charts_latency(c, name):
    series = {k: [(r["clients"], r["p99_ms"]) for r in v] for k, v in c["runs"].items()}
    svg = svgplot.chart(f"p99 against concurrent clients at {c['rate']} requests/s", "grows: clients (each slower, the total rate fixed); flat (goal): p99",
                        "concurrent clients", "p99, ms", series)
    (RESULTS / f"{name}-latency.svg").write_text(svg)


# ---------------------------------------------------------------- report


def report_md(results, name):
    lines = [f"# Scale curves ({results['machine']['date']}, fulcrum {results['commit']}{', --quick' if results.get('quick') else ''})", ""]
    c = results.get("curves", {})
    if "config" in c:
        cfg = c["config"]
        lines += ["## Memory and apply time against config size", "", f"![memory]({name}-config-memory.svg) ![apply]({name}-config-apply.svg)", "",
                  "| services x servers | RSS MiB | KiB per server | KiB per service | one edit, ms (median / max) | full reload, ms | start, s |", "|---|---|---|---|---|---|---|"]
        for r in cfg["ten_servers"]:
            lines.append(f"| {r['services']} x 10 | {r['rss_mib']:.1f} | {r['kib_per_server']:.2f} | {r['kib_per_service']:.2f} | {r['edit_ms_median']:.1f} / {r['edit_ms_max']:.1f} | {r['reload_ms_median']:.0f} | {r['start_s']:.1f} |")
        lines += ["", cfg["note"], ""]
        if cfg.get("heap"):
            h = cfg["heap"]
            lines += [f"Heap by the counting allocator ({h['services']} x {h['servers_per_service']}): parsed config {h['config_kib_per_server']:.2f} KiB per server, "
                      f"first generation {h['generation_kib_per_server']:.2f}, the running app {h['app_kib_per_server']:.2f} ({h['app_kib_per_service']:.1f} per service); "
                      f"the traffic history once it holds 24 h: {h['history_24h_kib_per_server']:.1f} KiB per server more (taken as it fills: none at start).", ""]
    if "cpu" in c:
        cpu = c["cpu"]
        lines += ["## CPU per request against pool size", "", f"![cpu]({name}-cpu.svg)", "", "| algorithm | " + " | ".join(str(n) for n in sorted({r['servers'] for r in cpu['rows']})) + " servers |"]
        sizes = sorted({r["servers"] for r in cpu["rows"]})
        lines.append("|---|" + "---|" * len(sizes))
        for a in dict.fromkeys(r["algorithm"] for r in cpu["rows"]):
            by = {r["servers"]: r["cpu_s_per_10k"] for r in cpu["rows"] if r["algorithm"] == a}
            lines.append(f"| {a} | " + " | ".join(f"{by[n]:.3f}" if n in by else "" for n in sizes) + " |")
        if cpu.get("maglev"):
            lines += ["", "Maglev table build (65,537 slots, on the balancer update thread): " + ", ".join(f"{m['servers']} servers {m['build_ms']:.1f} ms" for m in cpu["maglev"])]
        lines += ["", "CPU s per 10,000 requests. " + cpu["note"], ""]
    if "idle" in c:
        idle = c["idle"]
        lines += ["## Memory against idle connections", "", f"![tcp]({name}-idle-tcp.svg) ![http]({name}-idle-http.svg)", ""]
        if idle.get("capped"):
            lines += [f"Capped: {idle['capped']}.", ""]
        lines += ["| balancer | connections | RSS MiB | KiB per connection |", "|---|---|---|---|"]
        for k, v in idle["runs"].items():
            for r in v["rows"]:
                lines.append(f"| {k} | {r['connections']} | {r['rss_mib']:.1f} | {r['kib_per_connection']:.2f} |")
        lines.append("")
    if "latency" in c:
        lat = c["latency"]
        lines += ["## p99 against concurrent clients", "", f"![latency]({name}-latency.svg)", "", "| balancer | clients | req/s | p50 ms | p99 ms | failed |", "|---|---|---|---|---|---|"]
        for k, v in lat["runs"].items():
            for r in v:
                lines.append(f"| {k} | {r['clients']} | {r['achieved_rps']:.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['failed']} |")
        lines += ["", lat["note"].replace("RATE", str(lat["rate"])), ""]
    return "\n".join(lines) + "\n"


def main():
    global LIMIT
    LIMIT = raise_nofile()
    if not FULCRUM.exists():
        raise SystemExit(f"scale: no Fulcrum binary at {FULCRUM} (bench/scale builds it; FULCRUM_BIN names another)")
    for c in CURVES:
        if c not in ("config", "cpu", "idle", "latency"):
            raise SystemExit(f"scale: no curve {c!r} (config, cpu, idle, latency)")
    name = SAVE or "latest-scale"
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    results = json.loads(path.read_text()) if path.exists() else {"curves": {}}
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout.strip()
    results["commit"] = commit + ("+changes" if dirty else "")
    results["quick"] = QUICK
    model = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("model name")), "")
    results["machine"] = {"cores": os.cpu_count(), "cpu": model, "kernel": os.uname().release, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    try:
        for c in CURVES:
            say(f"curve {c}")
            results["curves"][c] = {"config": curve_config, "cpu": curve_cpu, "idle": curve_idle, "latency": curve_latency}[c]()
            results["curves"][c]["commit"] = results["commit"]
            results["curves"][c]["quick"] = QUICK
            path.write_text(json.dumps(results, indent=1) + "\n")
    finally:
        cleanup()
    charts = {"config": charts_config, "cpu": charts_cpu, "idle": charts_idle, "latency": charts_latency}
    for c, data in results["curves"].items():
        charts[c](data, name)
    (RESULTS / f"{name}.md").write_text(report_md(results, name))
    print(report_md(results, name))
    say(f"wrote {path} and the SVGs beside it")


if __name__ == "__main__":
    main()
