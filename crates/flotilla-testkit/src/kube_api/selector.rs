//! Label and field selectors of list and watch requests.
//!
//! Copied behaviour: label selector syntax and meaning
//! (https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors):
//! `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, comma means AND;
//! `!=` and `notin` match objects without the label. Field selectors
//! (https://kubernetes.io/docs/concepts/overview/working-with-objects/field-selectors/):
//! `=`, `==`, `!=` on a dotted path; the real API accepts only some paths per
//! resource (`metadata.name`, `metadata.namespace`, `status.phase`…), the fake any.

use serde_json::Value;

/// One requirement of a selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Requirement {
    Eq(String, String),
    Ne(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed selector: all requirements must hold.
#[derive(Clone, Debug, Default)]
pub(crate) struct Selector(pub Vec<Requirement>);

fn split_top(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out.into_iter()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect()
}

impl Selector {
    /// Parses a label or field selector; the error is the API's message.
    pub fn parse(s: &str) -> Result<Selector, String> {
        let mut reqs = Vec::new();
        for term in split_top(s) {
            if let Some(open) = term.find('(') {
                let head = term[..open].trim();
                let close = term
                    .rfind(')')
                    .ok_or_else(|| format!("unable to parse requirement: {term}"))?;
                let values: Vec<String> = term[open + 1..close]
                    .split(',')
                    .map(|v| v.trim().to_string())
                    .filter(|v| !v.is_empty())
                    .collect();
                if let Some(k) = head.strip_suffix("notin") {
                    reqs.push(Requirement::NotIn(k.trim().to_string(), values));
                } else if let Some(k) = head.strip_suffix("in") {
                    reqs.push(Requirement::In(k.trim().to_string(), values));
                } else {
                    return Err(format!("unable to parse requirement: {term}"));
                }
            } else if let Some((k, v)) = term.split_once("!=") {
                reqs.push(Requirement::Ne(k.trim().into(), v.trim().into()));
            } else if let Some((k, v)) = term.split_once("==") {
                reqs.push(Requirement::Eq(k.trim().into(), v.trim().into()));
            } else if let Some((k, v)) = term.split_once('=') {
                reqs.push(Requirement::Eq(k.trim().into(), v.trim().into()));
            } else if let Some(k) = term.strip_prefix('!') {
                reqs.push(Requirement::NotExists(k.trim().into()));
            } else {
                reqs.push(Requirement::Exists(term.clone()));
            }
        }
        Ok(Selector(reqs))
    }

    /// Whether a value lookup (`Some(value)` or `None` when absent) satisfies all.
    fn matches_with(&self, get: impl Fn(&str) -> Option<String>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Eq(k, v) => get(k).as_deref() == Some(v),
            Requirement::Ne(k, v) => get(k).as_deref() != Some(v),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.contains(&x)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|x| !vs.contains(&x)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
        })
    }

    /// Label selector against `metadata.labels`.
    pub fn matches_labels(&self, obj: &Value) -> bool {
        let labels = &obj["metadata"]["labels"];
        self.matches_with(|k| labels.get(k).and_then(Value::as_str).map(str::to_string))
    }

    /// Field selector against dotted paths of the object.
    pub fn matches_fields(&self, obj: &Value) -> bool {
        self.matches_with(|k| {
            let mut cur = obj;
            for part in k.split('.') {
                cur = cur.get(part)?;
            }
            match cur {
                Value::String(s) => Some(s.clone()),
                Value::Null => None,
                other => Some(other.to_string()),
            }
        })
    }
}

/// A list or watch request's selectors.
#[derive(Clone, Debug, Default)]
pub(crate) struct Filter {
    pub labels: Selector,
    pub fields: Selector,
}

impl Filter {
    pub fn matches(&self, obj: &Value) -> bool {
        self.labels.matches_labels(obj) && self.fields.matches_fields(obj)
    }
}
