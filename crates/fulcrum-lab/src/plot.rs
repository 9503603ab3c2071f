//! SVG line charts for the lab's reports (plotters' SVG backend: text, no fonts or images needed).

use plotters::prelude::*;

/// One named line.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A line chart with a point at every value, as SVG text.
pub fn lines(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> anyhow::Result<String> {
    let all = || series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1) = all().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let y1 = all().fold(0.0f64, |b, p| b.max(p.1));
    if x0 > x1 {
        (x0, x1) = (0.0, 1.0);
    }
    if x0 == x1 {
        x1 = x0 + 1.0;
    }
    let y1 = if y1 > 0.0 { y1 * 1.1 } else { 1.0 };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (800, 480)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart =
            ChartBuilder::on(&root).caption(title, ("sans-serif", 20)).margin(12).x_label_area_size(40).y_label_area_size(64).build_cartesian_2d(x0..x1, 0.0..y1).map_err(err)?;
        chart.configure_mesh().x_desc(x_label).y_desc(y_label).light_line_style(WHITE.mix(0.0)).draw().map_err(err)?;
        for (i, s) in series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(s.points.iter().copied(), color.stroke_width(2)))
                .map_err(err)?
                .label(s.name.as_str())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2)));
            chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled()))).map_err(err)?;
        }
        chart.configure_series_labels().background_style(WHITE.mix(0.85)).border_style(BLACK).position(SeriesLabelPosition::UpperRight).draw().map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
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
}
