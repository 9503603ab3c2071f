//! The lab's statistics: a figure measured over repeats is reported as its mean with a 95%
//! confidence interval (Student's t over the repeats), and one configuration is said to beat
//! another only when Welch's t-test puts the difference beyond noise (p < 0.05). Otherwise the
//! report says there is no significant difference at this sample size, and roughly how many
//! repeats the observed difference would need to show (80% power).
//! Checks use the same rule, so a check never passes or fails on noise.

use serde::Serialize;
use statrs::distribution::{ContinuousCDF, StudentsT};

/// The significance level of every comparison.
pub const ALPHA: f64 = 0.05;

/// One figure over its repeats.
#[derive(Debug, Clone, Serialize)]
pub struct Estimate {
    pub mean: f64,
    /// Half the width of the 95% confidence interval of the mean (infinite with one repeat).
    pub ci95: f64,
    /// The sample standard deviation across repeats.
    pub sd: f64,
    /// Every repeat's value, in order.
    pub values: Vec<f64>,
}

impl Estimate {
    pub fn of(values: &[f64]) -> Estimate {
        let n = values.len();
        if n == 0 {
            return Estimate { mean: f64::NAN, ci95: f64::INFINITY, sd: f64::NAN, values: Vec::new() };
        }
        let mean = values.iter().sum::<f64>() / n as f64;
        if n == 1 {
            return Estimate { mean, ci95: f64::INFINITY, sd: f64::NAN, values: values.to_vec() };
        }
        let sd = (values.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt();
        let ci95 = t_quantile(1.0 - ALPHA / 2.0, (n - 1) as f64) * sd / (n as f64).sqrt();
        Estimate { mean, ci95, sd, values: values.to_vec() }
    }

    pub fn n(&self) -> usize {
        self.values.len()
    }

    /// `12.3 ± 0.4`, with `digits` after the point; `12.3 (n = 1)` without an interval.
    pub fn show(&self, digits: usize) -> String {
        if self.ci95.is_finite() { format!("{:.digits$} ± {:.digits$}", self.mean, self.ci95) } else { format!("{:.digits$} (n = {})", self.mean, self.n()) }
    }
}

/// Welch's t-test of two estimates' means.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// `b.mean - a.mean`.
    pub difference: f64,
    pub t: f64,
    pub df: f64,
    /// Two-sided.
    pub p: f64,
    pub significant: bool,
    /// Repeats of each that would show the observed difference at 80% power (when it is not
    /// shown yet and there is a difference to show).
    pub repeats_needed: Option<usize>,
}

/// Compares `a` and `b` (each with at least two repeats for a test; with fewer, nothing is
/// significant).
pub fn welch(a: &Estimate, b: &Estimate) -> Comparison {
    let difference = b.mean - a.mean;
    let (na, nb) = (a.n() as f64, b.n() as f64);
    if a.n() < 2 || b.n() < 2 {
        return Comparison { difference, t: f64::NAN, df: f64::NAN, p: 1.0, significant: false, repeats_needed: None };
    }
    let (va, vb) = (a.sd * a.sd / na, b.sd * b.sd / nb);
    let se = (va + vb).sqrt();
    if se == 0.0 {
        // Identical repeats on both sides (a count that every repeat gives alike): any difference
        // at all is exact. A figure read at a coarse resolution can look like this too (CPU in
        // 10 ms ticks over a short run); full runs measure long enough for it not to.
        let significant = difference != 0.0;
        return Comparison {
            difference,
            t: if significant { f64::INFINITY.copysign(difference) } else { 0.0 },
            df: na + nb - 2.0,
            p: if significant { 0.0 } else { 1.0 },
            significant,
            repeats_needed: None,
        };
    }
    let t = difference / se;
    let df = (va + vb).powi(2) / (va * va / (na - 1.0) + vb * vb / (nb - 1.0));
    let p = 2.0 * (1.0 - StudentsT::new(0.0, 1.0, df).map_or(1.0, |d| d.cdf(t.abs())));
    let significant = p < ALPHA;
    let repeats_needed = (!significant && difference != 0.0).then(|| repeats_for(difference.abs(), ((a.sd * a.sd + b.sd * b.sd) / 2.0).sqrt()));
    Comparison { difference, t, df, p, significant, repeats_needed }
}

/// The fewest repeats of each side for which a true difference `d` between two configurations
/// of spread `sd` is found significant 80% of the time: the smallest n with d / (sd sqrt(2/n))
/// at least t(0.975, 2n - 2) + t(0.8, 2n - 2). The t quantiles, not the normal ones, since the
/// answer is often a handful of repeats, where they differ most. Capped at 100,000.
fn repeats_for(d: f64, sd: f64) -> usize {
    (2..=100_000)
        .find(|&n| {
            let df = (2 * n - 2) as f64;
            d / (sd * (2.0 / n as f64).sqrt()) >= t_quantile(1.0 - ALPHA / 2.0, df) + t_quantile(0.8, df)
        })
        .unwrap_or(100_000)
}

/// The sentence a report writes about `a` against `b` for a figure where lower is better (a
/// time, with `better` = "faster" and `unit` = " ms"): "a is faster than b (Welch's t-test, p =
/// 0.003)", or "no significant difference between a and b at this sample size (n = 2 and 2, p =
/// 0.310; about 12 repeats each would show the observed difference of 1.80 ms)".
pub fn verdict(name_a: &str, a: &Estimate, name_b: &str, b: &Estimate, better: &str, unit: &str) -> String {
    let c = welch(a, b);
    if c.significant {
        let (first, second) = if c.difference > 0.0 { (name_a, name_b) } else { (name_b, name_a) };
        return format!("{first} is {better} than {second} (Welch's t-test, {})", p_text(c.p));
    }
    let need = match c.repeats_needed {
        Some(n) => format!("; about {n} repeats each would show the observed difference of {:.2}{unit}", c.difference.abs()),
        None => String::new(),
    };
    format!("no significant difference between {name_a} and {name_b} at this sample size (n = {} and {}, {}{need})", a.n(), b.n(), p_text(c.p))
}

/// A measure a report ranks runs by: its name, the digits it is shown with, and its figure of
/// one run (lower is better).
pub type Measure<R> = (&'static str, usize, fn(&R) -> f64);

/// One figure over the runs `pick` selects: each scenario keeps a list of runs (configuration
/// and repeat) and asks for a configuration's figure this way.
pub fn over<R>(runs: &[R], pick: impl Fn(&R) -> bool, figure: impl Fn(&R) -> f64) -> Estimate {
    Estimate::of(&runs.iter().filter(|r| pick(r)).map(figure).collect::<Vec<_>>())
}

/// A ranking where lower is better, defended pair by pair: the entries by mean, each with its
/// interval, neighbours joined by `<` where Welch's t-test separates them and by `≈` where it
/// does not. When no neighbours separate, it says so instead of ranking.
pub fn ranking(entries: &[(String, Estimate)], digits: usize) -> String {
    let mut sorted: Vec<&(String, Estimate)> = entries.iter().collect();
    sorted.sort_by(|a, b| a.1.mean.total_cmp(&b.1.mean));
    let Some(first) = sorted.first() else { return String::new() };
    let mut out = format!("{} ({})", first.0, first.1.show(digits));
    let mut separated = false;
    for pair in sorted.windows(2) {
        let c = welch(&pair[0].1, &pair[1].1);
        separated |= c.significant;
        out.push_str(if c.significant { " < " } else { " ≈ " });
        out.push_str(&format!("{} ({})", pair[1].0, pair[1].1.show(digits)));
    }
    if separated { out } else { format!("no significant difference at this sample size: {out}") }
}

/// "p = 0.031", or "p < 0.001" where three digits would round it to nothing.
pub fn p_text(p: f64) -> String {
    if p < 0.001 { "p < 0.001".into() } else { format!("p = {p:.3}") }
}

/// The `q` quantile of Student's t with `df` degrees of freedom.
fn t_quantile(q: f64, df: f64) -> f64 {
    StudentsT::new(0.0, 1.0, df).map_or(f64::INFINITY, |d| d.inverse_cdf(q))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tolerance: f64) -> bool {
        (a - b).abs() <= tolerance
    }

    #[test]
    fn a_known_sample_has_its_known_interval() {
        // Mean 5, sample sd sqrt(2.5) = 1.5811; t(0.975, 4) = 2.7764; half width 1.9632.
        let e = Estimate::of(&[3.0, 4.0, 5.0, 6.0, 7.0]);
        assert!(close(e.mean, 5.0, 1e-12));
        assert!(close(e.sd, 2.5f64.sqrt(), 1e-12));
        assert!(close(e.ci95, 1.9632, 1e-3), "{}", e.ci95);
        assert_eq!(e.show(1), "5.0 ± 2.0");
        // Two repeats: sd sqrt(2), t(0.975, 1) = 12.706, half width 12.706 x sqrt(2) / sqrt(2).
        let e = Estimate::of(&[10.0, 12.0]);
        assert!(close(e.ci95, 12.706, 1e-2), "{}", e.ci95);
        let one = Estimate::of(&[7.0]);
        assert!(one.ci95.is_infinite());
        assert_eq!(one.show(0), "7 (n = 1)");
    }

    #[test]
    fn welch_matches_a_worked_example() {
        // Unequal variances (2.5 and 14.5): t = 6 / sqrt(3.4) = 3.2540, df = 3.4^2 / (0.25/4 +
        // 8.41/4) = 5.3395, two-sided p = 0.02055 (the t density integrated numerically).
        let a = Estimate::of(&[19.0, 20.0, 21.0, 22.0, 23.0]);
        let b = Estimate::of(&[22.0, 25.0, 27.0, 29.0, 32.0]);
        let c = welch(&a, &b);
        assert!(close(c.difference, 6.0, 1e-12));
        assert!(close(c.t, 3.2540, 1e-4), "{}", c.t);
        assert!(close(c.df, 5.3395, 1e-4), "{}", c.df);
        assert!(close(c.p, 0.02055, 1e-4), "{}", c.p);
        assert!(c.significant && c.repeats_needed.is_none());
        let v = verdict("a", &a, "b", &b, "faster", " ms");
        assert_eq!(v, "a is faster than b (Welch's t-test, p = 0.021)");
        assert_eq!(p_text(0.0004), "p < 0.001", "not \"p = < 0.001\"");
        assert_eq!(verdict("b", &b, "a", &a, "faster", " ms"), v, "the same whichever is named first");
    }

    #[test]
    fn a_ranking_separates_only_what_the_test_separates() {
        let e = |v: &[f64]| Estimate::of(v);
        let entries = vec![
            ("slow".to_string(), e(&[30.0, 31.0, 29.0, 30.5, 29.5])),
            ("fast".to_string(), e(&[10.0, 11.0, 9.0, 10.5, 9.5])),
            ("fast-too".to_string(), e(&[10.2, 11.1, 9.2, 10.4, 9.9])),
        ];
        assert_eq!(ranking(&entries, 1), "fast (10.0 ± 1.0) ≈ fast-too (10.2 ± 0.9) < slow (30.0 ± 1.0)");
        let noise = vec![("a".to_string(), e(&[10.0, 14.0])), ("b".to_string(), e(&[11.0, 15.0]))];
        assert_eq!(ranking(&noise, 0), "no significant difference at this sample size: a (12 ± 25) ≈ b (13 ± 25)");
        let runs = [("a", 1.0), ("b", 5.0), ("a", 3.0)];
        assert_eq!(over(&runs, |r| r.0 == "a", |r| r.1).values, [1.0, 3.0]);
    }

    #[test]
    fn noise_is_not_a_ranking_and_says_what_it_would_take() {
        let a = Estimate::of(&[10.0, 14.0]);
        let b = Estimate::of(&[11.0, 15.0]);
        let c = welch(&a, &b);
        // t = 1 / sqrt(8/2 + 8/2) = 0.354 on 2 degrees of freedom: p = 0.7575.
        assert!(!c.significant && close(c.p, 0.7575, 1e-3), "{c:?}");
        // sd 2.83 on both sides, difference 1: the normal approximation says 2 x (1.96 + 0.84)^2 x
        // 8 / 1 = 126 repeats; the t quantiles on 2n - 2 degrees of freedom add one.
        assert_eq!(c.repeats_needed, Some(127));
        let v = verdict("a", &a, "b", &b, "faster", " ms");
        assert!(v.starts_with("no significant difference between a and b at this sample size (n = 2 and 2, p = 0."), "{v}");
        assert!(v.ends_with("about 127 repeats each would show the observed difference of 1.00 ms)"), "{v}");
        // A large difference with two noisy repeats: more than the two it had, though the normal
        // approximation would say two.
        let c = welch(&Estimate::of(&[100.0, 400.0]), &Estimate::of(&[300.0, 900.0]));
        assert!(!c.significant && c.repeats_needed.is_some_and(|n| n > 2), "{c:?}");
        // One repeat is never a ranking; a count every repeat gives alike differs exactly.
        assert!(!welch(&Estimate::of(&[1.0]), &Estimate::of(&[9.0])).significant);
        let c = welch(&Estimate::of(&[140.0, 140.0]), &Estimate::of(&[0.0, 0.0]));
        assert!(c.significant && c.p == 0.0, "{c:?}");
        assert!(!welch(&Estimate::of(&[3.0, 3.0]), &Estimate::of(&[3.0, 3.0])).significant);
    }
}
