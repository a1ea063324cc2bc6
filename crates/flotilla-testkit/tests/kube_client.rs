//! kube-rs (the client the Kubernetes adapter uses) against the fake Kubernetes API:
//! kubeconfig, discovery, server-side apply and its conflicts, lists with selectors,
//! kube-runtime's watcher, status from the simulated kubelet, deletion.

use std::time::Duration;

use flotilla_testkit::FakeKube;
use futures_util::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;
use kube::{Client, Config};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(10);

async fn client(fake: &FakeKube) -> Client {
    let dir = std::env::temp_dir().join(format!(
        "fake-kube-client-{}-{}",
        std::process::id(),
        fake.addr().port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config");
    fake.write_kubeconfig(&path, "fake", Some("default"))
        .unwrap();
    let kc = Kubeconfig::read_from(&path).unwrap();
    let opts = KubeConfigOptions {
        context: Some("fake".into()),
        ..Default::default()
    };
    let config = Config::from_custom_kubeconfig(kc, &opts).await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(config.default_namespace, "default");
    Client::try_from(config).unwrap()
}

fn web(replicas: i32) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}}},
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_applies_watches_and_sees_conflicts() {
    let fake = FakeKube::start();
    let client = client(&fake).await;
    let discovery = kube::discovery::Discovery::new(client.clone())
        .run()
        .await
        .unwrap();
    let apps = discovery
        .groups()
        .find(|g| g.name() == "apps")
        .expect("apps group");
    assert!(apps
        .recommended_resources()
        .iter()
        .any(|(ar, _)| ar.kind == "Deployment"));

    let deploys: Api<Deployment> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let mut events = watcher(pods.clone(), watcher::Config::default().labels("app=web")).boxed();
    // The events are only read while the stream is polled; the watch itself starts
    // after the first list, below.

    let applied = deploys
        .patch(
            "web",
            &PatchParams::apply("flotilla"),
            &Patch::Apply(&web(2)),
        )
        .await
        .unwrap();
    assert_eq!(applied.metadata.generation, Some(1));
    let mf = applied.metadata.managed_fields.unwrap();
    assert_eq!(mf[0].manager.as_deref(), Some("flotilla"));
    assert_eq!(mf[0].operation.as_deref(), Some("Apply"));

    // kube-runtime's watcher (list, then watch from the list's version) sees the
    // kubelet's pods become ready...
    let ready = tokio::time::timeout(WAIT, async {
        let (mut ready, mut init_done) = (std::collections::BTreeSet::new(), false);
        while let Some(ev) = events.next().await {
            match ev {
                Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                    let is_ready = p
                        .status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| {
                            cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                        });
                    if is_ready {
                        ready.insert(p.metadata.name.clone().unwrap());
                    }
                }
                Ok(watcher::Event::InitDone) => init_done = true,
                _ => {}
            }
            if ready.len() == 2 && init_done {
                break;
            }
        }
        ready
    })
    .await
    .expect("two ready pods within the deadline");
    assert_eq!(ready.len(), 2);
    // ...and, watching, a third one made by scaling up.
    deploys
        .patch(
            "web",
            &PatchParams::apply("flotilla"),
            &Patch::Apply(&web(3)),
        )
        .await
        .unwrap();
    let third = tokio::time::timeout(WAIT, async {
        while let Some(ev) = events.next().await {
            if let Ok(watcher::Event::Apply(p)) = ev {
                let name = p.metadata.name.clone().unwrap();
                if !ready.contains(&name) {
                    return name;
                }
            }
        }
        String::new()
    })
    .await
    .expect("a live event within the deadline");
    assert!(third.starts_with("web-"), "{third}");
    deploys
        .patch(
            "web",
            &PatchParams::apply("flotilla"),
            &Patch::Apply(&web(2)),
        )
        .await
        .unwrap();
    let listed = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 2);
    assert!(listed.metadata.resource_version.is_some());

    // Another manager takes .spec.replicas; flotilla's apply then conflicts, and
    // wins with force.
    let kubectl = PatchParams {
        field_manager: Some("kubectl".into()),
        ..Default::default()
    };
    deploys
        .patch(
            "web",
            &kubectl,
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    let err = deploys
        .patch(
            "web",
            &PatchParams::apply("flotilla"),
            &Patch::Apply(&web(2)),
        )
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 409);
            assert_eq!(s.reason, "Conflict");
            assert!(s.message.contains(".spec.replicas"), "{}", s.message);
        }
        other => panic!("expected a 409, got {other:?}"),
    }
    let forced = deploys
        .patch(
            "web",
            &PatchParams::apply("flotilla").force(),
            &Patch::Apply(&web(2)),
        )
        .await
        .unwrap();
    assert_eq!(forced.spec.unwrap().replicas, Some(2));

    let status = deploys.get_status("web").await.unwrap().status.unwrap();
    assert!(status.observed_generation.is_some());

    // The watcher keeps one watch open (kube-rs asks for bookmarks, 290 s).
    assert!(flotilla_testkit::wait_until(WAIT, || fake
        .watches_opened()
        .get("pods")
        == Some(&1)));
    let watch = fake
        .requests()
        .into_iter()
        .find(|r| r.path.ends_with("/pods") && r.query.contains("watch=true"))
        .unwrap();
    assert!(
        watch.query.contains("allowWatchBookmarks=true")
            && watch.query.contains("timeoutSeconds=290"),
        "{}",
        watch.query
    );
    assert!(watch.authorization, "the kubeconfig's token is sent");
    // After compaction a watch from an old version is told 410 Expired.
    fake.compact();
    let mut old = pods
        .watch(&WatchParams::default(), "1")
        .await
        .unwrap()
        .boxed();
    match tokio::time::timeout(WAIT, old.next())
        .await
        .expect("an event")
    {
        Some(Ok(WatchEvent::Error(s))) => assert_eq!((s.code, s.reason.as_str()), (410, "Expired")),
        other => panic!("expected a 410 error event, got {other:?}"),
    }

    let missing = deploys.get_opt("nope").await.unwrap();
    assert!(missing.is_none());
    deploys
        .delete("web", &DeleteParams::background())
        .await
        .unwrap();
    assert!(
        flotilla_testkit::wait_until_async(WAIT, || async {
            pods.list(&ListParams::default().labels("app=web"))
                .await
                .map(|l| l.items.is_empty())
                .unwrap_or(false)
        })
        .await
    );
}
