//! Files as documents for `stead knowledge add` (docs/knowledge.md, "Files"): plain text and
//! Markdown as they are, HTML as its visible text (scripts, styles and tags dropped, block
//! elements ending lines, the common entities decoded). PDF is not read: convert it first
//! (`pdftotext file.pdf`), since no well-kept pure-Rust reader handles real-world PDFs well.

use std::path::Path;

/// The text of a file to ingest, by its extension.
pub fn read_document(path: &Path) -> anyhow::Result<String> {
    let extension = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    let bytes = std::fs::read(path)?;
    let text = String::from_utf8(bytes)
        .map_err(|_| anyhow::anyhow!("{} is not UTF-8 text", path.display()))?;
    match extension.as_str() {
        "txt" | "text" | "md" | "markdown" | "rst" | "" => Ok(text),
        "html" | "htm" => Ok(html_text(&text)),
        "pdf" => anyhow::bail!(
            "{}: PDF is not read; convert it to text first (pdftotext)",
            path.display()
        ),
        other => anyhow::bail!(
            "{}: .{other} files are not read (plain text, Markdown or HTML)",
            path.display()
        ),
    }
}

/// Elements whose start or end ends a line of text.
const BLOCKS: &[&str] = &[
    "p",
    "div",
    "br",
    "li",
    "ul",
    "ol",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "tr",
    "table",
    "section",
    "article",
    "header",
    "footer",
    "pre",
    "blockquote",
    "hr",
    "title",
];

/// The visible text of an HTML page.
pub fn html_text(html: &str) -> String {
    let mut out = String::with_capacity(html.len() / 2);
    let mut rest = html;
    while let Some(open) = rest.find('<') {
        out.push_str(&decode_entities(&rest[..open]));
        rest = &rest[open..];
        let Some(close) = rest.find('>') else {
            break;
        };
        let tag = rest[1..close].trim();
        let name: String = tag
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase();
        rest = &rest[close + 1..];
        if tag.starts_with("!--") {
            // A comment: skip to its end.
            match rest.find("-->") {
                Some(end) if !tag.ends_with("--") => rest = &rest[end + 3..],
                _ => {}
            }
            continue;
        }
        if (name == "script" || name == "style") && !tag.starts_with('/') {
            let end = format!("</{name}");
            match rest.to_ascii_lowercase().find(&end) {
                Some(at) => {
                    rest = &rest[at..];
                    if let Some(close) = rest.find('>') {
                        rest = &rest[close + 1..];
                    }
                }
                None => rest = "",
            }
            continue;
        }
        if BLOCKS.contains(&name.as_str()) {
            out.push('\n');
        } else {
            out.push(' ');
        }
    }
    out.push_str(&decode_entities(rest));
    // Lines of words; blank lines dropped.
    let mut text = String::new();
    for line in out.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if !words.is_empty() {
            text.push_str(&words.join(" "));
            text.push('\n');
        }
    }
    text
}

fn decode_entities(text: &str) -> String {
    if !text.contains('&') {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let end = rest.find(';').filter(|&e| e <= 10);
        let decoded = end.and_then(|end| {
            let entity = &rest[1..end];
            let c = match entity {
                "amp" => Some('&'),
                "lt" => Some('<'),
                "gt" => Some('>'),
                "quot" => Some('"'),
                "apos" | "#39" => Some('\''),
                "nbsp" => Some(' '),
                _ => entity
                    .strip_prefix("#x")
                    .and_then(|hex| u32::from_str_radix(hex, 16).ok())
                    .or_else(|| entity.strip_prefix('#').and_then(|d| d.parse().ok()))
                    .and_then(char::from_u32),
            };
            c.map(|c| (c, end))
        });
        match decoded {
            Some((c, end)) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_becomes_its_visible_text() {
        let html = "<html><head><title>Tea</title><style>p{color:red}</style>\
                    <script>var x = '<p>';</script></head><body><!-- note -->\
                    <h1>Green&nbsp;tea</h1><p>Steep at 80&deg; &amp; wait &lt;2 min&#33;</p>\
                    <ul><li>one</li><li>two <b>bold</b></li></ul></body></html>";
        assert_eq!(
            html_text(html),
            "Tea\nGreen tea\nSteep at 80&deg; & wait <2 min!\none\ntwo bold\n"
        );
    }

    #[test]
    fn unknown_file_types_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let pdf = dir.path().join("a.pdf");
        std::fs::write(&pdf, "%PDF").unwrap();
        assert!(read_document(&pdf)
            .unwrap_err()
            .to_string()
            .contains("pdftotext"));
        let md = dir.path().join("a.md");
        std::fs::write(&md, "# Title\ntext").unwrap();
        assert_eq!(read_document(&md).unwrap(), "# Title\ntext");
    }
}
