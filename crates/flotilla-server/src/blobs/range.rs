//! The `Range` header of a `GET` (RFC 9110 §14.1.2, §14.2): one byte range.

/// What a `Range` header asks of a representation of `size` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wanted {
    /// The whole representation (no header, another unit, several ranges, or a
    /// header that does not parse: RFC 9110 §14.2 lets a server ignore it).
    Whole,
    /// Bytes `start..end` (end exclusive): answered 206 with
    /// `Content-Range: bytes start-(end-1)/size`.
    Part {
        /// The first byte.
        start: u64,
        /// One past the last byte.
        end: u64,
    },
    /// Nothing of it can be sent (a first position at or past the end, or an empty
    /// suffix): answered 416 with `Content-Range: bytes */size`.
    Unsatisfiable,
}

/// Parses `header` (`bytes=N-`, `bytes=N-M`, `bytes=-S`) against `size` bytes.
pub fn wanted(header: Option<&str>, size: u64) -> Wanted {
    let Some(spec) = header.map(str::trim).and_then(|h| {
        let (unit, set) = h.split_once('=')?;
        unit.trim()
            .eq_ignore_ascii_case("bytes")
            .then_some(set.trim())
    }) else {
        return Wanted::Whole;
    };
    // Several ranges: the whole representation instead (allowed, and simpler).
    if spec.contains(',') {
        return Wanted::Whole;
    }
    let Some((first, last)) = spec.split_once('-') else {
        return Wanted::Whole;
    };
    let number = |s: &str| -> Option<u64> {
        let s = s.trim();
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    match (first.trim().is_empty(), last.trim().is_empty()) {
        // bytes=-S: the last S bytes.
        (true, false) => match number(last) {
            Some(0) => Wanted::Unsatisfiable,
            Some(_) if size == 0 => Wanted::Unsatisfiable,
            Some(n) => Wanted::Part {
                start: size.saturating_sub(n),
                end: size,
            },
            None => Wanted::Whole,
        },
        // bytes=N-: from N to the end.
        (false, true) => match number(first) {
            Some(n) if n >= size => Wanted::Unsatisfiable,
            Some(n) => Wanted::Part {
                start: n,
                end: size,
            },
            None => Wanted::Whole,
        },
        // bytes=N-M: N to M inclusive, M clamped to the end.
        (false, false) => match (number(first), number(last)) {
            (Some(n), Some(m)) if m >= n => {
                if n >= size {
                    Wanted::Unsatisfiable
                } else {
                    Wanted::Part {
                        start: n,
                        end: m.saturating_add(1).min(size),
                    }
                }
            }
            _ => Wanted::Whole,
        },
        (true, true) => Wanted::Whole,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_of_rfc_9110() {
        let part = |start, end| Wanted::Part { start, end };
        assert_eq!(wanted(None, 10), Wanted::Whole);
        assert_eq!(wanted(Some("bytes=0-"), 10), part(0, 10));
        assert_eq!(wanted(Some("bytes=4-"), 10), part(4, 10));
        assert_eq!(wanted(Some("bytes=9-"), 10), part(9, 10));
        assert_eq!(wanted(Some("bytes=10-"), 10), Wanted::Unsatisfiable);
        assert_eq!(wanted(Some("bytes=2-5"), 10), part(2, 6));
        assert_eq!(wanted(Some("bytes=2-500"), 10), part(2, 10));
        assert_eq!(wanted(Some("bytes=12-15"), 10), Wanted::Unsatisfiable);
        assert_eq!(wanted(Some("bytes=-3"), 10), part(7, 10));
        assert_eq!(wanted(Some("bytes=-30"), 10), part(0, 10));
        assert_eq!(wanted(Some("bytes=-0"), 10), Wanted::Unsatisfiable);
        assert_eq!(wanted(Some("bytes=0-"), 0), Wanted::Unsatisfiable);
        // Ignored: invalid, another unit, several ranges.
        assert_eq!(wanted(Some("bytes=5-2"), 10), Wanted::Whole);
        assert_eq!(wanted(Some("bytes=a-"), 10), Wanted::Whole);
        assert_eq!(wanted(Some("bytes=+1-"), 10), Wanted::Whole);
        assert_eq!(wanted(Some("items=0-1"), 10), Wanted::Whole);
        assert_eq!(wanted(Some("bytes=0-1,4-5"), 10), Wanted::Whole);
        assert_eq!(wanted(Some("bytes=-"), 10), Wanted::Whole);
        assert_eq!(wanted(Some(" Bytes = 1-2 "), 10), part(1, 3));
    }
}
