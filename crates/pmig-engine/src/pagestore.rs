//! The destination side of iterative migration: pages arrive in rounds (the
//! same page possibly many times), and the image is composed at the end.
//!
//! Pages are appended to the future image's `pages.pmig` as they come (so
//! the chunk checksums are computed on the way); an index keeps the newest
//! copy of each page. [`PageStore::finish`] writes the process's parts with
//! runs that point at the newest copies of the pages still populated at the
//! source, and the manifest: the directory is then an ordinary image.

use crate::error::{Ctx, EngineError, Result};
use crate::image::ProcessImage;
use crate::resources::memory::PAGE;
use pmig_image::{Image, ImageWriter, Manifest};
use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::Path;

pub struct PageStore {
    w: ImageWriter,
    /// page address -> offset of its newest copy in pages.pmig
    index: BTreeMap<u64, u64>,
    received: u64,
}

impl PageStore {
    pub fn create(dir: &Path) -> Result<PageStore> {
        Ok(PageStore {
            w: ImageWriter::create(dir)?,
            index: BTreeMap::new(),
            received: 0,
        })
    }

    /// Store the pages of [addr, addr + data.len()) (page aligned).
    pub fn put(&mut self, addr: u64, data: &[u8]) -> Result<()> {
        if !addr.is_multiple_of(PAGE) || !(data.len() as u64).is_multiple_of(PAGE) {
            return Err(EngineError::Other(format!(
                "unaligned page data at {addr:#x} ({} bytes)",
                data.len()
            )));
        }
        let off = self.w.pages().offset();
        self.w
            .pages()
            .write_all(data)
            .ctx(|| "store page data".into())?;
        for i in 0..data.len() as u64 / PAGE {
            self.index.insert(addr + i * PAGE, off + i * PAGE);
        }
        self.received += data.len() as u64;
        Ok(())
    }

    /// Take every saved page of a (partial) image.
    pub fn absorb(&mut self, img: &Image, pi: &ProcessImage) -> Result<()> {
        let f = std::fs::File::open(img.pages_path())
            .ctx(|| format!("open {}", img.pages_path().display()))?;
        let mut buf = Vec::new();
        for r in pi.memory.vmas.iter().flat_map(|v| &v.runs) {
            buf.resize(r.len as usize, 0);
            f.read_exact_at(&mut buf, r.offset)
                .ctx(|| format!("read pages at {:#x}", r.addr))?;
            self.put(r.addr, &buf)?;
        }
        Ok(())
    }

    /// Forget the pages held in [addr, addr + len): they are stale (the
    /// composed image will have no run for them).
    pub fn forget(&mut self, addr: u64, len: u64) {
        let gone: Vec<u64> = self
            .index
            .range(addr..addr.saturating_add(len))
            .map(|(a, _)| *a)
            .collect();
        for a in gone {
            self.index.remove(&a);
        }
    }

    pub fn bytes_received(&self) -> u64 {
        self.received
    }

    pub fn pages_held(&self) -> usize {
        self.index.len()
    }

    /// Write `pi` (from the final, filtered capture) with its memory runs
    /// pointing at the newest copy of every page still present at the
    /// source; pages held but no longer present are dropped.
    pub fn finish(mut self, mut pi: ProcessImage, manifest: Manifest) -> Result<Manifest> {
        for v in &mut pi.memory.vmas {
            let mut runs: Vec<crate::resources::memory::Run> = Vec::new();
            for &(a, l) in &v.present {
                for (&page, &off) in self.index.range(a..a + l) {
                    match runs.last_mut() {
                        Some(r) if r.addr + r.len == page && r.offset + r.len == off => {
                            r.len += PAGE
                        }
                        _ => runs.push(crate::resources::memory::Run {
                            addr: page,
                            len: PAGE,
                            offset: off,
                        }),
                    }
                }
            }
            v.runs = runs;
        }
        crate::timing::mark("store: runs listed");
        pi.write_parts(&mut self.w)?;
        crate::timing::mark("store: parts written");
        Ok(self.w.finish(manifest)?)
    }
}

/// Read the pages of `ranges` from a (running) process, calling `sink` with
/// up to `chunk` bytes at a time. Pages that cannot be read (unmapped
/// meanwhile) are skipped: they will be resent at the stop.
pub fn read_ranges(
    pid: libc::pid_t,
    ranges: &[(u64, u64)],
    chunk: usize,
    sink: &mut dyn FnMut(u64, &[u8]) -> Result<()>,
) -> Result<u64> {
    let mut buf = vec![0u8; chunk.max(PAGE as usize)];
    let mut total = 0;
    for &(a, l) in ranges {
        let mut done = 0;
        while done < l {
            let n = (l - done).min(buf.len() as u64) as usize;
            match crate::sys::process_vm_read(pid, a + done, &mut buf[..n]) {
                Ok(got) if got > 0 => {
                    let got = got - got % PAGE as usize;
                    if got == 0 {
                        done += PAGE;
                        continue;
                    }
                    sink(a + done, &buf[..got])?;
                    total += got as u64;
                    done += got as u64;
                }
                _ => done += PAGE,
            }
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_copy_wins_and_absent_pages_are_dropped() {
        let d = tempfile::tempdir().unwrap();
        let mut s = PageStore::create(d.path()).unwrap();
        s.put(0x10000, &[1u8; 8192]).unwrap(); // pages 0x10000, 0x11000
        s.put(0x11000, &[2u8; 4096]).unwrap(); // newer copy of 0x11000
        s.put(0x20000, &[3u8; 4096]).unwrap(); // no longer present at the source
        assert_eq!(s.pages_held(), 3);
        // Compose with a minimal process image.
        let v = crate::resources::memory::Vma {
            start: 0x10000,
            end: 0x30000,
            prot: 3,
            backing: crate::resources::memory::Backing::Anon,
            growsdown: false,
            file: None,
            offset: 0,
            advice: vec![],
            locked: false,
            name: String::new(),
            runs: vec![],
            present: vec![(0x10000, 0x2000)],
        };
        let runs = {
            let mut pi = crate::image::tests_support::empty_image();
            pi.memory.vmas.push(v);
            let m = s.finish(pi, crate::dump::manifest_for(1)).unwrap();
            assert!(m.part("memory").is_some());
            let img = pmig_image::Image::open_verified(d.path()).unwrap();
            let pi = ProcessImage::read(&img).unwrap();
            pi.memory.vmas[0].runs.clone()
        };
        let f = std::fs::read(d.path().join(pmig_image::PAGES_FILE)).unwrap();
        let page = |addr: u64| {
            let r = runs
                .iter()
                .find(|r| r.addr <= addr && addr < r.addr + r.len)
                .expect("page present");
            f[(r.offset + addr - r.addr) as usize]
        };
        assert_eq!(page(0x10000), 1);
        assert_eq!(page(0x11000), 2, "the newest copy wins");
        assert!(
            !runs
                .iter()
                .any(|r| r.addr <= 0x20000 && 0x20000 < r.addr + r.len),
            "absent page dropped"
        );
    }
}
