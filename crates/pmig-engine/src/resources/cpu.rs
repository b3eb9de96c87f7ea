//! The CPU an image was captured on, checked against the one that restores
//! it (part `cpu`, format 1.17).
//!
//! A program learns what its CPU can do once, at its start: glibc picks
//! its `memcpy` and string functions by CPUID (AVX-512, AVX2 or SSE2
//! versions), OpenSSL its ciphers (AES-NI, VAES, SHA), a JIT the code it
//! emits. Moved to a CPU without one of those instructions, it dies at the
//! next use (SIGILL), long after the move. And the kernel can only set a
//! thread's saved FPU state on a CPU that has every state component it
//! holds (AVX-512's registers, AMX's tiles), in this CPU's own layout.
//!
//! The capture records the CPU it runs on: its vendor, family and model,
//! the CPUID words that name instruction-set features ([`FEATURES`]), the
//! xsave state components the kernel offers to programs, and their offsets
//! and sizes in the standard (uncompacted) xsave layout that ptrace uses.
//! The restore checks, before anything is created:
//! - every state component a thread holds is offered here, at the same
//!   offset and with the same size; a thread's saved area is then made
//!   this CPU's size ([`fit_xstate`]);
//! - with [`CpuCheck::Features`] (the default), this CPU has every feature
//!   of [`FEATURES`] the capturing CPU had. [`CpuCheck::Xsave`] (`pmig
//!   restore --cpu-check xsave`, or `PMIG_CPU_CHECK=xsave` in the
//!   environment of a daemon, which its restores inherit) skips this one:
//!   for programs known not to pick their code by CPU.
//!
//! An image without the part (format 1.16 and older) gets the first check
//! only, the capturing CPU's layout taken to be this one's.

use super::xcomp::components_in_use;
use super::Resource;
use crate::error::{EngineError, Result};
use serde::{Deserialize, Serialize};
use std::arch::x86_64::__cpuid_count;

pub struct Cpu;

/// How much of the capturing CPU the restoring one must have.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CpuCheck {
    /// Every instruction-set feature of [`FEATURES`] and every xsave state
    /// component a thread holds.
    #[default]
    Features,
    /// Only the state components the threads hold.
    Xsave,
}

impl CpuCheck {
    /// The name `pmig restore --cpu-check` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            CpuCheck::Features => "features",
            CpuCheck::Xsave => "xsave",
        }
    }
}

impl std::str::FromStr for CpuCheck {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<CpuCheck, String> {
        match s {
            "features" => Ok(CpuCheck::Features),
            "xsave" => Ok(CpuCheck::Xsave),
            _ => Err(format!("unknown CPU check {s:?} (features, xsave)")),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuState {
    /// The CPUID vendor string ("GenuineIntel", "AuthenticAMD").
    pub vendor: String,
    /// Family and model, with their extended fields folded in.
    pub family: u32,
    pub model: u32,
    /// CPUID words: (leaf, subleaf, register: 0 eax 1 ebx 2 ecx 3 edx,
    /// value), those that [`FEATURES`] reads.
    pub words: Vec<(u32, u32, u8, u32)>,
    /// The xsave state components the kernel offers to programs
    /// (`ARCH_GET_XCOMP_SUPP`).
    pub xfeatures: u64,
    /// (component, offset, size) in the standard xsave layout, of each
    /// offered component from 2 up (0 and 1, x87 and SSE, are fixed).
    pub layout: Vec<(u8, u32, u32)>,
}

/// Instruction-set features a program may pick its code by: (name as
/// `/proc/cpuinfo` gives it, leaf, subleaf, register, bit). Hints that
/// change no instruction's availability (ERMS, FSRM) are left out.
pub const FEATURES: &[(&str, u32, u32, u8, u8)] = &[
    ("sse3", 1, 0, 2, 0),
    ("pclmulqdq", 1, 0, 2, 1),
    ("ssse3", 1, 0, 2, 9),
    ("fma", 1, 0, 2, 12),
    ("cx16", 1, 0, 2, 13),
    ("sse4_1", 1, 0, 2, 19),
    ("sse4_2", 1, 0, 2, 20),
    ("movbe", 1, 0, 2, 22),
    ("popcnt", 1, 0, 2, 23),
    ("aes", 1, 0, 2, 25),
    ("xsave", 1, 0, 2, 26),
    ("avx", 1, 0, 2, 28),
    ("f16c", 1, 0, 2, 29),
    ("rdrand", 1, 0, 2, 30),
    ("cx8", 1, 0, 3, 8),
    ("cmov", 1, 0, 3, 15),
    ("mmx", 1, 0, 3, 23),
    ("fxsr", 1, 0, 3, 24),
    ("sse", 1, 0, 3, 25),
    ("sse2", 1, 0, 3, 26),
    ("fsgsbase", 7, 0, 1, 0),
    ("bmi1", 7, 0, 1, 3),
    ("avx2", 7, 0, 1, 5),
    ("bmi2", 7, 0, 1, 8),
    ("rtm", 7, 0, 1, 11),
    ("avx512f", 7, 0, 1, 16),
    ("avx512dq", 7, 0, 1, 17),
    ("rdseed", 7, 0, 1, 18),
    ("adx", 7, 0, 1, 19),
    ("avx512ifma", 7, 0, 1, 21),
    ("clflushopt", 7, 0, 1, 23),
    ("clwb", 7, 0, 1, 24),
    ("avx512pf", 7, 0, 1, 26),
    ("avx512er", 7, 0, 1, 27),
    ("avx512cd", 7, 0, 1, 28),
    ("sha_ni", 7, 0, 1, 29),
    ("avx512bw", 7, 0, 1, 30),
    ("avx512vl", 7, 0, 1, 31),
    ("avx512vbmi", 7, 0, 2, 1),
    ("pku", 7, 0, 2, 3),
    ("waitpkg", 7, 0, 2, 5),
    ("avx512_vbmi2", 7, 0, 2, 6),
    ("gfni", 7, 0, 2, 8),
    ("vaes", 7, 0, 2, 9),
    ("vpclmulqdq", 7, 0, 2, 10),
    ("avx512_vnni", 7, 0, 2, 11),
    ("avx512_bitalg", 7, 0, 2, 12),
    ("avx512_vpopcntdq", 7, 0, 2, 14),
    ("rdpid", 7, 0, 2, 22),
    ("movdiri", 7, 0, 2, 27),
    ("movdir64b", 7, 0, 2, 28),
    ("avx512_4vnniw", 7, 0, 3, 2),
    ("avx512_4fmaps", 7, 0, 3, 3),
    ("avx512_vp2intersect", 7, 0, 3, 8),
    ("serialize", 7, 0, 3, 14),
    ("tsxldtrk", 7, 0, 3, 16),
    ("amx_bf16", 7, 0, 3, 22),
    ("avx512_fp16", 7, 0, 3, 23),
    ("amx_tile", 7, 0, 3, 24),
    ("amx_int8", 7, 0, 3, 25),
    ("avx_vnni", 7, 1, 0, 4),
    ("avx512_bf16", 7, 1, 0, 5),
    ("cmpccxadd", 7, 1, 0, 7),
    ("amx_fp16", 7, 1, 0, 21),
    ("avx_ifma", 7, 1, 0, 23),
    ("xsaveopt", 0xd, 1, 0, 0),
    ("xsavec", 0xd, 1, 0, 1),
    ("xgetbv1", 0xd, 1, 0, 2),
    ("lahf_lm", 0x8000_0001, 0, 2, 0),
    ("abm", 0x8000_0001, 0, 2, 5),
    ("sse4a", 0x8000_0001, 0, 2, 6),
    ("3dnowprefetch", 0x8000_0001, 0, 2, 8),
    ("xop", 0x8000_0001, 0, 2, 11),
    ("fma4", 0x8000_0001, 0, 2, 16),
    ("tbm", 0x8000_0001, 0, 2, 21),
    ("rdtscp", 0x8000_0001, 0, 3, 27),
    ("clzero", 0x8000_0008, 0, 1, 0),
];

/// The legacy area and the header: x87 and SSE state, always present.
const XSAVE_FIXED: usize = 576;

fn reg(r: std::arch::x86_64::CpuidResult, which: u8) -> u32 {
    match which {
        0 => r.eax,
        1 => r.ebx,
        2 => r.ecx,
        _ => r.edx,
    }
}

fn supported_xfeatures() -> u64 {
    let mut m = 0u64;
    // SAFETY: arch_prctl(ARCH_GET_XCOMP_SUPP) writes one u64 at the address
    // given, a local.
    let r = unsafe { libc::syscall(libc::SYS_arch_prctl, 0x1021, &mut m as *mut u64) };
    if r == 0 {
        m
    } else {
        // A kernel before 5.16, which has no dynamic features: what it
        // enabled in XCR0.
        xcr0().unwrap_or(3)
    }
}

/// XCR0, the xsave features the kernel enabled; None where it did not
/// enable xsave (CPUID.1:ECX.OSXSAVE clear), when XCR0 cannot be read.
fn xcr0() -> Option<u64> {
    if __cpuid_count(1, 0).ecx & (1 << 27) == 0 {
        return None;
    }
    let (lo, hi): (u32, u32);
    // SAFETY: xgetbv with ecx = 0 reads XCR0 into edx:eax; it is allowed
    // in user mode once the kernel set CR4.OSXSAVE, checked above.
    unsafe {
        std::arch::asm!("xgetbv", in("ecx") 0u32, out("eax") lo, out("edx") hi,
            options(nomem, nostack, preserves_flags));
    }
    Some(u64::from(hi) << 32 | u64::from(lo))
}

impl CpuState {
    pub const PART: &'static str = "cpu";

    /// The CPU this program runs on (read once).
    pub fn here() -> &'static CpuState {
        static HERE: std::sync::OnceLock<CpuState> = std::sync::OnceLock::new();
        HERE.get_or_init(CpuState::read)
    }

    fn read() -> CpuState {
        let v = __cpuid_count(0, 0);
        let vendor: Vec<u8> = [v.ebx, v.edx, v.ecx]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        let max_basic = v.eax;
        let max_ext = __cpuid_count(0x8000_0000, 0).eax;
        let sig = __cpuid_count(1, 0).eax;
        let base_family = (sig >> 8) & 0xf;
        let family = base_family
            + if base_family == 0xf {
                (sig >> 20) & 0xff
            } else {
                0
            };
        let model = ((sig >> 4) & 0xf)
            | if base_family == 6 || base_family == 0xf {
                ((sig >> 16) & 0xf) << 4
            } else {
                0
            };
        let mut words: Vec<(u32, u32, u8, u32)> = Vec::new();
        for &(_, leaf, sub, r, _) in FEATURES {
            if words.iter().any(|w| (w.0, w.1, w.2) == (leaf, sub, r)) {
                continue;
            }
            let present = if leaf >= 0x8000_0000 {
                leaf <= max_ext
            } else {
                leaf <= max_basic
            };
            let value = if present {
                reg(__cpuid_count(leaf, sub), r)
            } else {
                0
            };
            words.push((leaf, sub, r, value));
        }
        let xfeatures = supported_xfeatures();
        let layout = (2..64u32)
            .filter(|&c| xfeatures & (1 << c) != 0 && max_basic >= 0xd)
            .map(|c| {
                let r = __cpuid_count(0xd, c);
                (c as u8, r.ebx, r.eax)
            })
            .collect();
        CpuState {
            vendor: String::from_utf8_lossy(&vendor).into_owned(),
            family,
            model,
            words,
            xfeatures,
            layout,
        }
    }

    fn has(&self, f: &(&str, u32, u32, u8, u8)) -> bool {
        self.words
            .iter()
            .find(|w| (w.0, w.1, w.2) == (f.1, f.2, f.3))
            .is_some_and(|w| w.3 & (1 << f.4) != 0)
    }

    /// The features of [`FEATURES`] `self` has and `here` lacks.
    pub fn missing_on(&self, here: &CpuState) -> Vec<&'static str> {
        FEATURES
            .iter()
            .filter(|f| self.has(f) && !here.has(f))
            .map(|f| f.0)
            .collect()
    }

    fn slot(&self, c: u32) -> Option<(u32, u32)> {
        self.layout
            .iter()
            .find(|l| l.0 as u32 == c)
            .map(|l| (l.1, l.2))
    }

    /// The size of a standard xsave area of every offered component.
    pub fn xsave_size(&self) -> usize {
        self.layout
            .iter()
            .map(|&(_, o, s)| (o + s) as usize)
            .max()
            .unwrap_or(0)
            .max(XSAVE_FIXED)
    }

    fn describe(&self) -> String {
        format!(
            "{} family {} model {}",
            self.vendor, self.family, self.model
        )
    }
}

fn component_name(c: u32) -> String {
    let what = match c {
        2 => "AVX",
        3 | 4 => "MPX",
        5..=7 => "AVX-512",
        9 => "PKRU",
        17 | 18 => "AMX",
        11 | 12 => "CET",
        19 => "APX",
        _ => "",
    };
    if what.is_empty() {
        format!("xsave component {c}")
    } else {
        format!("{what} (xsave component {c})")
    }
}

/// Checks that `here` can take the saved FPU state of every thread
/// (`xstates`: its id in the image, its xsave area) captured on `from`
/// (None: an image without the part, whose CPU is taken to lay its state
/// out as `here` does), and, with [`CpuCheck::Features`], that it has
/// every feature `from` had.
pub fn check(
    from: Option<&CpuState>,
    here: &CpuState,
    xstates: &[(i32, &[u8])],
    mode: CpuCheck,
) -> Result<()> {
    for &(t, x) in xstates {
        let held = components_in_use(x) & !3;
        for c in (2..64).filter(|c| held & (1 << c) != 0) {
            let Some((off, size)) = here.slot(c) else {
                return Err(EngineError::Incompatible(format!(
                    "thread {t} holds {} state, which this machine's CPU ({}) does not have",
                    component_name(c),
                    here.describe()
                )));
            };
            let theirs = from.map_or(Some((off, size)), |f| f.slot(c));
            if theirs != Some((off, size)) || (off + size) as usize > x.len() {
                let there = match theirs {
                    Some((o, s)) if (o + s) as usize <= x.len() => {
                        format!("at offset {o}, {s} bytes,")
                    }
                    _ => "outside its saved area".to_string(),
                };
                return Err(EngineError::Incompatible(format!(
                    "thread {t} holds {} state {there} on the CPU it was captured on, at offset {off}, {size} bytes, here: the layouts differ",
                    component_name(c),
                )));
            }
        }
    }
    if let (Some(from), CpuCheck::Features) = (from, mode) {
        let missing = from.missing_on(here);
        if !missing.is_empty() {
            return Err(EngineError::Incompatible(format!(
                "this machine's CPU ({}) lacks {}, which the CPU the process ran on ({}) has: the process may have chosen code that uses them (`pmig restore --cpu-check xsave`, or a destination daemon started with `--cpu-check xsave`, restores it all the same)",
                here.describe(),
                missing.join(", "),
                from.describe()
            )));
        }
    }
    Ok(())
}

/// A thread's saved xsave area made the size `here` takes (the kernel
/// takes only its own size): the fixed part and each component it holds
/// copied to the same offset ([`check`] found them the same), the rest
/// zero, which the header marks as initial state.
pub fn fit_xstate(x: &[u8], here: &CpuState) -> Vec<u8> {
    let size = here.xsave_size();
    if x.len() == size {
        return x.to_vec();
    }
    let mut out = vec![0u8; size];
    out[..XSAVE_FIXED.min(x.len())].copy_from_slice(&x[..XSAVE_FIXED.min(x.len())]);
    let held = components_in_use(x) & !3;
    for c in (2..64).filter(|c| held & (1 << c) != 0) {
        if let Some((off, sz)) = here.slot(c) {
            let (a, b) = (off as usize, (off + sz) as usize);
            if b <= x.len() && b <= size {
                out[a..b].copy_from_slice(&x[a..b]);
            }
        }
    }
    out
}

impl Resource for Cpu {
    const PART: &'static str = CpuState::PART;
    type State = CpuState;

    fn capture(_cx: &mut super::Capture) -> Result<CpuState> {
        Ok(CpuState::here().clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where the standard xsave area keeps its header's component bit map.
    const XSTATE_BV_AT: usize = 512;

    fn cpu(words: &[(u32, u32, u8, u32)], layout: &[(u8, u32, u32)]) -> CpuState {
        CpuState {
            vendor: "TestVendor12".into(),
            family: 6,
            model: 1,
            words: words.to_vec(),
            xfeatures: layout.iter().fold(3, |m, l| m | 1 << l.0),
            layout: layout.to_vec(),
        }
    }

    /// A standard xsave area of `size` bytes holding `bv`, each held
    /// component's bytes set to its number.
    fn area(size: usize, bv: u64, layout: &[(u8, u32, u32)]) -> Vec<u8> {
        let mut x = vec![0u8; size];
        x[..XSTATE_BV_AT].fill(0xee);
        x[XSTATE_BV_AT..XSTATE_BV_AT + 8].copy_from_slice(&bv.to_le_bytes());
        for &(c, o, s) in layout {
            if bv & (1 << c) != 0 {
                x[o as usize..(o + s) as usize].fill(c);
            }
        }
        x
    }

    const AVX512: &[(u8, u32, u32)] = &[
        (2, 576, 256),
        (5, 1088, 64),
        (6, 1152, 512),
        (7, 1664, 1024),
        (9, 2688, 8),
    ];
    const AMX: &[(u8, u32, u32)] = &[
        (2, 576, 256),
        (5, 1088, 64),
        (6, 1152, 512),
        (7, 1664, 1024),
        (9, 2688, 8),
        (17, 2752, 64),
        (18, 2816, 8192),
    ];
    const AVX2: &[(u8, u32, u32)] = &[(2, 576, 256)];

    #[test]
    fn a_cpu_check_reads_back_its_own_name() {
        for c in [CpuCheck::Features, CpuCheck::Xsave] {
            assert_eq!(c.as_str().parse::<CpuCheck>(), Ok(c));
        }
        assert!("fpu"
            .parse::<CpuCheck>()
            .unwrap_err()
            .contains("features, xsave"));
    }

    #[test]
    fn the_features_a_cpu_lacks_are_named() {
        let from = cpu(&[(7, 0, 1, 1 << 16 | 1 << 5), (1, 0, 2, 1 << 28)], AVX512);
        let here = cpu(&[(7, 0, 1, 1 << 5), (1, 0, 2, 1 << 28)], AVX2);
        assert_eq!(from.missing_on(&here), vec!["avx512f"]);
        assert!(here.missing_on(&from).is_empty());
        let e = check(Some(&from), &here, &[], CpuCheck::Features)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("image cannot be restored here"), "{e}");
        assert!(e.contains("lacks avx512f"), "{e}");
        assert!(e.contains("--cpu-check xsave"), "{e}");
        // Told to look at the state alone, and none is held.
        assert!(check(Some(&from), &here, &[], CpuCheck::Xsave).is_ok());
    }

    #[test]
    fn state_a_thread_holds_must_exist_here_at_the_same_place() {
        let from = cpu(&[], AVX512);
        let here = cpu(&[], AVX2);
        // AVX-512 registers in use: nowhere to put them here.
        let x = area(2696, 3 | 1 << 2 | 1 << 6, AVX512);
        let e = check(Some(&from), &here, &[(7, &x)], CpuCheck::Xsave)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("thread 7 holds AVX-512 (xsave component 6) state"),
            "{e}"
        );
        // Only AVX in use: fine, and so without the part (the same layout
        // assumed).
        let x = area(2696, 3 | 1 << 2, AVX512);
        assert!(check(Some(&from), &here, &[(7, &x)], CpuCheck::Xsave).is_ok());
        assert!(check(None, &here, &[(7, &x)], CpuCheck::Features).is_ok());
        // A component at another offset there.
        let moved = cpu(&[], &[(2, 640, 256)]);
        let e = check(Some(&moved), &here, &[(7, &x)], CpuCheck::Xsave)
            .unwrap_err()
            .to_string();
        assert!(e.contains("the layouts differ"), "{e}");
    }

    #[test]
    fn a_saved_area_is_made_the_size_this_cpu_takes() {
        let (small, big) = (cpu(&[], AVX512), cpu(&[], AMX));
        assert_eq!(small.xsave_size(), 2696);
        assert_eq!(big.xsave_size(), 11008);
        let bv = 3 | 1 << 2 | 1 << 5 | 1 << 6 | 1 << 7 | 1 << 9;
        let x = area(2696, bv, AVX512);
        let grown = fit_xstate(&x, &big);
        assert_eq!(grown.len(), 11008);
        assert_eq!(grown[..2696], x[..]);
        assert!(grown[2696..].iter().all(|&b| b == 0));
        // And back: what is held stays where it was; nothing else comes.
        let shrunk = fit_xstate(&grown, &small);
        assert_eq!(shrunk, x);
        // Components not held are not copied (their bytes are stale).
        let mut y = x.clone();
        y[1664..2688].fill(0x77);
        let bv2: u64 = 3 | 1 << 2;
        y[XSTATE_BV_AT..XSTATE_BV_AT + 8].copy_from_slice(&bv2.to_le_bytes());
        let g = fit_xstate(&y, &big);
        assert!(g[1664..2688].iter().all(|&b| b == 0));
        assert_eq!(g[576..832], y[576..832]);
    }

    #[test]
    fn this_cpu_is_read_and_its_size_is_the_kernels() {
        let here = CpuState::here();
        assert_eq!(here.vendor.len(), 12, "{:?}", here.vendor);
        let sse2 = FEATURES.iter().find(|f| f.0 == "sse2").unwrap();
        assert!(here.has(sse2), "an x86-64 CPU without SSE2: {here:?}");
        assert!(here.missing_on(here).is_empty());
        // The kernel's own size for ptrace's xsave area.
        let s = crate::check::Sleeper::new().expect("fork");
        let f = crate::ptrace::Frozen::freeze(s.0).unwrap();
        let x = crate::sys::get_xstate(s.0).unwrap();
        f.detach().unwrap();
        assert_eq!(x.len(), here.xsave_size(), "{here:?}");
        assert!(check(Some(here), here, &[(s.0, &x)], CpuCheck::Features).is_ok());
    }

    #[test]
    fn xcr0_agrees_with_what_the_kernel_offers() {
        // The fallback for kernels before 5.16 (XCR0) gives what this
        // kernel offers, less the dynamic features (AMX tile data).
        let xcr0 = xcr0().expect("a kernel that enabled xsave");
        let offered = CpuState::here().xfeatures;
        assert_eq!(
            xcr0 & !(1 << 18),
            offered & !(1 << 18),
            "{xcr0:#x} {offered:#x}"
        );
    }

    #[test]
    fn the_check_is_named_on_the_command_line() {
        assert_eq!("features".parse::<CpuCheck>(), Ok(CpuCheck::Features));
        assert_eq!("xsave".parse::<CpuCheck>(), Ok(CpuCheck::Xsave));
        assert!("none".parse::<CpuCheck>().is_err());
    }
}
