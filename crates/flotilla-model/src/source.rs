//! Source files handed to validation, byte spans inside them, and the mapping from
//! byte offsets to 1-based line and column numbers.
//!
//! The model never reads files: the caller (the CLI) reads them and passes their text
//! here, which keeps validation pure.

use serde::Serialize;
use std::ops::Range;

/// Index of a [`SourceFile`] inside a [`Sources`] set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct FileId(pub u32);

/// A half-open byte range `start..end` inside one source file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Span {
    /// First byte (inclusive).
    pub start: usize,
    /// Last byte (exclusive).
    pub end: usize,
}

impl Span {
    /// A span covering `start..end` bytes.
    pub fn new(start: usize, end: usize) -> Self {
        Span { start, end }
    }
}

impl From<Range<usize>> for Span {
    fn from(r: Range<usize>) -> Self {
        Span::new(r.start, r.end)
    }
}

/// The syntax a source file is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// TOML 1.0 (<https://toml.io/en/v1.0.0>).
    Toml,
    /// JSON (RFC 8259), strict: no comments, no trailing commas.
    Json,
}

impl Format {
    /// Guesses the format from a file name: `.json` is JSON, anything else TOML.
    pub fn from_path(path: &str) -> Format {
        if path.to_ascii_lowercase().ends_with(".json") {
            Format::Json
        } else {
            Format::Toml
        }
    }
}

/// One file's name (as it should be shown to the user), format and full text.
#[derive(Debug, Clone)]
pub struct SourceFile {
    /// The path as the user should see it in diagnostics.
    pub name: String,
    /// Syntax of `text`.
    pub format: Format,
    /// The file's whole text.
    pub text: String,
    line_starts: Vec<usize>,
    invalid_utf8: Option<InvalidUtf8>,
}

/// Where a file given as bytes ([`SourceFile::from_bytes`]) stops being UTF-8.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidUtf8 {
    /// Byte offset of the first byte that is not part of a valid UTF-8 character.
    /// Everything before it is valid, so it is also that byte's offset in
    /// [`SourceFile::text`].
    pub offset: usize,
    /// The invalid sequence (one to three bytes), or the incomplete character the
    /// file ends with.
    pub bytes: Vec<u8>,
    /// Whether the file ends inside a character (rather than holding an invalid one).
    pub truncated: bool,
}

/// A 1-based line and column (columns count Unicode scalar values, as editors do).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LineColumn {
    /// Line number, from 1.
    pub line: usize,
    /// Column number, from 1.
    pub column: usize,
}

impl SourceFile {
    /// Wraps a file's text; `name` is what diagnostics print.
    pub fn new(name: impl Into<String>, format: Format, text: impl Into<String>) -> Self {
        let text = text.into();
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        SourceFile {
            name: name.into(),
            format,
            text,
            line_starts,
            invalid_utf8: None,
        }
    }

    /// Wraps a file's raw bytes, which should be UTF-8. When they are not, the first
    /// invalid sequence is recorded ([`SourceFile::invalid_utf8`]; validation reports
    /// it as [`crate::Code::NotUtf8`]) and the text keeps every invalid sequence as
    /// U+FFFD, so that offsets before the first one are the file's own and its lines
    /// can still be shown.
    pub fn from_bytes(name: impl Into<String>, format: Format, bytes: Vec<u8>) -> Self {
        match String::from_utf8(bytes) {
            Ok(text) => SourceFile::new(name, format, text),
            Err(e) => {
                let error = e.utf8_error();
                let offset = error.valid_up_to();
                let bytes = e.as_bytes();
                let len = error.error_len().unwrap_or(bytes.len() - offset);
                let invalid = InvalidUtf8 {
                    offset,
                    bytes: bytes[offset..offset + len].to_vec(),
                    truncated: error.error_len().is_none(),
                };
                let text = String::from_utf8_lossy(bytes).into_owned();
                SourceFile {
                    invalid_utf8: Some(invalid),
                    ..SourceFile::new(name, format, text)
                }
            }
        }
    }

    /// Where the bytes given to [`SourceFile::from_bytes`] stopped being UTF-8, if
    /// they did.
    pub fn invalid_utf8(&self) -> Option<&InvalidUtf8> {
        self.invalid_utf8.as_ref()
    }

    /// Line and column of a byte offset (clamped to the end of the text).
    pub fn line_column(&self, offset: usize) -> LineColumn {
        let offset = offset.min(self.text.len());
        let line = match self.line_starts.binary_search(&offset) {
            Ok(i) => i,
            Err(i) => i - 1,
        };
        let start = self.line_starts[line];
        let mut end = offset;
        while !self.text.is_char_boundary(end) {
            end -= 1;
        }
        LineColumn {
            line: line + 1,
            column: self.text[start..end].chars().count() + 1,
        }
    }

    /// The text of 1-based line `line`, without its line terminator.
    pub fn line_text(&self, line: usize) -> &str {
        let Some(&start) = self.line_starts.get(line.saturating_sub(1)) else {
            return "";
        };
        let end = self
            .line_starts
            .get(line)
            .copied()
            .unwrap_or(self.text.len());
        self.text[start..end].trim_end_matches(['\n', '\r'])
    }
}

/// The set of files one validation reads: the inventory first, then template files.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    files: Vec<SourceFile>,
}

impl Sources {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a file and returns its id.
    pub fn add(&mut self, file: SourceFile) -> FileId {
        self.files.push(file);
        FileId(self.files.len() as u32 - 1)
    }

    /// The file with this id.
    ///
    /// # Panics
    /// If `id` was not returned by [`Sources::add`] on this set.
    pub fn get(&self, id: FileId) -> &SourceFile {
        &self.files[id.0 as usize]
    }

    /// All files with their ids, in the order they were added.
    pub fn iter(&self) -> impl Iterator<Item = (FileId, &SourceFile)> {
        self.files
            .iter()
            .enumerate()
            .map(|(i, f)| (FileId(i as u32), f))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_column_counts_from_one_and_in_chars() {
        let f = SourceFile::new("x", Format::Toml, "ab\nçd = 1\n");
        assert_eq!(f.line_column(0), LineColumn { line: 1, column: 1 });
        assert_eq!(f.line_column(3), LineColumn { line: 2, column: 1 });
        // 'ç' is two bytes; 'd' is the second character.
        assert_eq!(f.line_column(5), LineColumn { line: 2, column: 2 });
        assert_eq!(f.line_text(2), "çd = 1");
        assert_eq!(f.line_text(9), "");
    }

    #[test]
    fn bytes_that_are_not_utf8_are_recorded_where_they_start() {
        let f = SourceFile::from_bytes("x", Format::Toml, b"a = 1\n\xc3\xa7 = \xff\xfe\n".to_vec());
        let bad = f.invalid_utf8().expect("not UTF-8");
        assert_eq!(
            (bad.offset, bad.bytes.as_slice(), bad.truncated),
            (11, &b"\xff"[..], false)
        );
        assert_eq!(f.line_column(bad.offset), LineColumn { line: 2, column: 5 });
        assert_eq!(f.line_text(2), "ç = \u{fffd}\u{fffd}");
        let f = SourceFile::from_bytes("x", Format::Toml, b"a = \xe2\x82".to_vec());
        let bad = f.invalid_utf8().expect("ends inside a character");
        assert_eq!(
            (bad.offset, bad.bytes.as_slice(), bad.truncated),
            (4, &b"\xe2\x82"[..], true)
        );
        let f = SourceFile::from_bytes("x", Format::Toml, "ç".as_bytes().to_vec());
        assert_eq!((f.invalid_utf8(), f.text.as_str()), (None, "ç"));
    }
}
