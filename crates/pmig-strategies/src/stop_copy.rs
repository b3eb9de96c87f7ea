//! `stop-copy`: total copy while the process is stopped.
//!
//! Source: freeze the process and capture it into a tmpfs staging directory (the
//! holder keeps it frozen), stream every image file to the destination in large
//! chunks, wait for `Restored`, then kill the frozen original (`Commit`).
//! Destination: write the files into its own staging directory, verify the image,
//! restore it with `pmig restore --detach` in a helper process, reply `Restored`.
//!
//! See docs/protocol.md, "stop-copy", for the sequence diagram.

use crate::clock::{mark, mono_ns};
use crate::error::{io_err, Result, StrategyError};
use crate::holder::Holder;
use crate::{Destination, Progress, Source, Strategy, StrategyKind};
use pmig_proto::blocking::Incoming;
use pmig_proto::{code, Msg};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

/// Bytes of image data per `ImageChunk` message.
pub const CHUNK: usize = 16 << 20;

/// Files of an image, in sending order (the manifest last).
const FILES: [&str; 3] = [
    pmig_image::PARTS_FILE,
    pmig_image::PAGES_FILE,
    pmig_image::MANIFEST_FILE,
];

#[derive(Debug, Default)]
pub struct StopCopy;

/// A read-only memory map of a whole file (zero-copy sending).
struct Map {
    ptr: *mut libc::c_void,
    len: usize,
}

impl Map {
    fn new(f: &File, len: usize) -> std::io::Result<Map> {
        if len == 0 {
            return Ok(Map {
                ptr: std::ptr::null_mut(),
                len: 0,
            });
        }
        // SAFETY: a private read-only mapping of a file we hold open; the staging
        // file is not modified while mapped (the holder finished writing it).
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                f.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Map { ptr, len })
    }

    fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `ptr` maps `len` readable bytes for the lifetime of `self`.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: unmapping exactly the mapping created in `new`.
            unsafe { libc::munmap(self.ptr, self.len) };
        }
    }
}

/// Streams the image files of `dir` to the destination.
pub(crate) fn send_image(m: &mut Source, dir: &Path) -> Result<u64> {
    let mut sizes = Vec::new();
    for name in FILES {
        let p = dir.join(name);
        let len = std::fs::metadata(&p)
            .map_err(io_err(format!("stat {}", p.display())))?
            .len();
        sizes.push(len);
    }
    let total: u64 = sizes.iter().sum();
    let mut done = 0u64;
    (m.progress)(Progress {
        phase: "transfer",
        done,
        total,
    });
    for (name, &size) in FILES.iter().zip(&sizes) {
        let p = dir.join(name);
        let f = File::open(&p).map_err(io_err(format!("open {}", p.display())))?;
        let map = Map::new(&f, size as usize).map_err(io_err(format!("map {}", p.display())))?;
        m.ch.queue(
            &Msg::ImageFile {
                id: m.id,
                name: name.to_string(),
                size,
            },
            &[],
        )?;
        m.count(32);
        for (i, chunk) in map.bytes().chunks(CHUNK).enumerate() {
            m.ch.send_with(
                &Msg::ImageChunk {
                    id: m.id,
                    offset: (i * CHUNK) as u64,
                },
                &[chunk],
            )?;
            m.count(chunk.len() as u64 + 24);
            done += chunk.len() as u64;
            (m.progress)(Progress {
                phase: "transfer",
                done,
                total,
            });
        }
    }
    m.ch.send(&Msg::ImageDone {
        id: m.id,
        files: FILES.len() as u32,
        bytes: total,
    })?;
    m.count(24);
    Ok(total)
}

impl Strategy for StopCopy {
    fn kind(&self) -> StrategyKind {
        StrategyKind::StopCopy
    }

    fn prepare(&mut self, _m: &mut Source) -> Result<()> {
        Ok(())
    }

    fn handover(&mut self, m: &mut Source) -> Result<()> {
        let host = m.host;
        std::fs::create_dir_all(&m.staging)
            .map_err(io_err(format!("create {}", m.staging.display())))?;
        let holder = Holder::start(host, m.pid, &m.staging.clone())?;
        m.stopped_ns = Some(holder.captured.frozen_ns);
        m.pages_sent = holder.captured.page_bytes / pmig_image::PAGE_SIZE;
        tracing::info!(
            "process {} frozen and captured in {:.1} ms ({:.1} MiB of pages)",
            m.pid,
            (holder.captured.captured_ns - holder.captured.frozen_ns) as f64 / 1e6,
            holder.captured.page_bytes as f64 / (1 << 20) as f64
        );
        m.holder = Some(holder);
        let staging = m.staging.clone();
        send_image(m, &staging)?;
        m.await_restored()
    }

    fn post(&mut self, m: &mut Source) -> Result<()> {
        // Nothing is owed after a total copy: remove the source copy now.
        m.commit()?;
        m.residual.until = "handover (nothing remains on the source)".into();
        Ok(())
    }

    fn destination(&mut self, d: &mut Destination) -> Result<i32> {
        let dir = d.staging.clone();
        prespawn_restore(d, &dir, false);
        receive_image(d)?;
        restore_and_reply(d, mono_ns())
    }
}

/// Destination, once the staging directory holds the complete image (received
/// at `t_done`, CLOCK_MONOTONIC): restore it, reply `Restored` (or `Error`), and
/// wait for `Commit`. Returns the pid of the restored process.
pub(crate) fn restore_and_reply(d: &mut Destination, t_done: u64) -> Result<i32> {
    if d.hooks.hang_before_restore {
        tracing::warn!("test hook: not answering migration {}", d.offer.id);
        std::thread::sleep(Duration::from_secs(3600));
    }
    let (pid, original_pid, resumed_ns) = match restore(d) {
        Ok(x) => x,
        Err((code, e)) => {
            let text = format!("{}: {e}", d.host.node());
            let _ = d.ch.send(&Msg::Error {
                code,
                text: text.chars().take(4000).collect(),
            });
            return Err(StrategyError::Other(text));
        }
    };
    let now = mono_ns();
    d.ch.send(&Msg::Restored {
        id: d.offer.id,
        pid,
        original_pid,
        restore_us: (resumed_ns.saturating_sub(t_done)) / 1000,
        since_resume_us: now.saturating_sub(resumed_ns) / 1000,
    })?;
    await_commit(d, pid)?;
    Ok(pid)
}

/// Destination: receive `ImageFile`/`ImageChunk` until `ImageDone`.
pub(crate) fn receive_image(d: &mut Destination) -> Result<u64> {
    let dir = d.staging.clone();
    receive_image_into(d, &dir)
}

/// [`receive_image`] into another directory than the staging one.
pub(crate) fn receive_image_into(d: &mut Destination, dir: &Path) -> Result<u64> {
    receive_image_after(d, dir, None)
}

/// [`receive_image_into`] whose first message (`ImageFile`) may have been
/// received already, e.g. by a pre-copy destination reading pages until the
/// image starts.
pub(crate) fn receive_image_after(
    d: &mut Destination,
    dir: &Path,
    mut first: Option<Incoming>,
) -> Result<u64> {
    let mut current: Option<(String, File, u64, u64)> = None; // name, file, size, written
    let mut files = 0u32;
    let mut total = 0u64;
    let bad = |what: String| StrategyError::Protocol {
        node: String::new(),
        what,
    };
    loop {
        let inc = match first.take() {
            Some(inc) => inc,
            None => d.ch.recv_with()?,
        };
        let (msg, body, att) = inc.into_parts();
        let data = &body[att..];
        match msg {
            Msg::ImageFile { id, name, size } if id == d.offer.id => {
                if let Some((n, _, s, w)) = &current {
                    if w != s {
                        return Err(bad(format!("file {n} ended after {w} of {s} bytes")));
                    }
                }
                if !pmig_proto::is_safe_file_name(&name) {
                    return Err(bad(format!("invalid file name {name:?}")));
                }
                let p = dir.join(&name);
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&p)
                    .map_err(io_err(format!("create {}", p.display())))?;
                files += 1;
                current = Some((name, f, size, 0));
            }
            Msg::ImageChunk { id, offset } if id == d.offer.id => {
                let Some((name, f, size, written)) = current.as_mut() else {
                    return Err(bad("image data before any ImageFile".into()));
                };
                if offset != *written || *written + data.len() as u64 > *size {
                    return Err(bad(format!(
                        "chunk of {} bytes at offset {offset} does not continue file {name} ({written} of {size} bytes written)",
                        data.len()
                    )));
                }
                f.write_all(data)
                    .map_err(io_err(format!("write {}", dir.join(&*name).display())))?;
                *written += data.len() as u64;
                total += data.len() as u64;
                d.count_received(data.len() as u64);
            }
            Msg::ImageDone {
                id,
                files: n,
                bytes,
            } if id == d.offer.id => {
                if let Some((name, _, s, w)) = &current {
                    if w != s {
                        return Err(bad(format!("file {name} ended after {w} of {s} bytes")));
                    }
                }
                if n != files || bytes != total {
                    return Err(bad(format!(
                        "image announced {n} files and {bytes} bytes, got {files} and {total}"
                    )));
                }
                return Ok(total);
            }
            Msg::Abort { reason, .. } => {
                return Err(StrategyError::Refused {
                    node: d.peer.clone(),
                    code: code::INTERNAL,
                    text: format!("the source aborted: {reason}"),
                })
            }
            other => {
                let e = format!("unexpected {} during the image transfer", other.kind());
                let _ = d.ch.send(&Msg::Error {
                    code: code::UNEXPECTED,
                    text: e.clone(),
                });
                return Err(bad(e));
            }
        }
    }
}

fn stdio_file(d: &Destination) -> std::path::PathBuf {
    let dir = d.host.state_dir().join("procs");
    let _ = std::fs::create_dir_all(&dir);
    let comm: String = d
        .offer
        .comm
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    dir.join(format!("{comm}-{}-{}.out", d.offer.pid, d.offer.id))
}

/// Destination: verify the staged image and restore it in a helper. Returns
/// (pid, original pid, CLOCK_MONOTONIC when it was resumed).
pub(crate) fn restore(d: &mut Destination) -> std::result::Result<(i32, i32, u64), (u32, String)> {
    let dir = d.staging.clone();
    restore_from(d, &dir, false).map(|r| (r.pid, r.original_pid, r.resumed_ns))
}

/// What [`restore_from`] started.
pub(crate) struct Started {
    pub pid: i32,
    pub original_pid: i32,
    /// CLOCK_MONOTONIC when it was resumed.
    pub resumed_ns: u64,
    /// Lazy restores: the fd number of the userfaultfd the process keeps.
    pub uffd_fd: Option<i32>,
}

/// A `pmig restore --wait-go` started while the image is still on its way:
/// starting the program costs about 1.5 ms here, which would otherwise count
/// in the process's down time. Dropped unused, it reads end-of-file and exits
/// having done nothing.
pub(crate) struct Prespawned<'a> {
    host: &'a dyn crate::Host,
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    dir: PathBuf,
    lazy: bool,
    out: PathBuf,
    err_path: PathBuf,
}

impl Drop for Prespawned<'_> {
    fn drop(&mut self) {
        drop(self.stdin.take());
        if let Some(mut c) = self.child.take() {
            let _ = self.host.wait(&mut c);
        }
    }
}

impl Prespawned<'_> {
    /// Tells it to go on; None if it is gone (then a fresh one is started).
    fn go(mut self) -> Option<(Child, PathBuf, PathBuf)> {
        let mut stdin = self.stdin.take()?;
        if stdin.write_all(b"go\n").is_err() {
            return None;
        }
        drop(stdin);
        let child = self.child.take()?;
        Some((child, self.out.clone(), self.err_path.clone()))
    }
}

/// The `pmig restore --detach --json` command for the image in `dir` (with
/// `--lazy` for post-copy), its stdout file and its error file.
fn restore_command(
    d: &Destination,
    dir: &Path,
    lazy: bool,
) -> std::result::Result<(Command, PathBuf, PathBuf), (u32, String)> {
    let [stdin, out, err] = match d.host.stdio_for(&d.peer, &d.offer) {
        Some(s) => s,
        None => {
            let out = stdio_file(d);
            [PathBuf::from("/dev/null"), out.clone(), out]
        }
    };
    let err_path = d.staging.join("restore.err");
    let err_file = File::create(&err_path).map_err(|e| (code::INTERNAL, e.to_string()))?;
    let mut cmd = Command::new(d.host.exe());
    cmd.args(["restore", "--detach", "--json", "--dir"])
        .arg(dir)
        .args(if lazy { &["--lazy"][..] } else { &[] })
        .arg("--stdin")
        .arg(&stdin)
        .arg("--stdout")
        .arg(&out)
        .arg("--stderr")
        .arg(&err)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(err_file));
    d.host.wrap_restore(&d.peer, &d.offer, &mut cmd);
    Ok((cmd, out, err_path))
}

/// Starts the restore of the image that will arrive in `dir` ahead of it
/// (see [`Prespawned`]). Without success nothing is lost: [`restore_from`]
/// then starts it as before.
pub(crate) fn prespawn_restore(d: &mut Destination, dir: &Path, lazy: bool) {
    let Ok((mut cmd, out, err_path)) = restore_command(d, dir, lazy) else {
        return;
    };
    cmd.arg("--wait-go").stdin(Stdio::piped());
    match d.host.spawn(&mut cmd) {
        Ok(mut child) => {
            let stdin = child.stdin.take();
            d.restorer = Some(Prespawned {
                host: d.host,
                child: Some(child),
                stdin,
                dir: dir.to_path_buf(),
                lazy,
                out,
                err_path,
            });
        }
        Err(e) => tracing::debug!("pmig restore not started ahead: {e}"),
    }
}

/// Verify the image in `dir` and restore it in a helper (`pmig restore
/// --detach`, with `--lazy` for post-copy): the one started ahead by
/// [`prespawn_restore`] for the same image, else a new one.
pub(crate) fn restore_from(
    d: &mut Destination,
    dir: &Path,
    lazy: bool,
) -> std::result::Result<Started, (u32, String)> {
    let ahead = d.restorer.take().filter(|p| p.dir == dir && p.lazy == lazy);
    pmig_image::Image::open_verified(dir).map_err(|e| {
        (
            code::BAD_IMAGE,
            format!("the image failed verification: {e}"),
        )
    })?;
    mark("dst: image verified");
    if d.hooks.fail_restore {
        return Err((
            code::RESTORE_FAILED,
            "restore failed: test hook fail-restore".into(),
        ));
    }
    let (mut child, out, err_path) = match ahead.and_then(Prespawned::go) {
        Some(x) => x,
        None => {
            let (mut cmd, out, err_path) = restore_command(d, dir, lazy)?;
            let child = d.host.spawn(&mut cmd).map_err(|e| {
                (
                    code::RESTORE_FAILED,
                    format!("cannot run pmig restore: {e}"),
                )
            })?;
            (child, out, err_path)
        }
    };
    mark("dst: pmig restore started");
    let mut json = String::new();
    let _ = child.stdout.take().map(|mut s| s.read_to_string(&mut json));
    let resumed_ns = mono_ns();
    mark("dst: pmig restore output read");
    let st = d.host.wait(&mut child).map_err(|e| {
        (
            code::RESTORE_FAILED,
            format!("waiting for pmig restore: {e}"),
        )
    })?;
    mark("dst: pmig restore exited");
    if tracing::enabled!(target: "pmig_timing", tracing::Level::DEBUG) {
        for l in std::fs::read_to_string(&err_path)
            .unwrap_or_default()
            .lines()
        {
            tracing::debug!(target: "pmig_timing", "pmig restore: {l}");
        }
    }
    if !st.success() {
        let err = std::fs::read_to_string(&err_path).unwrap_or_default();
        let line = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no error output")
            .trim_start_matches("pmig: ")
            .to_string();
        return Err((code::RESTORE_FAILED, line));
    }
    let v: serde_json::Value = serde_json::from_str(json.trim()).map_err(|e| {
        (
            code::RESTORE_FAILED,
            format!("pmig restore printed {json:?}: {e}"),
        )
    })?;
    let pid = v["pid"].as_i64().unwrap_or(0) as i32;
    let orig = v["original_pid"].as_i64().unwrap_or(0) as i32;
    if pid <= 0 {
        return Err((
            code::RESTORE_FAILED,
            format!("pmig restore printed {json:?}"),
        ));
    }
    tracing::info!(
        "restored process {} ({}) from {} as pid {pid}; its terminal/pipe stdio goes to {}",
        d.offer.pid,
        d.offer.comm,
        d.peer,
        out.display()
    );
    Ok(Started {
        pid,
        original_pid: orig,
        resumed_ns,
        uffd_fd: v["uffd_fd"].as_i64().map(|f| f as i32),
    })
}

/// Destination, after `Restored`: wait until the source confirms that its copy is
/// gone. An `Abort` means the source resumed its copy (it gave up waiting): kill ours.
pub(crate) fn await_commit(d: &mut Destination, pid: i32) -> Result<()> {
    let _ =
        d.ch.stream()
            .set_read_timeout(Some(Duration::from_secs(60)));
    match d.ch.recv() {
        Ok(Msg::Commit { id }) if id == d.offer.id => {
            tracing::info!(
                "migration {} committed: process {} runs here as pid {pid}",
                d.offer.id,
                d.offer.comm
            );
            Ok(())
        }
        Ok(Msg::Abort { reason, .. }) => {
            tracing::warn!(
                "the source aborted migration {} after the restore ({reason}); killing the restored copy {pid}",
                d.offer.id
            );
            // SAFETY: sending a signal to the process we restored.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            Err(StrategyError::Other(format!(
                "the source aborted after the restore: {reason}"
            )))
        }
        Ok(other) => Err(StrategyError::Protocol {
            node: d.peer.clone(),
            what: format!("expected Commit, got {}", other.kind()),
        }),
        Err(e) => {
            tracing::warn!(
                "no Commit for migration {} ({e}); the restored process {pid} keeps running (the source kills its copy once it has our reply)",
                d.offer.id
            );
            Ok(())
        }
    }
}
