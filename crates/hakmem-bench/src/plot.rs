//! `--plot FILE.svg` / `FILE.png`: the results as grouped bar charts.
//!
//! One chart per table: the default table is one chart with a group of bars
//! per workload; the scaling table is one chart per workload with a group per
//! thread count. Each group has one bar per allocator (in the plan's order,
//! coloured as in the legend), in two panels:
//!
//! - throughput relative to the system allocator (the median of this
//!   allocator's runs over the system's, same invocation) on a log2 axis,
//!   bars growing up from 1x when faster and down when slower; the plan's
//!   first allocator stands in for the system one when that did not run;
//! - peak RSS in MiB (the median of the runs' `ru_maxrss`) on a log10 axis.
//!
//! Each bar carries its value as a label and a tooltip (`<title>`), a
//! failed cell says `failed` where its bar would be. The SVG is written by
//! hand, with classes and `data-` attributes that name what each element
//! shows (`chart`, `panel`, `bar`, `data-allocator`...) so that tests and
//! scripts can read it back; the PNG is that SVG painted by `raster` at
//! twice its size, with DejaVu Sans embedded in this binary (the `dejavu`
//! crate) as its only font: no system font is looked for or needed.

use crate::allocators::Allocator;
use crate::cli::{Plan, PlotFile, PlotFormat};
use crate::report::{self, Row};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

/// Pixels of the PNG per SVG unit.
pub const PNG_SCALE: f32 = 2.0;

/// The font the SVG asks for (browsers fall back along the list); the PNG
/// renderer has exactly the first.
const FONT_FAMILY: &str = "DejaVu Sans, Verdana, Arial, sans-serif";

/// The narrowest and the widest a bar is drawn: charts with few groups
/// spread over the width with wider bars.
const BAR_WIDTH: f64 = 16.0;
const MAX_BAR_WIDTH: f64 = 28.0;
/// Space between two groups of bars.
const GROUP_GAP: f64 = 24.0;
/// A group is at least this wide, so that its label fits.
const MIN_GROUP_WIDTH: f64 = 64.0;
/// Left of the panels: tick labels and the axis title.
const LEFT: f64 = 84.0;
const RIGHT: f64 = 24.0;
const MIN_WIDTH: f64 = 720.0;
/// Height of a panel's plotting area, and the room kept inside it above
/// and below the bars for their value labels.
const THROUGHPUT_HEIGHT: f64 = 260.0;
const RSS_HEIGHT: f64 = 220.0;
const LABEL_ROOM: f64 = 34.0;
/// From the top of a chart to its first panel: the chart's title and the
/// panel's.
const CHART_TITLE_HEIGHT: f64 = 52.0;

/// The line at the bottom of the picture.
const FOOTNOTE: &str =
    "Both axes are logarithmic. Where a bar is missing: failed = no run of that allocator succeeded; \
                        n/a = no baseline to divide by.";

/// The colour of each allocator's bars.
fn colour(allocator: Allocator) -> &'static str {
    match allocator {
        Allocator::Hakmem => "#e15759",
        Allocator::HakmemSecure => "#ff9d9a",
        Allocator::System => "#9d9d9d",
        Allocator::Mimalloc2 => "#59a14f",
        Allocator::Mimalloc3 => "#4e79a7",
        Allocator::MimallocDeb => "#8cd17d",
        Allocator::Jemalloc => "#f28e2b",
        Allocator::Tcmalloc => "#b07aa1",
    }
}

/// One bar chart: a title and its groups of bars.
#[derive(Debug)]
struct Chart {
    title: String,
    groups: Vec<Group>,
}

/// The bars of one job: one per allocator of the plan.
#[derive(Debug)]
struct Group {
    label: String,
    bars: Vec<Bar>,
}

#[derive(Debug)]
struct Bar {
    allocator: Allocator,
    mops: Option<f64>,
    /// Throughput over the baseline's.
    ratio: Option<f64>,
    rss_mib: Option<f64>,
    failed: bool,
}

/// The allocator the throughput is divided by: the system allocator, or the
/// plan's first when the system allocator did not run.
fn baseline(plan: &Plan) -> Allocator {
    if plan.allocators.contains(&Allocator::System) {
        Allocator::System
    } else {
        plan.allocators[0]
    }
}

/// The charts of `rows`: one for a plain table, one per workload for a
/// scaling table.
fn charts(plan: &Plan, rows: &[Row]) -> Vec<Chart> {
    let baseline = baseline(plan);
    let group = |job_index: usize, label: String| {
        let job = &plan.jobs[job_index];
        let of_job: Vec<&Row> = rows.iter().filter(|r| std::ptr::eq(r.job, job)).collect();
        let base = of_job.iter().find(|r| r.allocator == baseline).and_then(|r| r.mops);
        let bars = plan
            .allocators
            .iter()
            .map(|&allocator| {
                let row = of_job.iter().find(|r| r.allocator == allocator);
                let mops = row.and_then(|r| r.mops);
                Bar {
                    allocator,
                    mops,
                    ratio: report::ratio(mops, base),
                    rss_mib: row.and_then(|r| r.peak_rss_mib),
                    failed: row.is_some_and(|r| r.mops.is_none()),
                }
            })
            .collect();
        Group { label, bars }
    };
    if !plan.scaling {
        let title = if plan.jobs.len() == 1 {
            format!("{} workload", plan.jobs[0].workload)
        } else {
            format!("{} workloads", plan.jobs.len())
        };
        let groups = (0..plan.jobs.len())
            .map(|j| group(j, plan.jobs[j].workload.to_string()))
            .collect();
        return vec![Chart { title, groups }];
    }
    let mut workloads: Vec<&str> = Vec::new();
    for job in &plan.jobs {
        if !workloads.contains(&job.workload) {
            workloads.push(job.workload);
        }
    }
    workloads
        .into_iter()
        .map(|workload| Chart {
            title: format!("{workload}: thread scaling"),
            groups: (0..plan.jobs.len())
                .filter(|&j| plan.jobs[j].workload == workload)
                .map(|j| group(j, format!("{} thr", plan.jobs[j].params.threads)))
                .collect(),
        })
        .collect()
}

/// Writes the plot of `rows` into each of `plan.plots`.
pub fn write_all(plan: &Plan, rows: &[Row]) -> Result<(), String> {
    if plan.plots.is_empty() {
        return Ok(());
    }
    let svg = svg(plan, rows);
    for plot in &plan.plots {
        let bytes = match plot.format {
            PlotFormat::Svg => svg.clone().into_bytes(),
            PlotFormat::Png => png(&svg)?,
        };
        write_file(plot, &bytes)?;
    }
    Ok(())
}

/// Writes `bytes` to a new file beside `plot.path` and renames it there, so
/// a reader never sees half a picture.
fn write_file(plot: &PlotFile, bytes: &[u8]) -> Result<(), String> {
    let folder = match plot.path.parent() {
        Some(folder) if !folder.as_os_str().is_empty() => folder,
        _ => Path::new("."),
    };
    let error = |e: std::io::Error| format!("cannot write the plot {}: {e}", plot.path.display());
    let mut file = tempfile::NamedTempFile::new_in(folder).map_err(error)?;
    file.write_all(bytes).map_err(error)?;
    // NamedTempFile is private (0600); a picture is for others to read too.
    std::fs::set_permissions(file.path(), std::os::unix::fs::PermissionsExt::from_mode(0o644)).map_err(error)?;
    file.persist(&plot.path).map_err(|e| error(e.error))?;
    Ok(())
}

/// `text` with the XML special characters escaped.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// A ratio as a bar label: `1.23`, `12.3`, `123`.
fn ratio_label(ratio: f64) -> String {
    match ratio {
        r if r >= 100.0 => format!("{r:.0}"),
        r if r >= 10.0 => format!("{r:.1}"),
        r => format!("{r:.2}"),
    }
}

/// Mebibytes as a label: `0.75`, `2.1`, `512`.
fn mib_label(mib: f64) -> String {
    match mib {
        m if m >= 10.0 => format!("{m:.0}"),
        m if m >= 1.0 => format!("{m:.1}"),
        m => format!("{m:.2}"),
    }
}

/// A power of two as an axis label: `1/16x`, `0.25x`, `1x`, `8x`.
fn power_of_two_label(exponent: i32) -> String {
    match exponent {
        e if e < -3 => format!("1/{}x", 1u64 << e.unsigned_abs().min(62)),
        e if e < 0 => format!("{}x", 0.5f64.powi(-e)),
        e => format!("{}x", 1u64 << e.min(62)),
    }
}

/// A vertical log axis: `lo`..`hi` (exponents of `base`) mapped onto
/// `top`..`bottom` with `LABEL_ROOM` kept free at both ends.
struct Axis {
    base: f64,
    lo: f64,
    hi: f64,
    top: f64,
    bottom: f64,
}

impl Axis {
    fn y(&self, value: f64) -> f64 {
        let (top, bottom) = (self.top + LABEL_ROOM, self.bottom - LABEL_ROOM);
        let t = (value.log(self.base) - self.lo) / (self.hi - self.lo);
        bottom - t.clamp(0.0, 1.0) * (bottom - top)
    }
}

/// The exponents (of `base`) that enclose `values` and `always`.
fn span(base: f64, values: impl Iterator<Item = f64>, always: &[f64]) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values
        .chain(always.iter().copied())
        .filter(|v| *v > 0.0 && v.is_finite())
    {
        lo = lo.min(v.log(base).floor());
        hi = hi.max(v.log(base).ceil());
    }
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if hi <= lo {
        hi = lo + 1.0;
    }
    (lo, hi)
}

/// The values 1, 2 and 5 times a power of ten from `lo` to `hi`.
fn one_two_five(lo: f64, hi: f64) -> impl Iterator<Item = f64> {
    let first = lo.log10().floor() as i32;
    let last = hi.log10().ceil() as i32;
    (first..=last)
        .flat_map(|e| [1.0, 2.0, 5.0].map(|m| m * 10f64.powi(e)))
        .filter(move |v| *v >= lo * (1.0 - 1e-9) && *v <= hi * (1.0 + 1e-9))
}

/// The bounds of the peak-RSS axis: 1, 2 or 5 times a power of ten, the
/// lower one at least a third below the smallest value so that its bar
/// shows (the axis is logarithmic: a bar is the ratio to the lower bound).
fn rss_span(values: &[f64]) -> (f64, f64) {
    let values = values.iter().copied().filter(|v| *v > 0.0 && v.is_finite());
    let (min, max) = values.fold((f64::INFINITY, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if max == 0.0 {
        return (1.0, 10.0);
    }
    let candidates = |v: f64| one_two_five(v / 100.0, v * 100.0).collect::<Vec<_>>();
    let lo = candidates(min)
        .into_iter()
        .rev()
        .find(|c| *c <= min / 1.5)
        .unwrap_or(min / 10.0);
    let hi = candidates(max).into_iter().find(|c| *c >= max).unwrap_or(max);
    (lo, hi)
}

/// The SVG of the plot of `rows`.
pub fn svg(plan: &Plan, rows: &[Row]) -> String {
    let charts = charts(plan, rows);
    let allocators = plan.allocators.len().max(1) as f64;
    let group_width = (allocators * BAR_WIDTH + GROUP_GAP).max(MIN_GROUP_WIDTH);
    let most_groups = charts.iter().map(|c| c.groups.len()).max().unwrap_or(1) as f64;
    let headline = report::headline(plan);
    let subtitle = format!(
        "Throughput: median over the runs divided by {}'s in this invocation. Peak RSS: median of the runs' ru_maxrss.",
        baseline(plan).name()
    );
    let text_width = text_width(&headline, 17.0, true)
        .max(text_width(&subtitle, 12.0, false))
        .max(text_width(FOOTNOTE, 11.0, false));
    let width = (LEFT + (most_groups * group_width).max(text_width) + RIGHT)
        .max(MIN_WIDTH)
        .ceil();
    let header = 92.0;
    let chart_height = CHART_TITLE_HEIGHT + THROUGHPUT_HEIGHT + 50.0 + RSS_HEIGHT + 40.0;
    let footer = 44.0;
    let height = (header + charts.len() as f64 * chart_height + footer).ceil();
    let baseline = baseline(plan);

    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="hakmem-bench-plot" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="{FONT_FAMILY}">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text class="title" x="{LEFT}" y="28" font-size="17" font-weight="bold">{}</text>"#,
        escape(&headline)
    );
    let _ = writeln!(
        out,
        r##"<text class="subtitle" x="{LEFT}" y="48" font-size="12" fill="#444">{}</text>"##,
        escape(&subtitle)
    );
    legend(&mut out, plan, width);

    let mut top = header;
    for chart in &charts {
        draw_chart(&mut out, chart, top, width, baseline);
        top += chart_height;
    }
    let _ = writeln!(
        out,
        r##"<text class="footnote" x="{LEFT}" y="{}" font-size="11" fill="#666">{FOOTNOTE}</text>"##,
        height - 18.0
    );
    out.push_str("</svg>\n");
    out
}

/// The allocators and their colours, in one row (or more when wide).
fn legend(out: &mut String, plan: &Plan, width: f64) {
    let _ = writeln!(out, r#"<g class="legend">"#);
    let (mut x, mut y) = (LEFT, 70.0);
    for &allocator in &plan.allocators {
        let name = allocator.name();
        // DejaVu Sans at 13 px: about 8.5 px a character, m and w wider.
        let item = 36.0 + 9.0 * name.len() as f64;
        if x + item > width - RIGHT && x > LEFT {
            (x, y) = (LEFT, y + 18.0);
        }
        let _ = writeln!(
            out,
            r#"<rect x="{x}" y="{}" width="13" height="13" fill="{}" data-allocator="{name}"/><text x="{}" y="{y}" font-size="13">{name}</text>"#,
            y - 11.0,
            colour(allocator),
            x + 18.0
        );
        x += item;
    }
    out.push_str("</g>\n");
}

/// Where the groups and bars of a chart go across its panels.
struct Layout {
    group_width: f64,
    bar_width: f64,
}

impl Layout {
    /// The groups of `chart` spread over the width from `LEFT` to `right`.
    fn of(chart: &Chart, right: f64) -> Layout {
        let groups = chart.groups.len().max(1) as f64;
        let bars = chart.groups.first().map_or(1, |g| g.bars.len()).max(1) as f64;
        let group_width = (right - LEFT) / groups;
        let bar_width = ((group_width - GROUP_GAP) / bars).clamp(BAR_WIDTH, MAX_BAR_WIDTH);
        Layout { group_width, bar_width }
    }
}

/// About how wide `text` is in DejaVu Sans at `size` px (its average
/// advance is 0.6 em, bold 0.68).
fn text_width(text: &str, size: f64, bold: bool) -> f64 {
    text.chars().count() as f64 * size * if bold { 0.68 } else { 0.6 }
}

fn draw_chart(out: &mut String, chart: &Chart, top: f64, width: f64, baseline: Allocator) {
    let _ = writeln!(out, r#"<g class="chart" data-title="{}">"#, escape(&chart.title));
    let _ = writeln!(
        out,
        r#"<text class="chart-title" x="{LEFT}" y="{}" font-size="15" font-weight="bold">{}</text>"#,
        top + 20.0,
        escape(&chart.title)
    );
    let right = width - RIGHT;
    let layout = Layout::of(chart, right);
    let bar_width = layout.bar_width;

    // Throughput relative to the baseline.
    let panel_top = top + CHART_TITLE_HEIGHT;
    let ratios = chart.groups.iter().flat_map(|g| g.bars.iter().filter_map(|b| b.ratio));
    let (lo, hi) = span(2.0, ratios, &[0.5, 2.0]);
    let axis = Axis {
        base: 2.0,
        lo,
        hi,
        top: panel_top,
        bottom: panel_top + THROUGHPUT_HEIGHT,
    };
    let title = format!("Throughput vs {} (higher is faster)", baseline.name());
    panel_start(out, "throughput", &title, &axis, right, &layout, chart);
    let step = ((hi - lo) / 8.0).ceil().max(1.0) as i32;
    for exponent in (lo as i32..=hi as i32).filter(|e| e.rem_euclid(step) == 0) {
        let y = axis.y(2f64.powi(exponent));
        let (stroke, width) = if exponent == 0 { ("#333", 1.5) } else { ("#ddd", 1.0) };
        tick(out, y, right, &power_of_two_label(exponent), stroke, width);
    }
    let one = axis.y(1.0);
    for_each_bar(chart, &layout, |group, bar, x| {
        let tooltip = tooltip(group, bar, baseline);
        let data = bar_data(group, bar);
        match bar.ratio {
            Some(ratio) => {
                let y = axis.y(ratio);
                // The baseline's own bars are 1x: a thin mark on the line.
                let (top, height) = if (y - one).abs() < 2.0 {
                    (one - 1.0, 2.0)
                } else {
                    (y.min(one), (y - one).abs())
                };
                let _ = writeln!(
                    out,
                    r#"<rect class="bar" {data} data-value="{ratio}" x="{x:.2}" y="{top:.2}" width="{bar_width:.2}" height="{height:.2}" fill="{}"><title>{tooltip}</title></rect>"#,
                    colour(bar.allocator)
                );
                if bar.allocator != baseline {
                    let up = ratio >= 1.0;
                    let label_y = if up { top - 3.0 } else { top + height + 3.0 };
                    value_label(out, x + bar_width / 2.0, label_y, up, &ratio_label(ratio));
                }
            }
            None => missing(out, &data, x + bar_width / 2.0, one - 3.0, bar),
        }
    });
    out.push_str("</g>\n");

    // Peak RSS.
    let panel_top = panel_top + THROUGHPUT_HEIGHT + 50.0;
    let rss: Vec<f64> = chart
        .groups
        .iter()
        .flat_map(|g| g.bars.iter().filter_map(|b| b.rss_mib))
        .collect();
    let (lo, hi) = rss_span(&rss);
    let axis = Axis {
        base: 10.0,
        lo: lo.log10(),
        hi: hi.log10(),
        top: panel_top,
        bottom: panel_top + RSS_HEIGHT,
    };
    panel_start(
        out,
        "rss",
        "Peak RSS, MiB (lower is better)",
        &axis,
        right,
        &layout,
        chart,
    );
    for value in one_two_five(lo, hi) {
        let label = if value >= 1.0 {
            format!("{value:.0}")
        } else {
            format!("{value}")
        };
        tick(out, axis.y(value), right, &label, "#ddd", 1.0);
    }
    let floor = axis.bottom - LABEL_ROOM;
    for_each_bar(chart, &layout, |group, bar, x| {
        let data = bar_data(group, bar);
        match bar.rss_mib {
            Some(mib) => {
                let y = axis.y(mib);
                let _ = writeln!(
                    out,
                    r#"<rect class="bar" {data} data-value="{mib}" x="{x:.2}" y="{y:.2}" width="{bar_width:.2}" height="{:.2}" fill="{}"><title>{}</title></rect>"#,
                    (floor - y).max(1.0),
                    colour(bar.allocator),
                    tooltip(group, bar, baseline)
                );
                value_label(out, x + bar_width / 2.0, y - 3.0, true, &mib_label(mib));
            }
            None => missing(out, &data, x + bar_width / 2.0, floor - 3.0, bar),
        }
    });
    out.push_str("</g>\n</g>\n");
}

/// Opens a panel's group: its title, its frame, the bands and labels of its
/// groups of bars. The caller draws the ticks and the bars and closes it.
fn panel_start(out: &mut String, metric: &str, title: &str, axis: &Axis, right: f64, layout: &Layout, chart: &Chart) {
    let group_width = layout.group_width;
    let _ = writeln!(out, r#"<g class="panel" data-metric="{metric}">"#);
    let _ = writeln!(
        out,
        r#"<text class="panel-title" x="{LEFT}" y="{}" font-size="13" font-weight="bold">{}</text>"#,
        axis.top - 6.0,
        escape(title)
    );
    let height = axis.bottom - axis.top;
    let _ = writeln!(
        out,
        r##"<rect x="{LEFT}" y="{}" width="{}" height="{height}" fill="none" stroke="#999"/>"##,
        axis.top,
        right - LEFT
    );
    for (i, group) in chart.groups.iter().enumerate() {
        let x = LEFT + i as f64 * group_width;
        if i % 2 == 1 {
            let _ = writeln!(
                out,
                r##"<rect x="{x:.2}" y="{}" width="{group_width:.2}" height="{height}" fill="#f3f3f3"/>"##,
                axis.top
            );
        }
        let _ = writeln!(
            out,
            r#"<text class="group-label" x="{:.2}" y="{}" font-size="12" text-anchor="middle">{}</text>"#,
            x + group_width / 2.0,
            axis.bottom + 16.0,
            escape(&group.label)
        );
    }
}

/// A horizontal grid line at `y` with its label left of the panel.
fn tick(out: &mut String, y: f64, right: f64, label: &str, stroke: &str, width: f64) {
    let _ = writeln!(
        out,
        r#"<line x1="{LEFT}" y1="{y:.2}" x2="{right}" y2="{y:.2}" stroke="{stroke}" stroke-width="{width}"/><text class="tick" x="{}" y="{:.2}" font-size="11" text-anchor="end">{label}</text>"#,
        LEFT - 6.0,
        y + 4.0
    );
}

/// Calls `draw(group, bar, x)` for every bar, `x` its left edge.
fn for_each_bar(chart: &Chart, layout: &Layout, mut draw: impl FnMut(&Group, &Bar, f64)) {
    for (i, group) in chart.groups.iter().enumerate() {
        let bars = group.bars.len() as f64 * layout.bar_width;
        let first = LEFT + i as f64 * layout.group_width + (layout.group_width - bars) / 2.0;
        for (b, bar) in group.bars.iter().enumerate() {
            draw(group, bar, first + b as f64 * layout.bar_width);
        }
    }
}

/// The attributes that say which bar this is.
fn bar_data(group: &Group, bar: &Bar) -> String {
    format!(
        r#"data-group="{}" data-allocator="{}""#,
        escape(&group.label),
        bar.allocator.name()
    )
}

fn tooltip(group: &Group, bar: &Bar, baseline: Allocator) -> String {
    let mops = bar.mops.map_or_else(|| "failed".into(), |m| format!("{m:.3} Mops/s"));
    let ratio = bar
        .ratio
        .map_or_else(String::new, |r| format!(", {r:.2}x {}", baseline.name()));
    let rss = bar
        .rss_mib
        .map_or_else(String::new, |m| format!(", peak RSS {m:.1} MiB"));
    escape(&format!(
        "{} / {}: {mops}{ratio}{rss}",
        group.label,
        bar.allocator.name()
    ))
}

/// A bar's value, written along it (rotated), just past its end: above it
/// when `up`, else below. `x` is the bar's centre.
fn value_label(out: &mut String, x: f64, y: f64, up: bool, text: &str) {
    let x = x + 3.5;
    let anchor = if up { "start" } else { "end" };
    let _ = writeln!(
        out,
        r#"<text class="value" x="{x:.2}" y="{y:.2}" font-size="10" text-anchor="{anchor}" transform="rotate(-90 {x:.2} {y:.2})">{text}</text>"#
    );
}

/// Where a bar is missing: `failed` in red, or `n/a` (no baseline) in grey.
/// `x` is the bar's centre.
fn missing(out: &mut String, data: &str, x: f64, y: f64, bar: &Bar) {
    let (class, text, fill) = if bar.failed {
        ("failed", "failed", "#c00")
    } else {
        ("missing", "n/a", "#888")
    };
    let x = x + 3.5;
    let _ = writeln!(
        out,
        r#"<text class="{class}" {data} x="{x:.2}" y="{y:.2}" font-size="10" fill="{fill}" transform="rotate(-90 {x:.2} {y:.2})">{text}</text>"#
    );
}

/// The SVG painted into a PNG at `PNG_SCALE` (see `raster`).
pub fn png(svg: &str) -> Result<Vec<u8>, String> {
    crate::raster::png(svg, PNG_SCALE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::{Cell, Failure, Sample};

    fn plan(args: &[&str]) -> Plan {
        crate::cli::try_parse_from(std::iter::once("hakmem-bench").chain(args.iter().copied()))
            .unwrap()
            .plan()
            .unwrap()
    }

    fn sample(mops: f64, maxrss_kib: u64) -> Result<Sample, Failure> {
        Ok(Sample {
            ops: 1_000_000,
            elapsed_ns: (1e9 / mops) as u64,
            maxrss_kib,
        })
    }

    /// hakmem 2x and 1/4x the system allocator on mixed and c7, jemalloc
    /// failed on c7.
    fn plain() -> (Plan, Vec<Cell>) {
        let plan = plan(&["--workloads", "mixed,c7", "--allocators", "hakmem,system,jemalloc"]);
        let mut cells = Vec::new();
        for (job, (hakmem, jemalloc)) in [(40.0, 30.0), (5.0, 0.0)].into_iter().enumerate() {
            cells.push(Cell {
                job,
                allocator: Allocator::Hakmem,
                runs: vec![sample(hakmem, 2048)],
            });
            cells.push(Cell {
                job,
                allocator: Allocator::System,
                runs: vec![sample(20.0, 10240)],
            });
            cells.push(Cell {
                job,
                allocator: Allocator::Jemalloc,
                runs: vec![if jemalloc > 0.0 {
                    sample(jemalloc, 300 * 1024)
                } else {
                    Err(Failure::Signal(11))
                }],
            });
        }
        (plan, cells)
    }

    #[test]
    fn a_plain_table_is_one_chart_with_a_group_per_workload() {
        let (plan, cells) = plain();
        let rows = report::rows(&plan, &cells);
        let charts = charts(&plan, &rows);
        assert_eq!(charts.len(), 1);
        let labels: Vec<&str> = charts[0].groups.iter().map(|g| g.label.as_str()).collect();
        assert_eq!(labels, ["mixed", "c7"]);
        let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-6);
        let mixed = &charts[0].groups[0].bars;
        assert!(close(mixed[0].ratio, 2.0));
        assert!(close(mixed[1].ratio, 1.0));
        assert!(close(mixed[2].ratio, 1.5));
        assert_eq!(mixed[2].rss_mib, Some(300.0));
        let c7 = &charts[0].groups[1].bars;
        assert!(close(c7[0].ratio, 0.25));
        assert!(c7[2].failed && c7[2].ratio.is_none());
    }

    #[test]
    fn a_scaling_table_is_a_chart_per_workload_with_a_group_per_count() {
        let plan = plan(&[
            "--scaling",
            "--workloads",
            "larson,prodcons",
            "--threads",
            "1,2,4",
            "--allocators",
            "hakmem,mimalloc",
        ]);
        let cells: Vec<Cell> = (0..plan.jobs.len())
            .flat_map(|job| {
                plan.allocators.iter().map(move |&allocator| Cell {
                    job,
                    allocator,
                    runs: vec![sample(10.0, 4096)],
                })
            })
            .collect();
        let rows = report::rows(&plan, &cells);
        let charts = charts(&plan, &rows);
        let titles: Vec<&str> = charts.iter().map(|c| c.title.as_str()).collect();
        assert_eq!(titles, ["larson: thread scaling", "prodcons: thread scaling"]);
        let labels: Vec<&str> = charts[1].groups.iter().map(|g| g.label.as_str()).collect();
        assert_eq!(labels, ["2 thr", "4 thr"], "prodcons runs whole pairs");
        // No system allocator: relative to the first, hakmem.
        assert_eq!(baseline(&plan), Allocator::Hakmem);
        assert_eq!(charts[0].groups[0].bars[1].ratio, Some(1.0));
    }

    #[test]
    fn axis_spans_whole_powers_and_maps_them_inside_the_label_room() {
        assert_eq!(span(2.0, [0.3, 1.7].into_iter(), &[0.5, 2.0]), (-2.0, 1.0));
        assert_eq!(span(10.0, [2.0, 300.0].into_iter(), &[]), (0.0, 3.0));
        assert_eq!(span(10.0, [2.0].into_iter(), &[]), (0.0, 1.0));
        assert_eq!(span(10.0, std::iter::empty(), &[]), (0.0, 1.0));
        assert_eq!(rss_span(&[10.0, 14.0, 172.0]), (5.0, 200.0));
        assert_eq!(rss_span(&[2.5, 3.0]), (1.0, 5.0));
        assert_eq!(rss_span(&[]), (1.0, 10.0));
        let ticks: Vec<f64> = one_two_five(5.0, 200.0).collect();
        assert_eq!(ticks, [5.0, 10.0, 20.0, 50.0, 100.0, 200.0]);
        let axis = Axis {
            base: 2.0,
            lo: -1.0,
            hi: 1.0,
            top: 0.0,
            bottom: 100.0 + 2.0 * LABEL_ROOM,
        };
        assert_eq!(axis.y(0.5), 100.0 + LABEL_ROOM);
        assert_eq!(axis.y(1.0), 50.0 + LABEL_ROOM);
        assert_eq!(axis.y(2.0), LABEL_ROOM);
        assert_eq!(axis.y(1e9), LABEL_ROOM, "clamped");
    }

    #[test]
    fn labels_are_short() {
        assert_eq!(ratio_label(1.234), "1.23");
        assert_eq!(ratio_label(12.34), "12.3");
        assert_eq!(ratio_label(123.4), "123");
        assert_eq!(mib_label(0.5), "0.50");
        assert_eq!(mib_label(2.13), "2.1");
        assert_eq!(mib_label(512.4), "512");
        assert_eq!(power_of_two_label(-5), "1/32x");
        assert_eq!(power_of_two_label(-2), "0.25x");
        assert_eq!(power_of_two_label(0), "1x");
        assert_eq!(power_of_two_label(3), "8x");
        assert_eq!(escape(r#"a<b & "c""#), "a&lt;b &amp; &quot;c&quot;");
    }

    #[test]
    fn the_svg_is_xml_with_a_bar_per_allocator_and_the_png_renders_it() {
        let (plan, cells) = plain();
        let rows = report::rows(&plan, &cells);
        let svg = svg(&plan, &rows);
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let class = |node: &roxmltree::Node, name: &str| node.attribute("class") == Some(name);
        let charts: Vec<_> = doc.descendants().filter(|n| class(n, "chart")).collect();
        assert_eq!(charts.len(), 1);
        let bars: Vec<_> = charts[0].descendants().filter(|n| class(n, "bar")).collect();
        // Two panels x two workloads x three allocators, less jemalloc's c7.
        assert_eq!(bars.len(), 2 * (2 * 3 - 1));
        let failed: Vec<_> = charts[0].descendants().filter(|n| class(n, "failed")).collect();
        assert_eq!(failed.len(), 2, "one per panel");
        assert_eq!(failed[0].attribute("data-allocator"), Some("jemalloc"));

        let png = png(&svg).unwrap();
        let info = png::Decoder::new(std::io::Cursor::new(png)).read_info().unwrap();
        let root = doc.root_element();
        let size = |name| root.attribute(name).unwrap().parse::<f32>().unwrap();
        assert_eq!(info.info().width as f32, size("width") * PNG_SCALE);
        assert_eq!(info.info().height as f32, size("height") * PNG_SCALE);
    }
}
