"""Runs Fulcrum, HAProxy, NGINX and pen side by side in one run (see bench/README.md).

Four nginx real servers and every client run on core 0; each balancer runs on core 1 with one
worker. All balancers stay up for the whole run, idle when not measured, and the rounds are
interleaved (round 1 of every balancer, then round 2, ...), so a slow drift of the machine
touches all of them alike. A round counts only if no other load disturbed it: on core 1 nothing
but the balancer ran, on core 0 nothing but the client and the real servers (both read from
/proc/stat against the processes' own CPU); a disturbed round is run again.

Figures per balancer and mode, each the median over the clean rounds:
- CPU s per 10k requests: the balancer's own utime + stime (all its threads and processes);
- whole-machine CPU s per 10k requests: both cores' busy time from /proc/stat (client, servers,
  kernel included), since work the balancer avoids may land elsewhere;
- req/s, p50 and p99 from wrk, keep-alive and one request per connection (`Connection: close`);
- bulk: a 64 MiB download, MB/s and the balancer's CPU s per GB;
- KiB per idle connection: RSS growth of the balancer with thousands of idle keep-alive
  connections that each made one request (checked alive afterwards), once RSS has settled.
"""
import json
import os
import platform
import re
import selectors
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from procs import cleanup_on_exit, cpu_seconds, exchange, family, rss_bytes, settled_rss  # noqa: E402
from procs import start as procs_start, wait_port as procs_wait_port  # noqa: E402
import anchors  # noqa: E402


def arg(name, default):
    if name in sys.argv:
        return sys.argv[sys.argv.index(name) + 1]
    return default


QUICK = "--quick" in sys.argv
ROUNDS = int(arg("--rounds", 2 if QUICK else 5))
SAVE = arg("--save", None)
DURATION = 2 if QUICK else 5             # wrk seconds per round
BULK_ROUNDS = 2 if QUICK else 3
SCALE_ROUNDS = 1 if QUICK else 3
IDLE_CONNS = int(arg("--idle", 1000 if QUICK else 5000))
# --modes http (or tcp, or tls) measures those only, for a quicker comparison of a change.
MODES = arg("--modes", "tcp,http,tls").split(",")
CONC = 50
# A round is disturbed when another load took more than this share of a core.
FOREIGN_LIMIT = 0.05
RETRIES = 4
# Balancers whose forwarding the kernel does for them (softirq and kworker threads, which land on
# both cores): what the clean-round check sees as foreign load is their own, so a round is kept
# as it is instead of run again. Fulcrum's default in TCP mode (`fast_path = "adaptive"`) moves
# its keep-alive connections into the sockmap, and splices connections of one request.
KERNEL_FORWARDS = {("fulcrum-sockmap", "tcp", "keep_alive"), ("fulcrum-sockmap", "tcp", "new_connection"), ("fulcrum", "tcp", "keep_alive")}
SERVERS = [19081, 19082, 19083, 19084]
ROOT = Path(__file__).resolve().parent.parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
FULCRUM = Path(os.environ.get("FULCRUM_BIN", TARGET / "release" / "fulcrum"))
# FULCRUM_BASELINE=/path/to/an/older/fulcrum adds it as "fulcrum-base", run the same way in the
# same run, so a change is compared with what it changed.
BASELINE = os.environ.get("FULCRUM_BASELINE")
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
ANCHORS = ("haproxy", "nginx", "pen")
REQUEST = b"GET /index.html HTTP/1.1\r\nHost: bench\r\n\r\n"

work = Path(tempfile.mkdtemp(prefix="fulcrum-bench-"))
procs = []
cleanup = cleanup_on_exit(procs, work)


def say(*a):
    print("bench:", *a, flush=True)


def port_free(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def wait_port(port, what, limit=10.0):
    procs_wait_port(port, what, work, limit)


def start(cmd, cores, name):
    return procs_start(procs, work, cmd, name, cores)


def cores():
    """Per-core busy jiffies from /proc/stat (irq and softirq included), and procs_running."""
    busy = {}
    running = 0
    for line in Path("/proc/stat").read_text().splitlines():
        f = line.split()
        if re.fullmatch(r"cpu\d+", f[0]):
            user, nice, system, idle, iowait, irq, softirq, steal = map(int, f[1:9])
            busy[int(f[0][3:])] = user + nice + system + irq + softirq + steal
        elif f[0] == "procs_running":
            running = int(f[1])
    return busy, running


def nginx_server(port):
    d = work / f"real{port}"
    (d / "www").mkdir(parents=True)
    (d / "www" / "index.html").write_text("<html><body>TARGET " + "x" * 60 + "</body></html>\n")
    with open(d / "www" / "large", "wb") as f:
        f.truncate(64 << 20)
    (d / "nginx.conf").write_text(f"""daemon off; master_process off; worker_processes 1; user root root;
pid {d}/nginx.pid; error_log {d}/error.log warn;
events {{ worker_connections 16384; }}
http {{ access_log off; keepalive_requests 1000000; keepalive_timeout 300s; sendfile on;
  client_body_temp_path {d}/b; proxy_temp_path {d}/p; fastcgi_temp_path {d}/f; uwsgi_temp_path {d}/u; scgi_temp_path {d}/s;
  server {{ listen 127.0.0.1:{port} backlog=8192 reuseport; root {d}/www; }} }}
""")
    p = start(["nginx", "-p", str(d), "-c", str(d / "nginx.conf")], "0", f"real{port}")
    wait_port(port, f"real{port}")
    return p


class Balancer:
    """One balancer in one mode; `variant` is a Fulcrum setting measured as a balancer of its own."""

    def __init__(self, name, mode, port, cores="1", workers=1):
        self.name, self.mode, self.port, self.cores, self.workers = name, mode, port, cores, workers
        self.proc = None

    def config(self, d):
        http = self.mode == "http"
        ups = SERVERS
        if self.name.startswith("fulcrum"):
            exe = BASELINE if self.name == "fulcrum-base" else FULCRUM
            extra = ""
            if self.name == "fulcrum-sockmap":
                extra = 'fast_path = "sockmap"\n'
            elif self.name == "fulcrum-splice":
                extra = 'fast_path = "splice"\n'
            top = "reuse_port = true\n" if self.name == "fulcrum-reuseport" else ""
            service = (f'{root_line(exe)}workers = {self.workers}\n{top}[[service]]\nname = "bench"\nlisten = "127.0.0.1:{self.port}"\n'
                       f'algorithm = "round-robin"\nclient_timeout = "10m"\nserver_timeout = "10m"\n{extra}')
            if http:
                service += 'mode = "http"\n[service.http]\naccess_log = "off"\nhead_timeout = "10m"\nkeepalive_idle = "10m"\n'
            service += '[service.health]\nkind = "tcp"\n' + "".join(f'[[service.server]]\naddress = "127.0.0.1:{p}"\n' for p in ups)
            (d / "fulcrum.toml").write_text(service)
            return [str(exe), "--log", "warn", "run", str(d / "fulcrum.toml")]
        if self.name == "haproxy":
            (d / "haproxy.cfg").write_text(haproxy_config(self.workers, self.mode, f"127.0.0.1:{self.port}"))
            return ["haproxy", "-db", "-f", str(d / "haproxy.cfg")]
        if self.name in ("nginx", "nginx-half"):
            servers = "".join(f"server 127.0.0.1:{p};" for p in ups)
            head = f"""daemon off; master_process {"on" if self.workers > 1 else "off"}; worker_processes {self.workers}; user root root;
pid {d}/nginx.pid; error_log {d}/error.log warn; worker_rlimit_nofile 19000;
events {{ worker_connections 16384; }}
"""
            if http:
                body = f"""http {{ access_log off; keepalive_requests 1000000; keepalive_timeout 10m;
  client_body_temp_path {d}/b; proxy_temp_path {d}/p; fastcgi_temp_path {d}/f; uwsgi_temp_path {d}/u; scgi_temp_path {d}/s;
  upstream real {{ {servers} keepalive 256; keepalive_timeout 10m; }}
  server {{ listen 127.0.0.1:{self.port} backlog=8192 {"reuseport" if self.workers > 1 else ""};
    location / {{ proxy_pass http://real; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; }} }} }}
"""
            else:
                head = "load_module /usr/lib/nginx/modules/ngx_stream_module.so;\n" + head
                body = f"""stream {{ upstream real {{ {servers} }}
  server {{ listen 127.0.0.1:{self.port} backlog=8192 {"reuseport" if self.workers > 1 else ""}; proxy_pass real; proxy_timeout 10m;{" proxy_half_close on;" if self.name == "nginx-half" else ""} }} }}
"""
            (d / "nginx.conf").write_text(head + body)
            return ["nginx", "-p", str(d), "-c", str(d / "nginx.conf")]
        if self.name == "pen":
            return ["pen", "-f", "-r", "-x", "9000", "-c", "9000", f"127.0.0.1:{self.port}"] + [f"127.0.0.1:{s}" for s in ups]
        raise ValueError(self.name)

    def start(self):
        d = work / f"{self.name}-{self.mode}-{self.port}"
        d.mkdir()
        self.proc = start(self.config(d), self.cores, f"{self.name}-{self.mode}-{self.port}")
        wait_port(self.port, f"{self.name}-{self.mode}-{self.port}")
        ok = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"http://127.0.0.1:{self.port}/index.html"],
                            capture_output=True, text=True).stdout
        if ok != "200":
            raise SystemExit(f"bench: {self.name} ({self.mode}) answered {ok!r} instead of 200; log in {d}")

    def pids(self):
        return family(self.proc.pid) if self.proc else []

    def stop(self):
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


class Edited(Balancer):
    """Fulcrum in HTTP mode as bench/run runs it, started afresh in a clean directory each time,
    with its config rewritten by `edit` and checked with `fulcrum check` (bench/rules, bench/limits)."""

    def __init__(self, name, port):
        super().__init__(name, "http", port)

    def edit(self, head, rest):
        """The config from its service's head (up to `[service.health]`) and the rest."""
        return head + rest

    def start(self):
        shutil.rmtree(work / f"{self.name}-{self.mode}-{self.port}", ignore_errors=True)
        super().start()

    def config(self, d):
        cmd = super().config(d)
        path = d / "fulcrum.toml"
        head, rest = path.read_text().split("[service.health]", 1)
        path.write_text(self.edit(head, "[service.health]" + rest))
        check = subprocess.run([str(FULCRUM), "check", str(path)], capture_output=True, text=True)
        if check.returncode != 0:
            raise SystemExit(f"bench: the {self.name} config does not pass check:\n{check.stderr}")
        return cmd


def root_line(exe):
    """`allow_root = true` for a Fulcrum that knows the key (the bench runs as root, which `run`
    refuses without it), nothing for an older baseline build that would reject it."""
    probe = Path(tempfile.mkdtemp()) / "probe.toml"
    probe.write_text("allow_root = true\n")
    known = subprocess.run([str(exe), "check", str(probe)], capture_output=True).returncode == 0
    shutil.rmtree(probe.parent, ignore_errors=True)
    return "allow_root = true\n" if known else ""


def haproxy_config(workers, mode, bind):
    """HAProxy with `workers` threads balancing the real servers round robin in `mode`; `bind` is
    the rest of its bind line (address, and TLS options for the TLS cases)."""
    return anchors.haproxy_config(workers, mode, bind, SERVERS, 9000)


def fulcrum_accepts(setting, top=False):
    """Whether this Fulcrum build accepts a service setting, or with `top` a top-level one (a
    variant it does not know is left out)."""
    d = work / "probe"
    d.mkdir(exist_ok=True)
    head, own = (f"{setting}\n", "") if top else ("", f"{setting}\n")
    (d / "f.toml").write_text(f'{head}[[service]]\nname = "p"\nlisten = "127.0.0.1:1"\n{own}[[service.server]]\naddress = "127.0.0.1:2"\n')
    return subprocess.run([str(FULCRUM), "check", str(d / "f.toml")], capture_output=True).returncode == 0


def parse_wrk(out):
    total = int(re.search(r"(\d+) requests in", out).group(1))
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))

    def lat(q):
        m = re.search(rf"\s{q}%\s+([\d.]+)(us|ms|s)\b", out)
        v, unit = float(m.group(1)), m.group(2)
        return v / 1000 if unit == "us" else v * 1000 if unit == "s" else v

    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errs = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    errors = (int(non2xx.group(1)) if non2xx else 0) + (sum(map(int, errs.groups())) if errs else 0)
    return {"requests": total, "rps": rps, "p50_ms": lat(50), "p99_ms": lat(99), "errors": errors}


def measured(b, cmd, servers):
    """Runs a client on core 0; returns its output and the CPU figures of the run."""
    pids = b.pids()
    c0, _ = cores()
    b0, s0 = cpu_seconds(pids), cpu_seconds(servers)
    t0 = time.time()
    p = subprocess.Popen(["taskset", "-c", "0"] + cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.time() - t0
    c1, running = cores()
    b1, s1 = cpu_seconds(pids), cpu_seconds(servers)
    if p.returncode != 0:
        raise SystemExit(f"bench: {' '.join(cmd)} failed ({p.returncode}):\n{out[-2000:]}")
    balancer = b1 - b0
    client = usage.ru_utime + usage.ru_stime
    # Foreign load: a core's busy time (irq and softirq included: the kernel charges softirq work
    # done for a process to the process) not spent by the processes meant to run there. Near
    # zero on a quiet machine; negative when the processes' softirq landed on the other core.
    core1 = (c1[1] - c0[1]) / TICK
    core0 = (c1[0] - c0[0]) / TICK
    foreign1 = core1 - balancer if b.cores == "1" else 0.0
    foreign0 = core0 - client - (s1 - s0)
    machine = sum(c1[i] - c0[i] for i in c1) / TICK
    return out, {"wall_s": wall, "balancer_cpu_s": balancer, "machine_cpu_s": machine, "client_cpu_s": client,
                 "foreign_core0": foreign0 / wall, "foreign_core1": foreign1 / wall, "procs_running": running}


def wrk(b, workload="keep_alive", seconds=DURATION, threads=1):
    """The wrk command line for `b`: keep-alive, or one request per connection."""
    cmd = ["wrk", f"-t{threads}", f"-c{threads * CONC}", f"-d{seconds}s", "--latency"]
    if workload == "new_connection":
        cmd += ["-H", "Connection: close"]
    return cmd + [f"http://127.0.0.1:{b.port}/index.html"]


def figures(out, cpu):
    """wrk's output and a run's CPU, as the figures per 10,000 requests."""
    r = parse_wrk(out)
    r.update(cpu)
    r["cpu_s_per_10k"] = cpu["balancer_cpu_s"] / r["requests"] * 10000
    r["machine_cpu_s_per_10k"] = cpu["machine_cpu_s"] / r["requests"] * 10000
    return r


def request_round(b, workload, servers):
    """One clean round of wrk against `b`: keep-alive or one request per connection."""
    rejected = []
    for _ in range(RETRIES):
        r = figures(*measured(b, wrk(b, workload), servers))
        if (b.name, b.mode, workload) in KERNEL_FORWARDS or (r["foreign_core0"] <= FOREIGN_LIMIT and r["foreign_core1"] <= FOREIGN_LIMIT):
            break
        rejected.append({k: round(r[k], 3) for k in ("foreign_core0", "foreign_core1")})
        time.sleep(1)
    else:
        say(f"{b.name} {b.mode} {workload}: every try was disturbed by other load ({rejected}); kept the last")
        r["disturbed"] = True
    r["rejected"] = rejected
    return r


def bulk(b, servers):
    speeds, cpu, machine = [], 0.0, 0.0
    for _ in range(BULK_ROUNDS):
        out, c = measured(b, ["curl", "-s", "-o", "/dev/null", "-w", "%{speed_download} %{size_download}",
                              f"http://127.0.0.1:{b.port}/large"], servers)
        speed, size = out.split()
        if int(size) != 64 << 20:
            raise SystemExit(f"bench: bulk download through {b.name} was {size} bytes")
        speeds.append(float(speed) / 1e6)
        cpu += c["balancer_cpu_s"]
        machine += c["machine_cpu_s"]
    gb = BULK_ROUNDS * 64 / 1024
    return {"mb_per_s": statistics.median(speeds), "cpu_s_per_gb": cpu / gb, "machine_cpu_s_per_gb": machine / gb}






def idle_memory(b):
    """RSS growth per idle keep-alive connection, each having made one request."""
    os.sched_setaffinity(0, {0})
    pids = b.pids()
    before = settled_rss(pids, 20)
    sel = selectors.DefaultSelector()
    socks = []
    try:
        for i in range(0, IDLE_CONNS, 250):
            wave = []
            for _ in range(min(250, IDLE_CONNS - i)):
                s = socket.create_connection(("127.0.0.1", b.port))
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                wave.append(s)
            exchange(wave, sel, f"{b.name} idle", REQUEST)
            socks += wave
        after = settled_rss(pids, 40)
        # Alive afterwards: a sample of them answers again.
        exchange(socks[:: max(1, len(socks) // 100)], sel, f"{b.name} idle, afterwards", REQUEST)
    finally:
        for s in socks:
            s.close()
        os.sched_setaffinity(0, set(range(os.cpu_count())))
    return {"connections": IDLE_CONNS, "rss_before_kib": before / 1024, "rss_after_kib": after / 1024,
            "kib_per_connection": (after - before) / IDLE_CONNS / 1024}


def scaling(b, servers):
    """Keep-alive load, then one request per connection, with the balancer and the client free to
    use both cores."""
    r = figures(*measured(b, wrk(b, threads=2), servers))
    # Requests per second for each core the balancer kept busy.
    r["rps_per_balancer_core"] = r["requests"] / max(r["balancer_cpu_s"], 1e-9)
    new = figures(*measured(b, wrk(b, "new_connection", threads=2), servers))
    r["new_rps"] = new["rps"]
    r["new_rps_per_balancer_core"] = new["requests"] / max(new["balancer_cpu_s"], 1e-9)
    r["new_cpu_s_per_10k"] = new["cpu_s_per_10k"]
    return r


def median_of(rounds, key):
    return statistics.median(r[key] for r in rounds)


def machine_info():
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    mem = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1)) // 1024
    return {"cores": os.cpu_count(), "cpu": model, "memory_mib": mem, "kernel": platform.release(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def versions():
    def first(cmd, stream="stdout"):
        try:
            r = subprocess.run(cmd, capture_output=True, text=True)
            return (getattr(r, stream).strip().split("\n") or [""])[0]
        except FileNotFoundError:
            return "missing"
    v = {"haproxy": first(["haproxy", "-v"]), "nginx": first(["nginx", "-v"], "stderr"),
         "pen": first(["dpkg-query", "-W", "-f", "${Version}", "pen"]), "wrk": first(["wrk", "-v"]),
         "openssl": first(["openssl", "version"]).split(" (")[0], "h2load": first(["h2load", "--version"]),
         "fulcrum": first([str(FULCRUM), "--version"])}
    try:
        v["fulcrum_commit"] = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except FileNotFoundError:
        pass
    return v


def main():
    taken = [p for p in SERVERS + list(range(19100, 19130)) if not port_free(p)]
    if taken:
        raise SystemExit(f"bench: ports {taken} on 127.0.0.1 are taken; stop what uses them and run again")
    servers = [nginx_server(p).pid for p in SERVERS]
    port = iter(range(19100, 19130))
    fulcrums = ["fulcrum"] + (["fulcrum-base"] if BASELINE else [])
    tcp = [Balancer(n, "tcp", next(port)) for n in ["haproxy", "nginx", "pen"] + fulcrums] if "tcp" in MODES else []
    # NGINX's stream proxy closes both sides when one closes unless told otherwise; Fulcrum (by
    # default) and HAProxy pass a FIN on and wait for the other side's. The same work, measured
    # beside the anchor (not an anchor itself): a shutdown and a read more per connection.
    if tcp:
        tcp.insert(2, Balancer("nginx-half", "tcp", next(port)))
    # `fulcrum` runs its default (adaptive where it has it); the fixed fast paths beside it.
    if tcp and fulcrum_accepts('fast_path = "adaptive"'):
        tcp.append(Balancer("fulcrum-splice", "tcp", next(port)))
    if tcp and fulcrum_accepts('fast_path = "sockmap"'):
        tcp.append(Balancer("fulcrum-sockmap", "tcp", next(port)))
    http = [Balancer(n, "http", next(port)) for n in ["haproxy", "nginx"] + fulcrums] if "http" in MODES else []
    balancers = tcp + http
    for b in balancers:
        b.start()
    direct = Balancer("direct", "tcp", SERVERS[0])
    results = {"machine": machine_info(), "versions": versions(), "quick": QUICK, "rounds": ROUNDS,
               "duration_s": DURATION, "concurrency": CONC, "idle_connections": IDLE_CONNS, "foreign_limit": FOREIGN_LIMIT,
               "modes": {"tcp": {}, "http": {}}}
    if balancers:
        say(f"{len(balancers)} balancers, {ROUNDS} rounds of {DURATION} s per workload, interleaved")
    # A warm-up so every balancer starts the first round with its pools and allocator warm.
    for b in balancers:
        measured(b, wrk(b, seconds=1), servers)
    rounds = {(b.name, b.mode, w): [] for b in balancers for w in ("keep_alive", "new_connection")}
    for r in range(ROUNDS if balancers else 0):
        order = balancers[r % len(balancers):] + balancers[: r % len(balancers)]
        for b in order:
            for w in ("keep_alive", "new_connection"):
                rounds[(b.name, b.mode, w)].append(request_round(b, w, servers))
        say(f"round {r + 1}/{ROUNDS} done")
    for b in balancers:
        res = {}
        for w in ("keep_alive", "new_connection"):
            rs = rounds[(b.name, b.mode, w)]
            res[w] = {k: median_of(rs, k) for k in ("cpu_s_per_10k", "machine_cpu_s_per_10k", "rps", "p50_ms", "p99_ms")}
            res[w]["errors"] = sum(x["errors"] for x in rs)
            res[w]["rejected_rounds"] = sum(len(x["rejected"]) for x in rs)
            res[w]["disturbed_rounds"] = sum(1 for x in rs if x.get("disturbed"))
            res[w]["rounds"] = rs
        results["modes"][b.mode][b.name] = res
    say("bulk")
    results["bulk_direct"] = bulk(direct, servers)
    for b in balancers:
        results["modes"][b.mode][b.name]["bulk"] = bulk(b, servers)
    for b in balancers:
        say(f"idle memory: {b.name} ({b.mode}), {IDLE_CONNS} connections")
        results["modes"][b.mode][b.name]["idle"] = idle_memory(b)
    for b in balancers:
        b.stop()
    if "tls" in MODES:
        import tls_cases
        say("TLS: handshakes, keep-alive, HTTP/2 and bulk")
        results["tls"] = tls_cases.run(sys.modules[__name__], servers, port)
    results["scaling"] = {}
    scaled = ["haproxy", "nginx", "fulcrum"] + (["fulcrum-reuseport"] if fulcrum_accepts("reuse_port = true", top=True) else [])
    scale = [Balancer(name, mode, next(port), cores="0,1", workers=2) for mode in MODES if mode != "tls" for name in scaled]
    if scale:
        say("scaling: two workers, both cores")
    for b in scale:
        b.start()
        measured(b, wrk(b, seconds=1), servers)
    # Interleaved rounds here too: one round moves by a quarter with where the scheduler puts things.
    runs = {b: [] for b in scale}
    for _ in range(SCALE_ROUNDS):
        for b in scale:
            runs[b].append(scaling(b, servers))
    for b in scale:
        rs = runs[b]
        keys = ("rps", "rps_per_balancer_core", "cpu_s_per_10k", "p99_ms", "new_rps", "new_rps_per_balancer_core", "new_cpu_s_per_10k")
        results["scaling"][f"{b.name} {b.mode}"] = {k: median_of(rs, k) for k in keys} | {"rounds": rs}
        b.stop()
    report = render(results)
    print(report)
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    for stem in ["latest"] + ([SAVE] if SAVE else []):
        (out / f"{stem}.md").write_text(report)
        (out / f"{stem}.json").write_text(json.dumps(results, indent=1))
    say(f"results in bench/results/{SAVE or 'latest'}.md")


def ratio(x, best):
    return f"{x / best:.2f}x" if best else "-"


def render(r):
    q = " (quick)" if r["quick"] else ""
    m = r["machine"]
    lines = [f"# Side by side{q}", "",
             f"{m['date']}; {m['cores']} cores ({m['cpu']}), {m['memory_mib']} MiB, Linux {m['kernel']}. "
             f"Fulcrum {r['versions'].get('fulcrum', '')} ({r['versions'].get('fulcrum_commit', '')}); "
             f"{r['versions']['haproxy']}; {r['versions']['nginx']}; pen {r['versions']['pen']}; {r['versions']['wrk']}.", "",
             f"Each balancer on core 1 with one worker, round robin over four nginx servers; wrk (`-t1 -c{r['concurrency']}`, "
             f"{r['duration_s']} s) and the servers on core 0. Medians of {r['rounds']} interleaved rounds that no other load "
             f"disturbed (more than {r['foreign_limit']:.0%} of a core used by anything else: the round is run again). "
             "CPU is the balancer's own utime + stime per 10,000 requests; machine CPU is both cores' busy time per 10,000 "
             "requests (client, servers and kernel included); ratios are to the best of HAProxy, NGINX and pen in each column. "
             "`nginx-half` (TCP mode, not an anchor) is NGINX with `proxy_half_close on`: it passes a FIN on and waits for the "
             "other side's, as Fulcrum's default `half_close = true` and HAProxy do (NGINX's default closes both sides at once).", ""]
    for mode in ("tcp", "http"):
        rows = r["modes"][mode]
        if not rows:
            continue
        anchors = [n for n in rows if n in ANCHORS]

        def best(w, k):
            return min(rows[n][w][k] for n in anchors)

        lines += [f"## {mode.upper()} mode", "",
                  "| balancer | keep-alive CPU / 10k | new-connection CPU / 10k | keep-alive p50 / p99 ms | new-connection p50 / p99 ms "
                  "| machine CPU / 10k (keep-alive, new) | req/s (keep-alive, new) | KiB per idle connection | errors |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for n, x in rows.items():
            ka, nc = x["keep_alive"], x["new_connection"]
            lines.append(
                f"| {n} | {ka['cpu_s_per_10k']:.3f} ({ratio(ka['cpu_s_per_10k'], best('keep_alive', 'cpu_s_per_10k'))}) "
                f"| {nc['cpu_s_per_10k']:.3f} ({ratio(nc['cpu_s_per_10k'], best('new_connection', 'cpu_s_per_10k'))}) "
                f"| {ka['p50_ms']:.2f} / {ka['p99_ms']:.2f} ({ratio(ka['p99_ms'], best('keep_alive', 'p99_ms'))}) "
                f"| {nc['p50_ms']:.2f} / {nc['p99_ms']:.2f} ({ratio(nc['p99_ms'], best('new_connection', 'p99_ms'))}) "
                f"| {ka['machine_cpu_s_per_10k']:.3f}, {nc['machine_cpu_s_per_10k']:.3f} "
                f"| {ka['rps']:.0f}, {nc['rps']:.0f} "
                f"| {x['idle']['kib_per_connection']:.1f} "
                f"| {ka['errors'] + nc['errors']} |")
        lines += ["", "| balancer | bulk MB/s (64 MiB) | CPU s / GB | machine CPU s / GB | rounds run again (disturbed) |", "|---|---:|---:|---:|---:|"]
        if mode == "tcp":
            d = r["bulk_direct"]
            lines.append(f"| direct from one server | {d['mb_per_s']:.0f} | - | {d['machine_cpu_s_per_gb']:.2f} | - |")
        for n, x in rows.items():
            g = x["bulk"]
            again = x["keep_alive"]["rejected_rounds"] + x["new_connection"]["rejected_rounds"]
            lost = x["keep_alive"]["disturbed_rounds"] + x["new_connection"]["disturbed_rounds"]
            lines.append(f"| {n} | {g['mb_per_s']:.0f} | {g['cpu_s_per_gb']:.3f} | {g['machine_cpu_s_per_gb']:.2f} | {again}"
                         + (f" ({lost} kept disturbed)" if lost else "") + " |")
        lines.append("")
    if r.get("tls"):
        import tls_cases
        lines += tls_cases.render(r["tls"], r["versions"])
    if not r["scaling"]:
        return "\n".join(lines)
    lines += ["## Two workers on two cores", "",
              "Each balancer with two workers (Fulcrum `workers = 2`, one accept loop per address feeding both; "
              "`fulcrum-reuseport` adds `reuse_port = true`, a listening socket and an event loop per worker; HAProxy "
              "`nbthread 2`; NGINX two worker processes with `reuseport`), unpinned, wrk `-t2 -c100` sharing the same "
              "two cores, keep-alive and then one request per connection: medians of "
              f"{1 if r['quick'] else 3} interleaved rounds, no clean-round check (the client shares the cores).", "",
              "| balancer | keep-alive req/s | requests per balancer CPU second | balancer CPU / 10k | p99 ms "
              "| new-connection req/s | requests per balancer CPU second | balancer CPU / 10k |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for n, x in r["scaling"].items():
        lines.append(f"| {n} | {x['rps']:.0f} | {x['rps_per_balancer_core']:.0f} | {x['cpu_s_per_10k']:.3f} | {x['p99_ms']:.2f} "
                     f"| {x['new_rps']:.0f} | {x['new_rps_per_balancer_core']:.0f} | {x['new_cpu_s_per_10k']:.3f} |")
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    try:
        main()
    finally:
        cleanup()
