//! A compose file's YAML as a tree of [`Node`]s, each with its 1-based line and
//! column, built from `saphyr-parser`'s event stream (YAML 1.2).
//!
//! Compose files use more of YAML than plain data, and all of it is resolved here as
//! Docker Compose resolves it:
//! - anchors and aliases (`&base` … `*base`): an alias is a copy of the anchored node
//!   (at most [`ALIAS_BUDGET`] nodes copied in all, against alias bombs);
//! - merge keys (`<<: *base`, `<<: [*a, *b]`, the YAML 1.1 merge type that compose
//!   keeps): the mapping's own keys win, then the merged mappings' in order;
//! - duplicate keys are an error, as in compose.
//!
//! Scalars keep their text and whether they were plain (unquoted): compose reads most
//! values as strings, and a plain `8080` or `true` is read as a number or boolean
//! only where a field wants one ([`Node::as_int`], [`Node::as_bool`]).

use crate::error::{ComposeError, Pos};
use saphyr_parser::{Event, Parser, ScalarStyle, Span};
use std::collections::BTreeMap;

/// Nodes an alias may copy in all, in one file (a "billion laughs" file stops here).
pub const ALIAS_BUDGET: usize = 100_000;

/// A YAML node and where it starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// What it holds.
    pub value: Value,
    /// Where it starts (for an alias: where the alias is written).
    pub at: Pos,
}

/// A node's content.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A scalar: its text, and whether it was written plain (unquoted, not a block).
    Scalar {
        /// The text, after YAML's unescaping and folding.
        text: String,
        /// Written without quotes (so `null`, `true`, `8080` mean what YAML says).
        plain: bool,
    },
    /// A sequence.
    Seq(Vec<Node>),
    /// A mapping, in document order (merge keys resolved).
    Map(Vec<(Node, Node)>),
}

impl Node {
    /// The scalar text, whatever its type (a plain `8080` gives `"8080"`); `None` for
    /// a collection or a null.
    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::Scalar { text, .. } if !self.is_null() => Some(text),
            _ => None,
        }
    }

    /// Whether this is YAML's null (a plain `null`, `~`, or nothing).
    pub fn is_null(&self) -> bool {
        matches!(&self.value, Value::Scalar { text, plain: true }
            if matches!(text.as_str(), "" | "~" | "null" | "Null" | "NULL"))
    }

    /// A plain boolean (YAML 1.2 core schema: `true`/`false` in three casings).
    pub fn as_bool(&self) -> Option<bool> {
        match &self.value {
            Value::Scalar { text, plain: true } => match text.as_str() {
                "true" | "True" | "TRUE" => Some(true),
                "false" | "False" | "FALSE" => Some(false),
                _ => None,
            },
            _ => None,
        }
    }

    /// A plain integer (YAML 1.2 core schema: decimal, `0o` octal, `0x` hex), or a
    /// quoted decimal (compose accepts `"8080"` where a number is wanted).
    pub fn as_int(&self) -> Option<i64> {
        let Value::Scalar { text, plain } = &self.value else {
            return None;
        };
        let t = text.trim();
        if let Some(h) = t.strip_prefix("0x").filter(|_| *plain) {
            return i64::from_str_radix(h, 16).ok();
        }
        if let Some(o) = t.strip_prefix("0o").filter(|_| *plain) {
            return i64::from_str_radix(o, 8).ok();
        }
        let digits = t.strip_prefix(['-', '+']).unwrap_or(t);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        t.parse().ok()
    }

    /// The entries of a mapping.
    pub fn as_map(&self) -> Option<&[(Node, Node)]> {
        match &self.value {
            Value::Map(m) => Some(m),
            _ => None,
        }
    }

    /// The items of a sequence.
    pub fn as_seq(&self) -> Option<&[Node]> {
        match &self.value {
            Value::Seq(s) => Some(s),
            _ => None,
        }
    }

    /// The value of `key` in a mapping.
    pub fn get(&self, key: &str) -> Option<&Node> {
        self.entry(key).map(|(_, v)| v)
    }

    /// The key node and value of `key` in a mapping.
    pub fn entry(&self, key: &str) -> Option<(&Node, &Node)> {
        self.as_map()?
            .iter()
            .find(|(k, _)| k.key_text() == key)
            .map(|(k, v)| (k, v))
    }

    /// The text of a mapping key (a scalar's text; empty for anything else).
    pub fn key_text(&self) -> &str {
        match &self.value {
            Value::Scalar { text, .. } => text,
            _ => "",
        }
    }

    /// What kind of node this is, for messages: "a string", "a list", "a mapping", "null".
    pub fn kind(&self) -> &'static str {
        match &self.value {
            _ if self.is_null() => "null",
            Value::Scalar { .. } if self.as_bool().is_some() => "a boolean",
            Value::Scalar { .. } if self.as_int().is_some() => "a number",
            Value::Scalar { .. } => "a string",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }
}

/// Parses one YAML document into a [`Node`] tree.
///
/// # Errors
/// [`ComposeError::Syntax`] at the line and column where YAML's grammar breaks;
/// [`ComposeError::Invalid`] for a duplicate key, a non-scalar key, a bad merge key,
/// more than one document, or aliases copying more than [`ALIAS_BUDGET`] nodes.
pub fn parse(text: &str) -> Result<Node, ComposeError> {
    let mut loader = Loader {
        events: Parser::new_from_str(text),
        anchors: BTreeMap::new(),
        copied: 0,
    };
    let mut doc = None;
    loop {
        let (ev, span) = loader.next()?;
        match ev {
            Event::StreamStart | Event::DocumentEnd | Event::Nothing => {}
            Event::StreamEnd => break,
            Event::DocumentStart(_) if doc.is_some() => {
                return Err(ComposeError::invalid(
                    pos(&span),
                    "a second YAML document: a compose file holds one",
                ));
            }
            Event::DocumentStart(_) => {
                let (ev, span) = loader.next()?;
                doc = Some(loader.node(ev, span)?);
            }
            other => {
                return Err(ComposeError::invalid(
                    pos(&span),
                    format!("unexpected YAML event {other:?}"),
                ))
            }
        }
    }
    Ok(doc.unwrap_or(Node {
        value: Value::Scalar {
            text: String::new(),
            plain: true,
        },
        at: Pos { line: 1, column: 1 },
    }))
}

fn pos(span: &Span) -> Pos {
    Pos {
        line: span.start.line() as u32,
        column: span.start.col() as u32 + 1,
    }
}

struct Loader<'a> {
    events: Parser<'a, saphyr_parser::StrInput<'a>>,
    anchors: BTreeMap<usize, Node>,
    copied: usize,
}

impl<'a> Loader<'a> {
    fn next(&mut self) -> Result<(Event<'a>, Span), ComposeError> {
        match self.events.next() {
            Some(Ok(e)) => Ok(e),
            Some(Err(e)) => Err(ComposeError::Syntax {
                at: Pos {
                    line: e.marker().line() as u32,
                    column: e.marker().col() as u32 + 1,
                },
                message: e.info().to_string(),
            }),
            None => Err(ComposeError::Syntax {
                at: Pos { line: 1, column: 1 },
                message: "unexpected end of the YAML stream".into(),
            }),
        }
    }

    fn keep(&mut self, anchor: usize, node: Node) -> Node {
        if anchor > 0 {
            self.anchors.insert(anchor, node.clone());
        }
        node
    }

    fn node(&mut self, ev: Event<'a>, span: Span) -> Result<Node, ComposeError> {
        let at = pos(&span);
        match ev {
            Event::Scalar(text, style, anchor, tag) => {
                // `!!str 8080` is a string, like a quoted one.
                let forced_str = tag
                    .as_ref()
                    .is_some_and(|t| t.handle == "tag:yaml.org,2002:" && t.suffix == "str");
                let node = Node {
                    value: Value::Scalar {
                        text: text.into_owned(),
                        plain: style == ScalarStyle::Plain && !forced_str,
                    },
                    at,
                };
                Ok(self.keep(anchor, node))
            }
            Event::Alias(id) => {
                let mut node =
                    self.anchors.get(&id).cloned().ok_or_else(|| {
                        ComposeError::invalid(at, "an alias to an unknown anchor")
                    })?;
                self.copied += count(&node);
                if self.copied > ALIAS_BUDGET {
                    return Err(ComposeError::invalid(
                        at,
                        format!(
                            "aliases copy more than {ALIAS_BUDGET} nodes: refused (an alias bomb?)"
                        ),
                    ));
                }
                node.at = at;
                Ok(node)
            }
            Event::SequenceStart(anchor, _) => {
                let mut items = Vec::new();
                loop {
                    let (ev, span) = self.next()?;
                    if ev == Event::SequenceEnd {
                        break;
                    }
                    items.push(self.node(ev, span)?);
                }
                let node = Node {
                    value: Value::Seq(items),
                    at,
                };
                Ok(self.keep(anchor, node))
            }
            Event::MappingStart(anchor, _) => {
                let mut entries: Vec<(Node, Node)> = Vec::new();
                let mut merges: Vec<(Node, Node)> = Vec::new();
                loop {
                    let (ev, span) = self.next()?;
                    if ev == Event::MappingEnd {
                        break;
                    }
                    let key = self.node(ev, span)?;
                    let (ev, span) = self.next()?;
                    let value = self.node(ev, span)?;
                    let Value::Scalar { text, plain } = &key.value else {
                        return Err(ComposeError::invalid(
                            key.at,
                            "a mapping key must be a scalar, not a list or a mapping",
                        ));
                    };
                    if *plain && text == "<<" {
                        merges.push((key, value));
                        continue;
                    }
                    if let Some((first, _)) = entries.iter().find(|(k, _)| k.key_text() == text) {
                        return Err(ComposeError::invalid(
                            key.at,
                            format!(
                                "duplicate key `{text}` (first at line {}, column {})",
                                first.at.line, first.at.column
                            ),
                        ));
                    }
                    entries.push((key, value));
                }
                for (key, value) in merges {
                    merge(&mut entries, &key, &value)?;
                }
                let node = Node {
                    value: Value::Map(entries),
                    at,
                };
                Ok(self.keep(anchor, node))
            }
            other => Err(ComposeError::invalid(
                at,
                format!("unexpected YAML event {other:?}"),
            )),
        }
    }
}

/// Adds to `entries` the keys of the mapping(s) `value` that it lacks (YAML's merge
/// type: <https://yaml.org/type/merge.html>): a mapping, or a list of mappings of which
/// the earlier win.
fn merge(entries: &mut Vec<(Node, Node)>, key: &Node, value: &Node) -> Result<(), ComposeError> {
    let sources: Vec<&Node> = match &value.value {
        Value::Map(_) => vec![value],
        Value::Seq(items) => items.iter().collect(),
        Value::Scalar { .. } => {
            return Err(ComposeError::invalid(
                key.at,
                format!(
                    "merge key `<<` takes a mapping or a list of mappings (usually an alias, `<<: *base`), not {}",
                    value.kind()
                ),
            ))
        }
    };
    for source in sources {
        let Value::Map(theirs) = &source.value else {
            return Err(ComposeError::invalid(
                source.at,
                format!(
                    "merge key `<<`: every item must be a mapping, not {}",
                    source.kind()
                ),
            ));
        };
        for (k, v) in theirs {
            if !entries
                .iter()
                .any(|(mine, _)| mine.key_text() == k.key_text())
            {
                entries.push((k.clone(), v.clone()));
            }
        }
    }
    Ok(())
}

fn count(node: &Node) -> usize {
    1 + match &node.value {
        Value::Scalar { .. } => 0,
        Value::Seq(items) => items.iter().map(count).sum(),
        Value::Map(entries) => entries.iter().map(|(k, v)| count(k) + count(v)).sum(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(e: ComposeError) -> (u32, u32, String) {
        match e {
            ComposeError::Syntax { at, message } | ComposeError::Invalid { at, message } => {
                (at.line, at.column, message)
            }
        }
    }

    #[test]
    fn merge_keys_resolve_with_own_keys_winning() {
        let doc = parse(
            "base: &b\n  a: 1\n  b: 2\nother: &o\n  c: 3\n  a: 9\nx:\n  <<: [*b, *o]\n  b: 5\n",
        )
        .unwrap();
        let x = doc.get("x").unwrap();
        let keys: Vec<(&str, &str)> = x
            .as_map()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.key_text(), v.as_str().unwrap()))
            .collect();
        assert_eq!(keys, [("b", "5"), ("a", "1"), ("c", "3")]);
    }

    #[test]
    fn scalars_keep_text_and_plainness() {
        let doc = parse("a: 8080\nb: '8080'\nc:\nd: true\ne: 0x1F\nf: !!str 12\n").unwrap();
        assert_eq!(doc.get("a").unwrap().as_int(), Some(8080));
        assert_eq!(doc.get("b").unwrap().as_int(), Some(8080));
        assert_eq!(doc.get("b").unwrap().as_bool(), None);
        assert!(doc.get("c").unwrap().is_null());
        assert_eq!(doc.get("d").unwrap().as_bool(), Some(true));
        assert_eq!(doc.get("e").unwrap().as_int(), Some(31));
        assert_eq!(doc.get("f").unwrap().kind(), "a number");
        assert_eq!(doc.get("f").unwrap().as_str(), Some("12"));
    }

    #[test]
    fn errors_have_line_and_column() {
        let (l, c, m) = at(parse("a: 1\na: 2\n").unwrap_err());
        assert_eq!((l, c), (2, 1), "{m}");
        assert!(m.contains("duplicate key `a`"), "{m}");
        let (l, c, _) = at(parse("a:\n  b: [1, 2\nc: 3\n").unwrap_err());
        assert_eq!((l, c), (3, 2));
        let (l, c, m) = at(parse("x: *nope\n").unwrap_err());
        assert_eq!((l, c), (1, 4), "{m}");
    }

    #[test]
    fn an_alias_bomb_is_refused() {
        let mut text = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..8 {
            text.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n",
                p = if i == 1 { String::new() } else { (i - 1).to_string() }
            ));
        }
        let (_, _, m) = at(parse(&text).unwrap_err());
        assert!(m.contains("alias bomb"), "{m}");
    }
}
