//! How a document is cut into chunks (docs/knowledge.md, "Chunking"): its words, at most
//! `chunk_words` to a chunk, each chunk ending at a sentence or block end where one falls in its
//! second half, and each chunk after the first starting with the last `overlap` words of the one
//! before (a fact cut in two is whole in one of them). Whitespace becomes single spaces.

/// One word and whether a sentence or block ends after it.
struct Word<'a> {
    text: &'a str,
    ends: bool,
}

fn words(text: &str) -> Vec<Word<'_>> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out: Vec<Word<'_>> = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let next = lines.get(i + 1).map(|l| l.trim_start()).unwrap_or("");
        // A block ends with its line when the next line is blank, a heading or a list item.
        let block_end = next.is_empty()
            || next.starts_with('#')
            || next.starts_with("- ")
            || next.starts_with("* ")
            || next.starts_with('|')
            || next.starts_with("```");
        let mut in_line = line.split_whitespace().peekable();
        while let Some(word) = in_line.next() {
            let last = in_line.peek().is_none();
            let sentence = word.ends_with(['.', '!', '?', ':']);
            out.push(Word {
                text: word,
                ends: sentence || (last && block_end),
            });
        }
    }
    out
}

/// The chunks of `text`, in order (none for a text without words).
pub fn chunk(text: &str, max_words: usize, overlap: usize) -> Vec<String> {
    let max_words = max_words.max(1);
    let overlap = overlap.min(max_words / 2);
    let words = words(text);
    let mut chunks = Vec::new();
    let mut start = 0;
    while start < words.len() {
        let mut end = (start + max_words).min(words.len());
        if end < words.len() {
            // The last sentence end in the chunk's second half, if any.
            if let Some(cut) = (start + max_words / 2..end).rev().find(|&i| words[i].ends) {
                end = cut + 1;
            }
        }
        chunks.push(
            words[start..end]
                .iter()
                .map(|w| w.text)
                .collect::<Vec<_>>()
                .join(" "),
        );
        if end == words.len() {
            break;
        }
        start = (end - overlap).max(start + 1);
    }
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_texts_are_one_chunk_and_empty_ones_none() {
        assert_eq!(chunk("  Hello,\n\n world. ", 10, 2), vec!["Hello, world."]);
        assert!(chunk(" \n\t ", 10, 2).is_empty());
    }

    #[test]
    fn chunks_end_at_sentences_and_overlap() {
        let text = "One two three four. Five six seven eight nine ten. Eleven twelve.";
        let chunks = chunk(text, 6, 2);
        assert_eq!(
            chunks,
            vec![
                "One two three four.",
                "three four. Five six seven eight",
                "seven eight nine ten. Eleven twelve.",
            ]
        );
    }

    #[test]
    fn a_sentence_longer_than_a_chunk_is_cut_by_words() {
        let text = (1..=25)
            .map(|i| format!("w{i}"))
            .collect::<Vec<_>>()
            .join(" ");
        let chunks = chunk(&text, 10, 3);
        assert_eq!(chunks[0], "w1 w2 w3 w4 w5 w6 w7 w8 w9 w10");
        assert_eq!(chunks[1], "w8 w9 w10 w11 w12 w13 w14 w15 w16 w17");
        assert_eq!(chunks.last().unwrap(), "w22 w23 w24 w25");
        // Every word is in some chunk.
        for i in 1..=25 {
            assert!(chunks
                .iter()
                .any(|c| c.split(' ').any(|w| w == format!("w{i}"))));
        }
    }

    #[test]
    fn headings_and_list_items_end_blocks() {
        let text = "# Title\nIntro words here\n- item one\n- item two\n\nAfter";
        let chunks = chunk(text, 6, 1);
        assert_eq!(chunks[0], "# Title Intro words here");
    }
}
