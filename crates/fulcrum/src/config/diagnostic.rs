//! Config errors as a user reads them: `file:line:column: message` and a hint on how to fix it.

use std::fmt;

/// One problem in a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub file: String,
    /// 1-based; 0 when the problem has no place in the file (an unreadable file).
    pub line: usize,
    pub column: usize,
    pub message: String,
    pub hint: Option<String>,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "{}:{}:{}: error: {}", self.file, self.line, self.column, self.message)?;
        } else {
            write!(f, "{}: error: {}", self.file, self.message)?;
        }
        if let Some(hint) = &self.hint {
            write!(f, "\n  hint: {hint}")?;
        }
        Ok(())
    }
}

/// Every problem found in one file, in file order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    pub fn single(d: Diagnostic) -> Self {
        Diagnostics(vec![d])
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

/// 1-based line and column (in characters) of a byte offset.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..floor_char_boundary(text, offset)];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
    (line, before[line_start..].chars().count() + 1)
}

fn floor_char_boundary(text: &str, mut i: usize) -> usize {
    while i > 0 && !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// A hint for the errors serde and toml give, which state the problem but not the fix.
pub fn hint_for_parse_error(message: &str) -> Option<String> {
    if message.starts_with("unknown field") {
        Some(match nearest(message) {
            Some(key) => format!("did you mean `{key}`? Otherwise remove the key; the expected keys are listed above"),
            None => "remove the key or fix its spelling; the expected keys are listed above".into(),
        })
    } else if message.starts_with("unknown variant") {
        Some(match nearest(message) {
            Some(value) => format!("did you mean \"{value}\"? The values it takes are listed above"),
            None => "use one of the values listed above".into(),
        })
    } else if message.starts_with("missing field") {
        Some("add the key to this table".into())
    } else if message.contains("invalid duration") {
        Some("durations are strings such as \"2s\", \"500ms\" or \"1m\"".into())
    } else if message.starts_with("invalid value: integer") {
        // serde says "expected u16": the type's limits, which are wider than the setting's range.
        Some("the setting does not take this number; the config reference gives each setting's range".into())
    } else if message.starts_with("invalid type") {
        Some("check the value's type: strings are quoted, numbers and booleans are not".into())
    } else {
        None
    }
}

/// serde's "unknown field `x`, expected one of `a`, `b`": the expected name closest to `x`, when
/// it is close enough to be a typo (at most a third of its letters differ).
fn nearest(message: &str) -> Option<&str> {
    let mut quoted = message.split('`').skip(1).step_by(2);
    let given = quoted.next()?;
    let (best, distance) = quoted.map(|c| (c, edit_distance(given, c))).min_by_key(|&(_, d)| d)?;
    (distance > 0 && distance <= given.chars().count().max(3) / 3).then_some(best)
}

/// Levenshtein distance: insertions, deletions and substitutions of characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (diagonal + usize::from(ca != cb)).min(row[j] + 1).min(row[j + 1] + 1);
            diagonal = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod suggestion_tests {
    use super::*;

    #[test]
    fn a_typo_gets_the_nearest_key_and_a_stranger_gets_none() {
        let hint = |m: &str| hint_for_parse_error(m).unwrap();
        assert!(hint("unknown field `half_closed`, expected one of `name`, `half_close`, `health`").starts_with("did you mean `half_close`?"));
        assert!(hint("unknown field `intervall`, expected one of `kind`, `interval`, `timeout`").starts_with("did you mean `interval`?"));
        assert!(hint("unknown field `colour`, expected one of `name`, `listen`").starts_with("remove the key"));
        assert!(hint("unknown variant `round-robbin`, expected one of `round-robin`, `random`").starts_with("did you mean \"round-robin\"?"));
        assert_eq!((edit_distance("", "ab"), edit_distance("kitten", "sitting")), (2, 3));
    }
}
