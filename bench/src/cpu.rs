//! Where the CPU goes during a burst: the whole machine's busy time
//! (`/proc/stat`), the daemons' (`dockerd`, `containerd`, read from their
//! `/proc/<pid>/stat`), and the `saheeli` processes the bench waited for
//! (`getrusage(RUSAGE_CHILDREN)`). The rest is containerd shims, runc,
//! the kernel's container set-up and the containers' own processes.

use serde::Serialize;

/// CPU seconds so far.
#[derive(Clone, Copy, Debug, Default)]
pub struct Snapshot {
    machine_busy: f64,
    daemons: f64,
    children: f64,
}

/// CPU seconds between two snapshots, by consumer.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Usage {
    pub machine: f64,
    pub daemons: f64,
    pub saheeli: f64,
    pub rest: f64,
}

fn ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

fn machine_busy() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = stat.lines().next() else {
        return 0.0;
    };
    let v: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal …
    let total: f64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0.0) + v.get(4).copied().unwrap_or(0.0);
    (total - idle) / ticks()
}

/// utime + stime of every process whose name is one of `names`.
fn process_cpu(names: &[&str]) -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    let mut sum = 0.0;
    for entry in dir.flatten() {
        let path = entry.path();
        let Ok(comm) = std::fs::read_to_string(path.join("comm")) else {
            continue;
        };
        if !names.contains(&comm.trim()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(path.join("stat")) else {
            continue;
        };
        // Fields after the `(comm)`: state is field 3; utime 14, stime 15.
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let f: Vec<&str> = rest.split_whitespace().collect();
        let num = |i: usize| f.get(i).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
        sum += num(11) + num(12);
    }
    sum / ticks()
}

fn children() -> f64 {
    // SAFETY: a zeroed rusage is valid; getrusage only writes into it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(ru.ru_utime) + secs(ru.ru_stime)
}

/// The share of the machine's CPU busy over the next `d` (0 to 1), with
/// nothing of ours running: anything above a few percent is someone else.
pub async fn busy_share(d: std::time::Duration) -> f64 {
    let (b0, t0) = (machine_busy(), std::time::Instant::now());
    tokio::time::sleep(d).await;
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1) as f64;
    (machine_busy() - b0) / (t0.elapsed().as_secs_f64() * cpus)
}

impl Snapshot {
    pub fn now() -> Snapshot {
        Snapshot {
            machine_busy: machine_busy(),
            daemons: process_cpu(&["dockerd", "containerd"]),
            children: children(),
        }
    }

    /// CPU used since `self`. `saheeli` counts only child processes that
    /// have been waited for.
    pub fn since(&self) -> Usage {
        let now = Snapshot::now();
        let machine = now.machine_busy - self.machine_busy;
        let daemons = now.daemons - self.daemons;
        let saheeli = now.children - self.children;
        Usage {
            machine,
            daemons,
            saheeli,
            rest: machine - daemons - saheeli,
        }
    }
}

impl Usage {
    /// One line for the table; `items` containers or tasks ran.
    pub fn describe(&self, items: usize) -> String {
        format!(
            "CPU s: machine {:.1} ({:.0} ms per item), dockerd+containerd {:.1}, saheeli {:.1}, rest (shims, runc, kernel, containers) {:.1}",
            self.machine,
            self.machine * 1000.0 / items.max(1) as f64,
            self.daemons,
            self.saheeli,
            self.rest
        )
    }
}
