//! Median and spread of repeated measurements.

#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

pub fn summarize(v: &[f64]) -> Summary {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if s.is_empty() {
        return Summary {
            median: f64::NAN,
            min: f64::NAN,
            max: f64::NAN,
            n: 0,
        };
    }
    let n = s.len();
    let median = if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    };
    Summary {
        median,
        min: s[0],
        max: s[n - 1],
        n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn median_odd_even() {
        assert_eq!(summarize(&[3.0, 1.0, 2.0]).median, 2.0);
        assert_eq!(summarize(&[4.0, 1.0, 2.0, 3.0]).median, 2.5);
        assert_eq!(summarize(&[]).n, 0);
        let s = summarize(&[5.0, f64::NAN, 1.0]);
        assert_eq!((s.min, s.max, s.n), (1.0, 5.0, 2));
    }
}
