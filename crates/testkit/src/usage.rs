//! What a process used, as the operating system counts it: CPU time and resident memory from
//! `/proc`, and an ended process's CPU from the kernel's rusage. The lab reports these figures
//! per process as the papers read them from their hosts' monitors; the tests bound them.

/// What a process used: CPU seconds (user + system) and resident memory now and at its peak.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Usage {
    pub cpu_secs: f64,
    pub rss_kib: u64,
    pub peak_rss_kib: u64,
}

impl Usage {
    /// Reads `/proc/PID/stat` (CPU time of every thread, live or gone) and `/proc/PID/status`;
    /// zeros where they cannot be read.
    pub fn of(pid: u32) -> Usage {
        let (rss_kib, peak_rss_kib) = memory_kib(pid);
        Usage { cpu_secs: stat(pid).map_or(0.0, |s| s.own_ticks / TICKS_PER_SEC), rss_kib, peak_rss_kib }
    }
}

/// The ticks `/proc` counts CPU time in (USER_HZ, which Linux fixes at 100 a second there).
const TICKS_PER_SEC: f64 = 100.0;

/// What the lab reads of `/proc/PID/stat`.
struct Stat {
    parent: u32,
    /// User and system time of the process's own threads, live or gone.
    own_ticks: f64,
    /// The same of its children that ended and were reaped (`cutime` and `cstime`).
    reaped_ticks: f64,
}

fn stat(pid: u32) -> Option<Stat> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name, which may hold spaces and ends at the last ')'.
    let rest = s.get(s.rfind(')')? + 2..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i)?.parse::<f64>().ok();
    Some(Stat { parent: f.get(1)?.parse().ok()?, own_ticks: ticks(11)? + ticks(12)?, reaped_ticks: ticks(13)? + ticks(14)? })
}

/// Resident memory now and at its peak (`VmRSS`, `VmHWM` of `/proc/PID/status`), in KiB; zeros
/// where they cannot be read.
fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = |key: &str| status.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| v.split_whitespace().next()?.parse().ok()).unwrap_or(0);
    (kib("VmRSS:"), kib("VmHWM:"))
}

/// The usage of each of `roots` with all its descendants: CPU of the live processes of the tree
/// plus what their children that ended had used (`cutime` and `cstime`, which Linux adds to a
/// parent when it reaps a child), and resident memory summed over the live ones; the peak is the
/// root's own. A server that forks per session (vsftpd) is measured whole this way; for a single
/// process it is [`Usage::of`]. One pass over `/proc` serves every root.
pub fn tree_usages(roots: &[u32]) -> Vec<Usage> {
    let procs: Vec<(u32, Stat)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
            Some((pid, stat(pid)?))
        })
        .collect();
    roots
        .iter()
        .map(|&root| {
            // Breadth first from the root; each member's ticks are taken as it is found.
            let mut tree = vec![root];
            let mut ticks = 0.0;
            let mut i = 0;
            while i < tree.len() {
                let pid = tree[i];
                if let Some((_, s)) = procs.iter().find(|p| p.0 == pid) {
                    ticks += s.own_ticks + s.reaped_ticks;
                }
                tree.extend(procs.iter().filter(|p| p.1.parent == pid).map(|p| p.0));
                i += 1;
            }
            let (root_rss, peak_rss_kib) = memory_kib(root);
            let rss_kib = root_rss + tree[1..].iter().map(|&pid| memory_kib(pid).0).sum::<u64>();
            Usage { cpu_secs: ticks / TICKS_PER_SEC, rss_kib, peak_rss_kib }
        })
        .collect()
}

/// Waits for child `pid` to exit and reads its rusage (its own threads and the children it
/// reaped) without reaping it, so the `Child` that owns it still does: `waitid` with `WNOWAIT`
/// fills the rusage the kernel passes as the system call's fifth argument, which libc's
/// `waitid` does not expose.
#[allow(unsafe_code)]
pub(crate) fn exited_cpu_secs(pid: u32) -> std::io::Result<f64> {
    // SAFETY: both structs are plain data the kernel writes into; all-zero is a valid value.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: the pointers are to live, writable structs of the types the system call takes.
        let r = unsafe {
            libc::syscall(libc::SYS_waitid, libc::P_PID, pid as libc::id_t, &mut info as *mut libc::siginfo_t, libc::WEXITED | libc::WNOWAIT, &mut ru as *mut libc::rusage)
        };
        if r == 0 {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok(secs(ru.ru_utime) + secs(ru.ru_stime))
}

/// CPU seconds `pid`'s live threads have used, in nanoseconds of run time
/// (`/proc/PID/task/*/schedstat`) rather than ticks; 0 where it cannot be read.
pub fn cpu_secs_now(pid: u32) -> f64 {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten();
    let ns: u64 = tasks.filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok()?.split_whitespace().next()?.parse::<u64>().ok()).sum();
    ns as f64 / 1e9
}

/// Whether `pid` has child processes now (a scan of `/proc`: not every kernel has
/// `/proc/PID/task/TID/children`).
pub fn has_children(pid: u32) -> bool {
    std::fs::read_dir("/proc").into_iter().flatten().flatten().filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok()).any(|p| stat(p).is_some_and(|s| s.parent == pid))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Proc;
    use std::process::Command;
    use std::time::{Duration, Instant};

    #[test]
    fn a_tree_counts_its_children_live_and_ended() {
        // A shell that runs a busy child to its end and then sleeps: the ended child's CPU is in
        // the shell's cutime, and the sleeping child is a live member of the tree (`true` after
        // it, so the shell does not exec the sleep in its own place).
        let mut shell = Command::new("sh").args(["-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done & wait; sleep 30; true"]).spawn().unwrap();
        let pid = shell.id();
        let mut seen = Usage::default();
        for _ in 0..400 {
            // The sleep is looked for before the tree is read: read the other way round, a sleep
            // that started between the two reads is seen here but not counted there.
            let sleeping = std::fs::read_dir("/proc")
                .unwrap()
                .flatten()
                .any(|e| std::fs::read_to_string(e.path().join("stat")).is_ok_and(|s| s.contains("(sleep)") && s.split_whitespace().nth(3) == Some(&pid.to_string())));
            seen = tree_usages(&[pid])[0];
            if seen.cpu_secs > 0.0 && sleeping {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let own = Usage::of(pid);
        let _ = shell.kill();
        let _ = shell.wait();
        assert!(seen.cpu_secs > own.cpu_secs, "the ended child's CPU is counted: tree {seen:?}, shell alone {own:?}");
        assert!(seen.rss_kib > own.rss_kib, "the sleeping child's memory is counted: tree {seen:?}, shell alone {own:?}");
    }

    #[test]
    fn an_ended_process_counts_the_short_children_it_reaped() {
        // Forty short children, each far below /proc's 10 ms tick, then a sleep in the shell's
        // place: its rusage holds their run time, which no tick read can be less than.
        let child = Command::new("sh").args(["-c", "i=0; while [ $i -lt 40 ]; do /bin/true; i=$((i+1)); done; exec sleep 30"]).spawn().unwrap();
        let mut proc = Proc { name: "shell".into(), child };
        let pid = proc.pid();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep") {
            assert!(Instant::now() < deadline, "the shell did not reach its sleep");
            std::thread::sleep(Duration::from_millis(10));
        }
        let ticks = tree_usages(&[pid])[0].cpu_secs;
        let cpu = proc.end_measured().unwrap();
        assert!(cpu > 0.0 && cpu >= ticks, "rusage {cpu} s, /proc ticks {ticks} s");
        assert!(proc.child.try_wait().unwrap().is_some(), "the process is reaped");
    }

    #[test]
    fn own_usage_is_read_from_proc() {
        // /proc counts CPU in ticks of 10 ms: a test process that just started may have none yet,
        // so work until one is counted (bounded, not timed).
        let mut x = 0u64;
        let mut u = Usage::of(std::process::id());
        for _ in 0..2000 {
            if u.cpu_secs > 0.0 {
                break;
            }
            for i in 0..100_000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
            u = Usage::of(std::process::id());
        }
        assert!(u.rss_kib > 0 && u.peak_rss_kib >= u.rss_kib && u.cpu_secs > 0.0, "{u:?}");
    }
}
