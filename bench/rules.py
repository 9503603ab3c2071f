"""What the rule engine costs a request: Fulcrum in HTTP mode with one route (a path prefix to its
servers: routing as a site with a single rule has it) against the same Fulcrum with 50 rules, 49
of which the request passes over (path prefixes, hosts, regexes, headers, queries, cookies,
methods, client networks, a `not`) before the 50th takes it, sets a request header from a
variable and two response headers. Beside them, for reference: no route at all, the one route
with the 50th's actions, and the 50 rules without them (the matching alone).

The setup of bench/run: four nginx servers and wrk on core 0, each instance alone on core 1 with
one worker; the rounds are interleaved, each instance started afresh for each round, and a round
that other load disturbed is run again. Prints each instance's CPU per 10,000 requests (median of the rounds,
keep-alive) and the ratio of the 50 rules to the one route; the goal is under 1.05.
"""
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import side_by_side as sbs  # noqa: E402

ROUNDS = int(sbs.arg("--rounds", 2 if sbs.QUICK else 7))

ONE_ROUTE = """
[[service.route]]
path_prefix = ["/"]
"""


ACTIONS = ('request_headers = { set = { "x-client" = "{client_ip}:{client_port}" } }\n'
           'response_headers = { set = { "x-content-type-options" = "nosniff", "x-frame-options" = "DENY" } }\n')


def fifty_rules(actions=True):
    """49 rules that do not take `GET /index.html` from 127.0.0.1 with wrk's headers, then one that
    does (with the header actions, or none)."""
    rules = []
    for i in range(20):
        rules.append(f'[[service.route]]\npath_prefix = ["/section{i}"]\n')
    for i in range(10):
        rules.append(f'[[service.route]]\nhost = ["www{i}.example.test", "*.shop{i}.example.test"]\ndeny = 403\n')
    for i in range(5):
        rules.append(f"[[service.route]]\npath_regex = ['^/u/{i}/\\d+$']\nrewrite_path = {{ pattern = '^/u/{i}/(\\d+)$', with = \"/users/$1\" }}\n")
    for i in range(5):
        rules.append(f'[[service.route]]\nheader = "x-tenant"\nheader_value = "t{i}"\nrequest_headers = {{ set = {{ "x-pool" = "t{i}" }} }}\n')
    for i in range(3):
        rules.append(f'[[service.route]]\nquery = ["debug{i}"]\ndeny = 404\n')
    for i in range(3):
        rules.append(f'[[service.route]]\ncookie = ["beta{i}"]\npath_prefix = ["/"]\n')
    rules.append('[[service.route]]\nmethod = ["POST", "PUT"]\npath_prefix = ["/upload"]\nmax_request_body = 1048576\n')
    rules.append('[[service.route]]\npath_prefix = ["/admin"]\nnot = { client = ["10.0.0.0/8", "192.168.0.0/16"] }\ndeny = 403\n')
    rules.append('[[service.route]]\nclient = ["203.0.113.0/24", "2001:db8::/32"]\ndeny = 403\n')
    assert len(rules) == 49, len(rules)
    rules.append('[[service.route]]\npath_prefix = ["/"]\n' + (ACTIONS if actions else ""))
    return "\n" + "\n".join(rules)


class Instance(sbs.Edited):
    """Fulcrum in HTTP mode as bench/run runs it, with `routes` appended to its service."""

    def __init__(self, name, port, routes):
        super().__init__(name, port)
        self.routes = routes

    def edit(self, head, rest):
        return head + rest + self.routes


def main():
    servers = [sbs.nginx_server(p).pid for p in sbs.SERVERS]
    instances = [
        Instance("fulcrum-no-route", 19140, ""),
        Instance("fulcrum-one-route", 19141, ONE_ROUTE),
        Instance("fulcrum-one-route-actions", 19143, ONE_ROUTE + ACTIONS),
        Instance("fulcrum-50-rules-no-actions", 19144, fifty_rules(actions=False)),
        Instance("fulcrum-50-rules", 19142, fifty_rules()),
    ]
    for b in instances:
        # `name` picks bench/run's Fulcrum config; the instance keeps its own for the report.
        b.label, b.name = b.name, "fulcrum"
    rounds = {b.label: [] for b in instances}
    for i in range(ROUNDS):
        # A fresh process per round: what one process happens to be (its allocator's arenas, its
        # tables' places in memory) moves a figure by a few percent, and would otherwise stay
        # with its config for the whole run.
        order = instances[i % len(instances):] + instances[:i % len(instances)]
        for b in order:
            b.start()
            sbs.measured(b, sbs.wrk(b, seconds=1), servers)
            r = sbs.request_round(b, "keep_alive", servers)
            b.stop()
            if r["errors"]:
                raise SystemExit(f"bench: {b.label}: {r['errors']} errors in a round")
            rounds[b.label].append(r)
            sbs.say(f"round {i + 1} {b.label}: {r['cpu_s_per_10k']:.4f} s/10k, {r['rps']:.0f} req/s")
    med = {k: statistics.median(r["cpu_s_per_10k"] for r in v) for k, v in rounds.items()}
    rps = {k: statistics.median(r["rps"] for r in v) for k, v in rounds.items()}
    lines = [f"# The rule engine's cost, {sbs.machine_info()['date']}", "",
             f"wrk -t1 -c{sbs.CONC} keep-alive, {sbs.DURATION} s per round, median of {ROUNDS} interleaved rounds.", "",
             "| instance | CPU s / 10k | req/s | against one route |", "|---|---:|---:|---:|"]
    for k in rounds:
        lines.append(f"| {k} | {med[k]:.4f} | {rps[k]:.0f} | {med[k] / med['fulcrum-one-route']:.3f} |")
    ratio = med["fulcrum-50-rules"] / med["fulcrum-one-route"]
    lines += ["", f"Side by side, 50 rules against one route: {ratio:.3f} (goal: under 1.05; rounds on this machine move by several percent)."]
    # The same configs, the rule engine alone (benches/rules.rs): its nanoseconds per request,
    # set against what a whole request costs the instance with one route.
    files = []
    for b in instances:
        path = sbs.work / f"{b.label}.toml"
        path.write_text((sbs.work / f"{b.name}-{b.mode}-{b.port}" / "fulcrum.toml").read_text())
        files.append(str(path))
    out = sbs.subprocess.run(["cargo", "bench", "--locked", "-q", "-p", "fulcrum", "--bench", "rules", "--"] + files,
                             capture_output=True, text=True, cwd=sbs.ROOT)
    if out.returncode != 0:
        raise SystemExit(f"bench: benches/rules.rs failed:\n{out.stderr[-2000:]}")
    ns = {}
    for line in out.stdout.splitlines():
        name = line.split(":")[0].rsplit("/", 1)[-1].removesuffix(".toml")
        ns[name] = float(line.rsplit(":", 1)[1].split()[0])
    request_ns = med["fulcrum-one-route"] / 10000 * 1e9
    lines += ["", "The rule engine alone (benches/rules.rs, the least disturbed of five runs of a million requests):", "",
              "| instance | ns per request | share of a request's CPU |", "|---|---:|---:|"]
    for k, v in ns.items():
        lines.append(f"| {k} | {v:.0f} | {v / request_ns:.1%} |")
    extra = (ns["fulcrum-50-rules"] - ns["fulcrum-one-route"]) / request_ns
    lines += ["", f"50 rules cost {ns['fulcrum-50-rules'] - ns['fulcrum-one-route']:.0f} ns more than one route per request, "
              f"{extra:.1%} of the {request_ns / 1000:.1f} us of CPU a request costs (goal: under 5%)."]
    report = "\n".join(lines) + "\n"
    print(report)
    if sbs.SAVE:
        (sbs.ROOT / "bench" / "results" / f"{sbs.SAVE}-rules.md").write_text(report)


if __name__ == "__main__":
    try:
        main()
    finally:
        sbs.cleanup()
