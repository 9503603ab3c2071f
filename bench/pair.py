"""Two or more Fulcrum builds side by side with NGINX, HTTP mode, judged round by round.

On a host whose speed drifts from round to round (a shared VM), medians over rounds move with the
drift; the ratio of two balancers measured back to back in the same round does not, so this
prints, per workload, each build's CPU per 10k requests and the median of its per-round ratios to
NGINX and to the first build.

Usage: bench/pair NAME=BINARY [NAME=BINARY ...] [--rounds N] [--seconds S]
"""
import os
import statistics
import sys

import side_by_side as sbs


def main(argv):
    rounds, seconds, builds = 8, 2, {}
    args = iter(argv)
    for a in args:
        if a == "--rounds":
            rounds = int(next(args))
        elif a == "--seconds":
            seconds = int(next(args))
        elif "=" in a:
            name, path = a.split("=", 1)
            builds[name] = path
        else:
            sys.exit(f"bench/pair: unknown argument {a!r}\n{__doc__}")
    if not builds:
        sys.exit(__doc__)
    servers = [sbs.nginx_server(p).pid for p in sbs.SERVERS]
    try:
        balancers, port = {}, 19400
        for name, path in builds.items():
            os.environ["FULCRUM_BIN"] = path
            balancers[name] = sbs.Balancer("fulcrum", "http", port)
            port += 10
        balancers["nginx"] = sbs.Balancer("nginx", "http", port)
        for b in balancers.values():
            b.start()
        cost = {}
        for r in range(rounds):
            for kind in ("keep_alive", "new_connection"):
                for name, b in balancers.items():
                    out, c = sbs.measured(b, sbs.wrk(b, kind, seconds=seconds), servers)
                    done = int(next(l for l in out.splitlines() if "requests in" in l).split()[0])
                    cost.setdefault((kind, name), []).append(c["balancer_cpu_s"] / done * 1e4)
            print(f"bench/pair: round {r + 1} of {rounds}", file=sys.stderr)
        names = list(builds)
        for kind in ("keep_alive", "new_connection"):
            print(f"{kind}: CPU s / 10k (median) " + ", ".join(f"{n} {statistics.median(cost[(kind, n)]):.3f}" for n in balancers))
            for n in names:
                paired = [a / b for a, b in zip(cost[(kind, n)], cost[(kind, "nginx")])]
                line = f"  {n}: {statistics.median(paired):.3f}x NGINX"
                if n != names[0]:
                    to_first = [a / b for a, b in zip(cost[(kind, n)], cost[(kind, names[0])])]
                    line += f", {statistics.median(to_first):.3f}x {names[0]}"
                print(line + f" (rounds: {', '.join(f'{x:.2f}' for x in paired)})")
    finally:
        sbs.cleanup()


if __name__ == "__main__":
    main(sys.argv[1:])
