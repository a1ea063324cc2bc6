//! Helpers of flotilla-kube's tests.

/// The kubernetes-validate program, when `scripts/kube-tools` installed it (its
/// directory in `FLOTILLA_KUBE_TOOLS`); with `FLOTILLA_REQUIRE_KUBE_TOOLS=1` its
/// absence fails the test.
pub fn validator() -> Option<std::path::PathBuf> {
    let dir = std::env::var_os("FLOTILLA_KUBE_TOOLS").map(std::path::PathBuf::from);
    let found = dir
        .map(|d| d.join("bin").join("kubernetes-validate"))
        .filter(|p| p.exists());
    if found.is_none() && std::env::var("FLOTILLA_REQUIRE_KUBE_TOOLS").as_deref() == Ok("1") {
        panic!("FLOTILLA_REQUIRE_KUBE_TOOLS=1 but FLOTILLA_KUBE_TOOLS names no kubernetes-validate (run scripts/kube-tools)");
    }
    found
}
