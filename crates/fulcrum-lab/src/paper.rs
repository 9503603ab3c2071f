//! The Java load balancer paper's layout, shared by the lab's HTTP half (`java_slb`) and its FTP
//! half (`ftp`): the four algorithms it names, its four real servers and ten clients, and its
//! tables and figures of the real servers.

use super::Point;
use super::client;
use super::plot::{self, Series};
use super::report::{Report, Summary, Table};
use super::stats::Estimate;

/// The paper's four, by the names it gives them (Tables 3 to 6, Figures 6 to 10).
pub const PAPER: [(&str, &str); 4] = [("round-robin", "Round Robin"), ("source-hash", "Hash IP Address"), ("least-conn", "Least Connection"), ("random", "Random")];
pub const SERVERS: usize = 4;
pub const CLIENTS: usize = 10;

/// The spread of values across the real servers (the paper's measure of even load): the
/// population standard deviation, as the paper's Table 8 gives it.
pub fn spread(values: impl IntoIterator<Item = f64>) -> f64 {
    Summary::of(&values.into_iter().collect::<Vec<_>>()).std
}

/// A row of [`server_table`]: the figure's name, its digits, and its estimate for server `i`.
pub type ServerRow<'a> = (&'a str, usize, &'a dyn Fn(usize) -> Estimate);

/// A table in the layout of the paper's Tables 3 to 6: a column per real server, a row per figure.
pub fn server_table(rows: &[ServerRow]) -> Table {
    let mut t = Table::new(std::iter::once(String::new()).chain((1..=SERVERS).map(|i| format!("real server {i}"))));
    for (name, digits, figure) in rows {
        t.row(std::iter::once(name.to_string()).chain((0..SERVERS).map(|i| figure(i).show(*digits))));
    }
    t
}

/// The real servers' CPU and memory over time under one algorithm, as the paper's Figures 6
/// (CPU, `cpu_figure`) and 7 to 10 (memory, `memory_figure`) show them.
pub fn server_plots(r: &mut Report, service: &str, algorithm: &str, cpu_figure: &str, memory_figure: &str, timelines: &[Vec<Point>]) {
    let lines = |f: fn(&Point) -> f64| -> Vec<Series> {
        timelines.iter().enumerate().map(|(i, t)| Series { name: format!("real server {}", i + 1), points: t.iter().map(|p| (p.0, f(p))).collect() }).collect()
    };
    let upper = service.to_uppercase();
    if let Ok(svg) = plot::lines(&format!("Real servers' CPU, {upper}, {algorithm}"), "seconds", "% of one core", &lines(|p| p.1)) {
        r.plot(&format!("{service}-servers-cpu-{algorithm}.svg"), &format!("{upper}: the real servers' CPU with {algorithm} (the paper's Figure {cpu_figure}, first repeat)"), svg);
    }
    if let Ok(svg) = plot::lines(&format!("Real servers' memory, {upper}, {algorithm}"), "seconds", "resident MiB", &lines(|p| p.2)) {
        r.plot(
            &format!("{service}-servers-memory-{algorithm}.svg"),
            &format!("{upper}: the real servers' memory with {algorithm} (the paper's Figure {memory_figure}, first repeat)"),
            svg,
        );
    }
}

/// The address client `i` used.
pub fn source(i: usize) -> String {
    client::sources(CLIENTS).get(i).map_or_else(|| "?".to_string(), |a| a.to_string())
}

/// "Client 3 (127.0.0.13)": the paper's row name and the address that client used.
pub fn client_label(i: usize) -> String {
    format!("Client {} ({})", i + 1, source(i))
}
