//! Request contracts, in kube-rs's own testing pattern: the client over a
//! `tower-test` mock service, each request it makes checked exactly (method, path,
//! query, content type, field manager, body) and answered by the test.

use flotilla_kube::apply::server_side_apply;
use flotilla_kube::cluster::{runtime, Connection};
use flotilla_kube::manifest::{self, Inputs};
use flotilla_model::source::{Format, SourceFile, Sources};
use flotilla_model::validate::validate;
use http::{Request, Response};
use kube::client::Body;

fn component() -> flotilla_model::topology::Component {
    let text = "[hosts.gpu]\ntransport = \"kubernetes\"\nnamespace = \"inference\"\n\
        [components.llm]\nhost = \"gpu\"\nadapter = \"kubernetes\"\n\
        kubernetes = { image = \"llm:1\", ports = [{ container_port = 8080 }] }\n";
    let mut sources = Sources::new();
    let id = sources.add(SourceFile::new("flotilla.toml", Format::Toml, text));
    let t = validate(&sources, id, &[]).unwrap().topology;
    t.component(t.id("llm").unwrap()).clone()
}

/// The component's objects, one replica.
fn objects() -> manifest::Objects {
    manifest::objects(
        &component(),
        &Inputs {
            project: "lab",
            env: &[],
            replicas: 1,
            restarted_at: None,
        },
    )
    .unwrap()
}

/// One request as the mock saw it.
#[derive(Debug)]
struct Seen {
    method: String,
    path_and_query: String,
    content_type: String,
    body: serde_json::Value,
}

/// A connection whose client talks to a mock; the mock's requests are answered by
/// `answer` (status, body) and recorded.
fn mock(
    answer: impl Fn(&Seen) -> (u16, serde_json::Value) + Send + 'static,
) -> (Connection, std::sync::mpsc::Receiver<Seen>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let _enter = runtime().enter();
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    runtime().spawn(async move {
        while let Some((req, send)) = handle.next_request().await {
            let (parts, body) = req.into_parts();
            let bytes = body.collect_bytes().await.unwrap();
            let seen = Seen {
                method: parts.method.to_string(),
                path_and_query: parts.uri.path_and_query().unwrap().to_string(),
                content_type: parts
                    .headers
                    .get("content-type")
                    .map(|v| v.to_str().unwrap().to_string())
                    .unwrap_or_default(),
                body: serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
            };
            let (code, reply) = answer(&seen);
            let _ = tx.send(seen);
            send.send_response(
                Response::builder()
                    .status(code)
                    .body(Body::from(serde_json::to_vec(&reply).unwrap()))
                    .unwrap(),
            );
        }
    });
    let conn = Connection {
        client: kube::Client::new(service, "default"),
        kubeconfig: "mock".into(),
        context: "mock".into(),
        server: "http://mock".into(),
    };
    (conn, rx)
}

#[test]
fn an_apply_is_a_dry_run_then_the_apply_of_each_object_whole() {
    let objs = objects();
    let (conn, seen) = mock(|s| {
        let mut o = s.body.clone();
        o["metadata"]["generation"] = 7.into();
        (200, o)
    });
    let generation = server_side_apply(&conn, &objs, false, &[true, false]).unwrap();
    assert_eq!(
        generation, 7,
        "the workload's generation as the server answered"
    );
    let seen: Vec<Seen> = seen.try_iter().collect();
    let calls: Vec<(&str, &str)> = seen
        .iter()
        .map(|s| (s.method.as_str(), s.path_and_query.as_str()))
        .collect();
    assert_eq!(
        calls,
        [
            ("PATCH", "/api/v1/namespaces/inference/services/llm?&dryRun=All&fieldManager=flotilla"),
            ("PATCH", "/apis/apps/v1/namespaces/inference/deployments/llm?&dryRun=All&fieldManager=flotilla"),
            ("PATCH", "/api/v1/namespaces/inference/services/llm?&fieldManager=flotilla"),
            ("PATCH", "/apis/apps/v1/namespaces/inference/deployments/llm?&fieldManager=flotilla"),
        ]
    );
    for s in &seen {
        assert_eq!(s.content_type, "application/apply-patch+yaml");
    }
    assert_eq!(
        seen[1].body,
        objs.workload.to_json(),
        "the object is sent whole"
    );
    assert_eq!(
        seen[0].body,
        serde_json::to_value(objs.service.as_ref().unwrap()).unwrap()
    );
    assert_eq!(seen[1].body["apiVersion"], "apps/v1");
    assert_eq!(seen[1].body["kind"], "Deployment");
}

#[test]
fn force_is_sent_only_when_asked_and_a_refused_dry_run_applies_nothing() {
    let objs = objects();
    let (conn, seen) = mock(|s| {
        if s.path_and_query.contains("/deployments/") {
            (
                409,
                serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 409, "reason": "Conflict",
                    "message": "Apply failed with 1 conflict: conflict with \"kubectl\" using apps/v1: .spec.replicas"}),
            )
        } else {
            (200, s.body.clone())
        }
    });
    let err = server_side_apply(&conn, &objs, true, &[true, false]).unwrap_err();
    assert_eq!(err.code(), Some(409));
    let text = err.to_string();
    assert!(text.contains("conflict with \"kubectl\""), "{text}");
    let seen: Vec<Seen> = seen.try_iter().collect();
    assert_eq!(
        seen.len(),
        2,
        "the dry run of the Service, then of the Deployment: {seen:?}"
    );
    for s in &seen {
        assert!(
            s.path_and_query.contains("dryRun=All"),
            "{}",
            s.path_and_query
        );
        assert!(
            s.path_and_query.contains("force=true"),
            "{}",
            s.path_and_query
        );
    }
}
