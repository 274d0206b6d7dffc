//! Line charts as SVG, written by hand (a few dozen elements; no plotting dependency): the
//! scaling scenario's throughput against shards and the latency scenario's percentiles
//! against offered rate.

use std::fmt::Write as _;
use std::path::Path;

/// One line of a chart.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    /// An SVG colour.
    pub color: &'static str,
    /// A reference line (dashed, no points) rather than a measurement.
    pub dashed: bool,
    /// (x, y), in x order.
    pub points: Vec<(f64, f64)>,
}

/// A chart: title, axis labels, lines; the y axis is logarithmic when `log_y` (latencies
/// spread over orders of magnitude).
#[derive(Debug, Clone)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub log_y: bool,
    /// Formats an axis value.
    pub fmt_x: fn(f64) -> String,
    pub fmt_y: fn(f64) -> String,
    pub series: Vec<Series>,
}

const W: f64 = 720.0;
const H: f64 = 420.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 150.0;
const TOP: f64 = 36.0;
const BOTTOM: f64 = 50.0;

impl Chart {
    /// Writes the SVG to `path`, creating its directory.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, self.svg())
    }

    /// The chart as an SVG document.
    pub fn svg(&self) -> String {
        let finite = |v: f64| v.is_finite() && (!self.log_y || v > 0.0);
        let pts = || {
            self.series
                .iter()
                .flat_map(|s| s.points.iter().copied())
                .filter(|&(x, y)| x.is_finite() && finite(y))
        };
        let (x_min, x_max) = pts().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), (x, _)| {
            (lo.min(x), hi.max(x))
        });
        let (y_lo, y_hi) = pts().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), (_, y)| {
            (lo.min(y), hi.max(y))
        });
        let (x_min, x_max) = if x_min.is_finite() {
            (x_min, if x_max > x_min { x_max } else { x_min + 1.0 })
        } else {
            (0.0, 1.0)
        };
        // Linear: from 0; log: whole decades around the data.
        let (y_min, y_max) = match (self.log_y, y_lo.is_finite()) {
            (true, true) => (
                10f64.powf(y_lo.log10().floor()),
                10f64.powf(y_hi.log10().ceil().max(y_lo.log10().floor() + 1.0)),
            ),
            (true, false) => (1.0, 10.0),
            (false, true) => (0.0, if y_hi > 0.0 { y_hi * 1.05 } else { 1.0 }),
            (false, false) => (0.0, 1.0),
        };
        let plot_w = W - LEFT - RIGHT;
        let plot_h = H - TOP - BOTTOM;
        let x = |v: f64| LEFT + (v - x_min) / (x_max - x_min) * plot_w;
        let y = |v: f64| {
            let f = if self.log_y {
                (v.log10() - y_min.log10()) / (y_max.log10() - y_min.log10())
            } else {
                (v - y_min) / (y_max - y_min)
            };
            H - BOTTOM - f * plot_h
        };
        let mut s = format!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">
<rect width="{W}" height="{H}" fill="white"/>
<text x="{tx}" y="20" text-anchor="middle" font-size="14">{title}</text>
<line x1="{LEFT}" y1="{yb}" x2="{xr}" y2="{yb}" stroke="black"/>
<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{yb}" stroke="black"/>
"#,
            tx = LEFT + plot_w / 2.0,
            title = escape(&self.title),
            yb = H - BOTTOM,
            xr = W - RIGHT,
        );
        // x ticks: at every distinct x of the data (few points per chart).
        let mut xs: Vec<f64> = pts().map(|p| p.0).collect();
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        for v in xs {
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                x(v),
                H - BOTTOM + 16.0,
                escape(&(self.fmt_x)(v))
            );
        }
        // y ticks: decades on a log axis, quarters on a linear one.
        let ticks: Vec<f64> = if self.log_y {
            let (a, b) = (y_min.log10().round() as i32, y_max.log10().round() as i32);
            (a..=b).map(|e| 10f64.powi(e)).collect()
        } else {
            (0..=4)
                .map(|i| y_min + (y_max - y_min) * f64::from(i) / 4.0)
                .collect()
        };
        for v in ticks {
            let _ = writeln!(
                s,
                r##"<line x1="{LEFT}" y1="{yy:.1}" x2="{xr}" y2="{yy:.1}" stroke="#e5e5e5"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                LEFT - 6.0,
                y(v) + 4.0,
                escape(&(self.fmt_y)(v)),
                yy = y(v),
                xr = W - RIGHT,
            );
        }
        for (i, series) in self.series.iter().enumerate() {
            let line: Vec<String> = series
                .points
                .iter()
                .filter(|&&(px, py)| px.is_finite() && finite(py))
                .map(|&(px, py)| format!("{:.1},{:.1}", x(px), y(py)))
                .collect();
            let dash = if series.dashed {
                r#" stroke-dasharray="4 4""#
            } else {
                ""
            };
            let _ = writeln!(
                s,
                r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="2"{dash}/>"#,
                line.join(" "),
                series.color
            );
            if !series.dashed {
                for p in &line {
                    if let Some((cx, cy)) = p.split_once(',') {
                        let _ = writeln!(
                            s,
                            r#"<circle cx="{cx}" cy="{cy}" r="3" fill="{}"/>"#,
                            series.color
                        );
                    }
                }
            }
            // Legend on the right.
            let ly = TOP + 10.0 + 18.0 * i as f64;
            let _ = writeln!(
                s,
                r#"<line x1="{:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{}" stroke-width="2"{dash}/><text x="{:.1}" y="{:.1}">{}</text>"#,
                W - RIGHT + 10.0,
                W - RIGHT + 30.0,
                series.color,
                W - RIGHT + 36.0,
                ly + 4.0,
                escape(&series.name)
            );
        }
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            LEFT + plot_w / 2.0,
            H - 12.0,
            escape(&self.x_label)
        );
        let _ = writeln!(
            s,
            r#"<text x="16" y="{:.1}" text-anchor="middle" transform="rotate(-90 16 {:.1})">{}</text>"#,
            TOP + plot_h / 2.0,
            TOP + plot_h / 2.0,
            escape(&self.y_label)
        );
        s.push_str("</svg>\n");
        s
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(log_y: bool) -> Chart {
        Chart {
            title: "t <x>".into(),
            x_label: "rate".into(),
            y_label: "ms".into(),
            log_y,
            fmt_x: |v| format!("{v:.0}"),
            fmt_y: |v| format!("{v}"),
            series: vec![
                Series {
                    name: "p50".into(),
                    color: "steelblue",
                    dashed: false,
                    points: vec![(1e3, 0.5), (2e3, 0.7), (4e3, 12.0)],
                },
                Series {
                    name: "linear".into(),
                    color: "gray",
                    dashed: true,
                    points: vec![(1e3, 1.0), (4e3, 4.0)],
                },
            ],
        }
    }

    #[test]
    fn every_measured_point_is_drawn_and_text_is_escaped() {
        for log_y in [false, true] {
            let svg = chart(log_y).svg();
            assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
            // Points of measured lines only, not of the dashed reference.
            assert_eq!(svg.matches("<circle").count(), 3);
            assert!(svg.contains("stroke-dasharray"));
            assert!(svg.contains("t &lt;x&gt;") && !svg.contains("<x>"));
            assert!(!svg.contains("NaN") && !svg.contains("inf"));
        }
    }

    #[test]
    fn a_log_axis_spans_whole_decades_and_skips_zero() {
        let mut c = chart(true);
        c.series[0].points.push((8e3, 0.0));
        let svg = c.svg();
        // 0.5 .. 12 ms: ticks at 0.1, 1, 10, 100.
        for t in ["0.1<", ">1<", ">10<", ">100<"] {
            assert!(svg.contains(t), "{t} missing");
        }
        assert_eq!(
            svg.matches("<circle").count(),
            3,
            "the zero is not drawn on a log axis"
        );
    }

    #[test]
    fn an_empty_chart_is_still_a_document() {
        let mut c = chart(false);
        c.series.clear();
        let svg = c.svg();
        assert!(svg.trim_end().ends_with("</svg>") && !svg.contains("NaN"));
    }
}
