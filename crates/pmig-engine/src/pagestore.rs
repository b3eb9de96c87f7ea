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

/// The most [`PageStore::fill_from`] reads at a time (whole pages).
const FILL_PIECE: u64 = 1 << 20;

/// The pages a store held ([`PageStore::held`]): its page data, open, and
/// where the newest copy of each page lies in it (address, length,
/// offset).
pub struct HeldPages {
    file: std::fs::File,
    extents: Vec<(u64, u64, u64)>,
}

pub struct PageStore {
    w: ImageWriter,
    /// Where the newest copy of each page is: extents of pages
    /// (start -> (length, offset in pages.pmig)), disjoint; a round that
    /// sends memory in address order makes one extent of it, so that the
    /// image is composed at the stop at a cost per extent, not per page
    /// (a 1 GiB process is 262144 pages).
    index: BTreeMap<u64, (u64, u64)>,
    /// Bytes the index covers.
    held: u64,
    received: u64,
    /// `pages.pmig`, opened for reading at the first [`PageStore::get`].
    path: std::path::PathBuf,
    reader: Option<std::fs::File>,
}

impl PageStore {
    pub fn create(dir: &Path) -> Result<PageStore> {
        Ok(PageStore {
            w: ImageWriter::create(dir)?,
            index: BTreeMap::new(),
            held: 0,
            received: 0,
            path: dir.join(pmig_image::PAGES_FILE),
            reader: None,
        })
    }

    /// A store in `dir` that starts with the pages of the image `img`
    /// (verified by the caller; `pi`, its process image) as its newest
    /// copies: that image's page data is moved into `dir` and the store
    /// appends after it ([`ImageWriter::append_to_pages`]). Storing pages
    /// into a store that then takes an image in ([`PageStore::absorb`])
    /// copies all of that image's pages; this copies none of them.
    pub fn adopt(dir: &Path, img: &Image, pi: &ProcessImage) -> Result<PageStore> {
        let w = ImageWriter::append_to_pages(dir, &img.pages_path(), &img.manifest)?;
        let mut store = PageStore {
            w,
            index: BTreeMap::new(),
            held: 0,
            received: 0,
            path: dir.join(pmig_image::PAGES_FILE),
            reader: None,
        };
        let len = store.w.pages().offset();
        for r in pi.memory.vmas.iter().flat_map(|v| &v.runs) {
            if r.offset.checked_add(r.len).is_none_or(|e| e > len) {
                return Err(EngineError::Other(format!(
                    "the image's pages at {:#x} lie past its page data",
                    r.addr
                )));
            }
            store.carve(r.addr, r.len);
            store.insert(r.addr, r.len, r.offset);
        }
        Ok(store)
    }

    /// The directory the store's image goes into.
    pub fn dir(&self) -> &Path {
        self.w.dir()
    }

    /// The pages this store holds, as they are now. Taken before the
    /// store's directory gets other page data ([`PageStore::adopt`]), it
    /// still reads this store's.
    pub fn held(&self) -> Result<HeldPages> {
        let file =
            std::fs::File::open(&self.path).ctx(|| format!("open {}", self.path.display()))?;
        let extents = self
            .index
            .iter()
            .map(|(&a, &(l, off))| (a, l, off))
            .collect();
        Ok(HeldPages { file, extents })
    }

    /// Stores the pages `from` holds ([`PageStore::held`]) that this store
    /// holds no copy of: the copies it holds are the newer. Returns the
    /// bytes stored.
    pub fn fill_from(&mut self, from: &HeldPages) -> Result<u64> {
        let mut buf = Vec::new();
        let mut stored = 0;
        for &(a, l, off) in &from.extents {
            let held = self.runs_within(&[(a, l)]);
            let mut at = a;
            let holes = held
                .iter()
                .map(|r| (r.addr, r.len))
                .chain(std::iter::once((a + l, 0)));
            for (s, n) in holes {
                // A MiB at most at a time.
                while at < s {
                    let len = (s - at).min(FILL_PIECE);
                    buf.resize(len as usize, 0);
                    from.file
                        .read_exact_at(&mut buf, off + (at - a))
                        .ctx(|| format!("read stored pages at {at:#x}"))?;
                    self.put(at, &buf)?;
                    stored += len;
                    at += len;
                }
                at = at.max(s + n);
            }
        }
        Ok(stored)
    }

    /// Reads the newest copy of the page at `addr` into `page` (one page);
    /// false if the store holds none.
    pub fn get(&mut self, addr: u64, page: &mut [u8]) -> Result<bool> {
        if page.len() as u64 != PAGE {
            return Err(EngineError::Other(format!(
                "a page is {PAGE} bytes, not {}",
                page.len()
            )));
        }
        let Some((&s, &(l, off))) = self.index.range(..=addr).next_back() else {
            return Ok(false);
        };
        if addr >= s + l {
            return Ok(false);
        }
        let f = self.reader()?;
        f.read_exact_at(page, off + (addr - s))
            .ctx(|| format!("read the stored page at {addr:#x}"))?;
        Ok(true)
    }

    /// Copies the newest copies this store holds of the pages of `ranges`
    /// (sorted, disjoint) into `to`; returns the bytes copied.
    pub fn copy_within(&mut self, ranges: &[(u64, u64)], to: &mut PageStore) -> Result<u64> {
        let runs = self.runs_within(ranges);
        if runs.is_empty() {
            return Ok(0);
        }
        let f = self.reader()?;
        let mut buf = Vec::new();
        let mut n = 0;
        for r in runs {
            buf.resize(r.len as usize, 0);
            f.read_exact_at(&mut buf, r.offset)
                .ctx(|| format!("read the stored pages at {:#x}", r.addr))?;
            to.put(r.addr, &buf)?;
            n += r.len;
        }
        Ok(n)
    }

    /// `pages.pmig`, opened for reading the first time.
    fn reader(&mut self) -> Result<&std::fs::File> {
        match self.reader {
            Some(ref f) => Ok(f),
            None => {
                let f = std::fs::File::open(&self.path)
                    .ctx(|| format!("open {}", self.path.display()))?;
                Ok(self.reader.insert(f))
            }
        }
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
        self.carve(addr, data.len() as u64);
        self.insert(addr, data.len() as u64, off);
        self.received += data.len() as u64;
        Ok(())
    }

    /// Writes zeros where the next `bytes` of pages will be stored, past
    /// what is there already ([`pmig_image::PagesWriter::touch_ahead`]), so
    /// that storing them later allocates and touches no new memory. Returns
    /// the bytes written now.
    pub fn touch_ahead(&mut self, bytes: u64) -> Result<u64> {
        self.w
            .pages()
            .touch_ahead(bytes)
            .ctx(|| "write the room ahead of the stored pages".into())
    }

    /// Drops [a, a + len) from the index, cutting the extents across its
    /// ends.
    fn carve(&mut self, a: u64, len: u64) {
        let e = a.saturating_add(len);
        // An extent that starts before `a` and reaches into the range.
        if let Some((&s, &(l, off))) = self.index.range(..a).next_back() {
            if s + l > a {
                self.index.insert(s, (a - s, off));
                self.held -= s + l - a;
                if s + l > e {
                    self.index.insert(e, (s + l - e, off + (e - s)));
                    self.held += s + l - e;
                }
            }
        }
        let inside: Vec<(u64, (u64, u64))> =
            self.index.range(a..e).map(|(&s, &v)| (s, v)).collect();
        for (s, (l, off)) in inside {
            self.index.remove(&s);
            self.held -= l;
            if s + l > e {
                self.index.insert(e, (s + l - e, off + (e - s)));
                self.held += s + l - e;
            }
        }
    }

    /// Adds the extent [a, a + len) -> `off` (the range is free), merged with
    /// the extent before it where both address and offset continue.
    fn insert(&mut self, a: u64, len: u64, off: u64) {
        self.held += len;
        if let Some((&s, v)) = self.index.range_mut(..a).next_back() {
            if s + v.0 == a && v.1 + v.0 == off {
                v.0 += len;
                return;
            }
        }
        self.index.insert(a, (len, off));
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
        self.carve(addr, len);
    }

    pub fn bytes_received(&self) -> u64 {
        self.received
    }

    pub fn pages_held(&self) -> usize {
        (self.held / PAGE) as usize
    }

    /// The newest copies of the pages of `ranges` (sorted, disjoint), as
    /// image runs.
    fn runs_within(&self, ranges: &[(u64, u64)]) -> Vec<crate::resources::memory::Run> {
        let mut runs: Vec<crate::resources::memory::Run> = Vec::new();
        for &(a, l) in ranges {
            let e = a + l;
            // The extent across `a`, if any, then those starting inside.
            let first = self
                .index
                .range(..a)
                .next_back()
                .filter(|(&s, &(n, _))| s + n > a)
                .map(|(&s, &v)| (s, v));
            for (s, (n, off)) in first
                .into_iter()
                .chain(self.index.range(a..e).map(|(&s, &v)| (s, v)))
            {
                let lo = s.max(a);
                let hi = (s + n).min(e);
                let at = off + (lo - s);
                match runs.last_mut() {
                    Some(r) if r.addr + r.len == lo && r.offset + r.len == at => r.len += hi - lo,
                    _ => runs.push(crate::resources::memory::Run {
                        addr: lo,
                        len: hi - lo,
                        offset: at,
                    }),
                }
            }
        }
        runs
    }

    /// Write `pi` (from the final, filtered capture) with its memory runs
    /// pointing at the newest copy of every page still present at the
    /// source; pages held but no longer present are dropped.
    pub fn finish(self, pi: ProcessImage, manifest: Manifest) -> Result<Manifest> {
        Ok(self.finish_image(pi, manifest)?.0)
    }

    /// [`finish`](Self::finish), which also returns the process image as
    /// written (its runs point into the store's page data).
    pub fn finish_image(
        mut self,
        mut pi: ProcessImage,
        manifest: Manifest,
    ) -> Result<(Manifest, ProcessImage)> {
        for v in &mut pi.memory.vmas {
            v.runs = self.runs_within(&v.present);
        }
        crate::timing::mark("store: runs listed");
        pi.write_parts(&mut self.w)?;
        crate::timing::mark("store: parts written");
        Ok((self.w.finish(manifest)?, pi))
    }
}

/// Read the pages of `ranges` from a (running) process, calling `sink` with
/// up to `chunk` bytes at a time. Returns the bytes read and the pages that
/// could not be read (unmapped or made inaccessible meanwhile), as sorted
/// runs: the caller must not count them as sent.
pub fn read_ranges(
    pid: libc::pid_t,
    ranges: &[(u64, u64)],
    chunk: usize,
    sink: &mut dyn FnMut(u64, &[u8]) -> Result<()>,
) -> Result<(u64, Vec<(u64, u64)>)> {
    let mut buf = vec![0u8; chunk.max(PAGE as usize)];
    let mut total = 0;
    let mut skipped: Vec<(u64, u64)> = Vec::new();
    let mut skip = |a: u64| match skipped.last_mut() {
        Some((s, l)) if *s + *l == a => *l += PAGE,
        _ => skipped.push((a, PAGE)),
    };
    for &(a, l) in ranges {
        let mut done = 0;
        while done < l {
            let n = (l - done).min(buf.len() as u64) as usize;
            match crate::sys::process_vm_read(pid, a + done, &mut buf[..n]) {
                Ok(got) if got > 0 => {
                    let got = got - got % PAGE as usize;
                    if got == 0 {
                        skip(a + done);
                        done += PAGE;
                        continue;
                    }
                    sink(a + done, &buf[..got])?;
                    total += got as u64;
                    done += got as u64;
                }
                _ => {
                    skip(a + done);
                    done += PAGE;
                }
            }
        }
    }
    Ok((total, skipped))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_reads_the_newest_copy() {
        let d = tempfile::tempdir().unwrap();
        let mut s = PageStore::create(d.path()).unwrap();
        let mut p = [0u8; 4096];
        assert!(!s.get(0x10000, &mut p).unwrap());
        s.put(0x10000, &[1u8; 3 * 4096]).unwrap();
        s.put(0x11000, &[2u8; 4096]).unwrap();
        for (addr, byte) in [(0x10000, 1), (0x11000, 2), (0x12000, 1)] {
            assert!(s.get(addr, &mut p).unwrap(), "{addr:#x}");
            assert_eq!(p, [byte; 4096], "{addr:#x}");
        }
        assert!(!s.get(0x13000, &mut p).unwrap());
        assert!(!s.get(0xf000, &mut p).unwrap());
        s.forget(0x10000, 4096);
        assert!(!s.get(0x10000, &mut p).unwrap());
    }

    #[test]
    fn copy_within_copies_the_newest_copies_inside_the_ranges_only() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut s = PageStore::create(a.path()).unwrap();
        s.put(0x10000, &[1u8; 4 * 4096]).unwrap(); // 0x10000..0x14000
        s.put(0x12000, &[2u8; 4096]).unwrap(); // newer copy of 0x12000
        s.put(0x30000, &[3u8; 4096]).unwrap();
        let mut t = PageStore::create(b.path()).unwrap();
        let n = s
            .copy_within(&[(0x11000, 0x2000), (0x13000, 0x10000)], &mut t)
            .unwrap();
        assert_eq!(n, 3 * 4096);
        assert_eq!(t.pages_held(), 3);
        let mut p = [0u8; 4096];
        for (addr, want) in [(0x11000, Some(1)), (0x12000, Some(2)), (0x13000, Some(1))] {
            assert!(t.get(addr, &mut p).unwrap(), "{addr:#x}");
            assert_eq!(Some(p[0]), want, "{addr:#x}");
            assert!(p.iter().all(|&x| x == p[0]), "{addr:#x}");
        }
        for addr in [0x10000, 0x30000] {
            assert!(!t.get(addr, &mut p).unwrap(), "{addr:#x} copied");
        }
        // The source store keeps its pages.
        assert!(s.get(0x10000, &mut p).unwrap());
        assert_eq!(s.copy_within(&[(0x50000, 0x1000)], &mut t).unwrap(), 0);
    }

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
            present: vec![(0x10000, 0x2000)],
            ..crate::resources::memory::test_vma(0x10000, 0x30000, 3)
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

    #[test]
    fn adopting_the_image_of_the_stop_composes_what_absorbing_it_does() {
        use crate::resources::memory::{test_vma, Vma};
        let round0 = |dir: &Path| {
            let mut s = PageStore::create(dir).unwrap();
            s.put(0x10000, &[1u8; 4 * 4096]).unwrap(); // 0x10000..0x14000
            s.put(0x20000, &[3u8; 4096]).unwrap(); // not present at the stop
            s.put(0x30000, &[4u8; 2 * 4096]).unwrap();
            s
        };
        // The image of the stop: newer copies of 0x11000 and 0x12000, and a
        // page of its own.
        let stop = |dir: &Path| {
            let mut s = PageStore::create(dir).unwrap();
            s.put(0x11000, &[5u8; 2 * 4096]).unwrap();
            s.put(0x40000, &[6u8; 4096]).unwrap();
            let mut pi = crate::image::tests_support::empty_image();
            pi.memory.vmas.push(Vma {
                present: vec![(0x10000, 0x4000), (0x30000, 0x2000), (0x40000, 0x1000)],
                ..test_vma(0x10000, 0x50000, 3)
            });
            s.finish(pi, crate::dump::manifest_for(1)).unwrap();
            let img = pmig_image::Image::open_verified(dir).unwrap();
            let pi = ProcessImage::read(&img).unwrap();
            (img, pi)
        };
        let t = tempfile::tempdir().unwrap();
        let dir = |n: &str| {
            let d = t.path().join(n);
            std::fs::create_dir(&d).unwrap();
            d
        };
        let (a, fa, b, fb) = (dir("a"), dir("fa"), dir("b"), dir("fb"));
        // Absorbing it.
        let mut s = round0(&a);
        let (img, pi) = stop(&fa);
        s.absorb(&img, &pi).unwrap();
        let mut m = img.manifest.clone();
        m.parts.clear();
        s.finish_image(pi, m).unwrap();
        // Adopting it.
        let s = round0(&b);
        let (img, pi) = stop(&fb);
        let held = s.held().unwrap();
        drop(s);
        let mut s = PageStore::adopt(&b, &img, &pi).unwrap();
        assert_eq!(s.pages_held(), 3, "the image's own pages");
        let filled = s.fill_from(&held).unwrap();
        // 0x10000, 0x13000, 0x20000, 0x30000, 0x31000: not in the image.
        assert_eq!(filled, 5 * 4096);
        let mut m = img.manifest.clone();
        m.parts.clear();
        s.finish_image(pi, m).unwrap();
        assert!(!fb.join(pmig_image::PAGES_FILE).exists());
        let page_of = |d: &Path, addr: u64| -> Option<u8> {
            let img = pmig_image::Image::open_verified(d).unwrap();
            let pi = ProcessImage::read(&img).unwrap();
            let f = std::fs::read(img.pages_path()).unwrap();
            let r = pi.memory.vmas[0]
                .runs
                .iter()
                .find(|r| r.addr <= addr && addr < r.addr + r.len)?;
            let at = (r.offset + addr - r.addr) as usize;
            assert!(f[at..at + 4096].iter().all(|&x| x == f[at]), "{addr:#x}");
            Some(f[at])
        };
        for (addr, want) in [
            (0x10000, Some(1)),
            (0x11000, Some(5)),
            (0x12000, Some(5)),
            (0x13000, Some(1)),
            (0x20000, None),
            (0x30000, Some(4)),
            (0x31000, Some(4)),
            (0x40000, Some(6)),
        ] {
            assert_eq!(page_of(&a, addr), want, "absorbed, {addr:#x}");
            assert_eq!(page_of(&b, addr), want, "adopted, {addr:#x}");
        }
    }

    #[test]
    fn extent_index_matches_a_page_by_page_model() {
        let d = tempfile::tempdir().unwrap();
        let mut s = PageStore::create(d.path()).unwrap();
        // The model: page -> offset of its newest copy.
        let mut model: BTreeMap<u64, u64> = BTreeMap::new();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        let page = vec![0u8; 64 * PAGE as usize];
        for step in 0..600 {
            let a = 0x40_0000 + next(256) * PAGE;
            let n = 1 + next(40);
            if step % 5 == 4 {
                s.forget(a, n * PAGE);
                for p in 0..n {
                    model.remove(&(a + p * PAGE));
                }
            } else {
                let off = s.w.pages().offset();
                s.put(a, &page[..(n * PAGE) as usize]).unwrap();
                for p in 0..n {
                    model.insert(a + p * PAGE, off + p * PAGE);
                }
            }
            assert_eq!(s.pages_held(), model.len(), "step {step}");
        }
        let ranges = [
            (0x40_0000, 300 * PAGE),
            (0x3f_0000, 0x1000),
            (0x41_3000, 7 * PAGE),
        ];
        for r in ranges {
            let want: Vec<(u64, u64, u64)> = {
                let mut v: Vec<(u64, u64, u64)> = Vec::new();
                for (&p, &off) in model.range(r.0..r.0 + r.1) {
                    match v.last_mut() {
                        Some(l) if l.0 + l.1 == p && l.2 + l.1 == off => l.1 += PAGE,
                        _ => v.push((p, PAGE, off)),
                    }
                }
                v
            };
            let got: Vec<(u64, u64, u64)> = s
                .runs_within(&[r])
                .iter()
                .map(|r| (r.addr, r.len, r.offset))
                .collect();
            assert_eq!(got, want, "range {r:x?}");
        }
        // A round in address order is one extent.
        let d2 = tempfile::tempdir().unwrap();
        let mut t = PageStore::create(d2.path()).unwrap();
        for i in 0..64 {
            t.put(0x100_0000 + i * PAGE, &page[..PAGE as usize])
                .unwrap();
        }
        assert_eq!(t.index.len(), 1);
    }

    #[test]
    fn read_ranges_reports_the_pages_it_could_not_read() {
        let len = 6 * PAGE as usize;
        let base = crate::resources::memory::anon_map(len) as u64;
        for i in 0..6 {
            // SAFETY: inside the mapping.
            unsafe { *((base + i * PAGE) as *mut u8) = i as u8 + 1 };
        }
        // Pages 2 and 3 become inaccessible.
        // SAFETY: part of our own mapping.
        assert_eq!(
            unsafe {
                libc::mprotect(
                    (base + 2 * PAGE) as *mut _,
                    2 * PAGE as usize,
                    libc::PROT_NONE,
                )
            },
            0
        );
        let mut got = Vec::new();
        let (bytes, skipped) = read_ranges(
            std::process::id() as i32,
            &[(base, 6 * PAGE)],
            3 * PAGE as usize,
            &mut |a, d| {
                for (i, p) in d.chunks(PAGE as usize).enumerate() {
                    got.push((a + i as u64 * PAGE, p[0]));
                }
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(bytes, 4 * PAGE);
        assert_eq!(skipped, vec![(base + 2 * PAGE, 2 * PAGE)]);
        let want: Vec<(u64, u8)> = [0u64, 1, 4, 5]
            .iter()
            .map(|&i| (base + i * PAGE, i as u8 + 1))
            .collect();
        assert_eq!(got, want);
        // SAFETY: our own mapping, no longer used.
        unsafe { libc::munmap(base as *mut _, len) };
    }
}
