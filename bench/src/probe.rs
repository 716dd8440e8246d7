//! What a process and the running servos hold, read from `/proc` and the
//! containers' cgroups: open file descriptors and sockets of the foreman,
//! each servo's resident memory, and each servo container's memory charge.

use std::path::Path;

/// File descriptors of `pid`, and how many of them are sockets.
pub fn fds(pid: u32) -> (usize, usize) {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return (0, 0);
    };
    let (mut all, mut sockets) = (0, 0);
    for entry in dir.flatten() {
        all += 1;
        if std::fs::read_link(entry.path())
            .is_ok_and(|t| t.to_string_lossy().starts_with("socket:"))
        {
            sockets += 1;
        }
    }
    (all, sockets)
}

/// A `/proc/<pid>/status` field in MB (`VmRSS:`, `VmHWM:`).
fn status_mb(pid: &str, field: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse::<f64>()
        .ok()
        .map(|kb| kb / 1024.0)
}

/// The memory charged to the cgroup `pid` is in (v1 `memory` controller or
/// v2 unified), in MB.
pub fn cgroup_mb(pid: &str) -> Option<f64> {
    let groups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let v1 = groups.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, ctrl, path) = (parts.next()?, parts.next()?, parts.next()?);
        ctrl.split(',')
            .any(|c| c == "memory")
            .then(|| format!("/sys/fs/cgroup/memory{path}/memory.usage_in_bytes"))
    });
    let v2 = groups
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|path| format!("/sys/fs/cgroup{path}/memory.current"));
    let file = v1.or(v2)?;
    let bytes: f64 = std::fs::read_to_string(Path::new(&file))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(bytes / 1024.0 / 1024.0)
}

/// The servos running now: each one's RSS and its container's memory
/// charge, in MB.
#[derive(Default, Clone)]
pub struct Servos {
    pub rss_mb: Vec<f64>,
    pub cgroup_mb: Vec<f64>,
}

pub fn servos() -> Servos {
    let mut out = Servos::default();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(comm) = std::fs::read_to_string(entry.path().join("comm")) else {
            continue;
        };
        if comm.trim() != "servo" {
            continue;
        }
        // The servo's own helpers (its tool runner, pack, unpack) run the
        // same binary as the agent's user: not servos.
        let helper = std::fs::read(entry.path().join("cmdline")).is_ok_and(|c| {
            c.split(|b| *b == 0)
                .nth(1)
                .is_some_and(|a| matches!(a, b"runner" | b"pack" | b"unpack"))
        });
        if helper {
            continue;
        }
        if let Some(rss) = status_mb(&pid, "VmRSS:") {
            out.rss_mb.push(rss);
        }
        if let Some(mb) = cgroup_mb(&pid) {
            out.cgroup_mb.push(mb);
        }
    }
    out
}

/// A process's user + system CPU seconds so far.
pub fn cpu_s(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return f64::NAN;
    };
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (num(11) + num(12)) / ticks.max(1.0)
}

/// Loop devices mounted below `dir` (the per-task workspace images).
pub fn mounts_below(dir: &Path) -> usize {
    let prefix = dir.to_string_lossy().into_owned();
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .nth(1)
                .is_some_and(|m| m.starts_with(&prefix))
        })
        .count()
}
