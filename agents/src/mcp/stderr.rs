//! A stdio MCP server's stderr, drained into the log with each line's length bounded.

/// The longest stderr line of a stdio server kept for the log; the rest of a longer line is
/// read and dropped (a server writing without newlines cannot grow Stead's memory).
const MAX_STDERR_LINE: usize = 4 << 10;

/// A stdio server's stderr, line by line into the log (the pipe must be drained, or a chatty
/// server blocks).
pub(super) async fn log_stderr(server: String, stderr: tokio::process::ChildStderr) {
    drain_lines(stderr, MAX_STDERR_LINE, |line| {
        tracing::debug!(server = %server, "{line}");
    })
    .await;
}

/// Calls `each` with every line of `reader`, each cut to its first `max` bytes (cut lines
/// end with `…`); never holds more than `max` bytes of a line.
async fn drain_lines<R>(reader: R, max: usize, mut each: impl FnMut(&str))
where
    R: tokio::io::AsyncRead + Unpin,
{
    use tokio::io::AsyncBufReadExt;
    let mut reader = tokio::io::BufReader::new(reader);
    let mut line: Vec<u8> = Vec::new();
    let mut cut = false;
    loop {
        let buffer = match reader.fill_buf().await {
            Ok([]) | Err(_) => break,
            Ok(buffer) => buffer,
        };
        let (piece, ended) = match buffer.iter().position(|&b| b == b'\n') {
            Some(at) => (&buffer[..at], true),
            None => (buffer, false),
        };
        let room = max.saturating_sub(line.len());
        cut |= piece.len() > room;
        line.extend_from_slice(&piece[..piece.len().min(room)]);
        let used = piece.len() + usize::from(ended);
        reader.consume(used);
        if ended {
            emit(&line, cut, &mut each);
            line.clear();
            cut = false;
        }
    }
    if !line.is_empty() {
        emit(&line, cut, &mut each);
    }
}

fn emit(line: &[u8], cut: bool, each: &mut impl FnMut(&str)) {
    let text = String::from_utf8_lossy(line);
    let text = text.strip_suffix('\r').unwrap_or(&text);
    if cut {
        each(&format!("{text}…"));
    } else {
        each(text);
    }
}

#[cfg(test)]
mod tests {
    use super::drain_lines;

    /// A line without end is cut at the limit, and the lines after it
    /// still arrive.
    #[tokio::test]
    async fn stderr_lines_are_cut_at_the_limit() {
        let mut input = vec![b'x'; 1 << 20];
        input.extend_from_slice(b"\r\nhello\nlast");
        let mut lines = Vec::new();
        drain_lines(&input[..], 16, |line| lines.push(line.to_string())).await;
        assert_eq!(
            lines,
            vec![
                format!("{}…", "x".repeat(16)),
                "hello".into(),
                "last".into()
            ]
        );
    }
}
