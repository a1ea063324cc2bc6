//! Output capped at the source.
//!
//! A tool's or the executor's output beyond a cap is shown as its head and its tail
//! with a marker line in between that names how many bytes were left out and how to
//! get the whole: the caller stores the whole output under an id and the marker names
//! `flotilla output <id>` and `GET /v1/outputs/<id>`. Never truncation without that
//! escape hatch.
//!
//! Pure: no IO, no clock.

use serde::{Deserialize, Serialize};

/// The default cap: 16 KiB of text.
pub const DEFAULT_CAP: usize = 16 * 1024;

/// Output as it is shown: whole, or head + marker line + tail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capped {
    /// The text shown. Invalid UTF-8 is replaced by U+FFFD (lossy decoding).
    pub text: String,
    /// Whether anything was left out (then `text` holds the marker line).
    pub truncated: bool,
    /// The whole output's length in bytes, as it came.
    pub total_bytes: u64,
}

/// The marker shown between head and tail: `[… N bytes omitted: `flotilla output ID`
/// or GET /v1/outputs/ID …]`, where N counts the left-out bytes of the output as it
/// came (not of its lossy decoding).
pub fn marker(omitted: u64, id: &str) -> String {
    format!("[… {omitted} bytes omitted: `flotilla output {id}` or GET /v1/outputs/{id} …]")
}

/// Caps `bytes` at `cap` bytes of text.
///
/// - If the lossy UTF-8 decoding of `bytes` is at most `cap` bytes long, it is the
///   text, whole (for valid UTF-8: if `bytes.len() <= cap`).
/// - Otherwise the text is a head of at most `cap / 2` bytes, the [`marker`] on a line
///   of its own, and a tail of at most `cap - cap / 2` bytes. Head and tail are cut on
///   character boundaries (a multi-byte character is never split; an invalid byte
///   sequence counts as the 3 bytes of its U+FFFD), so the text is never longer than
///   `cap` plus the marker and its two newlines.
///
/// `id` is the id under which the caller stores the whole output.
pub fn cap(bytes: &[u8], cap: usize, id: &str) -> Capped {
    let total_bytes = bytes.len() as u64;
    // Decoding never makes text shorter than its bytes, so only short input can fit.
    if bytes.len() <= cap {
        let text = String::from_utf8_lossy(bytes);
        if text.len() <= cap {
            return Capped {
                text: text.into_owned(),
                truncated: false,
                total_bytes,
            };
        }
    }
    let head_budget = cap / 2;
    let tail_budget = cap - head_budget;
    // A character is at most 4 bytes: 3 bytes of slack let every piece that starts
    // inside the budget be decoded whole.
    let head_region = &bytes[..bytes.len().min(head_budget + 3)];
    let tail_region = &bytes[bytes.len() - bytes.len().min(tail_budget + 3)..];

    let mut head = String::new();
    let mut head_raw = 0usize;
    for (raw, piece) in pieces(head_region) {
        if head.len() + piece.len() > head_budget {
            break;
        }
        head.push_str(piece);
        head_raw += raw;
    }

    let tail_pieces = pieces(tail_region);
    let mut tail_len = 0usize;
    let mut tail_raw = 0usize;
    let mut first = tail_pieces.len();
    for (raw, piece) in tail_pieces.iter().rev() {
        if tail_len + piece.len() > tail_budget {
            break;
        }
        tail_len += piece.len();
        tail_raw += raw;
        first -= 1;
    }
    let tail: String = tail_pieces[first..].iter().map(|(_, p)| *p).collect();

    // Each piece's text is at least as long as its raw bytes, so head_raw + tail_raw
    // <= cap < the lossy length; head and tail never overlap.
    let omitted = bytes.len() - head_raw - tail_raw;
    let mut text = head;
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&marker(omitted as u64, id));
    text.push('\n');
    text.push_str(&tail);
    Capped {
        text,
        truncated: true,
        total_bytes,
    }
}

/// The lossy decoding of `bytes` as pieces `(raw byte count, text)`: one per valid
/// character, one U+FFFD per invalid sequence.
fn pieces(bytes: &[u8]) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    for chunk in bytes.utf8_chunks() {
        let valid = chunk.valid();
        for (i, c) in valid.char_indices() {
            out.push((c.len_utf8(), &valid[i..i + c.len_utf8()]));
        }
        if !chunk.invalid().is_empty() {
            out.push((chunk.invalid().len(), "\u{FFFD}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The text's head, marker line and tail.
    fn split(c: &Capped, id: &str) -> (String, String, String) {
        let start = c.text.find("[… ").expect("a marker");
        let end = c.text.find(&format!("/v1/outputs/{id} …]\n")).unwrap()
            + format!("/v1/outputs/{id} …]\n").len();
        let head = c.text[..start]
            .strip_suffix('\n')
            .unwrap_or(&c.text[..start]);
        (
            head.to_string(),
            c.text[start..end - 1].to_string(),
            c.text[end..].to_string(),
        )
    }

    #[test]
    fn short_output_is_whole() {
        let c = cap(b"hello\nworld\n", 64, "o1");
        assert_eq!(c.text, "hello\nworld\n");
        assert!(!c.truncated);
        assert_eq!(c.total_bytes, 12);
        let exact = vec![b'x'; 64];
        let c = cap(&exact, 64, "o1");
        assert!(!c.truncated);
        assert_eq!(c.text.len(), 64);
    }

    #[test]
    fn long_output_keeps_head_and_tail_and_says_how_to_get_the_rest() {
        let mut input = Vec::new();
        for i in 0..10_000 {
            input.extend_from_slice(format!("line {i}\n").as_bytes());
        }
        let c = cap(&input, DEFAULT_CAP, "out-42");
        assert!(c.truncated);
        assert_eq!(c.total_bytes, input.len() as u64);
        assert!(c.text.starts_with("line 0\nline 1\n"));
        assert!(c.text.ends_with("line 9999\n"));
        let (head, mark, tail) = split(&c, "out-42");
        assert_eq!(head.len(), DEFAULT_CAP / 2);
        assert_eq!(tail.len(), DEFAULT_CAP / 2);
        let omitted = input.len() - DEFAULT_CAP;
        assert_eq!(
            mark,
            format!(
                "[… {omitted} bytes omitted: `flotilla output out-42` or GET /v1/outputs/out-42 …]"
            )
        );
        assert!(c.text.contains("`flotilla output out-42`"));
        assert!(c.text.contains("GET /v1/outputs/out-42"));
    }

    #[test]
    fn multi_byte_characters_are_never_split() {
        // "é" is 2 bytes, "€" 3, "𝄞" 4: budgets of 5 fall inside characters.
        let input = "é€𝄞é€𝄞é€𝄞é€𝄞".repeat(3);
        let c = cap(input.as_bytes(), 10, "m");
        assert!(c.truncated);
        let (head, _, tail) = split(&c, "m");
        assert_eq!(head, "é€"); // 5 bytes; "𝄞" would make 9 > 5
        assert_eq!(tail, "𝄞"); // 4 bytes; "€𝄞" would be 7 > 5
        assert!(input.starts_with(&head) && input.ends_with(&tail));
        let omitted = input.len() - head.len() - tail.len();
        assert!(c.text.contains(&format!("[… {omitted} bytes omitted")));
    }

    #[test]
    fn invalid_utf8_is_replaced_and_counted_in_raw_bytes() {
        let c = cap(b"ok \xff\xfe end", 64, "x");
        assert!(!c.truncated);
        assert_eq!(c.text, "ok \u{FFFD}\u{FFFD} end");
        // 8 raw bytes that decode to 3 x 3 bytes = 24 > cap 16: truncated although
        // the raw input fits.
        let raw = [0xffu8; 8];
        let c = cap(&raw, 16, "x");
        assert!(c.truncated);
        let (head, mark, tail) = split(&c, "x");
        assert_eq!(head, "\u{FFFD}\u{FFFD}");
        assert_eq!(tail, "\u{FFFD}\u{FFFD}");
        assert!(mark.starts_with("[… 4 bytes omitted"), "{mark}");
    }

    #[test]
    fn a_zero_cap_keeps_only_the_marker() {
        let c = cap(b"abc", 0, "z");
        assert!(c.truncated);
        assert_eq!(c.text, format!("{}\n", marker(3, "z")));
        let c = cap(b"", 0, "z");
        assert!(!c.truncated);
        assert_eq!(c.text, "");
    }

    proptest! {
        #[test]
        fn never_longer_than_cap_plus_marker_and_head_tail_are_prefix_suffix(
            input in ".{0,300}",
            cap_len in 0usize..200,
        ) {
            let c = cap(input.as_bytes(), cap_len, "p");
            prop_assert_eq!(c.total_bytes, input.len() as u64);
            if !c.truncated {
                prop_assert_eq!(&c.text, &input);
                prop_assert!(input.len() <= cap_len);
            } else {
                prop_assert!(input.len() > cap_len);
                let (head, mark, tail) = split(&c, "p");
                let omitted = input.len() - head.len() - tail.len();
                prop_assert_eq!(&mark, &marker(omitted as u64, "p"));
                prop_assert!(c.text.len() <= cap_len + mark.len() + 2);
                prop_assert!(head.len() <= cap_len / 2);
                prop_assert!(tail.len() <= cap_len - cap_len / 2);
                prop_assert!(input.starts_with(&head));
                prop_assert!(input.ends_with(&tail));
                // Cut as late as possible: the next character would not have fitted.
                if let Some(next) = input[head.len()..].chars().next() {
                    prop_assert!(head.len() + next.len_utf8() > cap_len / 2);
                }
            }
        }

        #[test]
        fn any_bytes_stay_within_the_bound(
            input in proptest::collection::vec(any::<u8>(), 0..300),
            cap_len in 0usize..200,
        ) {
            let c = cap(&input, cap_len, "b");
            if c.truncated {
                let (_, mark, _) = split(&c, "b");
                prop_assert!(c.text.len() <= cap_len + mark.len() + 2);
            } else {
                prop_assert!(c.text.len() <= cap_len);
                prop_assert_eq!(c.text, String::from_utf8_lossy(&input).into_owned());
            }
        }
    }
}
