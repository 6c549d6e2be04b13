//! Text a traced program controls (thread and command names, symbols, paths, the MPI
//! launcher's variables), made inert for a terminal. A thread can name itself
//! `\x1b]0;pwned\x07` or `\x1b[2J`; printed raw to root's terminal that retitles or
//! clears it, and a `\n` or `\r` forges report lines. Every text output passes such
//! strings through [`escape`]; the JSON escapes them its own way.

use std::borrow::Cow;

/// Whether a character must not reach a terminal raw: C0 and C1 controls, DEL, and the
/// Unicode format characters that reorder or hide text (bidirectional overrides and
/// isolates, zero-width characters, the BOM).
pub fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{200b}'..='\u{200f}'
            | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{2069}'
            | '\u{feff}')
}

/// `s` with every unsafe character written as an escape (`\n`, `\r`, `\t`, `\\`-free
/// `\xNN` for bytes below 0x100, `\u{NNNN}` above), so it reads as what it is.
pub fn escape(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_unsafe) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if is_unsafe(c) && (c as u32) < 0x100 => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if is_unsafe(c) => out.push_str(&format!("\\u{{{:04x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// `s` made inert as HTML text or an attribute value: markup characters as entities,
/// control characters as `\u{..}`.
pub fn markup(s: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// Displays a string escaped: `format!("{}", Shown(name))`.
pub struct Shown<'a>(pub &'a str);

impl std::fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&escape(self.0))
    }
}

/// `text` with every unsafe character but the line breaks escaped: for messages whose
/// own lines are meant, with names inside them already [`Shown`].
pub fn escape_lines(text: &str) -> Cow<'_, str> {
    if is_inert(text) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&escape(line));
    }
    Cow::Owned(out)
}

/// Prints a message on stderr as one line, inert: every unsafe character escaped, line
/// feeds too, so a name a target chose (a thread called `c\nrtm-trace: ok`) can never
/// start a line of its own in the tracer's output or the agent's log. A message of
/// several lines is several calls.
pub fn say(msg: &str) {
    use std::io::Write as _;
    // Never a panic: a closed stderr (a reader gone, a pipe closed) must not stop the
    // tracer before its results are written.
    let _ = writeln!(std::io::stderr(), "{}", escape(msg));
}

/// `eprintln!` for the tracer's messages: formats, then prints through [`say`].
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::say(&format!($($arg)*))
    };
}

/// A path for a message, escaped.
pub fn path_shown(p: &std::path::Path) -> String {
    escape(&p.display().to_string()).into_owned()
}

/// Whether `text` is safe to print: no unsafe character but the line breaks.
pub fn is_inert(text: &str) -> bool {
    !text.chars().any(|c| c != '\n' && is_unsafe(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_escaped_and_plain_text_is_untouched() {
        assert!(matches!(escape("worker-1"), Cow::Borrowed("worker-1")));
        assert_eq!(escape("naïve ✓"), "naïve ✓");
        assert_eq!(escape("\x1b]0;pwned\x07"), "\\x1b]0;pwned\\x07");
        assert_eq!(escape("a\nb\rc\td"), "a\\nb\\rc\\td");
        assert_eq!(escape("\x1b[2J\x7f"), "\\x1b[2J\\x7f");
        assert_eq!(escape("\u{9b}31m"), "\\x9b31m");
        assert_eq!(escape("abc\u{202e}gpj.exe"), "abc\\u{202e}gpj.exe");
        assert_eq!(Shown("x\ny").to_string(), "x\\ny");
        assert!(is_inert(&escape("\x1b\x07\x00\u{85}\u{2066}")));
        assert!(!is_inert("\x1b"));
        assert!(is_inert("line\nline\n"));
        assert_eq!(escape_lines("a\x1b\nb\r"), "a\\x1b\nb\\r");
    }
}
