//! `pmig bench engine`: dump and restore throughput against their limits.
//!
//! For each size, each repetition measures, back to back:
//! 1. with the `dirtier` workload holding that much touched memory, the raw
//!    write bandwidth of the image directory (8 MiB writes of random data
//!    into a new file, no fsync — the same way the dump writes);
//! 2. right after, a dump of that workload (the process is stopped from the
//!    freeze until the image is written and verified);
//! 3. first-touch bandwidth of fresh anonymous memory (fill a new mapping);
//! 4. a restore of that image (from the command's start to the process
//!    running again, checksum verification included).

use crate::stats::{summarize, Summary};
use crate::{BenchError, Result};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

#[derive(Debug, Clone)]
pub struct Options {
    pub pmig: PathBuf,
    pub dir: PathBuf,
    pub sizes_mib: Vec<u64>,
    pub reps: usize,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    pub mib: u64,
    pub page_bytes: u64,
    pub stopped_ms: Summary,
    pub dump_ms: Summary,
    pub dump_gbps: Summary,
    pub disk_write_gbps: Summary,
    pub dump_ratio: Summary,
    pub restore_ms: Summary,
    pub restore_gbps: Summary,
    pub first_touch_gbps: Summary,
    pub restore_ratio: Summary,
}

fn sync() {
    // SAFETY: sync() has no arguments and cannot fail.
    unsafe { libc::sync() };
}

/// Start a write measurement from a known state: no dirty pages, and the
/// clean page cache dropped (when we may), so that the raw write and the
/// dump that follows it meet the same conditions.
fn settle() {
    sync();
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "1");
}

/// Write `bytes` of random data into a new file in `dir`, 8 MiB at a time.
pub fn disk_write_gbps(dir: &Path, bytes: u64) -> Result<f64> {
    let path = dir.join(".pmig-bench-raw");
    settle();
    let mut block = vec![0u8; 8 << 20];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for c in block.chunks_exact_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c.copy_from_slice(&x.to_le_bytes());
    }
    sync();
    let t = Instant::now();
    let mut f = std::fs::File::create(&path)
        .map_err(|e| BenchError::Io(format!("create {}", path.display()), e))?;
    let mut left = bytes;
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        f.write_all(&block[..n])
            .map_err(|e| BenchError::Io("raw write".into(), e))?;
        left -= n as u64;
    }
    drop(f);
    let secs = t.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&path);
    sync();
    Ok(bytes as f64 / secs / 1e9)
}

/// Fill `bytes` of fresh anonymous memory.
pub fn first_touch_gbps(bytes: u64) -> Result<f64> {
    let len = bytes as usize;
    // SAFETY: a fresh private anonymous mapping, unmapped below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(BenchError::Io(
            "mmap".into(),
            std::io::Error::last_os_error(),
        ));
    }
    let t = Instant::now();
    // SAFETY: p points to len writable bytes we own.
    unsafe { std::ptr::write_bytes(p as *mut u8, 0x5a, len) };
    let secs = t.elapsed().as_secs_f64();
    // SAFETY: unmapping what we mapped.
    unsafe { libc::munmap(p, len) };
    Ok(bytes as f64 / secs / 1e9)
}

fn json_of(out: &[u8]) -> Result<serde_json::Value> {
    let s = String::from_utf8_lossy(out);
    let line = s
        .lines()
        .find(|l| l.starts_with('{'))
        .ok_or_else(|| BenchError::Failed(format!("no JSON in output: {s}")))?;
    serde_json::from_str(line).map_err(|e| BenchError::Failed(format!("bad JSON {line}: {e}")))
}

fn num(v: &serde_json::Value, k: &str) -> f64 {
    v.get(k).and_then(|x| x.as_f64()).unwrap_or(f64::NAN)
}

/// Kill a process that is not our child and wait (bounded) until it is gone.
fn kill_and_wait(pid: i32) {
    // SAFETY: sending a signal.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    for _ in 0..500 {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

struct One {
    disk_gbps: f64,
    page_bytes: f64,
    stopped_ms: f64,
    dump_ms: f64,
    restore_ms: f64,
}

fn one(o: &Options, mib: u64) -> Result<One> {
    let dirtier = crate::workload("dirtier")?;
    let img = o.dir.join(format!("img-{mib}"));
    let _ = std::fs::remove_dir_all(&img);
    sync();
    let mut w = crate::clean_command(&dirtier)
        .args([
            "--mib",
            &mib.to_string(),
            "--dirty-rate",
            "0",
            "--seconds",
            "0",
            "--report-ms",
            "0",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| BenchError::Io(format!("start {}", dirtier.display()), e))?;
    let mut out = BufReader::new(w.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line)
        .map_err(|e| BenchError::Io("read workload".into(), e))?;
    if !line.starts_with("READY") {
        let _ = w.kill();
        return Err(BenchError::Failed(format!(
            "workload did not start: {line}"
        )));
    }
    drop(out);
    // The disk's write bandwidth under the same conditions as the dump:
    // the workload resident, right before it is dumped.
    let disk_gbps = disk_write_gbps(&o.dir, mib << 20)?;
    settle();
    let t = Instant::now();
    let d = Command::new(&o.pmig)
        .args(["dump", "--json", "--pid", &w.id().to_string(), "--dir"])
        .arg(&img)
        .output();
    let dump_wall = t.elapsed().as_secs_f64() * 1e3;
    let _ = w.kill();
    let _ = w.wait();
    let d = d.map_err(|e| BenchError::Io("run pmig dump".into(), e))?;
    if !d.status.success() {
        return Err(BenchError::Failed(format!(
            "pmig dump failed: {}",
            String::from_utf8_lossy(&d.stderr).trim()
        )));
    }
    let dj = json_of(&d.stdout)?;
    let page_bytes = num(&dj, "page_bytes");
    let dump_ms = num(&dj, "frozen_ms");
    let stopped_ms = dump_ms + num(&dj, "verify_ms");
    let _ = dump_wall;
    // Restore: the command's own figure covers verify + rebuild + resume.
    // The restored workload's stdout would otherwise be ours (the pipe we
    // read the JSON from) and we would wait for its EOF forever.
    let r = Command::new(&o.pmig)
        .args([
            "restore",
            "--detach",
            "--json",
            "--stdout",
            "/dev/null",
            "--dir",
        ])
        .arg(&img)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output();
    let r = r.map_err(|e| BenchError::Io("run pmig restore".into(), e))?;
    if !r.status.success() {
        return Err(BenchError::Failed(format!(
            "pmig restore failed: {}",
            String::from_utf8_lossy(&r.stderr).trim()
        )));
    }
    let rj = json_of(&r.stdout)?;
    kill_and_wait(num(&rj, "pid") as i32);
    let _ = std::fs::remove_dir_all(&img);
    sync();
    Ok(One {
        disk_gbps,
        page_bytes,
        stopped_ms,
        dump_ms,
        restore_ms: num(&rj, "total_ms"),
    })
}

pub fn run(o: &Options, progress: &dyn Fn(&str)) -> Result<Vec<Row>> {
    std::fs::create_dir_all(&o.dir)
        .map_err(|e| BenchError::Io(format!("create {}", o.dir.display()), e))?;
    let mut rows = Vec::new();
    for &mib in &o.sizes_mib {
        let bytes = mib << 20;
        let (mut stopped, mut dump, mut dump_bw, mut disk, mut dratio) =
            (vec![], vec![], vec![], vec![], vec![]);
        let (mut rest, mut rest_bw, mut touch, mut rratio) = (vec![], vec![], vec![], vec![]);
        let mut page_bytes = 0.0;
        for rep in 0..o.reps {
            progress(&format!("{mib} MiB, repetition {}/{}", rep + 1, o.reps));
            let r = one(o, mib)?;
            let disk_bw = r.disk_gbps;
            let touch_bw = first_touch_gbps(bytes)?;
            page_bytes = r.page_bytes;
            let dbw = r.page_bytes / (r.dump_ms / 1e3) / 1e9;
            let rbw = r.page_bytes / (r.restore_ms / 1e3) / 1e9;
            stopped.push(r.stopped_ms);
            dump.push(r.dump_ms);
            dump_bw.push(dbw);
            disk.push(disk_bw);
            dratio.push(dbw / disk_bw);
            rest.push(r.restore_ms);
            rest_bw.push(rbw);
            touch.push(touch_bw);
            rratio.push(rbw / touch_bw);
        }
        rows.push(Row {
            mib,
            page_bytes: page_bytes as u64,
            stopped_ms: summarize(&stopped),
            dump_ms: summarize(&dump),
            dump_gbps: summarize(&dump_bw),
            disk_write_gbps: summarize(&disk),
            dump_ratio: summarize(&dratio),
            restore_ms: summarize(&rest),
            restore_gbps: summarize(&rest_bw),
            first_touch_gbps: summarize(&touch),
            restore_ratio: summarize(&rratio),
        });
    }
    Ok(rows)
}

fn cell(s: &Summary, prec: usize) -> String {
    format!("{:.p$} ({:.p$}–{:.p$})", s.median, s.min, s.max, p = prec)
}

pub fn markdown(rows: &[Row]) -> String {
    let mut t = String::from(
        "| MiB | stopped ms | dump ms | dump GB/s | disk write GB/s | dump / disk | restore ms | restore GB/s | first touch GB/s | restore / first touch |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        t.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.mib,
            cell(&r.stopped_ms, 0),
            cell(&r.dump_ms, 0),
            cell(&r.dump_gbps, 2),
            cell(&r.disk_write_gbps, 2),
            cell(&r.dump_ratio, 2),
            cell(&r.restore_ms, 0),
            cell(&r.restore_gbps, 2),
            cell(&r.first_touch_gbps, 2),
            cell(&r.restore_ratio, 2),
        ));
    }
    t
}
