"""What a per-client limit costs a request with 100,000 active keys: Fulcrum in HTTP mode trusting
127.0.0.1's `X-Forwarded-For` (`trusted_forwarders`), with no limit, against the same with a
`[[service.limit]]` counting requests per client in a table of 200,000 keys, which nothing
reaches (every request is checked and counted, none refused) and whose counts outlast the run
(100 an hour, bursts of 1,000: a request keeps its key's count 36 s ahead), so the sweep that
takes keys with nothing counted out of the table every 10 s leaves all 100,000 in it. Beside
them, `fulcrum-limit-1m-per-s`: the same with 1,000,000 a second, whose counts last a
microsecond, so each sweep empties the table and the next requests make their keys again. wrk
sends each request with an `X-Forwarded-For` address of 100,000 (10.0.0.0 to 10.1.134.159, in
turn), the same script for all, so all parse the same header; a warm-up sends every address
before a round is measured.

The setup of bench/run: four nginx servers and wrk on core 0, each instance alone on core 1 with
one worker. Each round starts all three afresh and warms them, then runs wrk against each in
passes, one instance right after another in a rotated order; a run that other load disturbed is
run again. Prints each instance's CPU per 10,000 requests (the median of its runs, keep-alive)
and its ratio to no limit, paired (the median of each pass's own ratio, runs seconds apart);
the goal is under 1.03. Then the limit's own code's share of a limited instance's CPU samples
under `perf record`, which the host's swings move little, and benches/limits.rs: the memory
each table takes per key, and the nanoseconds a check of the local table takes among 100,000
keys.
"""
import json
import os
import re
import shutil
import statistics
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import side_by_side as sbs  # noqa: E402

# More runs than bench/rules: the host moves a run's figures by up to a third (the same instance
# 0.21 to 0.37 s per 10k within one run), far more than the few percent to measure. Two runs a
# few seconds apart still differ by about 19% (the standard deviation of their ratio), so 33
# pairs give the ratio within about 7% (two standard errors): the profile is the finer figure.
ROUNDS = int(sbs.arg("--rounds", 2 if sbs.QUICK else 11))
# Runs of each instance per round, the instances in turn.
PASSES = 1 if sbs.QUICK else 3
# Runs of wrk under `perf record` for the limit's share of the CPU.
PROFILE_RUNS = 1 if sbs.QUICK else 3
KEYS = 100_000
# The warm-up before each round: at 30,000 requests a second and more, every key twice.
WARM_S = 7

FORWARDERS = 'trusted_forwarders = ["127.0.0.1/32"]\n'

# A key's count after a request is 36 s ahead of it (an hour over 100) and may be 1,000 of them
# ahead before one is refused: a key sees about ten requests in a process's life, so none is
# refused and none has nothing counted when the sweep comes by (every 10 s).
LIMIT = """
[[service.limit]]
name = "per-client"
count = "requests"
limit = 100
period = "1h"
burst = 1000
max_keys = 200000
"""

# Nothing refused either, but a count lasts a microsecond: the sweep empties the table.
LIMIT_SWEPT = """
[[service.limit]]
name = "per-client"
count = "requests"
limit = 1000000
period = "1s"
max_keys = 200000
"""

# The sweep of keys with nothing counted (live::limit::run, every 10 s): the probe asks the table
# after the first one after start.
SWEEP_S = 10

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


class Instance(sbs.Edited):
    """Fulcrum in HTTP mode as bench/run runs it, trusting 127.0.0.1's `X-Forwarded-For`, with
    `limits` appended to its service (and an admin listener on `admin`, for the probe)."""

    def __init__(self, name, port, limits, admin=None):
        super().__init__(name, port)
        self.limits, self.admin = limits, admin

    def edit(self, head, rest):
        # bench/run's service has a [service.http] table (the access log off, its timeouts): the
        # key goes into it, since a second table of the same name does not parse.
        if "\n[service.http]\n" in head:
            head = head.replace("\n[service.http]\n", "\n[service.http]\n" + FORWARDERS, 1)
        else:
            head += "[service.http]\n" + FORWARDERS
        admin = f'\n[admin]\nlisten = "127.0.0.1:{self.admin}"\n' if self.admin else ""
        return head + rest + self.limits + admin


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


def probe(servers, limits, port):
    """An instance with `limits` and an admin listener, asked how many keys its table holds after
    the warm-up, and after a measured round once the first sweep after start (10 s) has passed."""
    b = Instance(f"fulcrum-probe-{port}", port, limits, admin=port + 1)
    b.label, b.name = b.name, "fulcrum"

    def table():
        with urllib.request.urlopen(f"http://127.0.0.1:{port + 1}/api/limits/per-client?top=1", timeout=10) as r:
            return json.load(r)

    b.start()
    began = time.time()
    try:
        sent = warm(b, servers)
        warmed = table()
        out, _ = sbs.measured(b, wrk(b), servers)
        sent += sbs.parse_wrk(out)["requests"]
        time.sleep(max(0.0, began + SWEEP_S + 1.5 - time.time()))
        after = table()
    finally:
        b.stop()
    return {"sent": sent, "warmed": warmed["keys"], "after": after["keys"], "passed": after["passed"], "limited": after["limited"]}


def profile(servers):
    """The limit's own code's share of a fresh `fulcrum-limit-100k`'s CPU: `perf record` over a few
    runs, the samples in functions of `live::limit` and `proxy::limits` (what is inlined into
    them included; the clock reads and allocations they make are not). Unlike the CPU time, a
    share of samples moves little with the host."""
    if not shutil.which("perf"):
        return None
    b = Instance("fulcrum-profile", 19158, LIMIT)
    b.label, b.name = b.name, "fulcrum"
    b.start()
    try:
        warm(b, servers)
        data = str(sbs.work / "limit.perf")
        perf = sbs.subprocess.Popen(["perf", "record", "-q", "-F", "1999", "-p", ",".join(map(str, b.pids())), "-o", data],
                                    stdout=sbs.subprocess.DEVNULL, stderr=sbs.subprocess.DEVNULL)
        time.sleep(0.5)
        for _ in range(PROFILE_RUNS):
            sbs.measured(b, wrk(b), servers)
        perf.send_signal(2)
        perf.wait()
    finally:
        b.stop()
    out = sbs.subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "symbol", "--stdio", "-g", "none"],
                             capture_output=True, text=True).stdout
    shares = {}
    for line in out.splitlines():
        m = re.match(r"\s+([\d.]+)%\s+\[[.k]\]\s+(.+?)(\s+-\s+-)?\s*$", line)
        if m and ("live::limit" in m.group(2) or "proxy::limits" in m.group(2)):
            shares[m.group(2)] = float(m.group(1)) / 100
    return shares


def main():
    taken = [p for p in sbs.SERVERS + list(range(19150, 19159)) if not sbs.port_free(p)]
    if taken:
        raise SystemExit(f"bench: ports {taken} on 127.0.0.1 are taken; stop what uses them and run again")
    (sbs.work / "limits.lua").write_text(SCRIPT)
    servers = [sbs.nginx_server(p).pid for p in sbs.SERVERS]
    # The tables as the rounds will have them (the 100,000 keys, and the curl of the start's check):
    # the limit's table keeps them across a sweep and refuses nothing; 1,000,000 a second loses
    # them to the sweep.
    held = probe(servers, LIMIT, 19154)
    if not (KEYS <= held["warmed"] <= KEYS + 1 and KEYS <= held["after"] <= KEYS + 1) or held["limited"] or held["passed"] < held["sent"]:
        raise SystemExit(f"bench: the limit's table does not hold the {KEYS} keys through a sweep, or refused some: {held}")
    swept = probe(servers, LIMIT_SWEPT, 19156)
    if swept["limited"]:
        raise SystemExit(f"bench: 1,000,000 a second refused requests: {swept}")
    sbs.say(f"probes: {held} and, 1,000,000 a second, {swept}")
    instances = [Instance("fulcrum-no-limit", 19150, ""), Instance("fulcrum-limit-100k", 19151, LIMIT),
                 Instance("fulcrum-limit-1m-per-s", 19152, LIMIT_SWEPT)]
    for b in instances:
        # `name` picks bench/run's Fulcrum config; the instance keeps its own for the report.
        b.label, b.name = b.name, "fulcrum"
    # Every instance's runs, pass by pass: the n-th of each was measured in the same pass.
    rounds = {b.label: [] for b in instances}
    for i in range(ROUNDS):
        # Fresh processes each round, as bench/rules: what one process happens to be (its
        # allocator's arenas, its tables' places in memory) moves a figure by a few percent. All
        # are started and warmed first, then measured in passes, one right after another in a
        # rotated order, so the runs of a pass are seconds apart: this machine's host moves every
        # figure by up to a third within a minute, alike for all three.
        for b in instances:
            b.start()
            warm(b, servers)
        for j in range(PASSES):
            k = (i * PASSES + j) % len(instances)
            for b in instances[k:] + instances[:k]:
                r = request_round(b, servers)
                if r["errors"]:
                    raise SystemExit(f"bench: {b.label}: {r['errors']} errors in a round")
                rounds[b.label].append(r)
                sbs.say(f"round {i + 1}.{j + 1} {b.label}: {r['cpu_s_per_10k']:.4f} s/10k, {r['rps']:.0f} req/s")
        for b in instances:
            b.stop()
    shares = profile(servers)
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
             "`trusted_forwarders = [\"127.0.0.1/32\"]`. `fulcrum-limit-100k` adds `[[service.limit]]` "
             "`count = \"requests\"`, `limit = 100`, `period = \"1h\"`, `burst = 1000`, `max_keys = 200000`: nothing "
             "refused, every request checked and counted, and every key's count outlasts the run, so the sweep of keys "
             "with nothing counted (every 10 s) leaves the 100,000 keys in the table. `fulcrum-limit-1m-per-s` has "
             "`limit = 1000000`, `period = \"1s\"` instead: nothing refused either, but a count lasts a microsecond, "
             "so a sweep empties the table and the next requests make their keys again. wrk sends each request with "
             "an `X-Forwarded-For` of 100,000 addresses in turn, the same script for all; each round starts fresh "
             f"instances and warms each with {WARM_S} s of the script (every address at least once).", "",
             "Probes (the same configs with an admin listener, `GET /api/limits/per-client`), after a warm-up and "
             "after a round once a sweep has passed: "
             f"`fulcrum-limit-100k` held {held['warmed']} and {held['after']} keys ({held['limited']} of {held['sent']} "
             f"requests refused); `fulcrum-limit-1m-per-s` {swept['warmed']} and {swept['after']} ({swept['limited']} refused).", "",
             f"wrk -t1 -c{sbs.CONC} keep-alive, {sbs.DURATION} s per run; {ROUNDS} rounds, each of fresh instances "
             f"started and warmed together, then measured in {PASSES} pass(es), the instances one right after another "
             f"in a rotated order: {ROUNDS * PASSES} runs of each, medians. **Paired**: each run's ratio to "
             "`fulcrum-no-limit`'s run of the same pass, seconds apart (the host's swings over a minute move it less "
             "than the ratio of the medians): their median, and their mean with two standard errors.", "",
             "| instance | CPU s / 10k | ratio of medians | paired: median | paired: mean | machine CPU s / 10k | req/s | p99 ms "
             "| runs run again (disturbed) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    ratios = {k: [r["cpu_s_per_10k"] / n["cpu_s_per_10k"] for r, n in zip(v, rounds["fulcrum-no-limit"])] for k, v in rounds.items()}
    paired = {k: statistics.median(v) for k, v in ratios.items()}
    mean = {k: statistics.mean(v) for k, v in ratios.items()}
    error = {k: 2 * statistics.stdev(v) / len(v) ** 0.5 if len(v) > 1 else float("nan") for k, v in ratios.items()}
    for k in rounds:
        lines.append(f"| {k} | {med[k]:.4f} | {med[k] / base:.3f} | {paired[k]:.3f} | {mean[k]:.3f} ± {error[k]:.3f} | {machine[k]:.4f} "
                     f"| {rps[k]:.0f} | {p99[k]:.2f} | {again[k]}" + (f" ({lost[k]} kept disturbed)" if lost[k] else "") + " |")
    request_us = base / 10000 * 1e6
    key = "fulcrum-limit-100k"
    lines += ["", f"The limit with 100,000 active keys against no limit: {paired[key]:.3f} (paired median; mean "
              f"{mean[key]:.3f} ± {error[key]:.3f}; ratio of medians {med[key] / base:.3f}). Goal: under 1.03. Paired, "
              f"{(paired[key] - 1) * request_us * 1000:+.0f} ns of CPU per request, of the {request_us:.1f} us a request "
              "costs without a limit.", "",
              "Each run, pass by pass (CPU s / 10k; * kept disturbed):", ""]
    if shares is not None:
        top = sorted(shares.items(), key=lambda kv: -kv[1])[:5]
        total = sum(shares.values())
        lines[-2:-2] = [f"The limit's own code under `perf record` ({PROFILE_RUNS} run(s) of a fresh `{key}`): {total:.1%} of "
                        f"its CPU samples, about {total * med[key] / 10000 * 1e9:.0f} ns of a request's: "
                        + "; ".join(f"`{name}` {share:.2%}" for name, share in top) + ".", ""]
    for k, v in rounds.items():
        lines.append(f"- {k}: " + ", ".join(f"{r['cpu_s_per_10k']:.3f}" + ("*" if r.get("disturbed") else "") for r in v))
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
