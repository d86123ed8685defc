//! The plot's SVG painted into a PNG: `plot` writes the picture once, as
//! SVG, and this reads that SVG back (`roxmltree`) and paints it, so the
//! two files cannot disagree.
//!
//! It paints exactly the subset of SVG that `plot` writes, and refuses
//! anything else rather than draw it wrong: `svg` with `width` and
//! `height` (user units = CSS pixels), `g` (grouping only), `title`
//! (tooltips: not painted), `rect` (`x`, `y`, `width`, `height` in units
//! or `100%`, `fill`, `stroke`), horizontal or vertical `line` (`stroke`,
//! `stroke-width`), and `text` (`x`, `y`, `font-size`, `font-weight` normal
//! or bold, `text-anchor`, `fill`, and `transform="rotate(-90 X Y)"` about
//! its own anchor point). Colours are `#rrggbb`, `white`, `black` or
//! `none`. Edges are anti-aliased by their exact pixel coverage; glyphs are
//! DejaVu Sans (regular and bold, from the `dejavu` crate, so the PNG needs
//! no system font and looks the same everywhere), laid out with their
//! advances and kerning and rasterised by `ab_glyph`.
//!
//! Why not a general SVG renderer (`resvg`): it and its text stack would
//! be linked into every benchmark child (this is one binary), and measured
//! that way they added about 0.4 MiB to every child's peak RSS (dynamic
//! relocations and code pages); this module and its crates add little.

use ab_glyph::{Font, FontRef, Glyph, PxScale, ScaleFont};
use roxmltree::Node;

/// An RGB picture being painted, in device pixels.
struct Canvas {
    width: u32,
    height: u32,
    pixels: Vec<[u8; 3]>,
    /// Device pixels per SVG unit.
    scale: f32,
}

type Rgb = [u8; 3];

impl Canvas {
    fn new(width: u32, height: u32, scale: f32) -> Canvas {
        Canvas {
            width,
            height,
            pixels: vec![[255; 3]; width as usize * height as usize],
            scale,
        }
    }

    /// Mixes `colour` into the pixel at (x, y) with `alpha` (0 to 1).
    fn blend(&mut self, x: i64, y: i64, colour: Rgb, alpha: f32) {
        if x < 0 || y < 0 || x >= i64::from(self.width) || y >= i64::from(self.height) || alpha <= 0.0 {
            return;
        }
        let alpha = alpha.min(1.0);
        let pixel = &mut self.pixels[y as usize * self.width as usize + x as usize];
        for (channel, &c) in pixel.iter_mut().zip(&colour) {
            *channel = (f32::from(*channel) * (1.0 - alpha) + f32::from(c) * alpha).round() as u8;
        }
    }

    /// Fills the rectangle from (x0, y0) to (x1, y1), in SVG units; a pixel
    /// the edge crosses gets the fraction of it covered.
    fn fill(&mut self, (x0, y0): (f32, f32), (x1, y1): (f32, f32), colour: Rgb) {
        let s = self.scale;
        let (x0, x1) = (x0.min(x1) * s, x0.max(x1) * s);
        let (y0, y1) = (y0.min(y1) * s, y0.max(y1) * s);
        let overlap = |p: f32, lo: f32, hi: f32| (hi.min(p + 1.0) - lo.max(p)).max(0.0);
        for y in y0.floor() as i64..y1.ceil() as i64 {
            let cover_y = overlap(y as f32, y0, y1);
            for x in x0.floor() as i64..x1.ceil() as i64 {
                self.blend(x, y, colour, cover_y * overlap(x as f32, x0, x1));
            }
        }
    }

    fn into_png(self) -> Result<Vec<u8>, String> {
        let mut bytes = Vec::new();
        let mut encoder = png::Encoder::new(&mut bytes, self.width, self.height);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let error = |e: png::EncodingError| format!("cannot encode the PNG: {e}");
        let mut writer = encoder.write_header().map_err(error)?;
        writer.write_image_data(self.pixels.as_flattened()).map_err(error)?;
        writer.finish().map_err(error)?;
        Ok(bytes)
    }
}

/// The embedded faces.
struct Fonts {
    regular: FontRef<'static>,
    bold: FontRef<'static>,
}

impl Fonts {
    fn load() -> Result<Fonts, String> {
        let load = |bytes| FontRef::try_from_slice(bytes).map_err(|e| format!("the embedded font: {e}"));
        Ok(Fonts {
            regular: load(dejavu::sans::regular())?,
            bold: load(dejavu::sans::bold())?,
        })
    }
}

/// `svg` (as `plot::svg` writes it) painted at `scale` device pixels per
/// unit, as a PNG.
pub fn png(svg: &str, scale: f32) -> Result<Vec<u8>, String> {
    let doc = roxmltree::Document::parse(svg).map_err(|e| format!("cannot read the plot's SVG: {e}"))?;
    let root = doc.root_element();
    let size =
        |name| -> Result<f32, String> { number(root, name)?.ok_or_else(|| format!("the plot's SVG has no {name}")) };
    let (width, height) = (size("width")?, size("height")?);
    let device = |units: f32| (units * scale).ceil() as u32;
    let mut canvas = Canvas::new(device(width), device(height), scale);
    let fonts = Fonts::load()?;
    for node in root.descendants().filter(Node::is_element) {
        match node.tag_name().name() {
            "svg" | "g" | "title" => {}
            "rect" => rect(&mut canvas, node, (width, height))?,
            "line" => line(&mut canvas, node)?,
            "text" => text(&mut canvas, &fonts, node)?,
            other => return Err(format!("the plot's SVG has a <{other}>, which cannot be painted")),
        }
    }
    canvas.into_png()
}

/// The number in attribute `name` of `node`, if it is there.
fn number(node: Node, name: &str) -> Result<Option<f32>, String> {
    node.attribute(name)
        .map(|v| v.parse().map_err(|_| format!("{name}=\"{v}\" is not a number")))
        .transpose()
}

/// A coordinate or length: a number, or a percentage of `whole`.
fn length(node: Node, name: &str, whole: f32) -> Result<f32, String> {
    match node.attribute(name) {
        Some(v) if v.ends_with('%') => v[..v.len() - 1]
            .parse::<f32>()
            .map(|p| p / 100.0 * whole)
            .map_err(|_| format!("{name}=\"{v}\" is not a percentage")),
        _ => Ok(number(node, name)?.unwrap_or(0.0)),
    }
}

/// The colour in attribute `name`: `None` when absent or `none`.
fn colour(node: Node, name: &str) -> Result<Option<Rgb>, String> {
    let Some(value) = node.attribute(name) else {
        return Ok(None);
    };
    match value {
        "none" => Ok(None),
        "white" => Ok(Some([255; 3])),
        "black" => Ok(Some([0; 3])),
        hex if hex.starts_with('#') && (hex.len() == 7 || hex.len() == 4) => {
            let digits = u32::from_str_radix(&hex[1..], 16).map_err(|_| format!("{name}=\"{hex}\""))?;
            // #rgb is #rrggbb with each digit twice.
            let rgb = if hex.len() == 4 {
                (0..3).fold(0, |rgb, i| {
                    let digit = (digits >> (8 - 4 * i)) & 0xf;
                    (rgb << 8) | (digit * 0x11)
                })
            } else {
                digits
            };
            Ok(Some([(rgb >> 16) as u8, (rgb >> 8) as u8, rgb as u8]))
        }
        other => Err(format!("{name}=\"{other}\" is not a colour this painter knows")),
    }
}

fn rect(canvas: &mut Canvas, node: Node, (width, height): (f32, f32)) -> Result<(), String> {
    let x = length(node, "x", width)?;
    let y = length(node, "y", height)?;
    let w = length(node, "width", width)?;
    let h = length(node, "height", height)?;
    if let Some(fill) = colour(node, "fill")?.or(node.attribute("fill").is_none().then_some([0; 3])) {
        canvas.fill((x, y), (x + w, y + h), fill);
    }
    if let Some(stroke) = colour(node, "stroke")? {
        // A stroke is centred on the outline.
        let half = number(node, "stroke-width")?.unwrap_or(1.0) / 2.0;
        canvas.fill((x - half, y - half), (x + w + half, y + half), stroke);
        canvas.fill((x - half, y + h - half), (x + w + half, y + h + half), stroke);
        canvas.fill((x - half, y + half), (x + half, y + h - half), stroke);
        canvas.fill((x + w - half, y + half), (x + w + half, y + h - half), stroke);
    }
    Ok(())
}

fn line(canvas: &mut Canvas, node: Node) -> Result<(), String> {
    let coordinate = |name| -> Result<f32, String> { Ok(number(node, name)?.unwrap_or(0.0)) };
    let (x1, y1, x2, y2) = (
        coordinate("x1")?,
        coordinate("y1")?,
        coordinate("x2")?,
        coordinate("y2")?,
    );
    let Some(stroke) = colour(node, "stroke")? else {
        return Ok(());
    };
    let half = number(node, "stroke-width")?.unwrap_or(1.0) / 2.0;
    if y1 == y2 {
        canvas.fill((x1.min(x2), y1 - half), (x1.max(x2), y1 + half), stroke);
    } else if x1 == x2 {
        canvas.fill((x1 - half, y1.min(y2)), (x1 + half, y1.max(y2)), stroke);
    } else {
        return Err("the plot's SVG has a slanted <line>, which cannot be painted".into());
    }
    Ok(())
}

fn text(canvas: &mut Canvas, fonts: &Fonts, node: Node) -> Result<(), String> {
    let content: String = node.children().filter(Node::is_text).filter_map(|n| n.text()).collect();
    let (x, y) = (number(node, "x")?.unwrap_or(0.0), number(node, "y")?.unwrap_or(0.0));
    let size = number(node, "font-size")?.unwrap_or(16.0);
    let font = match node.attribute("font-weight") {
        None | Some("normal") => &fonts.regular,
        Some("bold") => &fonts.bold,
        Some(other) => return Err(format!("font-weight=\"{other}\" cannot be painted")),
    };
    let fill = colour(node, "fill")?.unwrap_or([0; 3]);
    let rotated = match node.attribute("transform") {
        None => false,
        Some(transform) => {
            let about: Vec<f32> = transform
                .strip_prefix("rotate(-90 ")
                .and_then(|t| t.strip_suffix(')'))
                .map(|t| t.split_whitespace().filter_map(|n| n.parse().ok()).collect())
                .unwrap_or_default();
            if about.len() != 2 || (about[0] - x).abs() > 0.01 || (about[1] - y).abs() > 0.01 {
                return Err(format!(
                    "transform=\"{transform}\" cannot be painted (only rotate(-90) about the text's anchor)"
                ));
            }
            true
        }
    };

    // Lay the glyphs out along the baseline, in device pixels from the
    // anchor; an em is `size` units (ab_glyph's scale is the font's height).
    let em = size * canvas.scale;
    let scale = PxScale::from(em * font.height_unscaled() / font.units_per_em().unwrap_or(2048.0));
    let scaled = font.as_scaled(scale);
    let mut glyphs: Vec<Glyph> = Vec::new();
    let mut advance = 0.0;
    for c in content.chars() {
        let id = scaled.glyph_id(c);
        if let Some(previous) = glyphs.last() {
            advance += scaled.kern(previous.id, id);
        }
        glyphs.push(id.with_scale_and_position(scale, ab_glyph::point(advance, 0.0)));
        advance += scaled.h_advance(id);
    }
    let shift = match node.attribute("text-anchor") {
        None | Some("start") => 0.0,
        Some("middle") => -advance / 2.0,
        Some("end") => -advance,
        Some(other) => return Err(format!("text-anchor=\"{other}\" cannot be painted")),
    };
    // The anchor on a whole device pixel keeps glyphs crisp.
    let (origin_x, origin_y) = ((x * canvas.scale).round() as i64, (y * canvas.scale).round() as i64);
    for glyph in glyphs {
        let Some(outline) = font.outline_glyph(glyph) else {
            continue; // a space
        };
        let bounds = outline.px_bounds();
        outline.draw(|gx, gy, coverage| {
            // (u, v): along the baseline and down from it.
            let u = (bounds.min.x + shift).round() as i64 + i64::from(gx);
            let v = bounds.min.y.round() as i64 + i64::from(gy);
            // rotate(-90) takes (u, v) to (v, -u): the text reads upwards.
            let (px, py) = if rotated {
                (origin_x + v, origin_y - u - 1)
            } else {
                (origin_x + u, origin_y + v)
            };
            canvas.blend(px, py, fill, coverage);
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The PNG `svg` paints, decoded: width, height and RGB bytes.
    fn paint(svg: &str, scale: f32) -> (u32, u32, Vec<u8>) {
        let bytes = png(svg, scale).unwrap();
        let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
        let mut reader = decoder.read_info().unwrap();
        let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
        let frame = reader.next_frame(&mut pixels).unwrap();
        assert_eq!(frame.color_type, png::ColorType::Rgb);
        pixels.truncate(frame.buffer_size());
        (frame.width, frame.height, pixels)
    }

    fn pixel(image: &(u32, u32, Vec<u8>), x: u32, y: u32) -> [u8; 3] {
        let at = 3 * (y * image.0 + x) as usize;
        [image.2[at], image.2[at + 1], image.2[at + 2]]
    }

    #[test]
    fn rectangles_and_lines_cover_their_pixels_and_blend_at_edges() {
        let svg = r##"<svg xmlns="http://www.w3.org/2000/svg" width="20" height="10">
            <rect width="100%" height="100%" fill="white"/>
            <g><rect x="2" y="2" width="4" height="4" fill="#ff0000"><title>tip</title></rect></g>
            <rect x="10.5" y="2" width="2" height="2" fill="#0000ff"/>
            <line x1="0" y1="8" x2="20" y2="8" stroke="#000000" stroke-width="2"/>
            <rect x="14" y="1" width="4" height="4" fill="none" stroke="#00ff00"/>
        </svg>"##;
        let image = paint(svg, 2.0);
        assert_eq!((image.0, image.1), (40, 20), "twice the size");
        assert_eq!(pixel(&image, 0, 0), [255, 255, 255]);
        assert_eq!(pixel(&image, 5, 5), [255, 0, 0]);
        assert_eq!(pixel(&image, 3, 3), [255, 255, 255], "outside the red square");
        // x = 10.5 units = 21 device pixels: whole pixels, no blending.
        assert_eq!(pixel(&image, 21, 5), [0, 0, 255]);
        assert_eq!(pixel(&image, 20, 5), [255, 255, 255]);
        // The 2-unit line: device rows 14 to 17.
        assert_eq!(pixel(&image, 7, 14), [0, 0, 0]);
        assert_eq!(pixel(&image, 7, 17), [0, 0, 0]);
        assert_eq!(pixel(&image, 7, 13), [255, 255, 255]);
        // A 1-unit stroke, centred: half a unit each side of the outline.
        assert_eq!(pixel(&image, 28, 2), [0, 255, 0]);
        assert_eq!(pixel(&image, 30, 5), [255, 255, 255], "not filled");
        // #rgb is #rrggbb.
        let image = paint(
            r##"<svg xmlns="http://www.w3.org/2000/svg" width="2" height="2"><rect width="2" height="2" fill="#4a0"/></svg>"##,
            1.0,
        );
        assert_eq!(pixel(&image, 1, 1), [0x44, 0xaa, 0x00]);
        // Half a device pixel covered: half blended.
        let image = paint(
            r##"<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"><rect x="0" y="0" width="1.5" height="4" fill="#000000"/></svg>"##,
            1.0,
        );
        assert_eq!(pixel(&image, 1, 1), [128, 128, 128]);
    }

    /// The dark pixels of `image` in rows `rows` and columns `columns`.
    fn ink(image: &(u32, u32, Vec<u8>), columns: std::ops::Range<u32>, rows: std::ops::Range<u32>) -> usize {
        rows.flat_map(|y| columns.clone().map(move |x| (x, y)))
            .filter(|&(x, y)| pixel(image, x, y)[0] < 128)
            .count()
    }

    #[test]
    fn text_is_drawn_where_its_anchor_and_rotation_put_it() {
        let text = |attributes: &str| {
            format!(
                r#"<svg xmlns="http://www.w3.org/2000/svg" width="200" height="200"><text x="100" y="100" font-size="20" {attributes}>Mob</text></svg>"#
            )
        };
        // (No descender in "Mob": nothing goes below the baseline.)
        // Start: right of the anchor, above the baseline.
        let image = paint(&text(""), 1.0);
        assert!(ink(&image, 100..160, 80..101) > 100);
        assert_eq!(ink(&image, 0..100, 0..200) + ink(&image, 100..200, 101..200), 0);
        // End: left of it.
        let image = paint(&text(r#"text-anchor="end""#), 1.0);
        assert!(ink(&image, 40..100, 80..101) > 100);
        assert_eq!(ink(&image, 101..200, 0..200), 0);
        // Middle: both sides.
        let image = paint(&text(r#"text-anchor="middle" font-weight="bold""#), 1.0);
        assert!(ink(&image, 60..100, 80..101) > 50 && ink(&image, 100..140, 80..101) > 50);
        // Rotated -90 about the anchor: reads upwards, above it and just
        // left of it.
        let image = paint(&text(r#"transform="rotate(-90 100 100)""#), 1.0);
        assert!(ink(&image, 80..101, 40..100) > 100);
        assert_eq!(ink(&image, 0..200, 101..200) + ink(&image, 101..200, 0..200), 0);
        // The same text in bold has more ink.
        let bold = paint(&text(r#"font-weight="bold""#), 1.0);
        assert!(ink(&bold, 100..170, 80..101) > ink(&paint(&text(""), 1.0), 100..170, 80..101));
    }

    #[test]
    fn anything_outside_the_subset_is_refused() {
        for (element, expected) in [
            (r#"<circle r="3"/>"#, "<circle>"),
            (r#"<line x1="0" y1="0" x2="5" y2="5" stroke="black"/>"#, "slanted"),
            (r#"<text transform="rotate(45 1 1)">x</text>"#, "rotate(45"),
            (
                r#"<text x="5" transform="rotate(-90 1 1)">x</text>"#,
                "about the text's anchor",
            ),
            (r#"<rect width="2" height="2" fill="red"/>"#, "not a colour"),
            (r#"<text text-anchor="left">x</text>"#, "text-anchor"),
        ] {
            let svg = format!(r#"<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10">{element}</svg>"#);
            let error = png(&svg, 1.0).unwrap_err();
            assert!(error.contains(expected), "{element}: {error}");
        }
        assert!(png("<svg", 1.0).unwrap_err().contains("cannot read"));
    }
}
