//! Secret resolution: the owner-only file rule, sources in order, env resolution.

use flotilla_exec::secrets::{SecretError, SecretResolver};
use flotilla_model::values::EnvValue;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;

#[test]
fn a_secrets_file_readable_by_others_is_refused_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secrets");
    std::fs::write(&path, "HF_TOKEN=hf_abc\n").unwrap();
    for mode in [0o644, 0o640, 0o604, 0o660] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        let err = SecretResolver::new(false, Some(path.clone())).unwrap_err();
        assert!(matches!(err, SecretError::InsecureFile { .. }), "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("chmod 600 {}", path.display())) && !msg.contains("hf_abc"),
            "{msg}"
        );
    }
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let r = SecretResolver::new(false, Some(path.clone())).unwrap();
    assert_eq!(r.get("HF_TOKEN").as_deref(), Some("hf_abc"));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
    assert!(SecretResolver::new(false, Some(path.clone())).is_ok());

    let missing = dir.path().join("absent");
    let err = SecretResolver::new(true, Some(missing.clone())).unwrap_err();
    assert!(matches!(err, SecretError::Read { .. }));
    assert!(err.to_string().contains(&missing.display().to_string()));
}

#[test]
fn environment_first_then_file_and_env_maps_resolve() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secrets");
    std::fs::write(&path, "HOME=/from/file\nMASTER_KEY=sk-1234\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let r = SecretResolver::new(true, Some(path.clone())).unwrap();
    // HOME is set in the test environment, so the environment wins.
    assert_eq!(r.get("HOME"), std::env::var("HOME").ok());
    assert_eq!(r.get("MASTER_KEY").as_deref(), Some("sk-1234"));
    let file_only = SecretResolver::new(false, Some(path.clone())).unwrap();
    assert_eq!(file_only.get("HOME").as_deref(), Some("/from/file"));
    assert!(!format!("{r:?}").contains("sk-1234"));

    let mut env = BTreeMap::new();
    env.insert(
        "LITELLM_MASTER_KEY".into(),
        EnvValue::Secret("MASTER_KEY".into()),
    );
    env.insert("PORT".into(), EnvValue::Literal("4000".into()));
    assert_eq!(
        r.resolve_env("proxy", &env).unwrap(),
        vec![
            ("LITELLM_MASTER_KEY".to_string(), "sk-1234".to_string()),
            ("PORT".to_string(), "4000".to_string())
        ]
    );
    env.insert(
        "OTHER".into(),
        EnvValue::Secret("FLOTILLA_TEST_UNSET_SECRET".into()),
    );
    let err = r.resolve_env("proxy", &env).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("proxy")
            && msg.contains("FLOTILLA_TEST_UNSET_SECRET")
            && msg.contains(&path.display().to_string()),
        "{msg}"
    );
}
