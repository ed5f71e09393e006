//! Word error rate, as the speech benchmark and tests measure it: both texts lower-cased, cut
//! into words at spaces and hyphens, punctuation dropped, and `mr`/`mrs`/`dr` spelled out (the
//! labelled clips write titles as words); then the word-level edit distance.

/// `text` as the words compared.
pub fn words(text: &str) -> Vec<String> {
    text.to_lowercase()
        .replace('-', " ")
        .split_whitespace()
        .map(|w| {
            w.chars()
                .filter(|c| c.is_alphanumeric() || *c == '\'')
                .collect::<String>()
        })
        .filter(|w| !w.is_empty())
        .map(|w| match w.as_str() {
            "mr" => "mister".to_string(),
            "mrs" => "missus".to_string(),
            "dr" => "doctor".to_string(),
            _ => w,
        })
        .collect()
}

/// Substitutions, insertions and deletions that turn `reference` into `heard`.
pub fn word_errors(reference: &[String], heard: &[String]) -> usize {
    let mut row: Vec<usize> = (0..=heard.len()).collect();
    for (i, r) in reference.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, h) in heard.iter().enumerate() {
            let substitution = diagonal + usize::from(r != h);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[heard.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_count_substitutions_insertions_and_deletions_of_normalised_words() {
        let reference = words("and mister john dashwood had then leisure");
        assert_eq!(words("And Mr. John Dashwood had then leisure."), reference);
        assert_eq!(word_errors(&reference, &reference), 0);
        let heard = words("and mister jon dashwood had leisure now");
        // jon (substitution), then (deletion), now (insertion).
        assert_eq!(word_errors(&reference, &heard), 3);
        assert_eq!(word_errors(&reference, &[]), reference.len());
        assert_eq!(words("ill-disposed"), ["ill", "disposed"]);
    }
}
