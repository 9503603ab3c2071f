//! The lab's statistics: a figure measured over repeats is reported as its mean with a 95%
//! confidence interval (Student's t over the repeats), and one configuration is said to beat
//! another only when a t-test puts the difference beyond noise: the paired t-test where every
//! configuration of a repeat saw the same pages or arrivals, Welch's t-test otherwise. A report
//! makes many such tests, so it collects them all in one [`Family`] and judges each after Holm's
//! correction over the family (familywise error 5%): sixty tests at p < 0.05 would otherwise find
//! three differences in pure noise. Where a difference is not shown, the report says so, and
//! roughly how many repeats it would need on its own (80% power).
//! Checks use a single unadjusted test each, so a check never passes or fails on noise.

use serde::Serialize;
use statrs::distribution::{ContinuousCDF, Normal, StudentsT};

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

/// How the repeats of two configurations relate, which decides the test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Design {
    /// Repeat i of one configuration and repeat i of the other saw the same input (the same
    /// pages per client, the same arrivals): the paired t-test on the differences, which takes
    /// out what the input adds to both.
    Paired,
    /// Nothing ties the repeats together: Welch's t-test.
    Independent,
}

/// A t-test of two estimates' means.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// "Welch's t-test" or "paired t-test": the test that was made.
    pub test: &'static str,
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
        return Comparison { test: WELCH, difference, t: f64::NAN, df: f64::NAN, p: 1.0, significant: false, repeats_needed: None };
    }
    let (va, vb) = (a.sd * a.sd / na, b.sd * b.sd / nb);
    let se = (va + vb).sqrt();
    if se == 0.0 {
        // Identical repeats on both sides (a count that every repeat gives alike): any difference
        // at all is exact. A figure read at a coarse resolution can look like this too (CPU in
        // 10 ms ticks over a short run); full runs measure long enough for it not to.
        let significant = difference != 0.0;
        return Comparison {
            test: WELCH,
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
    let p = two_sided_p(t, df);
    let significant = p < ALPHA;
    let repeats_needed = (!significant && difference != 0.0).then(|| repeats_for(difference.abs(), ((a.sd * a.sd + b.sd * b.sd) / 2.0).sqrt()));
    Comparison { test: WELCH, difference, t, df, p, significant, repeats_needed }
}

const WELCH: &str = "Welch's t-test";
const PAIRED: &str = "paired t-test";

/// The paired t-test of `b - a`, repeat i of one against repeat i of the other: a one-sample t
/// on the differences, n - 1 degrees of freedom. Estimates of different lengths cannot be
/// paired and get Welch's test.
pub fn paired(a: &Estimate, b: &Estimate) -> Comparison {
    if a.n() != b.n() {
        return welch(a, b);
    }
    let d: Vec<f64> = a.values.iter().zip(&b.values).map(|(x, y)| y - x).collect();
    let e = Estimate::of(&d);
    let difference = e.mean;
    if e.n() < 2 {
        return Comparison { test: PAIRED, difference, t: f64::NAN, df: f64::NAN, p: 1.0, significant: false, repeats_needed: None };
    }
    let n = e.n() as f64;
    let df = n - 1.0;
    if e.sd == 0.0 {
        // Every repeat differs by the same amount: as with Welch's identical repeats, exact.
        let significant = difference != 0.0;
        let t = if significant { f64::INFINITY.copysign(difference) } else { 0.0 };
        return Comparison { test: PAIRED, difference, t, df, p: if significant { 0.0 } else { 1.0 }, significant, repeats_needed: None };
    }
    let t = difference / (e.sd / n.sqrt());
    let p = two_sided_p(t, df);
    let significant = p < ALPHA;
    let repeats_needed = (!significant && difference != 0.0).then(|| paired_repeats_for(difference.abs(), e.sd));
    Comparison { test: PAIRED, difference, t, df, p, significant, repeats_needed }
}

/// The test `design` calls for.
pub fn compare(a: &Estimate, b: &Estimate, design: Design) -> Comparison {
    match design {
        Design::Paired => paired(a, b),
        Design::Independent => welch(a, b),
    }
}

/// Two-sided p of Student's t with `df` degrees of freedom.
fn two_sided_p(t: f64, df: f64) -> f64 {
    2.0 * (1.0 - StudentsT::new(0.0, 1.0, df).map_or(1.0, |d| d.cdf(t.abs())))
}

/// The paired counterpart of [`repeats_for`]: the smallest n with d / (sd / sqrt(n)) at least
/// t(0.975, n - 1) + t(0.8, n - 1), `sd` the spread of the differences. Capped at 100,000.
fn paired_repeats_for(d: f64, sd: f64) -> usize {
    (2..=100_000)
        .find(|&n| {
            let df = (n - 1) as f64;
            d / (sd / (n as f64).sqrt()) >= t_quantile(1.0 - ALPHA / 2.0, df) + t_quantile(0.8, df)
        })
        .unwrap_or(100_000)
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

/// The sentence a check writes about `a` against `b` for a figure where lower is better (a
/// time, with `better` = "faster" and `unit` = " ms"), from one test on its own: "a is faster
/// than b (paired t-test, p = 0.003)", or "no significant difference between a and b at this
/// sample size (n = 2 and 2, Welch's t-test, p = 0.310; about 12 repeats each would show the
/// observed difference of 1.80 ms)". A report's readings use [`Family::verdict`] instead.
pub fn verdict(name_a: &str, a: &Estimate, name_b: &str, b: &Estimate, design: Design, better: &str, unit: &str) -> String {
    let c = compare(a, b, design);
    let p = format!("{}, {}", c.test, p_text(c.p));
    sentence((name_a, name_b), (a.n(), b.n()), &c, c.significant, &p, "", (better, unit))
}

/// The words of one test's verdict, for [`verdict`] and [`Family::verdict`]: which of `names` is
/// `better` where the test holds (`significant`, after whatever adjustment), else that the two
/// are not separated, with how many repeats the observed difference would need (`alone` says
/// under what test that count holds). `p` is the test and its p-value as the caller shows them.
fn sentence(names: (&str, &str), n: (usize, usize), c: &Comparison, significant: bool, p: &str, alone: &str, (better, unit): (&str, &str)) -> String {
    let (name_a, name_b) = names;
    if significant {
        let (first, second) = if c.difference > 0.0 { (name_a, name_b) } else { (name_b, name_a) };
        return format!("{first} is {better} than {second} ({p})");
    }
    let need = match c.repeats_needed {
        Some(k) => format!("; about {k} repeats each would show the observed difference of {:.2}{unit}{alone}", c.difference.abs()),
        None => String::new(),
    };
    format!("no significant difference between {name_a} and {name_b} at this sample size (n = {} and {}, {p}{need})", n.0, n.1)
}

/// A measure a report ranks runs by: its name, the digits it is shown with, and its figure of
/// one run (lower is better).
pub type Measure<R> = (&'static str, usize, fn(&R) -> f64);

/// One figure over the runs `pick` selects: each scenario keeps a list of runs (configuration
/// and repeat) and asks for a configuration's figure this way.
pub fn over<R>(runs: &[R], pick: impl Fn(&R) -> bool, figure: impl Fn(&R) -> f64) -> Estimate {
    Estimate::of(&runs.iter().filter(|r| pick(r)).map(figure).collect::<Vec<_>>())
}

/// Holm's step-down adjustment of the p-values of one family of tests, in their order: the
/// smallest p times m, the next times m - 1, and so on, each at least the one before (so the
/// order of the verdicts is kept) and at most 1. A test is significant after the adjustment when
/// its adjusted p is below [`ALPHA`]; the chance of any false claim in the family is then at most
/// ALPHA, whatever the tests' dependence, and no test of less than m is needlessly lost, as
/// Bonferroni's would be.
pub fn holm(p: &[f64]) -> Vec<f64> {
    let m = p.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&i, &j| p[i].total_cmp(&p[j]));
    let mut adjusted = vec![1.0; m];
    let mut running = 0.0f64;
    for (rank, &i) in order.iter().enumerate() {
        running = running.max(((m - rank) as f64 * p[i]).min(1.0));
        adjusted[i] = running;
    }
    adjusted
}

/// One test of a [`Family`]: what it compared, and its result before the adjustment.
#[derive(Debug, Clone, Serialize)]
pub struct Test {
    pub label: String,
    #[serde(flatten)]
    pub comparison: Comparison,
}

/// A claim whose words wait for the family's adjustment.
enum Claim {
    /// [`Family::verdict`]'s sentence about one test.
    Verdict { a: String, b: String, n: (usize, usize), test: usize, better: String, unit: String },
    /// [`Family::ranking`]'s entries, lowest mean first, shown as "name (mean ± ci)", and the
    /// test of every pair (i < j in that order).
    Ranking { shown: Vec<String>, names: Vec<String>, pairs: Vec<(usize, usize, usize)> },
    /// [`Family::agreement`]: a paper's order of some of a ranking's entries (best first; `None`
    /// where the paper found no difference), held against the ranking's tests, and why the two
    /// may differ.
    Agreement { ranking: usize, paper: Option<Vec<String>>, reason: String },
}

/// What a ranking's tests say of one entry against another after the adjustment.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Order {
    /// The first is lower (better), with the adjusted p.
    Below(f64),
    /// The first is higher.
    Above(f64),
    /// Not separated.
    Level(f64),
}

/// Every test of one report. Holm's correction needs them all before any is judged, so a
/// comparison registers its raw result and returns a placeholder for its words;
/// [`Family::render`] replaces the placeholders once the report is complete. The report owns its
/// family, so the correction is per report, whichever scenario or ranking a test came from.
#[derive(Default)]
pub struct Family {
    tests: Vec<Test>,
    claims: Vec<Claim>,
}

/// Brackets a claim's number in the text until it is rendered: characters no report writes.
const OPEN: char = '\u{27E6}';
const CLOSE: char = '\u{27E7}';

impl Family {
    /// Makes and keeps one test; its index.
    fn test(&mut self, label: String, a: &Estimate, b: &Estimate, design: Design) -> usize {
        self.tests.push(Test { label, comparison: compare(a, b, design) });
        self.tests.len() - 1
    }

    fn claim(&mut self, claim: Claim) -> String {
        self.claims.push(claim);
        format!("{OPEN}{}{CLOSE}", self.claims.len() - 1)
    }

    /// The sentence about `a` against `b` for a figure where lower is better (a time, with
    /// `better` = "faster" and `unit` = " ms"), once the family is adjusted: "a is faster than b
    /// (paired t-test, Holm p = 0.012, raw p = 0.002)", or "no significant difference between a
    /// and b at this sample size (n = 3 and 3, ...; about 12 repeats each would show the observed
    /// difference of 1.80 ms in a test of its own)".
    #[allow(clippy::too_many_arguments)]
    pub fn verdict(&mut self, name_a: &str, a: &Estimate, name_b: &str, b: &Estimate, design: Design, better: &str, unit: &str) -> String {
        let test = self.test(format!("{name_a} against {name_b}"), a, b, design);
        self.claim(Claim::Verdict { a: name_a.into(), b: name_b.into(), n: (a.n(), b.n()), test, better: better.into(), unit: unit.into() })
    }

    /// A ranking where lower is better, every pair tested: the entries by mean, each with its
    /// interval, neighbours joined by `<` (with its adjusted p) where the test separates them and
    /// by `≈` where it does not. Then the pairs further apart whose test the chain misstates: a
    /// chain of `≈` can hide a difference between its ends ("further apart, separated"), and a
    /// `<` in the chain does not make its ends different ("not separated despite the chain").
    /// When no pair separates, it says so.
    pub fn ranking(&mut self, label: &str, entries: &[(String, Estimate)], digits: usize, design: Design) -> String {
        let mut sorted: Vec<&(String, Estimate)> = entries.iter().collect();
        sorted.sort_by(|a, b| a.1.mean.total_cmp(&b.1.mean));
        let mut pairs = Vec::new();
        for i in 0..sorted.len() {
            for j in i + 1..sorted.len() {
                let (a, b) = (sorted[i], sorted[j]);
                pairs.push((i, j, self.test(format!("{label}: {} against {}", a.0, b.0), &a.1, &b.1, design)));
            }
        }
        let shown = sorted.iter().map(|(name, e)| format!("{name} ({})", e.show(digits))).collect();
        let names = sorted.iter().map(|(name, _)| name.clone()).collect();
        self.claim(Claim::Ranking { shown, names, pairs })
    }

    /// A line that holds a paper's ranking against `ranking` (a placeholder [`Family::ranking`]
    /// returned): for each step of the paper's order whether the lab's tests, after the
    /// adjustment, agree, contradict it, or cannot tell, with the p of each; `paper` = `None` is
    /// the paper's "no significant difference", which the lab agrees with when no two of the
    /// entries separate. `reason` is said where the two do not agree.
    pub fn agreement(&mut self, ranking: &str, paper: Option<&[&str]>, reason: &str) -> String {
        let index = ranking.trim_start_matches(OPEN).trim_end_matches(CLOSE).parse::<usize>().ok().filter(|&i| matches!(self.claims.get(i), Some(Claim::Ranking { .. })));
        match index {
            Some(ranking) => self.claim(Claim::Agreement { ranking, paper: paper.map(|p| p.iter().map(|s| s.to_string()).collect()), reason: reason.into() }),
            None => "(no ranking to hold the paper's against)".into(),
        }
    }

    /// How `a` stands against `b` in a ranking's tests.
    fn order(names: &[String], pairs: &[(usize, usize, usize)], adjusted: &[f64], a: &str, b: &str) -> Option<Order> {
        let (i, j) = (names.iter().position(|n| n == a)?, names.iter().position(|n| n == b)?);
        let p = adjusted[pairs.iter().find(|q| (q.0, q.1) == (i.min(j), i.max(j)))?.2];
        Some(if p >= ALPHA {
            Order::Level(p)
        } else if i < j {
            Order::Below(p)
        } else {
            Order::Above(p)
        })
    }

    /// Holm's adjusted p of every test, in order.
    fn adjusted(&self) -> Vec<f64> {
        holm(&self.tests.iter().map(|t| t.comparison.p).collect::<Vec<_>>())
    }

    /// `text` with every claim's placeholder replaced by its words after the adjustment.
    pub fn render(&self, text: &str) -> String {
        let adjusted = self.adjusted();
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(open) = rest.find(OPEN) {
            out.push_str(&rest[..open]);
            let after = &rest[open + OPEN.len_utf8()..];
            let Some(close) = after.find(CLOSE) else { break };
            match after[..close].parse::<usize>().ok().and_then(|i| self.claims.get(i)) {
                Some(claim) => out.push_str(&self.words(claim, &adjusted)),
                None => out.push_str(&rest[open..open + OPEN.len_utf8() + close + CLOSE.len_utf8()]),
            }
            rest = &after[close + CLOSE.len_utf8()..];
        }
        out.push_str(rest);
        out
    }

    fn words(&self, claim: &Claim, adjusted: &[f64]) -> String {
        match claim {
            Claim::Verdict { a, b, n, test, better, unit } => {
                let c = &self.tests[*test].comparison;
                let p = format!("{}, Holm {}, raw {}", c.test, p_text(adjusted[*test]), p_text(c.p));
                sentence((a, b), *n, c, adjusted[*test] < ALPHA, &p, " in a test of its own", (better, unit))
            }
            Claim::Ranking { shown, names, pairs } => {
                let Some(first) = shown.first() else { return String::new() };
                let separated = |i: usize, j: usize| pairs.iter().find(|p| p.0 == i && p.1 == j).map(|p| adjusted[p.2]).filter(|&p| p < ALPHA);
                let mut out = first.clone();
                for (j, entry) in shown.iter().enumerate().skip(1) {
                    match separated(j - 1, j) {
                        Some(p) => out.push_str(&format!(" < ({}) ", p_text(p))),
                        None => out.push_str(" ≈ "),
                    }
                    out.push_str(entry);
                }
                // The chain reads as transitive, and a test is not: name each pair further apart
                // whose test says otherwise than the chain, either way.
                let chained = |i: usize, j: usize| (i + 1..=j).any(|k| separated(k - 1, k).is_some());
                let (mut hidden, mut unfounded) = (Vec::new(), Vec::new());
                for &(i, j, test) in pairs.iter().filter(|p| p.1 > p.0 + 1) {
                    match (separated(i, j), chained(i, j)) {
                        (Some(p), false) => hidden.push(format!("{} < {} ({})", names[i], names[j], p_text(p))),
                        (None, true) => unfounded.push(format!("{} ≈ {} ({})", names[i], names[j], p_text(adjusted[test]))),
                        _ => {}
                    }
                }
                if !pairs.iter().any(|p| adjusted[p.2] < ALPHA) {
                    return format!("no significant difference between any two at this sample size: {out}");
                }
                if !hidden.is_empty() {
                    out.push_str(&format!("; further apart, separated: {}", hidden.join(", ")));
                }
                if !unfounded.is_empty() {
                    out.push_str(&format!("; not separated despite the chain: {}", unfounded.join(", ")));
                }
                out
            }
            Claim::Agreement { ranking, paper, reason } => {
                let Some(Claim::Ranking { names, pairs, .. }) = self.claims.get(*ranking) else { return String::new() };
                let order = |a: &str, b: &str| Self::order(names, pairs, adjusted, a, b);
                let (verdict, steps) = match paper {
                    // The paper found no difference: so does the lab unless two of its entries separate.
                    None => {
                        let separated: Vec<String> = names
                            .iter()
                            .enumerate()
                            .flat_map(|(i, a)| names[i + 1..].iter().map(move |b| (a, b)))
                            .filter_map(|(a, b)| match order(a, b)? {
                                Order::Below(p) => Some(format!("{a} < {b} ({})", p_text(p))),
                                Order::Above(p) => Some(format!("{b} < {a} ({})", p_text(p))),
                                Order::Level(_) => None,
                            })
                            .collect();
                        if separated.is_empty() {
                            ("agrees".to_string(), "no two separated either".to_string())
                        } else {
                            ("disagrees".to_string(), format!("separated: {}", separated.join(", ")))
                        }
                    }
                    Some(paper) => {
                        let (mut agree, mut contradict, mut steps) = (0, 0, Vec::new());
                        for w in paper.windows(2) {
                            let (a, b) = (&w[0], &w[1]);
                            steps.push(match order(a, b) {
                                Some(Order::Below(p)) => {
                                    agree += 1;
                                    format!("{a} < {b} ({})", p_text(p))
                                }
                                Some(Order::Above(p)) => {
                                    contradict += 1;
                                    format!("{b} < {a}, the other way ({})", p_text(p))
                                }
                                Some(Order::Level(p)) => format!("{a} ≈ {b} ({})", p_text(p)),
                                None => format!("{a}, {b}: not ranked"),
                            });
                        }
                        let n = paper.len().saturating_sub(1);
                        let verdict = if contradict > 0 {
                            format!("disagrees ({contradict} of {n} steps the other way, {agree} the same)")
                        } else if agree == n {
                            "agrees".to_string()
                        } else {
                            format!("not shown ({agree} of {n} steps separated, none the other way)")
                        };
                        (verdict, steps.join("; "))
                    }
                };
                let why = if verdict == "agrees" { String::new() } else { format!(" Why it may differ: {reason}") };
                format!("{verdict}: {steps}.{why}")
            }
        }
    }

    /// "60 tests, 9 significant at p < 0.05 alone, 1 after Holm's correction": what a report
    /// says of its family.
    pub fn summary(&self) -> String {
        let raw = self.tests.iter().filter(|t| t.comparison.p < ALPHA).count();
        let held = self.adjusted().iter().filter(|&&p| p < ALPHA).count();
        let m = self.tests.len();
        format!("{m} test{}, {raw} significant at p < {ALPHA} alone, {held} after Holm's correction", if m == 1 { "" } else { "s" })
    }

    pub fn is_empty(&self) -> bool {
        self.tests.is_empty()
    }

    /// Every test with its raw and adjusted p, for results.json.
    pub fn record(&self) -> serde_json::Value {
        let adjusted = self.adjusted();
        self.tests.iter().zip(adjusted).map(|(t, p)| serde_json::json!({ "test": t, "p_holm": p, "significant_after_holm": p < ALPHA })).collect::<Vec<_>>().into()
    }
}

/// "p = 0.031", or "p < 0.001" where three digits would round it to nothing.
pub fn p_text(p: f64) -> String {
    if p < 0.001 { "p < 0.001".into() } else { format!("p = {p:.3}") }
}

/// Past this many degrees of freedom, [`t_quantile`] is the normal quantile with its first two
/// corrections: statrs' inverse of Student's t drifts as the degrees of freedom grow (its
/// iterative search gives t(0.975) = 1.9598 at 500,000 and 1.83 at ten million, where the answer
/// is 1.960), while the expansion is exact to better than 1e-7 from here on.
const NORMAL_PAST_DF: f64 = 1_000.0;

/// The `q` quantile of Student's t with `df` degrees of freedom.
fn t_quantile(q: f64, df: f64) -> f64 {
    if df > NORMAL_PAST_DF {
        // Cornish-Fisher: t = z + (z^3 + z) / 4v + (5z^5 + 16z^3 + 3z) / 96v^2 + O(v^-3).
        let z = normal_quantile(q);
        return z + (z.powi(3) + z) / (4.0 * df) + (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / (96.0 * df * df);
    }
    StudentsT::new(0.0, 1.0, df).map_or(f64::INFINITY, |d| d.inverse_cdf(q))
}

/// The `q` quantile of the standard normal.
fn normal_quantile(q: f64) -> f64 {
    Normal::new(0.0, 1.0).map_or(f64::NAN, |d| d.inverse_cdf(q))
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
        let v = verdict("a", &a, "b", &b, Design::Independent, "faster", " ms");
        assert_eq!(v, "a is faster than b (Welch's t-test, p = 0.021)");
        assert_eq!(p_text(0.0004), "p < 0.001", "not \"p = < 0.001\"");
        assert_eq!(verdict("b", &b, "a", &a, Design::Independent, "faster", " ms"), v, "the same whichever is named first");
    }

    #[test]
    fn a_ranking_separates_only_what_the_test_separates() {
        let e = |v: &[f64]| Estimate::of(v);
        let entries = vec![
            ("slow".to_string(), e(&[30.0, 31.0, 29.0, 30.5, 29.5])),
            ("fast".to_string(), e(&[10.0, 11.0, 9.0, 10.5, 9.5])),
            ("fast-too".to_string(), e(&[10.2, 11.1, 9.2, 10.4, 9.9])),
        ];
        let mut f = Family::default();
        let text = f.ranking("time", &entries, 1, Design::Independent);
        // Three pairs tested; the two against slow are beyond any correction.
        assert_eq!(f.tests.len(), 3);
        assert_eq!(f.render(&text), "fast (10.0 ± 1.0) ≈ fast-too (10.2 ± 0.9) < (p < 0.001) slow (30.0 ± 1.0)");
        let noise = vec![("a".to_string(), e(&[10.0, 14.0])), ("b".to_string(), e(&[11.0, 15.0]))];
        let mut f = Family::default();
        let text = f.ranking("time", &noise, 0, Design::Independent);
        assert_eq!(f.render(&text), "no significant difference between any two at this sample size: a (12 ± 25) ≈ b (13 ± 25)");
        let runs = [("a", 1.0), ("b", 5.0), ("a", 3.0)];
        assert_eq!(over(&runs, |r| r.0 == "a", |r| r.1).values, [1.0, 3.0]);
    }

    #[test]
    fn a_chain_of_ties_does_not_hide_a_gap_between_its_ends() {
        // Each neighbour 2 apart with sd 1 over 3 repeats: t = 2 / sqrt(2/3) = 2.449 on 4
        // degrees of freedom, p = 0.0705; the ends 4 apart: t = 4.899, p = 0.00805. Holm over the
        // three: 0.00805 x 3 = 0.0241 holds, 0.0705 x 2 = 0.141 does not.
        let e = |v: &[f64]| Estimate::of(v);
        let entries = vec![("a".to_string(), e(&[10.0, 11.0, 12.0])), ("b".to_string(), e(&[12.0, 13.0, 14.0])), ("c".to_string(), e(&[14.0, 15.0, 16.0]))];
        let mut f = Family::default();
        let text = f.ranking("time", &entries, 0, Design::Independent);
        assert_eq!(f.render(&text), "a (11 ± 2) ≈ b (13 ± 2) ≈ c (15 ± 2); further apart, separated: a < c (p = 0.024)");
        assert_eq!(f.tests[1].label, "time: a against c");
        assert!(close(f.tests[1].comparison.p, 0.00805, 1e-4), "{:?}", f.tests[1]);
        assert!(close(f.tests[0].comparison.p, 0.0705, 1e-3), "{:?}", f.tests[0]);
        // The other way: b barely above a, c far above b yet lost in a's spread. The chain a ≈ b
        // < c would read as a < c, which its own test does not show.
        let entries = vec![("a".to_string(), e(&[0.0, 20.0, 40.0])), ("b".to_string(), e(&[20.9, 21.0, 21.1])), ("c".to_string(), e(&[30.9, 31.0, 31.1]))];
        let mut f = Family::default();
        let text = f.ranking("time", &entries, 0, Design::Independent);
        let out = f.render(&text);
        assert!(out.starts_with("a (20 ± 50) ≈ b (21 ± 0) < (p < 0.001) c (31 ± 0); not separated despite the chain: a ≈ c (p = 0."), "{out}");
    }

    #[test]
    fn holm_matches_a_worked_example() {
        // Sorted: 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04, raised to
        // the 0.06 before it. At 5%: the first two hold, 0.03 and 0.04 do not.
        let adjusted = holm(&[0.01, 0.04, 0.03, 0.005]);
        let want = [0.03, 0.06, 0.06, 0.02];
        for (a, w) in adjusted.iter().zip(want) {
            assert!(close(*a, w, 1e-12), "{adjusted:?}");
        }
        assert_eq!(adjusted.iter().map(|&p| p < ALPHA).collect::<Vec<_>>(), [true, false, false, true]);
        assert!(holm(&[]).is_empty());
        assert_eq!(holm(&[0.7, 0.9]), [1.0, 1.0], "capped at 1");
    }

    #[test]
    fn a_report_judges_every_verdict_after_holm() {
        // One difference at raw p = 0.021 (the Welch example) among nineteen of pure noise: alone
        // it is significant, among twenty it is not, and the text says which.
        let a = Estimate::of(&[19.0, 20.0, 21.0, 22.0, 23.0]);
        let b = Estimate::of(&[22.0, 25.0, 27.0, 29.0, 32.0]);
        let mut f = Family::default();
        let mut text = format!("- {}\n", f.verdict("a", &a, "b", &b, Design::Independent, "faster", " ms"));
        for i in 0..19 {
            text.push_str(&format!("- {}\n", f.verdict(&format!("x{i}"), &a, &format!("y{i}"), &a, Design::Independent, "faster", " ms")));
        }
        let out = f.render(&text);
        let first = out.lines().next().unwrap();
        assert!(first.starts_with("- no significant difference between a and b at this sample size (n = 5 and 5, Welch's t-test, Holm p = 0.411, raw p = 0.021"), "{first}");
        assert_eq!(f.summary(), "20 tests, 1 significant at p < 0.05 alone, 0 after Holm's correction");
        assert!(!out.contains(OPEN) && !out.contains(CLOSE), "{out}");
        // Alone, the same test holds.
        let mut f = Family::default();
        let text = f.verdict("a", &a, "b", &b, Design::Independent, "faster", " ms");
        assert_eq!(f.render(&text), "a is faster than b (Welch's t-test, Holm p = 0.021, raw p = 0.021)");
        assert_eq!(f.record()[0]["significant_after_holm"], true);
    }

    #[test]
    fn the_paired_test_matches_a_worked_example() {
        // Differences 3, 5, 6, 7, 9: mean 6, sd sqrt(5), t = 6 / (sqrt(5) / sqrt(5)) = 6 on 4
        // degrees of freedom; two-sided p = 0.003883 (t's closed form for 4 degrees of freedom).
        // Welch's test of the same numbers, blind to the pairing, finds only p = 0.021.
        let a = Estimate::of(&[19.0, 20.0, 21.0, 22.0, 23.0]);
        let b = Estimate::of(&[22.0, 25.0, 27.0, 29.0, 32.0]);
        let c = paired(&a, &b);
        assert_eq!(c.test, "paired t-test");
        assert!(close(c.difference, 6.0, 1e-12) && close(c.t, 6.0, 1e-9) && c.df == 4.0, "{c:?}");
        assert!(close(c.p, 0.0038825, 1e-6), "{c:?}");
        assert!(c.significant);
        assert!(compare(&a, &b, Design::Paired).p < compare(&a, &b, Design::Independent).p);
        // The same shift on every repeat is exact; none at all is no difference.
        assert!(paired(&Estimate::of(&[1.0, 5.0, 9.0]), &Estimate::of(&[2.0, 6.0, 10.0])).p == 0.0);
        assert!(!paired(&a, &a).significant);
        // Noise around no shift, and the repeats it would take to show the shift it has.
        let c = paired(&Estimate::of(&[10.0, 20.0, 30.0]), &Estimate::of(&[11.0, 19.0, 32.0]));
        assert!(!c.significant && c.repeats_needed.is_some_and(|n| n > 3), "{c:?}");
        // Unequal repeats cannot pair.
        assert_eq!(paired(&a, &Estimate::of(&[1.0, 2.0])).test, "Welch's t-test");
    }

    #[test]
    fn the_t_quantile_holds_at_small_and_huge_degrees_of_freedom() {
        // Table values of t(0.975).
        for (df, want) in [(1.0, 12.706), (2.0, 4.303), (4.0, 2.776), (10.0, 2.228), (30.0, 2.042), (120.0, 1.980), (1000.0, 1.962)] {
            assert!(close(t_quantile(0.975, df), want, 1e-3), "df {df}: {}", t_quantile(0.975, df));
        }
        assert!(close(t_quantile(0.8, 10.0), 0.8791, 1e-3));
        // Past the threshold: the normal's 1.959964, a hair wider; and still so where statrs'
        // own search has drifted off.
        assert!(close(t_quantile(0.975, 1e7), 1.959964, 1e-5));
        let q = t_quantile(0.975, 110_000.0);
        assert!(close(q, 1.95999, 1e-4), "{q}");
        assert!(q > 1.959964);
        // Either side of the threshold agree, so nothing jumps there.
        assert!(close(t_quantile(0.975, NORMAL_PAST_DF), t_quantile(0.975, NORMAL_PAST_DF + 1.0), 1e-5));
        assert!(close(t_quantile(0.8, NORMAL_PAST_DF), t_quantile(0.8, NORMAL_PAST_DF + 1.0), 1e-5));
        // The p of the quantile is its level at any size.
        assert!(close(two_sided_p(q, 110_000.0), 0.05, 1e-4));
        // An interval of many repeats is the normal's.
        let values: Vec<f64> = (0..110_001).map(|i| (i % 2) as f64).collect();
        let e = Estimate::of(&values);
        assert!(close(e.ci95 / (e.sd / (values.len() as f64).sqrt()), 1.96, 1e-3), "{}", e.ci95);
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
        let v = verdict("a", &a, "b", &b, Design::Independent, "faster", " ms");
        assert!(v.starts_with("no significant difference between a and b at this sample size (n = 2 and 2, Welch's t-test, p = 0."), "{v}");
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

    #[test]
    fn a_papers_order_is_held_step_by_step_against_the_tests() {
        let e = |v: &[f64]| Estimate::of(v);
        let entries = vec![("a".to_string(), e(&[1.0, 1.1, 0.9])), ("b".to_string(), e(&[5.0, 5.1, 4.9])), ("c".to_string(), e(&[5.05, 4.95, 5.0]))];
        let mut f = Family::default();
        let r = f.ranking("m", &entries, 1, Design::Independent);
        let same = f.agreement(&r, Some(&["a", "b", "c"]), "the machine");
        let reverse = f.agreement(&r, Some(&["b", "a"]), "the machine");
        let none = f.agreement(&r, None, "coarse samples");
        let text = f.render(&format!("{same}\n{reverse}\n{none}"));
        let lines: Vec<&str> = text.lines().collect();
        // a is far below both; b and c are level: one step of two separated, none reversed.
        assert!(
            lines[0].starts_with("not shown (1 of 2 steps separated, none the other way): a < b (p ")
                && lines[0].contains("b ≈ c (p = ")
                && lines[0].ends_with("Why it may differ: the machine"),
            "{}",
            lines[0]
        );
        assert!(lines[1].starts_with("disagrees (1 of 1 steps the other way, 0 the same): a < b, the other way"), "{}", lines[1]);
        assert!(lines[2].starts_with("disagrees: separated: a < b (p ") && lines[2].contains("a < c"), "{}", lines[2]);
        let mut g = Family::default();
        let r = g.ranking("m", &entries[1..], 1, Design::Independent);
        let level = g.agreement(&r, None, "x");
        assert_eq!(g.render(&level), "agrees: no two separated either.");
        assert_eq!(g.agreement("not a placeholder", None, "x"), "(no ranking to hold the paper's against)");
    }
}
