//! Every compose fixture (crates/flotilla-cli/tests/fixtures/compose) converts to TOML
//! that parses back into exactly the typed inventory the conversion built, and that
//! validates (the same validation as `flotilla validate`) without an error.

use flotilla_compose::{convert, Options};
use flotilla_model::inventory::{AdapterKind, Inventory};
use flotilla_model::{validate, Format, SourceFile, Sources};
use std::path::PathBuf;

fn fixtures() -> Vec<(String, String)> {
    let dir =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../flotilla-cli/tests/fixtures/compose");
    let mut out: Vec<(String, String)> = std::fs::read_dir(&dir)
        .expect("the fixtures")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect();
    out.sort();
    assert!(out.len() >= 4, "fixtures: {out:?}");
    out
}

fn options(file: &str) -> Options {
    Options {
        dir_name: "homelab".into(),
        file_name: file.into(),
        home: Some("/home/op".into()),
        variables_source: "the environment".into(),
        ..Options::default()
    }
}

#[test]
fn every_fixture_round_trips_and_validates() {
    for (file, text) in fixtures() {
        let c = convert(&text, &options(&file)).unwrap_or_else(|e| panic!("{file}: {e:?}"));
        let parsed: Inventory =
            toml::from_str(&c.toml).unwrap_or_else(|e| panic!("{file}: {e}\n{}", c.toml));
        assert_eq!(
            serde_json::to_value(&parsed).unwrap(),
            serde_json::to_value(&c.inventory).unwrap(),
            "{file}: the TOML reads back as another inventory\n{}",
            c.toml
        );
        let mut sources = Sources::new();
        let id = sources.add(SourceFile::from_bytes(
            "imported.toml",
            Format::Toml,
            c.toml.clone().into_bytes(),
        ));
        let v = validate(&sources, id, &[])
            .unwrap_or_else(|d| panic!("{file}: invalid: {d:#?}\n{}", c.toml));
        assert_eq!(v.topology.components.len(), c.inventory.components.len());
        for spec in c.inventory.components.values() {
            assert_eq!(spec.adapter, Some(AdapterKind::Container), "{file}");
        }
        let stack = c
            .inventory
            .stacks
            .get(&c.project)
            .or_else(|| c.inventory.stacks.get(&format!("{}-stack", c.project)));
        assert!(stack.is_some(), "{file}: the project's stack");
    }
}

#[test]
fn no_secret_value_of_a_fixture_reaches_the_inventory() {
    for (file, text) in fixtures() {
        let c = convert(&text, &options(&file)).unwrap();
        for secret in ["t0p-s3cret", "dbpassword9090", "sk-1234"] {
            if text.contains(secret) {
                assert!(
                    !c.toml.contains(secret),
                    "{file}: `{secret}` written:\n{}",
                    c.toml
                );
            }
        }
    }
}
