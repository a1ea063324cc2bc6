//! A syntax-neutral document tree whose every key and value keeps its byte span.
//!
//! TOML (parsed by the `toml` crate) and JSON (parsed by `jsonc-parser` in strict
//! mode) both become a [`Node`]. Typed structs are then read out of nodes with serde
//! through [`from_node`], whose errors carry the span of the innermost key or value
//! that was wrong, so every decoding error can be reported at `file:line:column`.

use crate::diag::{did_you_mean, Code};
use crate::source::{Format, Span};
use serde::de::{self, DeserializeSeed, IntoDeserializer, Visitor};
use std::borrow::Cow;
use std::fmt;

/// A value with the span of its source text. Strings borrow from the source text
/// where they can (`'a` is the text's lifetime).
#[derive(Debug, Clone, PartialEq)]
pub struct Node<'a> {
    /// Where the value is written.
    pub span: Span,
    /// The value.
    pub value: Value<'a>,
}

/// One key of a table with its span, and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry<'a> {
    /// The key.
    pub key: Cow<'a, str>,
    /// Where the key is written.
    pub key_span: Span,
    /// The value.
    pub value: Node<'a>,
}

/// The kinds of values TOML and JSON share (plus TOML datetimes, kept as text).
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    /// A table (TOML) or object (JSON), in source order (TOML: sorted by key).
    Table(Vec<Entry<'a>>),
    /// An array.
    Array(Vec<Node<'a>>),
    /// A string.
    String(Cow<'a, str>),
    /// An integer that fits `i64`.
    Integer(i64),
    /// A float.
    Float(f64),
    /// A boolean.
    Bool(bool),
    /// A TOML datetime, as written.
    Datetime(String),
    /// JSON `null`.
    Null,
}

impl Value<'_> {
    /// The user-facing name of this kind of value ("table", "string"…).
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Table(_) => "table",
            Value::Array(_) => "array",
            Value::String(_) => "string",
            Value::Integer(_) => "integer",
            Value::Float(_) => "float",
            Value::Bool(_) => "boolean",
            Value::Datetime(_) => "datetime",
            Value::Null => "null",
        }
    }
}

impl<'a> Node<'a> {
    /// The entry for `key` if this is a table holding it.
    pub fn entry(&self, key: &str) -> Option<&Entry<'a>> {
        match &self.value {
            Value::Table(entries) => entries.iter().find(|e| e.key == key),
            _ => None,
        }
    }

    /// The value at `key` if this is a table holding it.
    pub fn get(&self, key: &str) -> Option<&Node<'a>> {
        self.entry(key).map(|e| &e.value)
    }

    /// The entries if this is a table, else an empty slice.
    pub fn entries(&self) -> &[Entry<'a>] {
        match &self.value {
            Value::Table(entries) => entries,
            _ => &[],
        }
    }

    /// The span of the deepest node reachable by following `path` (table keys or
    /// array indices written as decimal strings). Where the last step is a key, the
    /// span is that of its value. Stops at the last node that exists.
    pub fn span_at(&self, path: &[&str]) -> Span {
        let mut node = self;
        for step in path {
            let next = match &node.value {
                Value::Table(_) => node.get(step),
                Value::Array(items) => step.parse::<usize>().ok().and_then(|i| items.get(i)),
                _ => None,
            };
            match next {
                Some(n) => node = n,
                None => break,
            }
        }
        node.span
    }

    /// The span of the key at the end of `path` (falls back to [`Node::span_at`]).
    pub fn key_span_at(&self, path: &[&str]) -> Span {
        if let Some((last, parent)) = path.split_last() {
            let mut node = self;
            for step in parent {
                match node.get(step) {
                    Some(n) => node = n,
                    None => return node.span,
                }
            }
            if let Some(e) = node.entry(last) {
                return e.key_span;
            }
            return node.span;
        }
        self.span
    }
}

impl Node<'_> {
    /// Removes the entry whose key or value has exactly `span` (or the array element
    /// with that span), anywhere below this node. Returns whether something was removed.
    /// Used to keep decoding after an error, so one entry can report several problems.
    pub fn remove_span(&mut self, span: Span) -> bool {
        match &mut self.value {
            Value::Table(entries) => {
                if let Some(i) = entries
                    .iter()
                    .position(|e| e.key_span == span || e.value.span == span)
                {
                    entries.remove(i);
                    return true;
                }
                entries.iter_mut().any(|e| e.value.remove_span(span))
            }
            Value::Array(items) => {
                if let Some(i) = items.iter().position(|n| n.span == span) {
                    items.remove(i);
                    return true;
                }
                items.iter_mut().any(|n| n.remove_span(span))
            }
            _ => false,
        }
    }
}

/// A syntax error: where and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    /// Where the parser stopped.
    pub span: Span,
    /// The parser's message.
    pub message: String,
}

/// Parses a whole document. TOML reports every syntax error it can recover from.
pub fn parse(text: &str, format: Format) -> Result<Node<'_>, Vec<SyntaxError>> {
    match format {
        Format::Toml => parse_toml(text),
        Format::Json => parse_json(text),
    }
}

fn parse_toml(text: &str) -> Result<Node<'_>, Vec<SyntaxError>> {
    use toml::de::{DeTable, DeValue};
    use toml::Spanned;
    let (doc, errors) = DeTable::parse_recoverable(text);
    if !errors.is_empty() {
        return Err(errors
            .into_iter()
            .map(|e| SyntaxError {
                span: e.span().map(Span::from).unwrap_or_default(),
                message: e.message().trim().to_string(),
            })
            .collect());
    }
    fn conv(v: Spanned<DeValue<'_>>) -> Node<'_> {
        let span = v.span().into();
        let value = match v.into_inner() {
            DeValue::String(s) => Value::String(s),
            DeValue::Integer(i) => {
                let s = i.as_str().replace('_', "");
                match i64::from_str_radix(&s, i.radix()) {
                    Ok(n) => Value::Integer(n),
                    // Out of i64 range: keep it visible as a float so type checks fail loudly.
                    Err(_) => Value::Float(s.parse().unwrap_or(f64::INFINITY)),
                }
            }
            DeValue::Float(f) => {
                Value::Float(f.as_str().replace('_', "").parse().unwrap_or(f64::NAN))
            }
            DeValue::Boolean(b) => Value::Bool(b),
            DeValue::Datetime(d) => Value::Datetime(d.to_string()),
            DeValue::Array(items) => Value::Array(items.into_iter().map(conv).collect()),
            DeValue::Table(t) => Value::Table(conv_table(t)),
        };
        Node { span, value }
    }
    fn conv_table(t: DeTable<'_>) -> Vec<Entry<'_>> {
        t.into_iter()
            .map(|(k, v)| Entry {
                key_span: k.span().into(),
                key: k.into_inner(),
                value: conv(v),
            })
            .collect()
    }
    let span = doc.span().into();
    Ok(Node {
        span,
        value: Value::Table(conv_table(doc.into_inner())),
    })
}

fn parse_json(text: &str) -> Result<Node<'_>, Vec<SyntaxError>> {
    use jsonc_parser::ast;
    let strict = jsonc_parser::ParseOptions {
        allow_comments: false,
        allow_loose_object_property_names: false,
        allow_trailing_commas: false,
        allow_missing_commas: false,
        allow_single_quoted_strings: false,
        allow_hexadecimal_numbers: false,
        allow_unary_plus_numbers: false,
        allow_bare_decimal_point_numbers: false,
        allow_non_finite_numbers: false,
        allow_extended_string_escapes: false,
    };
    let parsed = jsonc_parser::parse_to_ast(text, &Default::default(), &strict).map_err(|e| {
        vec![SyntaxError {
            span: Span::new(e.range().start, e.range().end),
            message: e.kind().to_string(),
        }]
    })?;
    let Some(root) = parsed.value else {
        return Err(vec![SyntaxError {
            span: Span::new(0, text.len()),
            message: "the document is empty".into(),
        }]);
    };
    let mut errors = Vec::new();
    fn conv<'a>(v: &ast::Value<'a>, errors: &mut Vec<SyntaxError>) -> Node<'a> {
        let (range, value) = match v {
            ast::Value::StringLit(s) => (s.range, Value::String(s.value.clone())),
            ast::Value::NumberLit(n) => (
                n.range,
                match n.value.parse::<i64>() {
                    Ok(i) => Value::Integer(i),
                    Err(_) => Value::Float(n.value.parse().unwrap_or(f64::NAN)),
                },
            ),
            ast::Value::BooleanLit(b) => (b.range, Value::Bool(b.value)),
            ast::Value::NullKeyword(n) => (n.range, Value::Null),
            ast::Value::Array(a) => (
                a.range,
                Value::Array(a.elements.iter().map(|e| conv(e, errors)).collect()),
            ),
            ast::Value::Object(o) => {
                let mut entries: Vec<Entry<'_>> = Vec::with_capacity(o.properties.len());
                let mut seen = std::collections::HashSet::with_capacity(o.properties.len());
                for p in &o.properties {
                    let (key, kr) = match &p.name {
                        ast::ObjectPropName::String(s) => (s.value.clone(), s.range),
                        ast::ObjectPropName::Word(w) => (Cow::Borrowed(w.value), w.range),
                    };
                    if !seen.insert(key.clone()) {
                        errors.push(SyntaxError {
                            span: Span::new(kr.start, kr.end),
                            message: format!("duplicate key `{key}`"),
                        });
                        continue;
                    }
                    entries.push(Entry {
                        key,
                        key_span: Span::new(kr.start, kr.end),
                        value: conv(&p.value, errors),
                    });
                }
                (o.range, Value::Table(entries))
            }
        };
        Node {
            span: Span::new(range.start, range.end),
            value,
        }
    }
    let node = conv(&root, &mut errors);
    if !errors.is_empty() {
        return Err(errors);
    }
    if !matches!(node.value, Value::Table(_)) {
        return Err(vec![SyntaxError {
            span: node.span,
            message: format!(
                "the document must be an object, found {}",
                node.value.kind()
            ),
        }]);
    }
    Ok(node)
}

/// A decoding error with the span of the key or value it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// `unknown-key`, `missing-key` or `invalid-value`.
    pub code: Code,
    /// What is wrong.
    pub message: String,
    /// Where (the innermost node that was being decoded).
    pub span: Option<Span>,
    /// A suggestion, e.g. the closest known key.
    pub help: Option<String>,
    /// For `missing-key`: the key.
    pub missing: Option<String>,
}

impl DecodeError {
    fn or_span(mut self, span: Span) -> Self {
        self.span.get_or_insert(span);
        self
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DecodeError {}

impl de::Error for DecodeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        DecodeError {
            code: Code::InvalidValue,
            message: msg.to_string(),
            span: None,
            help: None,
            missing: None,
        }
    }

    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        let help = match did_you_mean(field, expected.iter().copied()) {
            Some(s) => Some(format!("did you mean `{s}`?")),
            None if expected.is_empty() => None,
            None => Some(format!("expected one of: {}", expected.join(", "))),
        };
        DecodeError {
            code: Code::UnknownKey,
            message: format!("unknown key `{field}`"),
            span: None,
            help,
            missing: None,
        }
    }

    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> Self {
        let help = match did_you_mean(variant, expected.iter().copied()) {
            Some(s) => format!("did you mean `{s}`?"),
            None => format!("expected one of: {}", expected.join(", ")),
        };
        DecodeError {
            code: Code::InvalidValue,
            message: format!("unknown value `{variant}`"),
            span: None,
            help: Some(help),
            missing: None,
        }
    }

    fn missing_field(field: &'static str) -> Self {
        DecodeError {
            code: Code::MissingKey,
            message: format!("missing required key `{field}`"),
            span: None,
            help: None,
            missing: Some(field.to_string()),
        }
    }
}

/// Decodes a typed value from a node; the error points at the innermost offending part.
pub fn from_node<'de, T: serde::Deserialize<'de>>(node: &'de Node<'_>) -> Result<T, DecodeError> {
    T::deserialize(NodeDe(node)).map_err(|e| e.or_span(node.span))
}

struct NodeDe<'a>(&'a Node<'a>);

impl<'de> de::Deserializer<'de> for NodeDe<'de> {
    type Error = DecodeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        let span = self.0.span;
        let r = match &self.0.value {
            Value::Table(entries) => visitor.visit_map(TableAccess {
                entries: entries.iter(),
                value: None,
            }),
            Value::Array(items) => visitor.visit_seq(ArrayAccess(items.iter())),
            Value::String(s) => visitor.visit_borrowed_str(s),
            Value::Datetime(s) => visitor.visit_borrowed_str(s),
            Value::Integer(i) => visitor.visit_i64(*i),
            Value::Float(f) => visitor.visit_f64(*f),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Null => visitor.visit_unit(),
        };
        r.map_err(|e| e.or_span(span))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        match self.0.value {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        let span = self.0.span;
        let r = match &self.0.value {
            Value::String(s) => visitor.visit_enum(s.as_ref().into_deserializer()),
            Value::Table(entries) if entries.len() == 1 => {
                visitor.visit_enum(EnumAccess(&entries[0]))
            }
            other => Err(de::Error::custom(format!(
                "expected a string or a table with one key, found {}",
                other.kind()
            ))),
        };
        r.map_err(|e: DecodeError| e.or_span(span))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map struct identifier
        ignored_any
    }
}

struct TableAccess<'a> {
    entries: std::slice::Iter<'a, Entry<'a>>,
    value: Option<&'a Node<'a>>,
}

impl<'de> de::MapAccess<'de> for TableAccess<'de> {
    type Error = DecodeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DecodeError> {
        let Some(entry) = self.entries.next() else {
            return Ok(None);
        };
        self.value = Some(&entry.value);
        let key: de::value::BorrowedStrDeserializer<'de, DecodeError> =
            de::value::BorrowedStrDeserializer::new(&entry.key);
        seed.deserialize(key)
            .map(Some)
            .map_err(|e| e.or_span(entry.key_span))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, DecodeError> {
        let node = self.value.take().expect("value requested before key");
        seed.deserialize(NodeDe(node))
            .map_err(|e| e.or_span(node.span))
    }
}

struct ArrayAccess<'a>(std::slice::Iter<'a, Node<'a>>);

impl<'de> de::SeqAccess<'de> for ArrayAccess<'de> {
    type Error = DecodeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DecodeError> {
        match self.0.next() {
            None => Ok(None),
            Some(node) => seed
                .deserialize(NodeDe(node))
                .map(Some)
                .map_err(|e| e.or_span(node.span)),
        }
    }
}

struct EnumAccess<'a>(&'a Entry<'a>);

impl<'de> de::EnumAccess<'de> for EnumAccess<'de> {
    type Error = DecodeError;
    type Variant = NodeDe<'de>;

    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, NodeDe<'de>), DecodeError> {
        let key: de::value::BorrowedStrDeserializer<'de, DecodeError> =
            de::value::BorrowedStrDeserializer::new(&self.0.key);
        let v = seed
            .deserialize(key)
            .map_err(|e| e.or_span(self.0.key_span))?;
        Ok((v, NodeDe(&self.0.value)))
    }
}

impl<'de> de::VariantAccess<'de> for NodeDe<'de> {
    type Error = DecodeError;

    fn unit_variant(self) -> Result<(), DecodeError> {
        Err(de::Error::custom("expected a plain string for this value"))
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<T::Value, DecodeError> {
        let span = self.0.span;
        seed.deserialize(self).map_err(|e| e.or_span(span))
    }

    fn tuple_variant<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        de::Deserializer::deserialize_any(self, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        de::Deserializer::deserialize_any(self, visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct S {
        name: String,
        port: u16,
    }

    fn span_text(text: &str, span: Span) -> &str {
        &text[span.start..span.end]
    }

    #[test]
    fn toml_type_error_points_at_value() {
        let text = "name = \"a\"\nport = \"x\"\n";
        let node = parse(text, Format::Toml).unwrap();
        let err = from_node::<S>(&node).unwrap_err();
        assert_eq!(span_text(text, err.span.unwrap()), "\"x\"");
    }

    #[test]
    fn unknown_key_points_at_key_and_suggests() {
        let text = "{\"name\": \"a\", \"prot\": 1}";
        let node = parse(text, Format::Json).unwrap();
        let err = from_node::<S>(&node).unwrap_err();
        assert_eq!(err.code, Code::UnknownKey);
        assert_eq!(span_text(text, err.span.unwrap()), "\"prot\"");
        assert_eq!(err.help.as_deref(), Some("did you mean `port`?"));
    }

    #[test]
    fn json_duplicate_keys_and_syntax_errors_are_reported() {
        let errs = parse("{\"a\": 1, \"a\": 2}", Format::Json).unwrap_err();
        assert!(errs[0].message.contains("duplicate key"));
        let errs = parse("{\"a\": 1,}", Format::Json).unwrap_err();
        assert_eq!(errs.len(), 1);
    }

    #[test]
    fn toml_reports_several_syntax_errors() {
        let errs = parse("a = \nb = = 2\n", Format::Toml).unwrap_err();
        assert!(!errs.is_empty());
    }
}
