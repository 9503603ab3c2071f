"""What a per-client limit costs a request with 100,000 active keys: Fulcrum in HTTP mode trusting
127.0.0.1's `X-Forwarded-For` (`trusted_forwarders`), with no limit, against the same with a
`[[service.limit]]` counting requests per client in a table of 200,000 keys, high enough
(1,000,000 a second) that nothing is refused: every request is checked and counted. wrk sends
each request with an `X-Forwarded-For` address of 100,000 (10.0.0.0 to 10.1.134.159, in turn),
the same script for both, so both parse the same header; a warm-up fills the table with the
100,000 keys before a round is measured.

The setup of bench/run: four nginx servers and wrk on core 0, each instance alone on core 1 with
one worker; the rounds are interleaved, each instance started afresh (and warmed) for each round,
and a round that other load disturbed is run again. Prints each instance's CPU per 10,000
requests (median of the rounds, keep-alive) and the ratio of the limit to no limit; the goal is
under 1.03. Then benches/limits.rs: the memory each table takes per key, and the nanoseconds a
check of the local table takes among 100,000 keys.
"""
import json
import os
import statistics
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import side_by_side as sbs  # noqa: E402

ROUNDS = int(sbs.arg("--rounds", 2 if sbs.QUICK else 7))
KEYS = 100_000
# The warm-up before each round: at 30,000 requests a second and more, every key twice.
WARM_S = 7

FORWARDERS = 'trusted_forwarders = ["127.0.0.1/32"]\n'

LIMIT = """
[[service.limit]]
name = "per-client"
count = "requests"
limit = 1000000
period = "1s"
max_keys = 200000
"""

# wrk's LuaJIT (Lua 5.1: no bit operators). The requests are made once, in `init` (after wrk has
# set its Host header), so a request costs the client a table lookup; one wrk thread, one state,
# so the addresses go round in turn over all 50 connections.
SCRIPT = f"""
local keys = {KEYS}
local requests = {{}}
local i = 0
function init(args)
  for n = 0, keys - 1 do
    local addr = "10." .. math.floor(n / 65536) .. "." .. (math.floor(n / 256) % 256) .. "." .. (n % 256)
    requests[n] = wrk.format(nil, nil, {{ ["Host"] = wrk.headers["Host"], ["X-Forwarded-For"] = addr }})
  end
end
function request()
  local r = requests[i]
  i = (i + 1) % keys
  return r
end
"""


class Instance(sbs.Balancer):
    """Fulcrum in HTTP mode as bench/run runs it, trusting 127.0.0.1's `X-Forwarded-For`, with
    `limits` appended to its service (and an admin listener on `admin`, for the probe)."""

    def __init__(self, name, port, limits, admin=None):
        super().__init__(name, "http", port)
        self.limits, self.admin = limits, admin

    def start(self):
        # Each round starts the instance again, in a clean directory.
        sbs.shutil.rmtree(sbs.work / f"{self.name}-{self.mode}-{self.port}", ignore_errors=True)
        super().start()

    def config(self, d):
        cmd = super().config(d)
        path = d / "fulcrum.toml"
        text = path.read_text()
        head, servers = text.split("[service.health]", 1)
        # bench/run's service has a [service.http] table (the access log off, its timeouts): the
        # key goes into it, since a second table of the same name does not parse.
        if "\n[service.http]\n" in head:
            head = head.replace("\n[service.http]\n", "\n[service.http]\n" + FORWARDERS, 1)
        else:
            head += "[service.http]\n" + FORWARDERS
        admin = f'\n[admin]\nlisten = "127.0.0.1:{self.admin}"\n' if self.admin else ""
        path.write_text(head + "[service.health]" + servers + self.limits + admin)
        check = sbs.subprocess.run([str(sbs.FULCRUM), "check", str(path)], capture_output=True, text=True)
        if check.returncode != 0:
            raise SystemExit(f"bench: the {self.name} config does not pass check:\n{check.stderr}")
        return cmd


def wrk(b, seconds=sbs.DURATION):
    """sbs.wrk's command (the same -t, -c, -d and URL, keep-alive) with the addresses' script."""
    cmd = sbs.wrk(b, seconds=seconds)
    return cmd[:-1] + ["-s", str(sbs.work / "limits.lua")] + cmd[-1:]


def warm(b, servers):
    """Runs the script against a fresh instance until it has sent every address at least once."""
    sent = 0
    while sent < KEYS:
        out, _ = sbs.measured(b, wrk(b, seconds=WARM_S), servers)
        r = sbs.parse_wrk(out)
        if r["errors"]:
            raise SystemExit(f"bench: {b.label}: {r['errors']} errors in the warm-up")
        sent += r["requests"]
    return sent


def request_round(b, servers):
    """One clean round of wrk with the script against `b` (sbs.request_round's retries)."""
    rejected = []
    for _ in range(sbs.RETRIES):
        r = sbs.figures(*sbs.measured(b, wrk(b), servers))
        if r["foreign_core0"] <= sbs.FOREIGN_LIMIT and r["foreign_core1"] <= sbs.FOREIGN_LIMIT:
            break
        rejected.append({k: round(r[k], 3) for k in ("foreign_core0", "foreign_core1")})
        time.sleep(1)
    else:
        sbs.say(f"{b.label}: every try was disturbed by other load ({rejected}); kept the last")
        r["disturbed"] = True
    r["rejected"] = rejected
    return r


def probe(servers):
    """The limit instance's config with an admin listener: after one warm-up its table holds the
    100,000 keys (and the curl of the start's check), and nothing was refused."""
    b = Instance("fulcrum-limit-probe", 19152, LIMIT, admin=19153)
    b.label, b.name = b.name, "fulcrum"
    b.start()
    try:
        sent = warm(b, servers)
        with urllib.request.urlopen("http://127.0.0.1:19153/api/limits/per-client?top=1", timeout=10) as r:
            table = json.load(r)
    finally:
        b.stop()
    if not KEYS <= table["keys"] <= KEYS + 1 or table["limited"] or table["passed"] < sent:
        raise SystemExit(f"bench: after a warm-up of {sent} requests the table holds {table['keys']} keys, "
                         f"passed {table['passed']}, limited {table['limited']}; expected {KEYS} keys and none limited")
    sbs.say(f"probe: a warm-up of {sent} requests left {table['keys']} keys in the table, {table['limited']} limited")
    return sent, table["keys"]


def main():
    taken = [p for p in sbs.SERVERS + [19150, 19151, 19152, 19153] if not sbs.port_free(p)]
    if taken:
        raise SystemExit(f"bench: ports {taken} on 127.0.0.1 are taken; stop what uses them and run again")
    (sbs.work / "limits.lua").write_text(SCRIPT)
    servers = [sbs.nginx_server(p).pid for p in sbs.SERVERS]
    probe_sent, probe_keys = probe(servers)
    instances = [Instance("fulcrum-no-limit", 19150, ""), Instance("fulcrum-limit-100k", 19151, LIMIT)]
    for b in instances:
        # `name` picks bench/run's Fulcrum config; the instance keeps its own for the report.
        b.label, b.name = b.name, "fulcrum"
    rounds = {b.label: [] for b in instances}
    for i in range(ROUNDS):
        # A fresh process per round, as bench/rules: what one process happens to be (its
        # allocator's arenas, its tables' places in memory) moves a figure by a few percent.
        order = instances[i % len(instances):] + instances[:i % len(instances)]
        for b in order:
            b.start()
            warm(b, servers)
            r = request_round(b, servers)
            b.stop()
            if r["errors"]:
                raise SystemExit(f"bench: {b.label}: {r['errors']} errors in a round")
            rounds[b.label].append(r)
            sbs.say(f"round {i + 1} {b.label}: {r['cpu_s_per_10k']:.4f} s/10k, {r['rps']:.0f} req/s")
    med = {k: statistics.median(r["cpu_s_per_10k"] for r in v) for k, v in rounds.items()}
    machine = {k: statistics.median(r["machine_cpu_s_per_10k"] for r in v) for k, v in rounds.items()}
    rps = {k: statistics.median(r["rps"] for r in v) for k, v in rounds.items()}
    p99 = {k: statistics.median(r["p99_ms"] for r in v) for k, v in rounds.items()}
    again = {k: sum(len(r["rejected"]) for r in v) for k, v in rounds.items()}
    lost = {k: sum(1 for r in v if r.get("disturbed")) for k, v in rounds.items()}
    base = med["fulcrum-no-limit"]
    q = " (quick)" if sbs.QUICK else ""
    m = sbs.machine_info()
    lines = [f"# A per-client limit's cost with 100,000 active keys{q}, {m['date']}", "",
             f"{m['cores']} cores ({m['cpu']}), Linux {m['kernel']}; {sbs.versions()['fulcrum']}.", "",
             "Fulcrum in HTTP mode as bench/run runs it (core 1, one worker, four nginx servers) with "
             "`trusted_forwarders = [\"127.0.0.1/32\"]`; `fulcrum-limit-100k` adds `[[service.limit]]` "
             "`count = \"requests\"`, `limit = 1000000`, `period = \"1s\"`, `max_keys = 200000` (nothing refused: "
             "every request is checked and counted). wrk sends each request with an `X-Forwarded-For` of 100,000 "
             "addresses in turn, the same script for both; each round starts a fresh instance and warms it with "
             f"{WARM_S} s of the script first (every address at least once). A probe instance with the limit's config "
             f"and an admin listener held {probe_keys} keys after one warm-up of {probe_sent} requests, none refused.", "",
             f"wrk -t1 -c{sbs.CONC} keep-alive, {sbs.DURATION} s per round, median of {ROUNDS} interleaved rounds.", "",
             "| instance | CPU s / 10k | against no limit | machine CPU s / 10k | req/s | p99 ms | rounds run again (disturbed) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for k in rounds:
        lines.append(f"| {k} | {med[k]:.4f} | {med[k] / base:.3f} | {machine[k]:.4f} | {rps[k]:.0f} | {p99[k]:.2f} "
                     f"| {again[k]}" + (f" ({lost[k]} kept disturbed)" if lost[k] else "") + " |")
    ratio = med["fulcrum-limit-100k"] / base
    request_us = base / 10000 * 1e6
    lines += ["", f"Side by side, the limit against no limit: {ratio:.3f} (goal: under 1.03); "
              f"{(med['fulcrum-limit-100k'] - base) / 10000 * 1e9:.0f} ns more CPU per request, of the "
              f"{request_us:.1f} us a request costs without it. Rounds on this shared machine move by a few percent.", "",
              "Each round (CPU s / 10k):", ""]
    for k, v in rounds.items():
        lines.append(f"- {k}: " + ", ".join(f"{r['cpu_s_per_10k']:.4f}" + ("*" if r.get("disturbed") else "") for r in v))
    # The tables alone: memory per key, and a check's nanoseconds (benches/limits.rs).
    out = sbs.subprocess.run(["cargo", "bench", "--locked", "-q", "-p", "fulcrum", "--bench", "limits"],
                             capture_output=True, text=True, cwd=sbs.ROOT)
    if out.returncode != 0:
        raise SystemExit(f"bench: benches/limits.rs failed:\n{out.stderr[-2000:]}")
    bench = [line for line in out.stdout.splitlines() if line.strip()]
    lines += ["", "The tables alone (`cargo bench -p fulcrum --bench limits`: bytes allocated per key, and ten million "
              "checks of the local table among 100,000 keys, the least disturbed of five runs):", "", "```"] + bench + ["```"]
    ns = [float(line.rsplit(":", 1)[1].split()[0]) for line in bench if line.endswith("ns per check")]
    if ns:
        lines += ["", f"A check of the local table: {ns[0]:.0f} ns, {ns[0] / (request_us * 1000):.2%} of a request's CPU without a limit."]
    report = "\n".join(lines) + "\n"
    print(report)
    if sbs.SAVE:
        (sbs.ROOT / "bench" / "results" / f"{sbs.SAVE}-limits.md").write_text(report)
        sbs.say(f"results in bench/results/{sbs.SAVE}-limits.md")


if __name__ == "__main__":
    try:
        main()
    finally:
        sbs.cleanup()
