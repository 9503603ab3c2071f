//! SVG charts for the lab's reports (plotters' SVG backend: text, no fonts or images needed):
//! lines over a numeric axis ([`lines`]); means over the repeats with their 95% intervals, over a
//! numeric axis ([`means`]) or over categories, which are drawn as categories and not joined by
//! lines, since nothing lies between client 3 and client 4 ([`categories`]).

use plotters::prelude::*;

use super::stats::Estimate;

/// One named line.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// One named series of means over the repeats, each with its interval.
pub struct Means {
    pub name: String,
    pub points: Vec<(f64, Estimate)>,
}

/// A mean's interval as drawn: the mean alone where the interval is unknown (one repeat).
fn interval(e: &Estimate) -> (f64, f64) {
    if e.ci95.is_finite() { (e.mean - e.ci95, e.mean + e.ci95) } else { (e.mean, e.mean) }
}

/// The y axis's top: a tenth above the highest value drawn, 1 when there is none.
fn top(ys: impl Iterator<Item = f64>) -> f64 {
    let y1 = ys.filter(|y| y.is_finite()).fold(0.0f64, f64::max);
    if y1 > 0.0 { y1 * 1.1 } else { 1.0 }
}

/// A line chart of means over a numeric axis, each point with a bar over its 95% interval.
pub fn means(title: &str, x_label: &str, y_label: &str, series: &[Means]) -> anyhow::Result<String> {
    let marks: Vec<(&str, Vec<Mark>)> = series.iter().map(|s| (s.name.as_str(), s.points.iter().map(|(x, e)| (*x, e.mean, Some(interval(e)))).collect())).collect();
    line_chart(title, x_label, y_label, &marks)
}

/// A point of a line chart: x, y, and the interval drawn around y (a dot where there is none).
type Mark = (f64, f64, Option<(f64, f64)>);

/// The line chart [`lines`] and [`means`] draw: a line per series over a numeric x axis.
fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[(&str, Vec<Mark>)]) -> anyhow::Result<String> {
    let all = || series.iter().flat_map(|s| s.1.iter());
    let (mut x0, mut x1) = all().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    if x0 > x1 {
        (x0, x1) = (0.0, 1.0);
    }
    if x0 == x1 {
        x1 = x0 + 1.0;
    }
    let y1 = top(all().map(|p| p.2.map_or(p.1, |i| i.1)));
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (800, 480)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart =
            ChartBuilder::on(&root).caption(title, ("sans-serif", 20)).margin(12).x_label_area_size(40).y_label_area_size(64).build_cartesian_2d(x0..x1, 0.0..y1).map_err(err)?;
        chart.configure_mesh().x_desc(x_label).y_desc(y_label).light_line_style(WHITE.mix(0.0)).draw().map_err(err)?;
        for (i, (name, marks)) in series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(marks.iter().map(|m| (m.0, m.1)), color.stroke_width(2)))
                .map_err(err)?
                .label(*name)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2)));
            chart.draw_series(marks.iter().filter(|m| m.2.is_none()).map(|m| Circle::new((m.0, m.1), 3, color.filled()))).map_err(err)?;
            chart.draw_series(marks.iter().filter_map(|m| m.2.map(|(lo, hi)| ErrorBar::new_vertical(m.0, lo, m.1, hi, color.filled(), 8)))).map_err(err)?;
        }
        chart.configure_series_labels().background_style(WHITE.mix(0.85)).border_style(BLACK).position(SeriesLabelPosition::UpperRight).draw().map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// Means over categories (`names`, the x axis in that order): each series' mean in a category is
/// a dot with a bar over its 95% interval, the series side by side within the category, and no
/// line joins one category to the next. `series[i].points` are `(category index, estimate)`.
pub fn categories(title: &str, x_label: &str, names: &[String], y_label: &str, series: &[Means]) -> anyhow::Result<String> {
    // Room above the highest bar for the legend, which lists every series and would otherwise
    // cover the last categories.
    let y1 = top(series.iter().flat_map(|s| s.points.iter()).map(|p| interval(&p.1).1)) * (1.0 + 0.05 * series.len() as f64);
    let n = names.len().max(1);
    // Each category is one unit wide; the series share its middle 60%.
    let offset = |i: usize| if series.len() < 2 { 0.0 } else { -0.3 + 0.6 * i as f64 / (series.len() - 1) as f64 };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (800, 480)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(-0.5..n as f64 - 0.5, 0.0..y1)
            .map_err(err)?;
        let label = |x: &f64| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 { names.get(i as usize).cloned().unwrap_or_default() } else { String::new() }
        };
        chart.configure_mesh().x_desc(x_label).y_desc(y_label).x_labels(n + 1).x_label_formatter(&label).disable_x_mesh().light_line_style(WHITE.mix(0.0)).draw().map_err(err)?;
        for (i, s) in series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let dx = offset(i);
            chart
                .draw_series(s.points.iter().map(|(x, e)| Circle::new((x + dx, e.mean), 4, color.filled())))
                .map_err(err)?
                .label(s.name.as_str())
                .legend(move |(x, y)| Circle::new((x + 8, y), 4, color.filled()));
            chart
                .draw_series(s.points.iter().map(|(x, e)| {
                    let (lo, hi) = interval(e);
                    ErrorBar::new_vertical(x + dx, lo, e.mean, hi, color.filled(), 6)
                }))
                .map_err(err)?;
        }
        chart.configure_series_labels().background_style(WHITE.mix(0.85)).border_style(BLACK).position(SeriesLabelPosition::UpperRight).draw().map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// A line chart with a point at every value, as SVG text.
pub fn lines(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> anyhow::Result<String> {
    let marks: Vec<(&str, Vec<Mark>)> = series.iter().map(|s| (s.name.as_str(), s.points.iter().map(|&(x, y)| (x, y, None)).collect())).collect();
    line_chart(title, x_label, y_label, &marks)
}

fn err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("cannot draw the plot: {e}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_is_svg_with_its_title_and_legend() {
        let s = [Series { name: "round-robin".into(), points: vec![(1.0, 2.0), (2.0, 3.0)] }, Series { name: "empty".into(), points: vec![] }];
        let svg = lines("Mean time", "rate", "ms", &s).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("Mean time") && svg.contains("round-robin"), "{svg}");
    }

    /// The number of `<line` and `<polyline` elements, the marks an error bar and a line make.
    fn marks(svg: &str) -> (usize, usize) {
        (svg.matches("<line").count(), svg.matches("<polyline").count())
    }

    #[test]
    fn means_draw_their_intervals() {
        let e = |v: &[f64]| Estimate::of(v);
        let with = [Means { name: "a".into(), points: vec![(1.0, e(&[1.0, 2.0, 3.0])), (2.0, e(&[2.0, 3.0, 4.0]))] }];
        let without = [Means { name: "a".into(), points: vec![(1.0, e(&[2.0, 2.0, 2.0])), (2.0, e(&[3.0, 3.0, 3.0]))] }];
        let (a, b) = (means("m", "x", "y", &with).unwrap(), means("m", "x", "y", &without).unwrap());
        // The same marks either way (an interval of zero width is still drawn), at other heights:
        // an interval of 2 ± 2.48 reaches below zero on the first point.
        assert_eq!(marks(&a), marks(&b));
        assert_ne!(a, b);
        assert!(interval(&with[0].points[0].1).0 < 0.0 && interval(&without[0].points[0].1) == (2.0, 2.0));
    }

    #[test]
    fn categories_are_labelled_and_not_joined() {
        let e = |v: &[f64]| Estimate::of(v);
        let names: Vec<String> = ["client 1", "client 2", "client 3"].iter().map(|s| s.to_string()).collect();
        let series = [
            Means { name: "round-robin".into(), points: (0..3).map(|c| (c as f64, e(&[1.0 + c as f64, 2.0 + c as f64]))).collect() },
            Means { name: "random".into(), points: (0..3).map(|c| (c as f64, e(&[2.0, 3.0]))).collect() },
        ];
        let svg = categories("Per client", "client", &names, "ms", &series).unwrap();
        for n in &names {
            assert!(svg.contains(n.as_str()), "{n} is a label: {svg}");
        }
        // No series is a line: the only polylines would be lines between categories.
        let lined = lines("Per client", "client", "ms", &[Series { name: "x".into(), points: vec![(1.0, 1.0), (2.0, 2.0)] }]).unwrap();
        assert!(marks(&lined).1 > marks(&svg).1, "a line chart has a polyline the category chart lacks");
        assert!(svg.contains("round-robin") && svg.contains("random"));
    }
}
