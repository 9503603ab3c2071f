//! The passive paper's Figure 2: its metric R = (SYNs sent - SYN-ACKs) / SYN-ACKs against the
//! time a connection takes, over a range of degradations. One degraded real server (ten accepts a
//! second, one connection queued) behind Fulcrum without redispatch, as the paper's client reached
//! its server directly; Poisson arrivals from well below its capacity to well above it, a fresh
//! server and Fulcrum per rate. Fulcrum counts the SYNs it sends and the SYN-ACKs it gets, and
//! times each handshake; a least-squares line through the origin gives the time one unit of R
//! costs, which is the SYN retransmission timeout the paper read off its figure (3 s there).

use std::time::Duration;

use serde_json::{Value, json};

use super::client::{self, Link, Traffic};
use super::plot::{self, Series};
use super::procs::Fulcrum;
use super::report::{Report, Table, fmt};
use super::stats::{self, Estimate};
use super::{Ctx, service_toml};

/// One rate's run: what Fulcrum counted toward the server.
pub struct Point {
    pub rate: f64,
    pub repeat: usize,
    pub syn_sent: u64,
    pub syn_acked: u64,
    /// Mean handshake time of the connections the server answered.
    pub connect_ms: f64,
    pub requests: usize,
    pub failed: usize,
}

impl Point {
    pub fn r(&self) -> f64 {
        self.syn_sent.saturating_sub(self.syn_acked) as f64 / self.syn_acked.max(1) as f64
    }
}

/// Runs the sweep, `--repeat` times, `--lanes` repeats at a time; `degraded` are the slow
/// server's options.
pub async fn run(ctx: &Ctx, degraded: &[String]) -> anyhow::Result<Vec<Point>> {
    let (rates, seconds): (&[f64], u64) = if ctx.quick { (&[4.0, 14.0], 4) } else { (&[2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0], 20) };
    let pb = ctx.progress(Some((rates.len() * ctx.repeat) as u64), "passive figure 2");
    let mut points = Vec::new();
    for first in (0..ctx.repeat).step_by(ctx.lanes) {
        let lanes = (first..ctx.repeat.min(first + ctx.lanes)).map(|repeat| one_repeat(ctx, degraded, rates, Duration::from_secs(seconds), repeat, &pb));
        points.extend(futures_util::future::try_join_all(lanes).await?.into_iter().flatten());
    }
    pb.finish_and_clear();
    Ok(points)
}

/// Every rate once, each with a fresh server, so no run inherits another's queue.
async fn one_repeat(ctx: &Ctx, degraded: &[String], rates: &[f64], seconds: Duration, repeat: usize, pb: &indicatif::ProgressBar) -> anyhow::Result<Vec<Point>> {
    let sources = client::sources(10);
    let seed = ctx.seed * 1000 + 500 + repeat as u64;
    let mut points = Vec::new();
    for &rate in rates {
        pb.set_message(format!("figure 2 at {rate}/s, repeat {}", repeat + 1));
        let slow = super::procs::backend("slow", degraded)?;
        let f = Fulcrum::start(&ctx.work, &format!("syn-time-{rate}-{repeat}"), &service_toml("tcp", "round-robin", &[(slow.addr, 1)], "retries = 0\n"))?;
        let samples =
            client::poisson(rate, seconds, seed, Traffic { sources: &sources, target: f.listen, link: &Link::get("/name"), timeout: Duration::from_secs(20) }, 2000).await;
        let stats: Value = serde_json::from_slice(&client::fetch(f.admin, "/api/stats").await?)?;
        let s = &stats["services"][0]["servers"][0];
        let p = Point {
            rate,
            repeat,
            syn_sent: s["syn_sent"].as_u64().unwrap_or(0),
            syn_acked: s["syn_acked"].as_u64().unwrap_or(0),
            connect_ms: s["connect_ms"].as_f64().unwrap_or(f64::NAN),
            requests: samples.len(),
            failed: samples.iter().filter(|s| !s.ok()).count(),
        };
        pb.suspend(|| {
            eprintln!("passive figure 2 at {rate}/s, repeat {}: R {:.3}, connection {:.0} ms, {} SYNs, {} SYN-ACKs", repeat + 1, p.r(), p.connect_ms, p.syn_sent, p.syn_acked)
        });
        points.push(p);
        pb.inc(1);
    }
    Ok(points)
}

/// The least-squares slope of connection time on R through the origin (ms per unit of R), and
/// the share of the variance it explains; over the runs where R could be measured.
pub fn fit(points: &[Point]) -> Option<(f64, f64)> {
    let xy: Vec<(f64, f64)> = points.iter().filter(|p| p.syn_acked > 0 && p.connect_ms.is_finite()).map(|p| (p.r(), p.connect_ms)).collect();
    let sxx: f64 = xy.iter().map(|(x, _)| x * x).sum();
    if sxx == 0.0 {
        return None;
    }
    let slope = xy.iter().map(|(x, y)| x * y).sum::<f64>() / sxx;
    let mean_y = xy.iter().map(|p| p.1).sum::<f64>() / xy.len() as f64;
    let total: f64 = xy.iter().map(|(_, y)| (y - mean_y).powi(2)).sum();
    let left: f64 = xy.iter().map(|(x, y)| (y - slope * x).powi(2)).sum();
    Some((slope, if total > 0.0 { 1.0 - left / total } else { 1.0 }))
}

/// Figure 2's table, plots and reading.
pub fn report(r: &mut Report, ctx: &Ctx, points: &Result<Vec<Point>, String>) {
    let title = "R against the connection time (the paper's Figure 2)";
    let points = match points {
        Ok(p) => p,
        Err(e) => return r.section(title, &format!("Not run: {e}.")),
    };
    let mut rates: Vec<f64> = points.iter().map(|p| p.rate).collect();
    rates.sort_by(f64::total_cmp);
    rates.dedup();
    let at = |rate: f64, figure: fn(&Point) -> f64| stats::over(points, |p| p.rate == rate, figure);
    let mut t = Table::new(["Rate (req/s)", "R", "Connection time (ms)", "1000 ms × R", "SYNs / SYN-ACKs (all repeats)", "Failed"]);
    for &rate in &rates {
        let (syns, acks, failed) = points.iter().filter(|p| p.rate == rate).fold((0, 0, 0), |a, p| (a.0 + p.syn_sent, a.1 + p.syn_acked, a.2 + p.failed));
        let r_est = at(rate, Point::r);
        t.row([
            fmt(rate),
            r_est.show(3),
            at(rate, |p| p.connect_ms).show(1),
            Estimate::of(&r_est.values.iter().map(|v| v * 1000.0).collect::<Vec<_>>()).show(0),
            format!("{syns} / {acks}"),
            failed.to_string(),
        ]);
    }
    let fitted = fit(points);
    // Milliseconds per unit of R at each rate that dropped SYNs: whether the cost of R grows
    // with the load (second retransmissions) or shrinks (connects that time out uncounted).
    let per_r: Vec<(f64, f64)> = rates
        .iter()
        .filter_map(|&rate| {
            let (r_mean, ms) = (at(rate, Point::r).mean, at(rate, |p| p.connect_ms).mean);
            (r_mean > 0.0 && ms.is_finite()).then_some((rate, ms / r_mean))
        })
        .collect();
    let trend = match (per_r.first(), per_r.last()) {
        (Some(lo), Some(hi)) if per_r.len() > 1 => format!(
            " Per rate, a unit of R cost {:.0} ms at {} req/s and {:.0} ms at {} req/s: {}.",
            lo.1,
            fmt(lo.0),
            hi.1,
            fmt(hi.0),
            if hi.1 > lo.1 * 1.1 {
                "more under more overload, as second retransmissions (2 s more each) become common"
            } else if hi.1 < lo.1 / 1.1 {
                "less under more overload: connects that time out after retransmissions count in R but not in the connection time of the answered ones"
            } else {
                "about the same at every rate"
            }
        ),
        _ => String::new(),
    };
    let line = match fitted {
        Some((slope, r2)) => format!(
            "The least-squares line through the origin over all {} runs: connection time = {slope:.0} ms × R (R² = {r2:.3}). The paper read \
             3000 ms × R off its figure and matched it to the initial retransmission timeout of 3 s (RFC 1122, RFC 2988), which its kernel \
             (Linux 2.6.18) used. Linux since 3.1 starts at 1 s (RFC 6298) and doubles the wait at each further retransmission (1, 2, \
             4 s ...), so a connection that needed n retransmissions waited 2^n − 1 s: about 1000 ms per unit of R while most dropped \
             SYNs succeed at their first retransmission.{trend} The connection time is Fulcrum's own measure of each handshake to the \
             server (`connect_ms`), R its own count of SYNs and SYN-ACKs.",
            points.len()
        ),
        None => "No run dropped a SYN, so no line can be fitted.".to_string(),
    };
    r.section(
        title,
        &format!(
            "One degraded server (ten accepts a second, one connection queued) behind Fulcrum without redispatch, Poisson arrivals \
             at each rate for {} s, a fresh server and Fulcrum per rate and repeat ({} repeats); mean over the repeats ± its 95% \
             interval.\n\n{}\n{line}",
            if ctx.quick { 4 } else { 20 },
            ctx.repeat,
            t.markdown()
        ),
    );
    let mean_at = |figure: fn(&Point) -> f64| rates.iter().map(|&rate| (rate, at(rate, figure).mean)).collect::<Vec<_>>();
    let by_rate = [Series { name: "connection time (ms)".into(), points: mean_at(|p| p.connect_ms) }, Series { name: "1000 ms × R".into(), points: mean_at(|p| p.r() * 1000.0) }];
    if let Ok(svg) = plot::lines("Connection time and R against the request rate", "requests per second", "ms", &by_rate) {
        r.plot("r-vs-rate.svg", "Connection time and R against the rate (Figure 2, as the paper draws it)", svg);
    }
    let mut measured: Vec<(f64, f64)> = points.iter().filter(|p| p.syn_acked > 0 && p.connect_ms.is_finite()).map(|p| (p.r(), p.connect_ms)).collect();
    measured.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut series = vec![Series { name: "runs (R, connection time)".into(), points: measured.clone() }];
    if let (Some((slope, _)), Some(last)) = (fitted, measured.last()) {
        series.push(Series { name: format!("fitted: {slope:.0} ms × R"), points: vec![(0.0, 0.0), (last.0, slope * last.0)] });
    }
    if let Ok(svg) = plot::lines("Connection time against R", "R", "ms", &series) {
        r.plot("connection-time-vs-r.svg", "Connection time against R, each run and the fitted line", svg);
    }
    if let Some((slope, _)) = fitted {
        r.figure("figure2.ms_per_r", slope);
    }
    for &rate in &rates {
        r.estimate(format!("figure2.{rate}.r"), &at(rate, Point::r));
        r.estimate(format!("figure2.{rate}.connect_ms"), &at(rate, |p| p.connect_ms));
    }
}

/// Figure 2's runs for results.json.
pub fn raw(points: &Result<Vec<Point>, String>) -> Value {
    match points {
        Ok(points) => json!({
            "fit_ms_per_r": fit(points).map(|f| f.0),
            "runs": points.iter().map(|p| json!({"rate": p.rate, "repeat": p.repeat, "syn_sent": p.syn_sent, "syn_acked": p.syn_acked, "r": p.r(), "connect_ms": p.connect_ms, "requests": p.requests, "failed": p.failed})).collect::<Vec<_>>(),
        }),
        Err(e) => json!({ "not_run": e }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(syn_sent: u64, syn_acked: u64, connect_ms: f64) -> Point {
        Point { rate: 1.0, repeat: 0, syn_sent, syn_acked, connect_ms, requests: 0, failed: 0 }
    }

    #[test]
    fn r_and_its_line_through_the_origin() {
        assert_eq!(point(150, 100, 0.0).r(), 0.5);
        // Exactly 1000 ms per unit of R: slope 1000, all the variance explained.
        let exact = [point(110, 100, 100.0), point(150, 100, 500.0), point(200, 100, 1000.0)];
        let (slope, r2) = fit(&exact).unwrap();
        assert!((slope - 1000.0).abs() < 1e-9 && (r2 - 1.0).abs() < 1e-12, "{slope} {r2}");
        // Σxy / Σx² = (0.1·80 + 0.5·520) / (0.01 + 0.25) = 268 / 0.26.
        let (slope, _) = fit(&[point(110, 100, 80.0), point(150, 100, 520.0)]).unwrap();
        assert!((slope - 268.0 / 0.26).abs() < 1e-9, "{slope}");
        // No dropped SYN anywhere: no line.
        assert!(fit(&[point(100, 100, 0.2)]).is_none());
    }
}
