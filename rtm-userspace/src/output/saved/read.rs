//! Reading a saved document as it streams: junk refused from its first bytes, the head
//! (format and version) checked before the rest is parsed, nothing kept but the
//! document itself (`rtm-trace report` of a 1 GiB file of whitespace takes no more
//! memory than of an empty one).

use std::io::Read as _;

use super::{Doc, SavedError, json};

impl Doc {
    /// Parses and checks a document's text (`shown`: its name for messages). The head
    /// is checked as [`Doc::read`] checks it; the rest is parsed from memory, several
    /// times faster than through a reader (a 143 MB document: 1.3 s through one).
    pub fn parse(text: &[u8], shown: &str) -> Result<Self, SavedError> {
        let mut input = std::io::BufReader::with_capacity(1 << 16, text);
        Self::head(&mut input, shown)?;
        let doc: Doc = serde_json::from_slice(text).map_err(|e| not_ours(shown, format!("{e}")))?;
        Self::checked(doc, shown)
    }

    /// Reads and checks a document as it streams from `input`: memory follows what
    /// the document holds, never the input's size (a file of whitespace, zeros or one
    /// endless string is refused after a few bytes, or after a pass that keeps
    /// nothing). The head (`format`, `version`, `tool_version`, which rtm-trace writes
    /// first) is checked before the rest is parsed, so a document of another version
    /// is refused by name.
    pub fn read(input: impl std::io::Read, shown: &str) -> Result<Self, SavedError> {
        let mut input = std::io::BufReader::with_capacity(1 << 16, input);
        let seen = Self::head(&mut input, shown)?;
        let rest = std::io::Read::chain(&b"{"[..], seen.as_slice()).chain(input);
        let doc: Doc =
            serde_json::from_reader(rest).map_err(|e| not_ours(shown, format!("{e}")))?;
        Self::checked(doc, shown)
    }

    /// Checks the head of a document: an object that starts at once, of our format and
    /// version when it says so first. Returns the bytes the head took after the `{`.
    fn head<R: std::io::Read>(
        input: &mut std::io::BufReader<R>,
        shown: &str,
    ) -> Result<Vec<u8>, SavedError> {
        object_start(input).map_err(|w| not_ours(shown, w))?;
        // The head, read through a recorder: what it consumed is replayed before the
        // rest.
        let mut tee = Recorder {
            inner: input,
            seen: Vec::new(),
        };
        let head = read_head(&mut tee).map_err(|w| not_ours(shown, w))?;
        let seen = std::mem::take(&mut tee.seen);
        if let Some(format) = &head.format
            && format != json::FORMAT
        {
            return Err(not_ours(
                shown,
                format!("its \"format\" is {format:?}, not \"{}\"", json::FORMAT),
            ));
        }
        if let Some(v) = head.version
            && v != u64::from(json::VERSION)
        {
            return Err(wrong_version(shown, v, head.tool_version));
        }
        Ok(seen)
    }

    /// A document whose head came in another order is checked once read.
    fn checked(doc: Doc, shown: &str) -> Result<Self, SavedError> {
        if doc.format != json::FORMAT {
            return Err(not_ours(
                shown,
                format!(
                    "its \"format\" is {:?}, not \"{}\"",
                    doc.format,
                    json::FORMAT
                ),
            ));
        }
        if doc.version != u64::from(json::VERSION) {
            return Err(wrong_version(shown, doc.version, Some(doc.tool_version)));
        }
        Ok(doc)
    }
}

fn not_ours(shown: &str, why: String) -> SavedError {
    SavedError::NotOurs {
        path: shown.to_owned(),
        why,
    }
}

fn wrong_version(shown: &str, version: u64, tool: Option<String>) -> SavedError {
    SavedError::Version {
        path: shown.to_owned(),
        version,
        tool: tool.unwrap_or_else(|| "unknown".into()),
        ours: env!("CARGO_PKG_VERSION"),
        reads: json::VERSION,
    }
}

/// Most bytes the head of a document (its first keys up to one not in the head) may
/// take: rtm-trace writes about 70.
const MAX_HEAD_BYTES: usize = 4096;

/// Skips the whitespace before a document and its `{`, checking that an object
/// starts there: empty input, whitespace alone, zeros or anything but `{` is refused
/// at once.
pub fn object_start(input: &mut impl std::io::BufRead) -> Result<(), String> {
    let mut skipped = 0u64;
    loop {
        let buf = input
            .fill_buf()
            .map_err(|e| format!("cannot read it: {e}"))?;
        if buf.is_empty() {
            return Err(if skipped == 0 {
                "it is empty".into()
            } else {
                format!("it holds only whitespace ({skipped} bytes)")
            });
        }
        match buf.iter().position(|b| !b.is_ascii_whitespace()) {
            Some(i) => {
                let first = buf[i];
                // The brace is consumed: the callers' parsers start with their own.
                input.consume(i + 1);
                return if first == b'{' {
                    Ok(())
                } else {
                    Err(format!(
                        "it does not start with a JSON object ('{{') but with byte 0x{first:02x} \
                         at offset {}",
                        skipped + i as u64
                    ))
                };
            }
            None => {
                let n = buf.len();
                skipped += n as u64;
                input.consume(n);
            }
        }
    }
}

/// A reader that keeps a copy of what it reads, up to [`MAX_HEAD_BYTES`].
struct Recorder<'a, R> {
    inner: &'a mut R,
    seen: Vec<u8>,
}

impl<R: std::io::Read> std::io::Read for Recorder<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let room = MAX_HEAD_BYTES.saturating_sub(self.seen.len());
        if room == 0 {
            return Err(std::io::Error::other(HEAD_TOO_LONG));
        }
        let n = buf.len().min(room);
        let got = self.inner.read(&mut buf[..n])?;
        self.seen.extend_from_slice(&buf[..got]);
        Ok(got)
    }
}

const HEAD_TOO_LONG: &str = "head too long";
/// What ends the head's pass at the first key past it.
const HEAD_DONE: &str = "end of head";

/// What the first keys of a document say (None: not among them).
#[derive(Default)]
struct Head {
    format: Option<String>,
    version: Option<u64>,
    tool_version: Option<String>,
}

/// Reads the keys at the start of the object `input` holds (its `{` already read)
/// while they are the head's.
fn read_head(input: &mut impl std::io::Read) -> Result<Head, String> {
    struct V<'h>(&'h mut Head);
    impl<'de> serde::de::Visitor<'de> for V<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<String>()? {
                match key.as_str() {
                    "format" => self.0.format = map.next_value()?,
                    "version" => self.0.version = map.next_value()?,
                    "tool_version" => self.0.tool_version = map.next_value()?,
                    _ => return Err(serde::de::Error::custom(HEAD_DONE)),
                }
            }
            Ok(())
        }
    }
    let mut head = Head::default();
    let mut de = serde_json::Deserializer::from_reader(std::io::Read::chain(&b"{"[..], input));
    match serde::Deserializer::deserialize_map(&mut de, V(&mut head)) {
        Ok(()) => Ok(head),
        Err(e) if e.to_string().starts_with(HEAD_DONE) => Ok(head),
        Err(e) if e.to_string().contains(HEAD_TOO_LONG) => Err(format!(
            "its first {MAX_HEAD_BYTES} bytes do not hold its \"format\" and \"version\""
        )),
        Err(e) => Err(format!("{e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn why(input: &[u8]) -> String {
        match Doc::read(input, "f.json") {
            Err(e) => e.to_string(),
            Ok(_) => panic!("{:?} was read", String::from_utf8_lossy(input)),
        }
    }

    #[test]
    fn junk_is_refused_by_its_first_bytes() {
        assert!(why(b"").contains("it is empty"));
        assert!(why(&[b' '; 100_000]).contains("only whitespace (100000 bytes)"));
        assert!(why(&[0u8; 1000]).contains("byte 0x00 at offset 0"));
        assert!(why(b"  \n\"aaaa").contains("byte 0x22 at offset 3"));
        assert!(why(b"[1]").contains("not start with a JSON object"));
        // Whitespace after the brace instead of a head.
        let mut long = b"{".to_vec();
        long.extend([b' '; 10_000]);
        assert!(
            why(&long).contains("do not hold its \"format\""),
            "{}",
            why(&long)
        );
    }

    #[test]
    fn the_head_decides_before_the_rest_is_read() {
        // Another version is named even though its body would not parse.
        let e = why(br#"{"format":"rtm-trace","version":9,"tool_version":"9.0","run":[]}"#);
        assert!(e.contains("version 9") && e.contains("9.0"), "{e}");
        let e = why(br#"{"format":"perf","version":1,"run":{}}"#);
        assert!(e.contains("\"perf\""), "{e}");
        // Keys in another order (a document made by hand): checked after the parse.
        let d = Doc::read(
            &br#"{"sync_graph":{},"version":1,"format":"rtm-trace"}"#[..],
            "f.json",
        )
        .unwrap();
        assert_eq!(d.version, 1);
        let e = why(br#"{"run":{},"format":"rtm-trace"}"#);
        assert!(e.contains("version 0"), "{e}");
        // Trailing junk after the document.
        let e = why(br#"{"format":"rtm-trace","version":1} x"#);
        assert!(e.contains("trailing"), "{e}");
    }

    #[test]
    fn a_written_document_reads_back_whole() {
        let text = format!(
            r#"  {{"format":"rtm-trace","version":{},"tool_version":"t","run":{{"host":"h"}},
                "sync_graph":{{"threads":[{{"pid":5,"tid":6,"name":"w"}}]}}}}  "#,
            json::VERSION
        );
        let d = Doc::read(text.as_bytes(), "f.json").unwrap();
        assert_eq!(d.tool_version, "t");
        assert_eq!(d.sync_graph.threads[0].name.as_deref(), Some("w"));
    }
}
