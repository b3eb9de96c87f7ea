//! Plots of a `pmig bench` run, as SVG and PNG (plotters). Bitmap text needs a
//! TrueType font: DejaVu Sans from the system (`fonts-dejavu-core`), or the
//! file named by `PMIG_FONT`.

use crate::report::{Combo, Summaries};
use crate::{BenchError, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;
use std::sync::OnceLock;

const FONT_CANDIDATES: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

fn font() -> Result<()> {
    static FONT: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    FONT.get_or_init(|| {
        let mut paths: Vec<String> = Vec::new();
        if let Ok(p) = std::env::var("PMIG_FONT") {
            paths.push(p);
        }
        paths.extend(FONT_CANDIDATES.iter().map(|s| s.to_string()));
        for p in &paths {
            if let Ok(bytes) = std::fs::read(p) {
                // plotters keeps registered fonts for the life of the process.
                let b: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, b).is_ok() {
                    return Ok(());
                }
            }
        }
        Err(format!(
            "no TrueType font for the plots (tried {}); install fonts-dejavu-core or set PMIG_FONT",
            paths.join(", ")
        ))
    })
    .clone()
    .map_err(BenchError::Failed)
}

/// One line of a plot: (x, y) points, x and y already in plot units.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

pub struct Chart {
    pub title: String,
    pub x_desc: String,
    pub y_desc: String,
    /// Axes in log10 (values are given as they are; the plot takes log10).
    pub log_x: bool,
    pub log_y: bool,
    /// Category names for x = 0, 1, 2, … (instead of numbers).
    pub x_names: Option<Vec<String>>,
    /// Draw bars (grouped per x) instead of lines.
    pub bars: bool,
    pub series: Vec<Series>,
}

fn tr(v: f64, log: bool) -> f64 {
    if log {
        v.max(1e-3).log10()
    } else {
        v
    }
}

fn label(v: f64, log: bool) -> String {
    let x = if log { 10f64.powf(v) } else { v };
    crate::report::fmt_sig(x)
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    c: &Chart,
) -> std::result::Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(e)?;
    let pts: Vec<(f64, f64)> = c
        .series
        .iter()
        .flat_map(|s| s.points.iter())
        .filter(|p| p.0.is_finite() && p.1.is_finite())
        .map(|p| (tr(p.0, c.log_x), tr(p.1, c.log_y)))
        .collect();
    let (mut x0, mut x1, mut y0, mut y1) = pts.iter().fold(
        (
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ),
        |a, p| (a.0.min(p.0), a.1.max(p.0), a.2.min(p.1), a.3.max(p.1)),
    );
    if pts.is_empty() {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    if c.bars || !c.log_y {
        y0 = y0.min(0.0);
    }
    let padx = ((x1 - x0) * 0.08).max(if c.log_x { 0.1 } else { 0.5 });
    // Room at the top for the legend.
    let pady = ((y1 - y0) * if c.bars { 0.3 } else { 0.08 }).max(if c.log_y { 0.2 } else { 1e-3 });
    let (x0, x1, y0, y1) = (
        x0 - padx,
        x1 + padx,
        y0 - if c.bars { 0.0 } else { pady },
        y1 + pady,
    );
    let mut ch = ChartBuilder::on(&root)
        .caption(&c.title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(e)?;
    let names = c.x_names.clone();
    let (lx, ly) = (c.log_x, c.log_y);
    let xfmt = move |v: &f64| match &names {
        Some(n) => {
            let i = v.round();
            if (v - i).abs() < 0.01 && i >= 0.0 && (i as usize) < n.len() {
                n[i as usize].clone()
            } else {
                String::new()
            }
        }
        None => label(*v, lx),
    };
    let yfmt = move |v: &f64| label(*v, ly);
    let n_x = c.x_names.as_ref().map(|n| n.len()).unwrap_or(8);
    ch.configure_mesh()
        .x_desc(c.x_desc.as_str())
        .y_desc(c.y_desc.as_str())
        .x_labels(if c.x_names.is_some() { n_x * 8 + 1 } else { 8 })
        .x_label_formatter(&xfmt)
        .y_label_formatter(&yfmt)
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(e)?;
    let k = c.series.len().max(1) as f64;
    for (i, s) in c.series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let p: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter(|p| p.0.is_finite() && p.1.is_finite())
            .map(|p| (tr(p.0, c.log_x), tr(p.1, c.log_y)))
            .collect();
        if c.bars {
            let w = 0.8 / k;
            let off = -0.4 + w * i as f64;
            ch.draw_series(p.iter().map(|(x, y)| {
                Rectangle::new([(x + off, 0.0), (x + off + w * 0.9, *y)], color.filled())
            }))
            .map_err(e)?
            .label(s.name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled()));
        } else {
            ch.draw_series(LineSeries::new(p.clone(), color.stroke_width(2)))
                .map_err(e)?
                .label(s.name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
            ch.draw_series(p.iter().map(|pt| Circle::new(*pt, 4, color.filled())))
                .map_err(e)?;
        }
    }
    ch.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(e)?;
    root.present().map_err(e)?;
    Ok(())
}

/// Writes `<dir>/<name>.svg` and `<dir>/<name>.png`.
pub fn render(dir: &Path, name: &str, c: &Chart) -> Result<()> {
    font()?;
    let svg = dir.join(format!("{name}.svg"));
    let png = dir.join(format!("{name}.png"));
    draw(SVGBackend::new(&svg, (960, 600)).into_drawing_area(), c)
        .map_err(|e| BenchError::Failed(format!("{}: {e}", svg.display())))?;
    draw(BitMapBackend::new(&png, (960, 600)).into_drawing_area(), c)
        .map_err(|e| BenchError::Failed(format!("{}: {e}", png.display())))?;
    Ok(())
}

/// The workload and link with the most sizes (the size sweep).
fn sweep(s: &Summaries) -> Option<(String, String)> {
    let mut best: Option<(usize, String, String)> = None;
    for c in &s.combos {
        let mut sizes: Vec<u64> = s
            .combos
            .iter()
            .filter(|d| d.workload == c.workload && d.link == c.link && d.n_ok > 0)
            .map(|d| d.kib)
            .collect();
        sizes.sort();
        sizes.dedup();
        if best.as_ref().is_none_or(|b| sizes.len() > b.0) {
            best = Some((sizes.len(), c.workload.clone(), c.link.clone()));
        }
    }
    best.map(|b| (b.1, b.2))
}

fn by_strategy<'a>(
    cs: impl Iterator<Item = &'a Combo>,
    f: impl Fn(&Combo) -> Option<(f64, f64)>,
) -> Vec<Series> {
    let mut v: Vec<Series> = Vec::new();
    for c in cs {
        if c.n_ok == 0 {
            continue;
        }
        let Some(p) = f(c) else { continue };
        match v.iter_mut().find(|s| s.name == c.strategy) {
            Some(s) => s.points.push(p),
            None => v.push(Series {
                name: c.strategy.clone(),
                points: vec![p],
            }),
        }
    }
    for s in &mut v {
        s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    v
}

/// Every plot of the report; returns their names (files: name.svg, name.png).
pub fn all(dir: &Path, s: &Summaries) -> Result<Vec<String>> {
    let mut names = Vec::new();
    if let Some((w, link)) = sweep(s) {
        let sel = || {
            s.combos
                .iter()
                .filter(|c| c.workload == w && c.link == link)
        };
        let mib = |c: &Combo| c.rss_kib.median / 1024.0;
        for (name, title, ydesc, f) in [
            (
                "down_vs_size",
                "down time",
                "down time (ms, log)",
                (|c: &Combo| c.down_ms.median) as fn(&Combo) -> f64,
            ),
            (
                "total_vs_size",
                "total time",
                "total time (ms, log)",
                |c: &Combo| c.total_ms.median,
            ),
            (
                "bytes_vs_size",
                "data sent",
                "MiB sent (log)",
                |c: &Combo| c.bytes_total.median / 1048576.0,
            ),
        ] {
            let series = by_strategy(sel(), |c| Some((mib(c), f(c))));
            render(
                dir,
                name,
                &Chart {
                    title: format!("{title} against memory size ({w}, {link})"),
                    x_desc: "RSS (MiB, log)".into(),
                    y_desc: ydesc.into(),
                    log_x: true,
                    log_y: true,
                    x_names: None,
                    bars: false,
                    series,
                },
            )?;
            names.push(name.to_string());
        }
    }
    // Execution delay per link: the workload measured on the most links.
    let mut best: Option<(usize, String)> = None;
    for c in &s.combos {
        let mut ls: Vec<&str> = s
            .combos
            .iter()
            .filter(|d| d.workload == c.workload && d.n_ok > 0)
            .map(|d| d.link.as_str())
            .collect();
        ls.sort();
        ls.dedup();
        let prefer = c.workload == "rma";
        if best
            .as_ref()
            .is_none_or(|b| ls.len() > b.0 || (ls.len() == b.0 && prefer))
        {
            best = Some((ls.len(), c.workload.clone()));
        }
    }
    if let Some((_, w)) = best {
        let links: Vec<String> = crate::matrix::ALL_LINKS
            .iter()
            .filter(|l| s.combos.iter().any(|c| c.workload == w && c.link == **l))
            .map(|l| l.to_string())
            .collect();
        // One size per link (the smallest), so that lines compare like with like.
        let series = by_strategy(s.combos.iter().filter(|c| c.workload == w), |c| {
            let i = links.iter().position(|l| *l == c.link)?;
            let smallest = s
                .combos
                .iter()
                .filter(|d| d.workload == w && d.link == c.link)
                .map(|d| d.kib)
                .min()?;
            (c.kib == smallest).then_some((i as f64, c.delay_ms.median))
        });
        render(
            dir,
            "delay_per_link",
            &Chart {
                title: format!("execution delay per link ({w})"),
                x_desc: "link".into(),
                y_desc: "run time with migration − without (ms)".into(),
                log_x: false,
                log_y: false,
                x_names: Some(links),
                bars: false,
                series,
            },
        )?;
        names.push("delay_per_link".into());
    }
    // Faults prevented per kernel.
    let kernels: Vec<String> = s
        .ampom
        .iter()
        .map(|r| {
            format!(
                "{} {}",
                crate::matrix::size_label(&r.workload, r.kib),
                r.link
            )
        })
        .collect();
    let mut series: Vec<Series> = Vec::new();
    for st in ["post-copy", "ampom"] {
        let pts: Vec<(f64, f64)> = s
            .ampom
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                r.prevented
                    .iter()
                    .find(|p| p.0 == st)
                    .map(|p| (i as f64, p.1 * 100.0))
            })
            .collect();
        series.push(Series {
            name: format!("{st} (vs demand-paging)"),
            points: pts,
        });
    }
    render(
        dir,
        "faults_prevented",
        &Chart {
            title: "remote faults prevented per kernel".into(),
            x_desc: "kernel".into(),
            y_desc: "faults prevented (%)".into(),
            log_x: false,
            log_y: false,
            x_names: Some(kernels),
            bars: true,
            series,
        },
    )?;
    names.push("faults_prevented".into());
    Ok(names)
}
