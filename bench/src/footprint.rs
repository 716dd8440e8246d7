//! Footprint: the foreman's memory with a long queue, `task status` with a
//! big database, the servo binary and what the image adds to its base.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::json;

use crate::env::{Env, progress};
use crate::history;
use crate::project::{Project, interrupt_twice, rss_mb};
use crate::stats::{Figure, median};

/// Foreman RSS while 8 tasks run (each sleeps 3 s, so they keep being
/// collected and replaced) and the rest of the queue waits.
pub async fn foreman_rss(env: &Env) -> anyhow::Result<Figure> {
    let queued = env.sizes.queued;
    progress(&format!(
        "footprint: foreman memory with {queued} queued and 8 running"
    ));
    let p = Project::new(env, 8)?;
    let result = measure_rss(env, &p, queued).await;
    p.cleanup(env).await;
    result
}

async fn measure_rss(env: &Env, p: &Project, queued: usize) -> anyhow::Result<Figure> {
    let prompt = p.replay_prompt(
        "sleep",
        &[
            (
                "execute_shell",
                json!({"command": "sleep 3", "timeout_s": 60}),
            ),
            ("task_complete", json!({"message": "ok"})),
        ],
    )?;
    let first = p.submit(&prompt)?;
    p.clone_queued(&first, queued + 8 - 1)?;
    let mut serve = p.spawn(&["serve", "-j", "8"], "serve.log", "saheeli=info,warn")?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while p.count("running")? < 8 {
        if Instant::now() > deadline || serve.try_wait()?.is_some() {
            interrupt_twice(&mut serve).await?;
            bail!("8 tasks never ran at once: {}", p.read_log("serve.log"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut rss = Vec::new();
    let mut peak: f64 = 0.0;
    for _ in 0..env.sizes.rss_samples {
        let (now, hwm) = rss_mb(serve.id())?;
        rss.push(now);
        peak = peak.max(hwm);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let left = p.count("queued")?;
    let t0 = Instant::now();
    interrupt_twice(&mut serve).await?;
    let stop_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let done = p.count("complete")?;
    Ok(Figure::new(
        &format!("foreman RSS, {queued} queued + 8 running"),
        "MB",
        &rss,
    )
    .at_most(30.0)
    .detail("VmHWM peak MB", peak)
    .note(format!(
        "peak (VmHWM) {peak:.1} MB; {done} tasks done and {left} still queued when measured; stopped (two SIGINTs) in {stop_ms:.0} ms"
    )))
}

/// `task status` (the table of the 50 newest, its --json, and one task in
/// detail) with a big database of realistic history.
pub async fn status_latency(env: &Env) -> anyhow::Result<Vec<Figure>> {
    let rows = env.sizes.status_rows;
    progress(&format!(
        "footprint: `task status` with {rows} tasks in the database"
    ));
    let p = Project::new(env, 8)?;
    let result = measure_status(&p, rows);
    p.cleanup(env).await;
    result
}

fn measure_status(p: &Project, rows: usize) -> anyhow::Result<Vec<Figure>> {
    let prompt = p.one_step()?;
    let template = p.submit(&prompt)?;
    let t0 = Instant::now();
    let (events, some_id) = history::fill(p, &template, rows - 1)?;
    progress(&format!(
        "footprint: wrote {rows} tasks and {events} events in {:.1}s",
        t0.elapsed().as_secs_f64()
    ));
    let db_mb = std::fs::metadata(p.db_path())?.len() as f64 / 1e6;
    let time = |args: &[&str]| -> anyhow::Result<Vec<f64>> {
        p.ok(args)?; // warm the page cache
        let mut xs = Vec::new();
        for _ in 0..7 {
            let t0 = Instant::now();
            p.ok(args)?;
            xs.push(t0.elapsed().as_secs_f64() * 1000.0);
        }
        Ok(xs)
    };
    let note = format!(
        "{rows} tasks, {events} events, database {db_mb:.0} MB; the whole process, 7 runs after a warm-up"
    );
    let table = time(&["task", "status"])?;
    let json = time(&["task", "status", "--json"])?;
    let one = time(&["task", "status", &some_id])?;
    Ok(vec![
        Figure::new(&format!("task status (table), {rows} tasks"), "ms", &table)
            .at_most(100.0)
            .note(note),
        Figure::new(&format!("task status --json, {rows} tasks"), "ms", &json).at_most(100.0),
        Figure::new(&format!("task status ID, {rows} tasks"), "ms", &one).note(format!(
            "one task in detail; median of the table {:.1} ms",
            median(&table)
        )),
    ])
}

/// Whether an ELF file still has a symbol table or debug sections.
fn has_symbols(elf: &[u8]) -> anyhow::Result<bool> {
    let u16_at = |o: usize| -> Option<u64> {
        Some(u16::from_le_bytes(elf.get(o..o + 2)?.try_into().ok()?) as u64)
    };
    let u32_at = |o: usize| -> Option<u64> {
        Some(u32::from_le_bytes(elf.get(o..o + 4)?.try_into().ok()?) as u64)
    };
    let u64_at =
        |o: usize| -> Option<u64> { Some(u64::from_le_bytes(elf.get(o..o + 8)?.try_into().ok()?)) };
    if elf.get(0..5) != Some(b"\x7fELF\x02") {
        bail!("not a 64-bit ELF file");
    }
    let parse = || -> Option<bool> {
        let shoff = u64_at(0x28)? as usize;
        let shentsize = u16_at(0x3A)? as usize;
        let shnum = u16_at(0x3C)? as usize;
        let shstrndx = u16_at(0x3E)? as usize;
        let strtab = shoff + shstrndx * shentsize;
        let names = u64_at(strtab + 0x18)? as usize;
        let mut found = false;
        for i in 0..shnum {
            let sh = shoff + i * shentsize;
            let off = names + u32_at(sh)? as usize;
            let end = elf[off..].iter().position(|&b| b == 0)? + off;
            let name = &elf[off..end];
            found |= name == b".symtab" || name.starts_with(b".debug_");
        }
        Some(found)
    };
    parse().context("reading the ELF section headers")
}

/// Whether an ELF file asks for a program interpreter (is dynamically
/// linked): a `PT_INTERP` among its program headers.
fn is_dynamic(elf: &[u8]) -> anyhow::Result<bool> {
    let parse = || -> Option<bool> {
        let u16_at = |o: usize| Some(u16::from_le_bytes(elf.get(o..o + 2)?.try_into().ok()?));
        let phoff = u64::from_le_bytes(elf.get(0x20..0x28)?.try_into().ok()?) as usize;
        let phentsize = u16_at(0x36)? as usize;
        let phnum = u16_at(0x38)? as usize;
        let mut dynamic = false;
        for i in 0..phnum {
            let ph = phoff + i * phentsize;
            dynamic |= u32::from_le_bytes(elf.get(ph..ph + 4)?.try_into().ok()?) == 3;
        }
        Some(dynamic)
    };
    parse().context("reading the ELF program headers")
}

/// The servo binary (stripped), and what the servo image adds to its base.
pub async fn sizes(env: &Env, servo: &std::path::Path) -> anyhow::Result<(Figure, Figure)> {
    progress("footprint: servo binary and image sizes");
    let bytes = std::fs::read(servo).with_context(|| {
        format!(
            "reading `{}` (build it with `scripts/servo-bin.sh`)",
            servo.display()
        )
    })?;
    let mut size = bytes.len() as f64 / 1e6;
    // Static, as scripts/servo-bin.sh builds it; a dynamic one reads its
    // libraries through each container's storage driver.
    let linking = if is_dynamic(&bytes)? {
        "dynamically linked"
    } else {
        "static"
    };
    let mut how = "as built (the release profile strips it)".to_string();
    if has_symbols(&bytes)? {
        let dir = tempfile::tempdir()?;
        let out = dir.path().join("servo");
        let st = std::process::Command::new("strip")
            .arg("-o")
            .arg(&out)
            .arg(servo)
            .status()
            .context("running `strip` (binutils)")?;
        if !st.success() {
            bail!("`strip` failed on `{}`", servo.display());
        }
        how = format!("after `strip` (as built: {size:.2} MB)");
        size = std::fs::metadata(&out)?.len() as f64 / 1e6;
    }
    let image_size = |img: String| {
        let d = env.docker.clone();
        async move {
            d.inspect_image(&img)
                .await
                .with_context(|| format!("inspecting image `{img}`"))
                .map(|i| i.size.unwrap_or(0) as f64 / 1e6)
        }
    };
    let over = image_size(env.image.clone()).await? - image_size(env.base.clone()).await?;
    Ok((
        Figure::new("servo binary (release, stripped)", "MB", &[size])
            .at_most(12.0)
            .note(format!("`{}` {how}; {linking}", servo.display())),
        Figure::new("servo image over its base", "MB", &[over])
            .note(format!("`{}` minus `{}`", env.image, env.base)),
    ))
}
