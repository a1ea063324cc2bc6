//! API paths and queries: `/api/v1/…` and `/apis/{group}/{version}/…`, namespaced
//! `…/namespaces/{ns}/{resource}[/{name}[/{subresource}]]`, cluster-wide
//! `…/{resource}[/{name}]` (https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-uris).

use super::store::{Res, RESOURCES};

/// A request's query, percent-decoded.
#[derive(Clone, Debug, Default)]
pub(crate) struct Query(pub Vec<(String, String)>);

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Query {
    pub fn parse(raw: &str) -> Query {
        Query(
            raw.split('&')
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once('=').unwrap_or((p, ""));
                    (percent_decode(k), percent_decode(v))
                })
                .collect(),
        )
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What a path names.
#[derive(Debug)]
pub(crate) enum Route {
    Version,
    Api,
    Apis,
    Group(String),
    Resources(String, String),
    Object(Target),
}

/// A resource collection or object.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub res: Res,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub sub: Option<String>,
}

/// Parses an API path.
pub(crate) fn route(path: &str) -> Option<Route> {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, version, rest) = match segs.as_slice() {
        ["version"] => return Some(Route::Version),
        ["api"] => return Some(Route::Api),
        ["apis"] => return Some(Route::Apis),
        ["apis", g] => return Some(Route::Group(g.to_string())),
        ["api", v] => return Some(Route::Resources(String::new(), v.to_string())),
        ["apis", g, v] => return Some(Route::Resources(g.to_string(), v.to_string())),
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return None,
    };
    let find = |plural: &str| super::store::find_resource(group, version, plural);
    let t = |res, ns: Option<&&str>, name: Option<&&str>, sub: Option<&&str>| {
        Some(Route::Object(Target {
            res,
            namespace: ns.map(|s| s.to_string()),
            name: name.map(|s| s.to_string()),
            sub: sub.map(|s| s.to_string()),
        }))
    };
    match rest {
        [plural] => t(find(plural)?, None, None, None),
        ["namespaces", ns, plural, tail @ ..]
            if find(plural).is_some_and(|r| RESOURCES[r].namespaced) =>
        {
            let res = find(plural)?;
            match tail {
                [] => t(res, Some(ns), None, None),
                [name] => t(res, Some(ns), Some(name), None),
                [name, sub] => t(res, Some(ns), Some(name), Some(sub)),
                _ => None,
            }
        }
        [plural, name] => t(
            find(plural).filter(|r| !RESOURCES[*r].namespaced)?,
            None,
            Some(name),
            None,
        ),
        [plural, name, sub] => t(
            find(plural).filter(|r| !RESOURCES[*r].namespaced)?,
            None,
            Some(name),
            Some(sub),
        ),
        _ => None,
    }
}
