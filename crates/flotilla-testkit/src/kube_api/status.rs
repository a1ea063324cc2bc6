//! The API's `Status` bodies of failure, as in the API conventions
//! (https://github.com/kubernetes/community/blob/master/contributors/devel/sig-architecture/api-conventions.md#response-status-kind).

use serde_json::{json, Value};

/// An answer: HTTP status code and JSON body.
#[derive(Debug)]
pub(crate) struct Reply {
    pub code: u16,
    pub body: Value,
}

impl Reply {
    pub fn ok(body: Value) -> Reply {
        Reply { code: 200, body }
    }
}

/// A `Status` body of failure (`kind: Status`, `status: Failure`).
pub(crate) fn status_failure(
    code: u16,
    reason: &str,
    message: &str,
    details: Option<Value>,
) -> Reply {
    let mut body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    });
    if let Some(d) = details {
        body["details"] = d;
    }
    body["code"] = json!(code);
    Reply { code, body }
}

/// `400 BadRequest` with this message.
pub(crate) fn bad_request(message: &str) -> Reply {
    status_failure(400, "BadRequest", message, None)
}
