//! AMPoM's adaptive prefetching (Ho, Wang, Lau: "Lightweight Process
//! Migration and Memory Prefetching in openMosix"), as published:
//!
//! * a lookback window W of the last l faulting pages r_1..r_l (consecutive
//!   repeats collapsed), with their times T and the process's CPU share C;
//! * stride_d: the number of page references in W that take part in a
//!   stride-d reference (r_{p+d} = r_p + 1 with no r_p + 1 in between);
//! * spatial locality S = Σ_{d=1..d_max} stride_d / (l·d);
//! * N = (c'/c)·S·r·(2·t0 + td + 1/r), with r = l/(T_l − T_1) the paging
//!   rate, c the mean CPU share over W, c' = C_l, t0 the network latency and
//!   td the time to move one page (both measured by the caller);
//! * which pages: N/m pages after the pivot r_{p+d} + 1 of each of the m
//!   outstanding streams (those with p + d > l − d); with none, r_l + 1 ..
//!   r_l + N. A page named by several streams uses the saved quota to extend
//!   the others.
//!
//! Published parameters: l = 20, d_max = 4.

use std::collections::VecDeque;

pub const L: usize = 20;
pub const D_MAX: usize = 4;

#[derive(Debug, Clone)]
pub struct Ampom {
    l: usize,
    d_max: usize,
    /// (page number, time in seconds, CPU share in [0, 1])
    w: VecDeque<(u64, f64, f64)>,
}

impl Default for Ampom {
    fn default() -> Self {
        Ampom::new(L, D_MAX)
    }
}

impl Ampom {
    pub fn new(l: usize, d_max: usize) -> Ampom {
        Ampom {
            l,
            d_max,
            w: VecDeque::with_capacity(l + 1),
        }
    }

    fn pages(&self) -> Vec<u64> {
        self.w.iter().map(|e| e.0).collect()
    }

    /// stride_d of the current window.
    pub fn stride(&self, d: usize) -> usize {
        let r = self.pages();
        let mut part = vec![false; r.len()];
        for p in 0..r.len() {
            if p + d >= r.len() {
                break;
            }
            let next = r[p] + 1;
            if r[p + d] == next && !r[p + 1..p + d].contains(&next) {
                part[p] = true;
                part[p + d] = true;
            }
        }
        part.iter().filter(|x| **x).count()
    }

    /// Spatial locality score S (equation 1), in [0, 1].
    pub fn score(&self) -> f64 {
        let s: f64 = (1..=self.d_max)
            .map(|d| self.stride(d) as f64 / (self.l * d) as f64)
            .sum();
        s.min(1.0)
    }

    /// Number of pages to prefetch (equation 3), given the latency `t0` and
    /// the time `td` to move one page, in seconds.
    pub fn count(&self, t0: f64, td: f64) -> usize {
        if self.w.len() < 2 {
            return 0;
        }
        let (t1, tl) = (self.w.front().unwrap().1, self.w.back().unwrap().1);
        let span = (tl - t1).max(1e-6);
        let r = self.w.len() as f64 / span;
        let c = self.w.iter().map(|e| e.2).sum::<f64>() / self.w.len() as f64;
        let c_next = self.w.back().unwrap().2;
        let ratio = if c > 1e-9 { c_next / c } else { 1.0 };
        let n = ratio * self.score() * r * (2.0 * t0 + td + 1.0 / r);
        if n.is_finite() && n > 0.0 {
            n.round().min(4096.0) as usize
        } else {
            0
        }
    }

    /// Prefetch pivots of the outstanding streams (r_{p+d} + 1 with p + d > l − d).
    pub fn pivots(&self) -> Vec<u64> {
        let r = self.pages();
        let n = r.len();
        let mut piv = Vec::new();
        for d in 1..=self.d_max {
            for p in 0..n {
                let q = p + d;
                if q >= n {
                    break;
                }
                // outstanding: q is within the last d references (1-based q+1 > l - d)
                if q + 1 + d <= n {
                    continue;
                }
                let next = r[p] + 1;
                if r[q] == next && !r[p + 1..q].contains(&next) && !piv.contains(&(r[q] + 1)) {
                    piv.push(r[q] + 1);
                }
            }
        }
        piv
    }

    /// Record a fault on page number `page` at time `t` (seconds) with CPU
    /// share `cpu`, and return the page numbers to prefetch.
    pub fn on_fault(&mut self, page: u64, t: f64, cpu: f64, t0: f64, td: f64) -> Vec<u64> {
        if self.w.back().map(|e| e.0) == Some(page) {
            // A repeated reference is temporal locality: one reference.
            let last = self.w.back_mut().unwrap();
            last.1 = t;
            last.2 = cpu;
        } else {
            if self.w.len() == self.l {
                self.w.pop_front();
            }
            self.w.push_back((page, t, cpu));
        }
        let n = self.count(t0, td);
        if n == 0 {
            return Vec::new();
        }
        let piv = self.pivots();
        let mut out: Vec<u64> = Vec::with_capacity(n);
        if piv.is_empty() {
            let last = self.w.back().unwrap().0;
            out.extend((1..=n as u64).map(|k| last + k));
            return out;
        }
        // N/m pages after each pivot; pages named twice leave quota for more.
        let per = n.div_ceil(piv.len());
        for p in &piv {
            let mut k = 0u64;
            let mut took = 0;
            while took < per && out.len() < n && k < 4 * per as u64 + 8 {
                let page = p + k;
                if !out.contains(&page) {
                    out.push(page);
                    took += 1;
                }
                k += 1;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(pages: &[u64], l: usize) -> Ampom {
        let mut a = Ampom::new(l, D_MAX);
        for (i, p) in pages.iter().enumerate() {
            a.on_fault(*p, i as f64 * 1e-3, 1.0, 0.0, 0.0);
        }
        a
    }

    #[test]
    fn paper_stride_examples() {
        // {1, 99, 2, 45, 3, 78, 4}, l = 7: stride_2 = 4, S = 4 / 14.
        let a = with(&[1, 99, 2, 45, 3, 78, 4], 7);
        assert_eq!(a.stride(2), 4);
        assert_eq!(a.stride(1), 0);
        assert!((a.score() - 4.0 / 14.0).abs() < 1e-9);
        // {10, 99, 11, 34, 12, 85}, l = 6: stride_2 = 3, S = 0.25.
        let b = with(&[10, 99, 11, 34, 12, 85], 6);
        assert_eq!(b.stride(2), 3);
        assert!((b.score() - 0.25).abs() < 1e-9);
        // A purely sequential stream scores 1.
        let c = with(&(1..=20).collect::<Vec<_>>(), 20);
        assert!((c.score() - 1.0).abs() < 1e-9);
    }

    #[test]
    fn paper_pivot_example() {
        // l = 10, {13, 27, 7, 8, 14, 8, 3, 15, 4, 5}: outstanding streams
        // {14,15} (stride 3), {3,4} (stride 2), {4,5} (stride 1); pivots 16, 5, 6.
        let a = with(&[13, 27, 7, 8, 14, 8, 3, 15, 4, 5], 10);
        let mut p = a.pivots();
        p.sort();
        assert_eq!(p, vec![5, 6, 16]);
    }

    #[test]
    fn repeated_references_collapse() {
        let a = with(&[5, 5, 5, 6, 6, 7], 20);
        assert_eq!(a.pages(), vec![5, 6, 7]);
    }

    #[test]
    fn count_grows_with_locality_rate_and_latency() {
        // Sequential faults 1 ms apart: r = l / (T_l - T_1).
        let mut a = Ampom::default();
        let mut pre = Vec::new();
        for i in 0..20u64 {
            pre = a.on_fault(100 + i, i as f64 * 1e-3, 0.5, 1e-3, 1e-5);
        }
        let r: f64 = 20.0 / 19e-3;
        let want = (1.0 * r * (2e-3 + 1e-5 + 1.0 / r)).round() as usize;
        assert_eq!(a.count(1e-3, 1e-5), want);
        assert_eq!(pre.len(), want);
        assert_eq!(
            pre[0], 120,
            "prefetch starts at the pivot after the last page"
        );
        // No locality: no prefetch.
        let mut b = Ampom::default();
        let mut x = 7u64;
        for i in 0..20 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            b.on_fault((x >> 20) % 1_000_000 * 10, i as f64 * 1e-3, 0.5, 1e-3, 1e-5);
        }
        assert_eq!(b.count(1e-3, 1e-5), 0);
        // Less CPU expected next than on average: fewer pages.
        let mut c = Ampom::default();
        for i in 0..20u64 {
            c.on_fault(
                100 + i,
                i as f64 * 1e-3,
                if i == 19 { 0.25 } else { 0.5 },
                1e-3,
                1e-5,
            );
        }
        assert!(c.count(1e-3, 1e-5) < a.count(1e-3, 1e-5));
    }
}
