"""Where each balancer's CPU goes: kernel or its own code, per 10,000 requests (bench/README.md).

The setup of bench/run (four nginx servers and wrk on core 0, each balancer alone on core 1),
one balancer at a time: `perf record` samples the balancer while wrk runs, `perf report --sort
dso` splits the samples between the kernel and user space, and the split is applied to the
balancer's CPU per 10,000 requests measured in the same run.
"""
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import side_by_side as sbs  # noqa: E402

SECONDS = 4


def split(data):
    """Shares of the samples: kernel, the rest (the balancer's code, libc, vdso)."""
    out = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "dso", "--stdio", "-g", "none"],
                         capture_output=True, text=True).stdout
    kernel = user = 0.0
    for line in out.splitlines():
        m = re.match(r"\s+([\d.]+)%\s+(\S+)", line)
        if not m:
            continue
        share = float(m.group(1))
        if m.group(2).startswith("[kernel"):
            kernel += share
        else:
            user += share
    total = kernel + user or 1
    return kernel / total, user / total


def main():
    servers = [sbs.nginx_server(p).pid for p in sbs.SERVERS]
    port = iter(range(19100, 19130))
    rows = []
    for mode in ("tcp", "http"):
        for name in ("haproxy", "nginx", "fulcrum"):
            b = sbs.Balancer(name, mode, next(port))
            b.start()
            for workload in ("keep_alive", "new_connection"):
                sbs.measured(b, sbs.wrk(b, workload, seconds=1), servers)
                data = str(sbs.work / f"{name}-{mode}-{workload}.perf")
                perf = subprocess.Popen(["perf", "record", "-q", "-F", "1999", "-p", ",".join(map(str, b.pids())), "-o", data],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(0.3)
                r = sbs.figures(*sbs.measured(b, sbs.wrk(b, workload, seconds=SECONDS), servers))
                perf.send_signal(2)
                perf.wait()
                per10k = r["cpu_s_per_10k"]
                kernel, user = split(data)
                rows.append((mode, workload, name, per10k, per10k * kernel, per10k * user))
                sbs.say(f"{name} {mode} {workload}: {per10k:.3f} s/10k, kernel {kernel:.0%}")
            b.stop()
    lines = ["| mode | workload | balancer | CPU s / 10k | kernel | user space |", "|---|---|---|---:|---:|---:|"]
    for mode, workload, name, total, k, u in rows:
        lines.append(f"| {mode} | {workload} | {name} | {total:.3f} | {k:.3f} | {u:.3f} |")
    report = "\n".join(["# Kernel and user space", "", f"{sbs.machine_info()['date']}; perf samples at 1999 Hz over {SECONDS} s of wrk per row.", ""] + lines) + "\n"
    print(report)
    if sbs.SAVE:
        (sbs.ROOT / "bench" / "results" / f"{sbs.SAVE}-profile.md").write_text(report)


if __name__ == "__main__":
    try:
        main()
    finally:
        sbs.cleanup()
