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
//! Each bar carries its value as a label; a failed cell says `failed`
//! where its bar would be, a ratio without a baseline `n/a`. The charts
//! are drawn by `plotters`, once into an SVG (text left as text) and once
//! into an RGB buffer encoded as PNG; both use DejaVu Sans, embedded in
//! this binary (the `dejavu` crate) and registered with plotters as its
//! only font: no system font is looked for or needed. The numbers
//! themselves are for machines in the CSV and JSON output, not here.

use crate::allocators::Allocator;
use crate::cli::{Plan, PlotFile, PlotFormat};
use crate::report::{self, Row};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::io::Write as _;
use std::path::Path;
use std::sync::OnceLock;

/// The font family plotters is given, and the SVG names.
const FONT: &str = "sans-serif";

/// Pixels per bar, and between two groups of bars; a group is at least
/// `MIN_GROUP_WIDTH` wide so that its label fits.
const BAR_WIDTH: u32 = 18;
const GROUP_GAP: u32 = 24;
const MIN_GROUP_WIDTH: u32 = 72;
/// Left of the panels (tick labels), right of them, and the narrowest
/// picture.
const LEFT: u32 = 70;
const RIGHT: u32 = 20;
const MIN_WIDTH: u32 = 720;
/// Heights: the picture's title and legend, a chart's title, each panel
/// (its title, plotting area and group labels), the footnote.
const HEADER_HEIGHT: u32 = 64;
const CHART_TITLE_HEIGHT: u32 = 30;
const THROUGHPUT_HEIGHT: u32 = 300;
const RSS_HEIGHT: u32 = 250;
const FOOTNOTE_HEIGHT: u32 = 30;
/// Room inside a panel for the group labels under its axis.
const GROUP_LABEL_HEIGHT: u32 = 26;

/// The line at the bottom of the picture.
const FOOTNOTE: &str =
    "Both axes are logarithmic. Where a bar is missing: failed = no run of that allocator succeeded; \
                        n/a = no baseline to divide by.";

/// The colour of each allocator's bars.
pub fn colour(allocator: Allocator) -> RGBColor {
    match allocator {
        Allocator::Hakmem => RGBColor(0xe1, 0x57, 0x59),
        Allocator::HakmemSecure => RGBColor(0xff, 0x9d, 0x9a),
        Allocator::System => RGBColor(0x9d, 0x9d, 0x9d),
        Allocator::Mimalloc2 => RGBColor(0x59, 0xa1, 0x4f),
        Allocator::Mimalloc3 => RGBColor(0x4e, 0x79, 0xa7),
        Allocator::MimallocDeb => RGBColor(0x8c, 0xd1, 0x7d),
        Allocator::Jemalloc => RGBColor(0xf2, 0x8e, 0x2b),
        Allocator::Tcmalloc => RGBColor(0xb0, 0x7a, 0xa1),
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
    for plot in &plan.plots {
        let bytes = match plot.format {
            PlotFormat::Svg => svg(plan, rows)?.into_bytes(),
            PlotFormat::Png => png(plan, rows)?,
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

/// The picture's size in pixels: wide enough for the chart with the most
/// groups, tall enough for every chart's two panels.
fn size(plan: &Plan, charts: &[Chart]) -> (u32, u32) {
    let bars = u32::try_from(plan.allocators.len()).unwrap_or(u32::MAX);
    let group_width = (bars.saturating_mul(BAR_WIDTH) + GROUP_GAP).max(MIN_GROUP_WIDTH);
    let groups = charts.iter().map(|c| c.groups.len()).max().unwrap_or(1);
    let groups = u32::try_from(groups).unwrap_or(u32::MAX);
    let width = (LEFT + RIGHT)
        .saturating_add(groups.saturating_mul(group_width))
        .max(MIN_WIDTH);
    let chart_height = CHART_TITLE_HEIGHT + THROUGHPUT_HEIGHT + RSS_HEIGHT;
    let count = u32::try_from(charts.len()).unwrap_or(u32::MAX);
    let height = (HEADER_HEIGHT + FOOTNOTE_HEIGHT).saturating_add(count.saturating_mul(chart_height));
    (width, height)
}

/// DejaVu Sans registered with plotters (once per process) as `FONT`.
fn register_font() -> Result<(), String> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            for (style, bytes) in [
                (FontStyle::Normal, dejavu::sans::regular()),
                (FontStyle::Bold, dejavu::sans::bold()),
            ] {
                plotters::style::register_font(FONT, style, bytes)
                    .map_err(|_| "the embedded DejaVu Sans is not a font plotters can read".to_string())?;
            }
            Ok(())
        })
        .clone()
}

/// The SVG of the plot of `rows`.
pub fn svg(plan: &Plan, rows: &[Row]) -> Result<String, String> {
    register_font()?;
    let charts = charts(plan, rows);
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, size(plan, &charts)).into_drawing_area();
        draw(&root, plan, &charts).map_err(|e| format!("cannot draw the SVG plot: {e}"))?;
        root.present().map_err(|e| format!("cannot draw the SVG plot: {e}"))?;
    }
    Ok(out)
}

/// The PNG of the plot of `rows` (8-bit RGB).
pub fn png(plan: &Plan, rows: &[Row]) -> Result<Vec<u8>, String> {
    register_font()?;
    let charts = charts(plan, rows);
    let (width, height) = size(plan, &charts);
    let pixels = usize::try_from(u64::from(width) * u64::from(height) * 3).map_err(|_| "the plot is too large")?;
    let mut buffer = vec![0u8; pixels];
    {
        let root = BitMapBackend::with_buffer(&mut buffer, (width, height)).into_drawing_area();
        draw(&root, plan, &charts).map_err(|e| format!("cannot draw the PNG plot: {e}"))?;
        root.present().map_err(|e| format!("cannot draw the PNG plot: {e}"))?;
    }
    let mut encoded = Vec::new();
    let mut encoder = png::Encoder::new(&mut encoded, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let error = |e: png::EncodingError| format!("cannot encode the PNG plot: {e}");
    let mut writer = encoder.write_header().map_err(error)?;
    writer.write_image_data(&buffer).map_err(error)?;
    writer.finish().map_err(error)?;
    Ok(encoded)
}

type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// The whole picture: title, legend, each chart's two panels, footnote.
fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, plan: &Plan, charts: &[Chart]) -> DrawResult<DB> {
    root.fill(&WHITE)?;
    let (width, height) = root.dim_in_pixel();
    root.draw(&Text::new(
        report::headline(plan),
        (12, 10),
        (FONT, 18).into_font().style(FontStyle::Bold),
    ))?;
    let mut x = 12;
    for &allocator in &plan.allocators {
        root.draw(&Rectangle::new([(x, 40), (x + 12, 52)], colour(allocator).filled()))?;
        let style = (FONT, 13).into_font().into_text_style(root);
        root.draw(&Text::new(allocator.name(), (x + 17, 39), style.clone()))?;
        let (text_width, _) = root.estimate_text_size(allocator.name(), &style)?;
        x += 17 + i32::try_from(text_width).unwrap_or(100) + 18;
    }
    let mut top = HEADER_HEIGHT;
    for chart in charts {
        root.draw(&Text::new(
            chart.title.clone(),
            (12, i32::try_from(top).unwrap_or(0) + 6),
            (FONT, 15).into_font().style(FontStyle::Bold),
        ))?;
        top += CHART_TITLE_HEIGHT;
        let area = root.clone().shrink((0, top), (width, THROUGHPUT_HEIGHT));
        throughput_panel(&area, plan, chart)?;
        top += THROUGHPUT_HEIGHT;
        let area = root.clone().shrink((0, top), (width, RSS_HEIGHT));
        rss_panel(&area, chart)?;
        top += RSS_HEIGHT;
    }
    let footnote = (FONT, 12).into_font().color(&RGBColor(0x55, 0x55, 0x55));
    root.draw(&Text::new(
        FOOTNOTE,
        (12, i32::try_from(height).unwrap_or(0) - 22),
        footnote,
    ))?;
    Ok(())
}

/// Where bar `index` of `count` in group `group` lies on the x axis (the
/// groups are one unit wide, centred on `group + 0.5`).
fn bar_span(group: usize, index: usize, count: usize) -> (f64, f64) {
    let width = 0.8 / count.max(1) as f64;
    let left = group as f64 + 0.1 + index as f64 * width;
    (left, left + width)
}

/// The panel's plotting area with its y axis, groups labelled under it.
fn panel<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    title: &str,
    chart: &Chart,
    y: std::ops::Range<f64>,
    labels: usize,
    format: &dyn Fn(&f64) -> String,
) -> Result<Panel<'a, DB>, DrawingAreaErrorKind<DB::ErrorType>> {
    let groups = chart.groups.len().max(1);
    let mut context = ChartBuilder::on(area)
        .caption(title, (FONT, 13))
        .margin_right(RIGHT)
        .margin_top(4)
        .x_label_area_size(GROUP_LABEL_HEIGHT)
        .y_label_area_size(LEFT)
        .build_cartesian_2d(0f64..groups as f64, y)?;
    context
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_labels(labels)
        .y_label_formatter(format)
        .light_line_style(WHITE)
        .bold_line_style(RGBColor(0xe4, 0xe4, 0xe4))
        .label_style((FONT, 11))
        .draw()?;
    let floor = context.y_range().start;
    for (index, group) in chart.groups.iter().enumerate() {
        let style = (FONT, 12)
            .into_font()
            .into_text_style(area)
            .pos(Pos::new(HPos::Center, VPos::Top));
        let at = pixel(area, &context, (index as f64 + 0.5, floor), 6);
        area.draw(&Text::new(group.label.clone(), at, style))?;
    }
    Ok(context)
}

type Panel<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// The point of `area` (its own pixels) where `value` lies in the panel,
/// moved down by `down` pixels (up when negative).
fn pixel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel<DB>,
    value: (f64, f64),
    down: i32,
) -> (i32, i32) {
    let (x, y) = panel.backend_coord(&value);
    let (base_x, base_y) = area.get_base_pixel();
    (x - base_x, y - base_y + down)
}

/// A bar's value written at its end: above it when `up`, else below.
fn value_label<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel<DB>,
    value: (f64, f64),
    up: bool,
    text: &str,
) -> DrawResult<DB> {
    let pos = Pos::new(HPos::Center, if up { VPos::Bottom } else { VPos::Top });
    let style = (FONT, 10).into_font().into_text_style(area).pos(pos);
    area.draw(&Text::new(
        text.to_string(),
        pixel(area, panel, value, if up { -2 } else { 2 }),
        style,
    ))
}

/// Throughput over the baseline's, on a log2 axis, bars up from 1x when
/// faster and down when slower.
fn throughput_panel<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, plan: &Plan, chart: &Chart) -> DrawResult<DB> {
    let ratios = chart.groups.iter().flat_map(|g| g.bars.iter().filter_map(|b| b.ratio));
    let (lo, hi) = span(2.0, ratios, &[0.5, 2.0]);
    let title = format!("Throughput vs {} (higher is faster)", baseline(plan));
    let format = |v: &f64| power_of_two_label(v.round() as i32);
    let labels = (hi - lo) as usize + 1;
    // Half a power of two of room above and below for the value labels.
    let mut context = panel(area, &title, chart, (lo - 0.5)..(hi + 0.5), labels, &format)?;
    let count = chart.groups.first().map_or(0, |g| g.bars.len());
    context.draw_series(std::iter::once(PathElement::new(
        vec![(0.0, 0.0), (chart.groups.len() as f64, 0.0)],
        BLACK.stroke_width(1),
    )))?;
    for (g, group) in chart.groups.iter().enumerate() {
        for (i, bar) in group.bars.iter().enumerate() {
            let (left, right) = bar_span(g, i, count);
            let centre = (left + right) / 2.0;
            let Some(ratio) = bar.ratio.filter(|r| *r > 0.0 && r.is_finite()) else {
                let text = if bar.failed { "failed" } else { "n/a" };
                value_label(area, &context, (centre, 0.0), true, text)?;
                continue;
            };
            let value = ratio.log2();
            context.draw_series(std::iter::once(Rectangle::new(
                [(left, 0.0), (right, value)],
                colour(bar.allocator).filled(),
            )))?;
            if bar.allocator != baseline(plan) {
                value_label(area, &context, (centre, value), value >= 0.0, &ratio_label(ratio))?;
            }
        }
    }
    Ok(())
}

/// Peak RSS in MiB on a log10 axis, bars up from the axis' floor.
fn rss_panel<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, chart: &Chart) -> DrawResult<DB> {
    let values: Vec<f64> = chart
        .groups
        .iter()
        .flat_map(|g| g.bars.iter().filter_map(|b| b.rss_mib))
        .collect();
    let (lo, hi) = rss_span(&values);
    // A third of a power of ten above the top for the value labels.
    let ticks: Vec<f64> = one_two_five(lo, hi).collect();
    let (lo, hi) = (lo.log10(), hi.log10() + 0.35);
    // The mesh's own labels would be at even steps of the exponent (2.5,
    // 6.3, 16 MiB): the ticks are drawn here at 1, 2 and 5 times powers of
    // ten instead.
    let mut context = panel(area, "Peak RSS, MiB (lower is leaner)", chart, lo..hi, 0, &|_| {
        String::new()
    })?;
    let groups = chart.groups.len() as f64;
    for tick in ticks {
        let y = tick.log10();
        context.draw_series(std::iter::once(PathElement::new(
            vec![(0.0, y), (groups, y)],
            RGBColor(0xe4, 0xe4, 0xe4),
        )))?;
        let (x, y) = pixel(area, &context, (0.0, y), 0);
        let style = (FONT, 11)
            .into_font()
            .into_text_style(area)
            .pos(Pos::new(HPos::Right, VPos::Center));
        area.draw(&Text::new(format!("{tick}"), (x - 6, y), style))?;
    }
    let count = chart.groups.first().map_or(0, |g| g.bars.len());
    for (g, group) in chart.groups.iter().enumerate() {
        for (i, bar) in group.bars.iter().enumerate() {
            let (left, right) = bar_span(g, i, count);
            let centre = (left + right) / 2.0;
            match bar.rss_mib.filter(|m| *m > 0.0 && m.is_finite()) {
                Some(mib) => {
                    let value = mib.log10();
                    context.draw_series(std::iter::once(Rectangle::new(
                        [(left, lo), (right, value)],
                        colour(bar.allocator).filled(),
                    )))?;
                    value_label(area, &context, (centre, value), true, &mib_label(mib))?;
                }
                None => {
                    let text = if bar.failed { "failed" } else { "n/a" };
                    value_label(area, &context, (centre, lo), true, text)?;
                }
            }
        }
    }
    Ok(())
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
    fn axis_spans_whole_powers() {
        assert_eq!(span(2.0, [0.3, 1.7].into_iter(), &[0.5, 2.0]), (-2.0, 1.0));
        assert_eq!(span(10.0, [2.0, 300.0].into_iter(), &[]), (0.0, 3.0));
        assert_eq!(span(10.0, [2.0].into_iter(), &[]), (0.0, 1.0));
        assert_eq!(span(10.0, std::iter::empty(), &[]), (0.0, 1.0));
        assert_eq!(rss_span(&[10.0, 14.0, 172.0]), (5.0, 200.0));
        assert_eq!(rss_span(&[2.5, 3.0]), (1.0, 5.0));
        assert_eq!(rss_span(&[]), (1.0, 10.0));
        let ticks: Vec<f64> = one_two_five(5.0, 200.0).collect();
        assert_eq!(ticks, [5.0, 10.0, 20.0, 50.0, 100.0, 200.0]);
        let close = |(a, b): (f64, f64), (c, d): (f64, f64)| (a - c).abs() < 1e-12 && (b - d).abs() < 1e-12;
        assert!(close(bar_span(1, 0, 4), (1.1, 1.3)));
        assert!(
            close(bar_span(0, 3, 4), (0.7, 0.9)),
            "the last bar ends a tenth before the next group"
        );
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
    }

    /// The SVG read back as XML: the panels' titles, each group's label
    /// under each panel, a bar per allocator and workload in each panel
    /// (jemalloc's failed c7 says so instead), and the PNG the same size,
    /// with every allocator's colour in it.
    #[test]
    fn the_svg_has_a_bar_per_allocator_and_workload_and_the_png_matches_it() {
        let (plan, cells) = plain();
        let rows = report::rows(&plan, &cells);
        let svg = svg(&plan, &rows).unwrap();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let texts: Vec<&str> = doc
            .descendants()
            .filter(|n| n.has_tag_name("text"))
            .filter_map(|n| n.text())
            .map(str::trim)
            .collect();
        let count = |text: &str| texts.iter().filter(|t| **t == text).count();
        assert_eq!(count("Throughput vs system (higher is faster)"), 1);
        assert_eq!(count("Peak RSS, MiB (lower is leaner)"), 1);
        assert_eq!((count("mixed"), count("c7")), (2, 2), "{texts:?}");
        assert_eq!(count("failed"), 2, "one per panel: {texts:?}");
        assert_eq!((count("2.00"), count("0.25"), count("1.50")), (1, 1, 1), "{texts:?}");
        let rects = |allocator: Allocator| {
            let c = colour(allocator);
            let fill = format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2);
            doc.descendants()
                .filter(|n| n.has_tag_name("rect") && n.attribute("fill") == Some(fill.as_str()))
                .count()
        };
        // The legend's swatch, then a bar per workload in each panel.
        assert_eq!(rects(Allocator::Hakmem), 1 + 2 + 2);
        assert_eq!(rects(Allocator::Jemalloc), 1 + 1 + 1);

        let png = png(&plan, &rows).unwrap();
        let mut reader = png::Decoder::new(std::io::Cursor::new(png)).read_info().unwrap();
        let mut buffer = vec![0; reader.output_buffer_size().unwrap()];
        let frame = reader.next_frame(&mut buffer).unwrap();
        let root = doc.root_element();
        let size = |name| root.attribute(name).unwrap().parse::<u32>().unwrap();
        assert_eq!((frame.width, frame.height), (size("width"), size("height")));
        let pixels: Vec<&[u8]> = buffer[..frame.buffer_size()].chunks(3).collect();
        for allocator in [Allocator::Hakmem, Allocator::System, Allocator::Jemalloc] {
            let c = colour(allocator);
            assert!(pixels.iter().any(|p| **p == [c.0, c.1, c.2]), "no pixel of {allocator}");
        }
    }
}
