//! Validation phase by phase, without the CLI: table-driven cases for each phase
//! (hosts, drafts, references, probes, graph) asserting every error's stable code and
//! its `line:column`, and proptest properties over random dependency graphs and random
//! damage to valid inventories.
//!
//! A case names each expected error by its code and a snippet of the source that is
//! unique across the case's files: the error's span must start where the snippet
//! starts.

use flotilla_model::topology::Topology;
use flotilla_model::{
    validate, Code, Diagnostic, Format, Severity, SourceFile, Sources, TemplateRef,
};
use proptest::prelude::*;
use std::collections::BTreeSet;

/// An inventory (as `flotilla.toml`, or `flotilla.json` when it starts with `{`) and
/// user templates `(name, TOML text)`, validated.
fn run(
    inventory: &str,
    templates: &[(&str, &str)],
) -> (Sources, Result<Topology, Vec<Diagnostic>>) {
    let mut sources = Sources::new();
    let name = if inventory.trim_start().starts_with('{') {
        "flotilla.json"
    } else {
        "flotilla.toml"
    };
    let id = sources.add(SourceFile::new(name, Format::from_path(name), inventory));
    let refs: Vec<TemplateRef> = templates
        .iter()
        .map(|(n, text)| TemplateRef {
            name: n.to_string(),
            file: sources.add(SourceFile::new(
                format!("templates/{n}.toml"),
                Format::Toml,
                *text,
            )),
        })
        .collect();
    let result = validate(&sources, id, &refs).map(|v| v.topology);
    (sources, result)
}

/// 1-based (file name, line, column) of `snippet`, which must occur exactly once in
/// all of `sources`.
fn position_of(sources: &Sources, snippet: &str) -> Result<(String, usize, usize), String> {
    let hits: Vec<_> = sources
        .iter()
        .flat_map(|(_, f)| f.text.match_indices(snippet).map(move |(at, _)| (f, at)))
        .collect();
    let [(f, at)] = hits[..] else {
        return Err(format!(
            "snippet {snippet:?} occurs {} times, not once",
            hits.len()
        ));
    };
    let before = &f.text[..at];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    Ok((f.name.clone(), line, column))
}

/// Whether exactly the `expected` errors (code, snippet), in order, are reported.
fn check(
    inventory: &str,
    templates: &[(&str, &str)],
    expected: &[(Code, &str)],
) -> Result<(), String> {
    let (sources, result) = run(inventory, templates);
    let diags = match result {
        Ok(_) => return Err("valid, but errors were expected".into()),
        Err(d) => d,
    };
    let got: Vec<(Code, String, usize, usize)> = diags
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(|d| {
            let p = d
                .locate(&sources)
                .location
                .expect("an error has a location");
            (d.code, p.file, p.start.line, p.start.column)
        })
        .collect();
    let want = expected
        .iter()
        .map(|(code, snippet)| {
            let (f, l, c) = position_of(&sources, snippet)?;
            Ok((*code, f, l, c))
        })
        .collect::<Result<Vec<_>, String>>()?;
    if got != want {
        return Err(format!(
            "expected {want:?}\n     got {got:?}\ndiagnostics: {diags:#?}"
        ));
    }
    Ok(())
}

/// One case: name, inventory, user templates `(name, text)`, expected errors.
type Case<'a> = (
    &'a str,
    &'a str,
    &'a [(&'a str, &'a str)],
    &'a [(Code, &'a str)],
);

/// Runs every case; fails naming every case that did not hold.
fn table(cases: &[Case<'_>]) {
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|(name, inventory, templates, expected)| {
            check(inventory, templates, expected)
                .err()
                .map(|e| format!("case `{name}`:\n{inventory}\n{e}"))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn hosts_phase() {
    use Code::*;
    table(&[
        (
            "unknown transport",
            "[hosts.gpu]\ntransport = \"telnet\"\n",
            &[],
            &[(InvalidValue, "\"telnet\"")],
        ),
        (
            "the local host must be local",
            "[hosts.local]\ntransport = \"ssh\"\n",
            &[],
            &[(InvalidValue, "\"ssh\"")],
        ),
        (
            "ssh settings on a local host",
            "[hosts.box]\ntransport = \"local\"\nuser = \"me\"\nidentity = \"~/.ssh/id\"\nssh_options = { ProxyJump = \"b\" }\n",
            &[],
            &[
                (InvalidValue, "\"me\""),
                (InvalidValue, "\"~/.ssh/id\""),
                (InvalidValue, "{ ProxyJump"),
            ],
        ),
        (
            "forbidden and malformed ssh options",
            "[hosts.gpu]\ntransport = \"ssh\"\nssh_options = { ControlMaster = \"auto\", BatchMode = \"no\", \"Bad Key\" = \"x\", ProxyJump = \"ok\" }\n",
            &[],
            &[
                (InvalidValue, "\"auto\""),
                (InvalidValue, "\"no\""),
                (InvalidValue, "\"x\""),
            ],
        ),
        (
            "address, platform and state_dir",
            "[hosts.gpu]\ntransport = \"ssh\"\naddress = \"-oProxyCommand=sh\"\nplatform = \"amiga-m68k\"\nstate_dir = \"rel/state\"\n",
            &[],
            &[
                (InvalidValue, "\"-oProxyCommand=sh\""),
                (InvalidValue, "\"amiga-m68k\""),
                (InvalidValue, "\"rel/state\""),
            ],
        ),
        (
            "a host name with a dot",
            "[hosts.\"a.b\"]\ntransport = \"ssh\"\n",
            &[],
            &[(InvalidValue, "\"a.b\"")],
        ),
        (
            "ssh settings on an agent host, an unknown role",
            "[hosts.mac]\ntransport = \"agent\"\nuser = \"me\"\nstate_dir = \"/srv/st\"\n[hosts.pi]\ntransport = \"agent\"\nrole = \"boss\"\n",
            &[],
            &[
                (InvalidValue, "\"me\""),
                (InvalidValue, "\"/srv/st\""),
                (InvalidValue, "\"boss\""),
            ],
        ),
        (
            "the local host cannot be an agent host",
            "[hosts.local]\ntransport = \"agent\"\n",
            &[],
            &[(InvalidValue, "\"agent\"")],
        ),
        (
            "a tunnel cannot go through an agent host",
            "[hosts.mac]\ntransport = \"agent\"\n[components.m]\nhost = \"mac\"\ncommand = [\"m\"]\nendpoints = { http = \"http://${host.address}:8080\" }\n[components.t]\nadapter = \"ssh-tunnel\"\ntunnel = { via = \"mac\", target = \"m.http\", listen_port = 18080 }\n",
            &[],
            &[(TunnelUnresolved, "\"mac\", target")],
        ),
    ]);
}

/// Agent hosts need no address (other hosts reach them at their name), roles
/// default to `component` and are left out of the serialised topology then.
#[test]
fn agent_hosts_and_roles() {
    let (_, t) = run(
        "[hosts.mac]\ntransport = \"agent\"\nrole = \"control\"\n[hosts.pi]\ntransport = \"agent\"\n[components.m]\nhost = \"pi\"\ncommand = [\"m\"]\n",
        &[],
    );
    let t = t.unwrap();
    let mac = &t.hosts["mac"];
    assert_eq!(mac.address, "mac");
    assert_eq!(mac.role, flotilla_model::inventory::HostRole::Control);
    assert!(mac.is_remote());
    let pi = serde_json::to_value(&t.hosts["pi"]).unwrap();
    assert_eq!(pi["transport"], "agent");
    assert!(pi.get("role").is_none(), "{pi}");
    assert_eq!(serde_json::to_value(mac).unwrap()["role"], "control");
}

/// `restart`: defaults filled; in the component's runtime config (a changed policy
/// changes the config digest), absent from it when not declared.
#[test]
fn restart_policies_resolve_with_defaults() {
    let (_, t) = run(
        "[components.a]\ncommand = [\"a\"]\nrestart = { policy = \"always\", backoff = \"250ms\" }\n[components.b]\ncommand = [\"b\"]\nrestart = {}\n[components.c]\ncommand = [\"c\"]\n",
        &[],
    );
    let t = t.unwrap();
    let get = |n: &str| t.component(t.id(n).unwrap());
    let a = get("a").restart.unwrap();
    assert_eq!(
        (a.policy, a.backoff_ms, a.max_backoff_ms, a.max_restarts),
        (
            flotilla_model::inventory::RestartPolicy::Always,
            250,
            300_000,
            10
        )
    );
    assert_eq!(a.delay_ms(0), 250);
    assert_eq!(a.delay_ms(3), 2_000);
    assert_eq!(a.delay_ms(40), 300_000);
    assert!(a.window_ms() >= 10 * 250);
    let b = get("b").restart.unwrap();
    assert_eq!(
        (b.policy, b.backoff_ms),
        (flotilla_model::inventory::RestartPolicy::OnFailure, 1_000)
    );
    assert!(get("c").restart.is_none());
    assert!(!get("c").runtime_config().contains("restart"));
    assert!(get("a")
        .runtime_config()
        .contains("\"restart\":{\"backoff_ms\":250,"));
    let (_, t2) = run(
        "[components.a]\ncommand = [\"a\"]\nrestart = { policy = \"on-failure\", backoff = \"250ms\" }\n",
        &[],
    );
    let t2 = t2.unwrap();
    assert_ne!(
        t2.component(t2.id("a").unwrap()).config_digest(),
        get("a").config_digest()
    );
    // Without it, the config (and its digest) is what it was before `restart` existed.
    let c = serde_json::to_value(t.component(t.id("c").unwrap())).unwrap();
    assert!(c.get("restart").is_none());
}

#[test]
fn draft_phase() {
    use Code::*;
    table(&[
        (
            "unknown host",
            "[hosts.studio]\ntransport = \"ssh\"\n[components.a]\nhost = \"stuido\"\ncommand = [\"a\"]\n",
            &[],
            &[(UnknownHost, "\"stuido\"")],
        ),
        (
            "external component with lifecycle keys",
            "[components.db]\nowner = \"external\"\ncommand = [\"pg\"]\nstop = { signal = \"SIGINT\" }\n",
            &[],
            &[(ExternalLifecycle, "command"), (ExternalLifecycle, "stop")],
        ),
        (
            "restart on an external component",
            "[components.db]\nowner = \"external\"\nrestart = { policy = \"always\" }\n",
            &[],
            &[(ExternalLifecycle, "restart =")],
        ),
        (
            "restart durations and policy",
            "[components.a]\ncommand = [\"a\"]\nrestart = { backoff = \"0s\" }\n[components.b]\ncommand = [\"b\"]\nrestart = { backoff = \"10m\" }\n[components.c]\ncommand = [\"c\"]\nrestart = { backoff = \"2s\", max_backoff = \"1s\" }\n[components.d]\ncommand = [\"d\"]\nrestart = { policy = \"sometimes\", max_restarts = -1 }\n",
            &[],
            &[
                (InvalidValue, "\"0s\""),
                (InvalidValue, "\"10m\""),
                (InvalidValue, "\"2s\""),
                (InvalidValue, "\"sometimes\""),
                (InvalidValue, "-1"),
            ],
        ),
        (
            "restart on a unit or plist Flotilla does not write",
            "[components.u]\nadapter = \"systemd\"\nsystemd = { unit = \"x.service\" }\nrestart = {}\n[components.j]\nadapter = \"launchd\"\nlaunchd = { label = \"x\", plist = \"x.plist\" }\nrestart = { policy = \"always\" }\n",
            &[],
            &[(InvalidValue, "restart = {}"), (InvalidValue, "restart = { policy")],
        ),
        (
            "managed component with no way to start",
            "[components.lonely]\ndescription = \"nothing to run\"\n",
            &[],
            &[(NoStartMethod, "lonely]")],
        ),
        (
            "empty program",
            "[components.a]\ncommand = [\"\", \"x\"]\n",
            &[],
            &[(NoStartMethod, "\"\"")],
        ),
        (
            "adapter-specific table on the wrong adapter",
            "[components.a]\ncommand = [\"a\"]\nsystemd = { unit = \"a.service\" }\n",
            &[],
            &[(InvalidValue, "systemd")],
        ),
        (
            "unknown profile",
            "[components.a]\ncommand = [\"a\"]\nprofile = \"fast\"\n[components.a.profiles.slow]\ncommand = [\"a\", \"--slow\"]\n",
            &[],
            &[(UnknownProfile, "\"fast\"")],
        ),
        (
            "type errors are each reported, the entry still checked",
            "[components.a]\ncommand = \"a\"\nhost = \"nowhere\"\n[components.b]\ncommand = [\"b\"]\nstop = { grace_period = \"soon\" }\n",
            &[],
            &[
                (InvalidValue, "\"a\"\n"),
                (UnknownHost, "\"nowhere\""),
                (InvalidValue, "\"soon\""),
            ],
        ),
        (
            "a broken stack entry",
            "[components.a]\ncommand = [\"a\"]\n[stacks.s]\ncomponents = \"a\"\n",
            &[],
            &[(InvalidValue, "\"a\"\n")],
        ),
    ]);
}

const WHISPER: &str = "command = [\"whisper\", \"--port\", \"${params.port}\"]\nendpoints = { http = \"http://127.0.0.1:${params.port}\" }\n[params]\nmodel = { type = \"path\" }\nport = { type = \"port\", default = 8090 }\n";

#[test]
fn references_phase() {
    use Code::*;
    table(&[
        (
            "connection to an unknown component",
            "[components.a]\ncommand = [\"a\"]\nconnections = { up = \"ghost.http\" }\n",
            &[],
            &[(UnknownDependency, "\"ghost.http\"")],
        ),
        (
            "connection to an unknown endpoint",
            "[components.llm]\ncommand = [\"llm\"]\nendpoints = { http = \"http://127.0.0.1:8080\" }\n[components.a]\ncommand = [\"a\"]\nconnections = { up = \"llm.grpc\" }\n",
            &[],
            &[(UnknownEndpoint, "\"llm.grpc\"")],
        ),
        (
            "connection that is not component.endpoint",
            "[components.a]\ncommand = [\"a\"]\nconnections = { up = \"nodot\" }\n",
            &[],
            &[(InvalidValue, "\"nodot\"")],
        ),
        (
            "unknown dependency",
            "[components.a]\ncommand = [\"a\"]\ndepends_on = [\"b\", \"ghost\"]\n[components.b]\ncommand = [\"b\"]\n",
            &[],
            &[(UnknownDependency, "\"ghost\"")],
        ),
        (
            "unknown and mistyped built-in template parameters",
            "[components.llm]\ntemplate = \"llama-server\"\nparams = { model = \"m.gguf\", port = \"8080\", ctx = 4096 }\n",
            &[],
            &[(InvalidTemplateParam, "\"8080\""), (InvalidTemplateParam, "ctx")],
        ),
        (
            "unknown template",
            "[components.a]\ntemplate = \"lama-server\"\n",
            &[],
            &[(UnknownTemplate, "\"lama-server\"")],
        ),
        (
            "params without a template",
            "[components.a]\ncommand = [\"a\"]\nparams = { x = 1 }\n",
            &[],
            &[(InvalidTemplateParam, "params")],
        ),
        (
            "user template: unknown parameter",
            "[components.stt]\ntemplate = \"whisper\"\nparams = { model = \"m\", modle = \"x\" }\n",
            &[("whisper", WHISPER)],
            &[(InvalidTemplateParam, "modle")],
        ),
        (
            "user template: missing required parameter",
            "[components.stt]\ntemplate = \"whisper\"\n",
            &[("whisper", WHISPER)],
            &[(InvalidTemplateParam, "\"whisper\"\n")],
        ),
        (
            "user template referencing an undeclared parameter",
            "[components.a]\ncommand = [\"a\"]\n",
            &[(
                "broken",
                "command = [\"x\", \"${params.nope}\"]\n[params]\nname = { type = \"string\" }\n",
            )],
            &[(UnknownReference, "\"${params.nope}\"")],
        ),
        (
            "unknown ${...} references",
            "[components.a]\ncommand = [\"a\", \"${connections.up}\"]\nenv = { X = \"${endpoints.http.port}\" }\nendpoints = { grpc = \"127.0.0.1:9000\" }\n",
            &[],
            &[
                (UnknownReference, "\"${connections.up}\""),
                (UnknownReference, "\"${endpoints.http.port}\""),
            ],
        ),
        (
            "endpoint referencing what endpoints may not",
            "[components.a]\ncommand = [\"a\"]\nendpoints = { http = \"http://${connections.x}:80\" }\n",
            &[],
            &[(UnknownReference, "\"http://${connections.x}:80\"")],
        ),
        (
            "tunnel through an unknown host, to a missing endpoint",
            "[hosts.studio]\ntransport = \"ssh\"\n[components.llm]\nhost = \"studio\"\ncommand = [\"llm\"]\nendpoints = { http = \"http://127.0.0.1:8080\" }\n[components.t1]\nadapter = \"ssh-tunnel\"\ntunnel = { via = \"nowhere\", target = \"llm.http\", listen_port = 18080 }\n[components.t2]\nadapter = \"ssh-tunnel\"\ntunnel = { via = \"studio\", target = \"llm.grpc\", listen_port = 18081 }\n",
            &[],
            &[(TunnelUnresolved, "\"nowhere\""), (TunnelUnresolved, "\"llm.grpc\"")],
        ),
    ]);
}

#[test]
fn probes_phase() {
    use Code::*;
    table(&[
        (
            "probe naming an endpoint the component lacks",
            "[components.a]\ncommand = [\"a\"]\nendpoints = { http = \"http://127.0.0.1:8080\" }\nreadiness = { http = { endpoint = \"api\" } }\n",
            &[],
            &[(UnknownEndpoint, "\"api\"")],
        ),
        (
            "request probe to another component's missing endpoint",
            "[components.b]\ncommand = [\"b\"]\nendpoints = { http = \"http://127.0.0.1:8081\" }\n[components.a]\ncommand = [\"a\"]\nliveness = { request = { endpoint = \"b.grpc\" } }\n",
            &[],
            &[(UnknownEndpoint, "\"b.grpc\"")],
        ),
        (
            "no check, and two checks",
            "[components.a]\ncommand = [\"a\"]\nendpoints = { http = \"http://127.0.0.1:8080\" }\nreadiness = { period = \"1s\" }\nliveness = { process = {}, tcp = { endpoint = \"http\" } }\n",
            &[],
            &[(InvalidProbe, "{ period"), (InvalidProbe, "{ process")],
        ),
        (
            "process check of an external component",
            "[components.db]\nowner = \"external\"\nreadiness = { process = {} }\n",
            &[],
            &[(InvalidProbe, "{} }")],
        ),
        (
            "bad regex, method, thresholds",
            "[components.a]\ncommand = [\"a\"]\nendpoints = { http = \"http://127.0.0.1:8080\" }\nreadiness = { log = { pattern = \"(unclosed\" } }\nliveness = { request = { endpoint = \"http\", method = \"FETCH\" } }\n[components.b]\ncommand = [\"b\"]\nreadiness = { process = {}, failure_threshold = 0 }\n",
            &[],
            &[
                (InvalidValue, "\"(unclosed\""),
                (InvalidValue, "\"FETCH\""),
                (InvalidValue, "0 }"),
            ],
        ),
        (
            "an inline target and an endpoint, and neither",
            "[components.a]\ncommand = [\"a\"]\nendpoints = { http = \"http://127.0.0.1:8080\" }\nreadiness = { http = { endpoint = \"http\", url = \"http://127.0.0.1:8080/\" } }\nliveness = { tcp = { stays_open = \"1s\" } }\n",
            &[],
            &[(InvalidProbe, "{ endpoint = \"http\", url"), (InvalidProbe, "{ stays_open")],
        ),
        (
            "inline urls that are not http URLs, a path beside a url",
            "[components.a]\nowner = \"external\"\nreadiness = { http = { url = \"127.0.0.1:8080/health\" } }\nliveness = { http = { url = \"ftp://127.0.0.1:21/\" } }\n[components.b]\nowner = \"external\"\nreadiness = { http = { url = \"http://:8080/\" } }\nliveness = { http = { url = \"http://127.0.0.1:9/\", path = \"/health\" } }\n",
            &[],
            &[
                (InvalidValue, "\"127.0.0.1:8080/health\""),
                (InvalidValue, "\"ftp://"),
                (InvalidValue, "\"http://:8080/\""),
                (InvalidProbe, "\"/health\""),
            ],
        ),
        (
            "inline addresses without a port, with a scheme, an unknown reference",
            "[components.a]\nowner = \"external\"\nreadiness = { tcp = { address = \"db.internal\" } }\nliveness = { tcp = { address = \"tcp://127.0.0.1:5432\" } }\n[components.b]\nowner = \"external\"\nreadiness = { tcp = { address = \"${db.port}\" } }\n",
            &[],
            &[
                (InvalidValue, "\"db.internal\""),
                (InvalidValue, "\"tcp://"),
                (UnknownReference, "\"${db.port}\""),
            ],
        ),
        (
            "stack probes: a tcp check, a missing endpoint",
            "[components.a]\ncommand = [\"a\"]\nendpoints = { http = \"http://127.0.0.1:8080\" }\n[stacks.s]\ncomponents = [\"a\"]\nreadiness = [{ tcp = { endpoint = \"http\" } }, { request = { endpoint = \"a.nope\" } }]\n",
            &[],
            &[(InvalidProbe, "{ tcp"), (UnknownEndpoint, "\"a.nope\"")],
        ),
    ]);
}

/// A probe's `http` and `tcp` checks may give their target inline (`url`,
/// `address`) instead of naming an endpoint; `${host.address}`, `${host.name}`,
/// `${component.name}` and a template's `${params.NAME}` are substituted in it.
#[test]
fn inline_probe_targets_resolve() {
    use flotilla_model::topology::Check;
    let inventory = "[hosts.gpu]\ntransport = \"ssh\"\naddress = \"10.0.0.7\"\n[components.db]\nowner = \"external\"\nreadiness = { tcp = { address = \"127.0.0.1:5432\" } }\nliveness = { tcp = { address = \"[::1]:5432\" } }\n[components.api]\nowner = \"external\"\nhost = \"gpu\"\nreadiness = { http = { url = \"http://${host.address}:8080/health\" } }\nliveness = { http = { url = \"https://${component.name}.example\" } }\n[components.side]\ntemplate = \"probed\"\nparams = { port = 9000 }\n";
    let template = "params = { port = { type = \"port\" } }\nowner = \"external\"\n[readiness]\nhttp = { url = \"http://127.0.0.1:${params.port}/ready\" }\n";
    let (_, result) = run(inventory, &[("probed", template)]);
    let topology = result.unwrap_or_else(|d| panic!("{d:#?}"));
    let check = |name: &str, readiness: bool| {
        let c = topology.component(topology.id(name).unwrap_or_else(|| panic!("{name}")));
        let p = if readiness { &c.readiness } else { &c.liveness };
        p.as_ref().expect("a probe").check.clone()
    };
    let tcp = |address: &str| Check::Tcp {
        address: address.into(),
        endpoint: None,
        stays_open: None,
    };
    assert_eq!(check("db", true), tcp("127.0.0.1:5432"));
    assert_eq!(check("db", false), tcp("[::1]:5432"));
    let url = |c: Check| match c {
        Check::Http { url, endpoint, .. } => {
            assert_eq!(endpoint, None);
            url
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(url(check("api", true)), "http://10.0.0.7:8080/health");
    assert_eq!(url(check("api", false)), "https://api.example/");
    assert_eq!(url(check("side", true)), "http://127.0.0.1:9000/ready");
    assert_eq!(
        check("api", true).target(),
        "GET http://10.0.0.7:8080/health"
    );
}

#[test]
fn graph_phase() {
    use Code::*;
    table(&[
        (
            "a two-component cycle",
            "[components.a]\ncommand = [\"run-a\"]\ndepends_on = [\"b\"]\n[components.b]\ncommand = [\"run-b\"]\ndepends_on = [\"a\"]\n",
            &[],
            &[(DependencyCycle, "\"b\"]")],
        ),
        (
            "a self-dependency",
            "[components.solo]\ncommand = [\"s\"]\ndepends_on = [\"solo\"]\n",
            &[],
            &[(DependencyCycle, "\"solo\"")],
        ),
        (
            "a cycle through a connection, reported once, from its smallest name",
            "[components.x]\ncommand = [\"x\"]\nendpoints = { http = \"http://127.0.0.1:9001\" }\nconnections = { up = \"z.http\" }\n[components.z]\ncommand = [\"z\"]\nendpoints = { http = \"http://127.0.0.1:9002\" }\ndepends_on = [\"y\"]\n[components.y]\ncommand = [\"y\"]\ndepends_on = [\"x\"]\n",
            &[],
            &[(DependencyCycle, "\"z.http\"")],
        ),
        (
            "two components claim one port on one host: at the later one's port",
            "[components.a]\ncommand = [\"a\"]\nendpoints = { http = \"http://127.0.0.1:8080\" }\n[components.b]\ncommand = [\"b\"]\nendpoints = { api = \"http://0.0.0.0:8080/v1\" }\n",
            &[],
            &[(PortConflict, "8080/v1")],
        ),
        (
            "unknown stack member",
            "[components.llm]\ncommand = [\"llm\"]\n[stacks.chat]\ncomponents = [\"llm\", \"prxy\"]\n",
            &[],
            &[(UnknownStackMember, "\"prxy\"")],
        ),
        (
            "a stack and a component with one name",
            "[components.chat]\ncommand = [\"c\"]\n[stacks.chat]\ncomponents = [\"chat\"]\n",
            &[],
            &[(AmbiguousName, "chat]\ncomponents")],
        ),
    ]);
}

#[test]
fn cycle_message_names_the_path_and_each_edge() {
    let (sources, result) = run(
        "[components.b]\ncommand = [\"b\"]\ndepends_on = [\"c\"]\n[components.c]\ncommand = [\"c\"]\ndepends_on = [\"a\"]\n[components.a]\ncommand = [\"a\"]\ndepends_on = [\"b\"]\n",
        &[],
    );
    let diags = result.expect_err("a cycle");
    assert_eq!(diags.len(), 1, "{diags:#?}");
    let d = diags[0].locate(&sources);
    assert_eq!(d.message, "dependency cycle: a → b → c → a");
    assert_eq!(d.location.expect("located").start.line, 9);
    let labels: Vec<(String, usize)> = d
        .labels
        .iter()
        .map(|l| (l.message.clone(), l.location.start.line))
        .collect();
    assert_eq!(
        labels,
        [
            ("`b` depends on `c` here".to_string(), 3),
            ("`c` depends on `a` here".to_string(), 6)
        ]
    );
}

/// A type error (or any broken key) hides only the checks that depend on it: every
/// other problem of the same inventory is still reported, in one run.
#[test]
fn a_broken_key_hides_only_what_depends_on_it() {
    use Code::*;
    table(&[
        (
            "a type error, a port conflict and an unknown endpoint in four components",
            "[components.a]\ncommand = [\"a\"]\ndepends_on = \"llm\"\n[components.b]\ncommand = [\"b\"]\nendpoints = { http = \"http://127.0.0.1:8080\" }\n[components.c]\ncommand = [\"c\"]\nendpoints = { http = \"http://127.0.0.1:8080/v1\" }\n[components.d]\ncommand = [\"d\"]\nconnections = { up = \"b.nope\" }\n",
            &[],
            &[
                (InvalidValue, "\"llm\""),
                (PortConflict, "8080/v1"),
                (UnknownEndpoint, "\"b.nope\""),
            ],
        ),
        (
            "compose's depends_on map, a port conflict and an unknown endpoint",
            "[components.a]\ncommand = [\"a\"]\ndepends_on = { llm = { condition = \"service_healthy\" } }\n[components.b]\ncommand = [\"b\"]\nendpoints = { http = \"http://127.0.0.1:8080\" }\n[components.c]\ncommand = [\"c\"]\nendpoints = { http = \"http://127.0.0.1:8080/v1\" }\n[components.d]\ncommand = [\"d\"]\nconnections = { up = \"b.nope\" }\n",
            &[],
            &[
                (InvalidValue, "{ llm"),
                (PortConflict, "8080/v1"),
                (UnknownEndpoint, "\"b.nope\""),
            ],
        ),
        (
            "a cycle does not hide unknown references in other components",
            "[components.a]\ncommand = [\"a\"]\ndepends_on = [\"b\"]\n[components.b]\ncommand = [\"b\"]\ndepends_on = [\"a\"]\n[components.c]\ncommand = [\"c\", \"${connections.nope}\"]\n",
            &[],
            &[
                (DependencyCycle, "\"b\"]\n[components.b]"),
                (UnknownReference, "\"${connections.nope}\""),
            ],
        ),
        (
            "a component that cannot be finished does not hide the next one's references",
            "[components.a]\ncommand = [\"a\", \"${endpoints.http.port}\"]\nendpoints = { http = 8080 }\n[components.b]\ncommand = [\"b\", \"${connections.nope}\"]\n",
            &[],
            &[
                (InvalidValue, "8080"),
                (UnknownReference, "\"${connections.nope}\""),
            ],
        ),
        (
            "a broken endpoint hides only itself",
            "[components.a]\ncommand = [\"a\", \"${endpoints.grpc.port}\", \"${endpoints.api}\"]\nendpoints = { http = \"http://127.0.0.1:8080\", grpc = 9000 }\nreadiness = { tcp = { endpoint = \"grpc\" } }\nliveness = { tcp = { endpoint = \"admin\" } }\n[components.b]\ncommand = [\"b\"]\nconnections = { x = \"a.grpc\", y = \"a.ap\" }\n",
            &[],
            &[
                (UnknownReference, "\"${endpoints.api}\""),
                (InvalidValue, "9000"),
                (UnknownEndpoint, "\"admin\""),
                (UnknownEndpoint, "\"a.ap\""),
            ],
        ),
        (
            "a required key missing in a nested table sets that table aside, not the entry",
            "[components.a]\ncommand = [\"a\"]\ndepends_on = [\"b\"]\nreadiness = { log = { } }\n[components.b]\ncommand = [\"b\"]\ndepends_on = [\"a\"]\n",
            &[],
            &[(DependencyCycle, "\"b\"]\nreadiness"), (MissingKey, "{ } }")],
        ),
        (
            "a tunnel missing its target still has its dependencies checked",
            "[hosts.gpu]\ntransport = \"ssh\"\n[components.t]\nadapter = \"ssh-tunnel\"\ntunnel = { via = \"gpu\", listen_port = 18080 }\ndepends_on = [\"ghost\"]\n",
            &[],
            &[(MissingKey, "{ via"), (UnknownDependency, "\"ghost\"")],
        ),
        (
            "a template that cannot be expanded is set aside, the rest is checked",
            "[components.llm]\ntemplate = \"llama-server\"\nparams = { port = 9000 }\ndepends_on = [\"ghost\"]\n[components.a]\ncommand = [\"a\"]\nendpoints = { http = \"http://127.0.0.1:7000\" }\n[components.b]\ncommand = [\"b\"]\nendpoints = { http = \"http://127.0.0.1:7000/v1\" }\nconnections = { x = \"llm.http\" }\n",
            &[],
            &[
                (InvalidTemplateParam, "{ port = 9000 }"),
                (UnknownDependency, "\"ghost\""),
                (PortConflict, "7000/v1"),
            ],
        ),
        (
            "an unknown template is set aside too",
            "[components.a]\ntemplate = \"lama-server\"\ndepends_on = [\"ghost\"]\n",
            &[],
            &[(UnknownTemplate, "\"lama-server\""), (UnknownDependency, "\"ghost\"")],
        ),
        (
            "a user template with a broken key is set aside, its errors reported once",
            "[components.stt]\ntemplate = \"whisper\"\ndepends_on = [\"ghost\"]\n",
            &[(
                "whisper",
                "command = [\"whisper\"]\nendpoints = { http = \"http://127.0.0.1:8090\" }\nreadiness = { http = { path = \"/\" } }\n",
            )],
            &[(UnknownDependency, "\"ghost\""), (InvalidProbe, "{ path")],
        ),
        (
            "a stack with a broken key still has its members checked",
            "[components.a]\ncommand = [\"a\"]\n[stacks.s]\ndescription = 5\ncomponents = [\"a\", \"nope\"]\n",
            &[],
            &[(InvalidValue, "5\n"), (UnknownStackMember, "\"nope\"")],
        ),
        (
            "a broken probe check is reported once",
            "[components.a]\ncommand = [\"a\"]\nreadiness = { http = 5 }\n",
            &[],
            &[(InvalidValue, "5 }")],
        ),
        (
            "probes naming a broken component's endpoints are not reported again",
            "[components.a]\ncommand = [\"a\"]\nendpoints = 8080\n[components.b]\ncommand = [\"b\"]\nliveness = { request = { endpoint = \"a.http\" } }\n[stacks.s]\ncomponents = [\"a\", \"b\"]\nreadiness = [{ request = { endpoint = \"a.http\", path = \"/\" } }]\n",
            &[],
            &[(InvalidValue, "8080")],
        ),
    ]);
}

/// Errors (message and help joined) of an inventory.
fn error_texts(inventory: &str) -> Vec<(Code, String)> {
    let (_, result) = run(inventory, &[]);
    result
        .expect_err("invalid")
        .into_iter()
        .filter(|d| d.severity == Severity::Error)
        .map(|d| {
            (
                d.code,
                format!("{}\nhelp: {}", d.message, d.help.unwrap_or_default()),
            )
        })
        .collect()
}

/// A type error says what form the key takes, with an example built from what was
/// written (in the inventory's own syntax), located at the value.
#[test]
fn type_errors_show_the_expected_form() {
    use Code::*;
    // (name, inventory, code, where, what the message and help say)
    let cases: &[(&str, &str, Code, &str, &[&str])] = &[
        (
            "depends_on as a string",
            "[components.a]\ncommand = [\"a\"]\ndepends_on = \"llm\"\n",
            InvalidValue,
            "\"llm\"",
            &[
                "component `a`: `depends_on` is a list of component names, not a string",
                "write `depends_on = [\"llm\"]`",
                "waits until it is ready",
                "no `condition` to set",
                "service_healthy",
            ],
        ),
        (
            "depends_on in docker compose's long form",
            "[components.a]\ncommand = [\"a\"]\ndepends_on = { llm = { condition = \"service_healthy\" }, db = { condition = \"service_started\" } }\n",
            InvalidValue,
            "{ llm",
            &[
                "`depends_on` is a list of component names, not a table (docker compose's long form)",
                "write `depends_on = [\"db\", \"llm\"]`",
                "no `condition` to set",
            ],
        ),
        (
            "command as a string",
            "[components.llm]\ncommand = \"llama-server --port 8080\"\n",
            InvalidValue,
            "\"llama-server",
            &[
                "component `llm`: `command` is a list of arguments (argv), not a string",
                "write `command = [\"llama-server\", \"--port\", \"8080\"]`",
                "split as a shell would",
                "check the split",
            ],
        ),
        (
            "command with quotes",
            "[components.llm]\ncommand = \"server -m '/models/my model.gguf' --alias \\\"big one\\\"\"\n",
            InvalidValue,
            "\"server",
            &["`command = [\"server\", \"-m\", \"/models/my model.gguf\", \"--alias\", \"big one\"]`"],
        ),
        (
            "command with shell syntax",
            "[components.llm]\ncommand = \"llama-server --port 8080 | tee log\"\n",
            InvalidValue,
            "\"llama-server",
            &[
                "shell syntax (`|`)",
                "`command = [\"sh\", \"-c\", \"llama-server --port 8080 | tee log\"]`",
            ],
        ),
        (
            "a profile's command as a string",
            "[components.a]\ncommand = [\"a\"]\n[components.a.profiles.fast]\ncommand = \"a --fast\"\n",
            InvalidValue,
            "\"a --fast\"",
            &["`command = [\"a\", \"--fast\"]`"],
        ),
        (
            "env as docker compose's list",
            "[components.a]\ncommand = [\"a\"]\nenv = [\"A=1\", \"B=two words\", \"HF_TOKEN\"]\n",
            InvalidValue,
            "[\"A=1\"",
            &[
                "`env` is a table of NAME = value, not a list (docker compose's list form)",
                "write `env = { A = \"1\", B = \"two words\" }`",
                "`HF_TOKEN` has no value: to take it from the environment Flotilla runs in",
                "`inherit_env = [\"HF_TOKEN\"]`",
                "`HF_TOKEN = { secret = \"HF_TOKEN\" }`",
            ],
        ),
        (
            "endpoints as a list",
            "[components.a]\ncommand = [\"a\"]\nendpoints = [\"8080:80\", \"http://127.0.0.1:9000/v1\"]\n",
            InvalidValue,
            "[\"8080:80\"",
            &[
                "`endpoints` is a table of named addresses, not a list",
                "write `endpoints = { http = \"http://127.0.0.1:8080\", http-2 = \"http://127.0.0.1:9000/v1\" }`",
            ],
        ),
        (
            "a shell-style reference",
            "[components.a]\ncommand = [\"a\", \"--port\", \"${PORT}\"]\n",
            UnknownReference,
            "\"${PORT}\"",
            &[
                "unknown reference `${PORT}`",
                "did you mean `${env.PORT}` (the environment flotilla runs in)?",
            ],
        ),
        (
            "restart as a policy name",
            "[components.a]\ncommand = [\"a\"]\nrestart = \"always\"\n",
            InvalidValue,
            "\"always\"",
            &[
                "component `a`: `restart` is a table, not a string",
                "write `restart = { policy = \"always\" }`",
            ],
        ),
        (
            "a probe as a URL",
            "[components.a]\ncommand = [\"a\"]\nreadiness = \"http://127.0.0.1:8080/health\"\n",
            InvalidValue,
            "\"http://",
            &[
                "`readiness` is a table, not a string",
                "write `readiness = { http = { url = \"http://127.0.0.1:8080/health\" }, period = \"1s\" }`",
            ],
        ),
        (
            "an http check as a URL",
            "[components.a]\ncommand = [\"a\"]\nreadiness = { http = \"http://127.0.0.1:1/health\" }\n",
            InvalidValue,
            "\"http://",
            &[
                "`http` is a table, not a string",
                "write `http = { url = \"http://127.0.0.1:1/health\" }`",
                "or name one of the component's endpoints: `http = { endpoint = \"http\", path = \"/health\" }`",
            ],
        ),
        (
            "a tcp check as an address",
            "[components.a]\ncommand = [\"a\"]\nliveness = { tcp = \"127.0.0.1:5432\" }\n",
            InvalidValue,
            "\"127.0.0.1:5432\"",
            &[
                "`tcp` is a table, not a string",
                "write `tcp = { address = \"127.0.0.1:5432\" }`",
            ],
        ),
        (
            "max_restarts as a string",
            "[components.a]\ncommand = [\"a\"]\nrestart = { policy = \"always\", max_restarts = \"3\" }\n",
            InvalidValue,
            "\"3\"",
            &[
                "`max_restarts` is a whole number of restarts in a row (0 or more), not a string",
                "write `max_restarts = 3`",
            ],
        ),
        (
            "host as a list",
            "[components.a]\ncommand = [\"a\"]\nhost = [\"gpu1\"]\n",
            InvalidValue,
            "[\"gpu1\"]",
            &["`host` is a string, not a list", "write `host = \"gpu1\"`"],
        ),
        (
            "cwd as a number",
            "[components.a]\ncommand = [\"a\"]\ncwd = 5\n",
            InvalidValue,
            "5",
            &["`cwd` is a string, not", "write `cwd = \"/srv/llm\"`"],
        ),
        (
            "template as a table",
            "[components.a]\ntemplate = { name = \"llama-server\" }\n",
            InvalidValue,
            "{ name",
            &["`template` is a string, not a table", "write `template = \"llama-server\"`"],
        ),
        (
            "labels in docker compose's list form",
            "[components.a]\ncommand = [\"a\"]\nlabels = [\"team=ml\", \"tier=gpu\"]\n",
            InvalidValue,
            "[\"team=ml\"",
            &["`labels` is a table, not a list", "write `labels = { team = \"ml\", tier = \"gpu\" }`"],
        ),
        (
            "inherit_env as a string",
            "[components.a]\ncommand = [\"a\"]\ninherit_env = \"PATH\"\n",
            InvalidValue,
            "\"PATH\"",
            &["`inherit_env` is a list of variable names, not a string", "write `inherit_env = [\"PATH\"]`"],
        ),
        (
            "a host's port as a string",
            "[hosts.gpu1]\ntransport = \"ssh\"\naddress = \"10.0.0.5\"\nport = \"2222\"\n[components.a]\ncommand = [\"a\"]\n",
            InvalidValue,
            "\"2222\"",
            &["`port` is a whole number from 1 to 65535, not a string", "write `port = 2222`"],
        ),
        (
            "a host's labels as a string",
            "[hosts.gpu1]\ntransport = \"ssh\"\naddress = \"10.0.0.5\"\nlabels = \"gpu\"\n[components.a]\ncommand = [\"a\"]\n",
            InvalidValue,
            "\"gpu\"",
            &["`labels` is a table, not a string"],
        ),
        (
            "a label as a number",
            "[components.a]\ncommand = [\"a\"]\nlabels = { gpu = 1 }\n",
            InvalidValue,
            "1 }",
            &["label `gpu` is a string, not", "write `gpu = \"1\"`"],
        ),
        (
            "a duration as a number",
            "[components.a]\ncommand = [\"a\"]\nstop = { grace_period = 5 }\n",
            InvalidValue,
            "5 }",
            &[
                "`grace_period` is a duration: a string with its unit, not an integer",
                "write `grace_period = \"5s\"`",
            ],
        ),
        (
            "a duration without its unit",
            "[components.a]\ncommand = [\"a\"]\nstop = { grace_period = \"5x\" }\n",
            InvalidValue,
            "\"5x\"",
            &["`grace_period` is a duration with its unit (`500ms`, `5s`, `2m`, `1h`); `5x` is not one"],
        ),
        (
            "an endpoint as a port number",
            "[components.a]\ncommand = [\"a\"]\nendpoints = { http = 8080 }\n",
            InvalidValue,
            "8080",
            &[
                "endpoint `http` is an address (a URL or host:port string), not an integer",
                "write `http = \"http://127.0.0.1:8080\"`",
            ],
        ),
        (
            "docker compose's ports",
            "[components.a]\ncommand = [\"a\"]\nports = [\"127.0.0.1:8080:80\"]\n",
            UnknownKey,
            "ports",
            &[
                "unknown key `ports`",
                "Flotilla has no `ports`",
                "`endpoints = { http = \"http://127.0.0.1:8080\" }`",
            ],
        ),
        (
            "docker compose's environment",
            "[components.a]\ncommand = [\"a\"]\nenvironment = { A = \"1\" }\n",
            UnknownKey,
            "environment",
            &["Flotilla calls it `env`: write `env = { A = \"1\" }`"],
        ),
        (
            "examples in JSON for a JSON inventory",
            "{ \"components\": { \"a\": { \"command\": \"x --y\", \"depends_on\": \"llm\" } } }",
            InvalidValue,
            "\"x --y\"",
            &["`\"command\": [\"x\", \"--y\"]`"],
        ),
    ];
    let mut failures = Vec::new();
    for (name, inventory, code, snippet, says) in cases {
        if let Err(e) = check(inventory, &[], &[(*code, snippet)]).or_else(|e| {
            // The JSON case has a second error (depends_on), checked below.
            if inventory.starts_with('{') {
                check(
                    inventory,
                    &[],
                    &[(*code, snippet), (InvalidValue, "\"llm\"")],
                )
            } else {
                Err(e)
            }
        }) {
            failures.push(format!("case `{name}`: {e}"));
            continue;
        }
        let texts = error_texts(inventory);
        let text = &texts.iter().find(|(c, _)| c == code).expect("the error").1;
        for s in *says {
            if !text.contains(s) {
                failures.push(format!("case `{name}`: {s:?} not in\n{text}"));
            }
        }
    }
    let json = error_texts(
        "{ \"components\": { \"a\": { \"command\": [\"a\"], \"depends_on\": \"llm\" } } }",
    );
    assert!(
        json[0].1.contains("`\"depends_on\": [\"llm\"]`"),
        "{json:?}"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// (name, inventory, user templates, the error at, its label at, what help says)
type PortCase<'a> = (
    &'a str,
    &'a str,
    &'a [(&'a str, &'a str)],
    &'a str,
    &'a str,
    &'a str,
);

/// A port conflict is located at the port where it is written — the port in an
/// endpoint's URL, the template parameter that sets it (the active profile's first),
/// a tunnel's `listen_port` — at the later component in the file, with a label at the
/// earlier one's; a template's default port is located at `template`, saying so.
#[test]
fn a_port_conflict_points_at_both_ports() {
    let cases: &[PortCase] = &[
        (
            "ports in two endpoint URLs",
            "[components.a]\ncommand = [\"a\"]\nendpoints = { http = \"http://127.0.0.1:8080\" }\n[components.b]\ncommand = [\"b\"]\nendpoints = { api = \"http://0.0.0.0:8080/v1\" }\n",
            &[],
            "8080/v1",
            "8080\" }\n[components.b]",
            "give one of them another port",
        ),
        (
            "a built-in template's port parameter",
            "[components.a]\ncommand = [\"a\"]\nendpoints = { http = \"http://127.0.0.1:8081/x\" }\n[components.llm]\ntemplate = \"llama-server\"\nparams = { model = \"m.gguf\", port = 8081 }\n",
            &[],
            "8081 }",
            "8081/x",
            "give one of them another port",
        ),
        (
            "the active profile's port parameter",
            "[components.llm]\ntemplate = \"llama-server\"\nparams = { model = \"m.gguf\", port = 8080 }\nprofile = \"big\"\nprofiles.big = { params = { port = 8082 } }\n[components.x]\ncommand = [\"x\"]\nendpoints = { http = \"http://127.0.0.1:8082/x\" }\n",
            &[],
            "8082/x",
            "8082 } }",
            "give one of them another port",
        ),
        (
            "two templates' default ports",
            "[components.llm1]\ntemplate = \"llama-server\"\nparams = { model = \"a.gguf\" }\n[components.llm2]\ntemplate = \"llama-server\"\nparams = { model = \"b.gguf\" }\n",
            &[],
            "\"llama-server\"\nparams = { model = \"b.gguf\"",
            "\"llama-server\"\nparams = { model = \"a.gguf\"",
            "both are the default of template `llama-server`: set `params.port` on one of them",
        ),
        (
            "a template's default port against a written one",
            "[components.llm]\ntemplate = \"llama-server\"\nparams = { model = \"m.gguf\" }\n[components.x]\ncommand = [\"x\"]\nendpoints = { http = \"http://127.0.0.1:8080/x\" }\n",
            &[],
            "8080/x",
            "\"llama-server\"",
            "`llm`'s is the default of template `llama-server`: set `params.port` to change it",
        ),
        (
            "a user template's port parameter",
            "[components.stt]\ntemplate = \"whisper\"\nparams = { model = \"m\", port = 8085 }\n[components.x]\ncommand = [\"x\"]\nendpoints = { http = \"http://127.0.0.1:8085/x\" }\n",
            &[("whisper", WHISPER)],
            "8085/x",
            "8085 }",
            "give one of them another port",
        ),
        (
            "a tunnel's listen_port",
            "[hosts.gpu]\ntransport = \"ssh\"\n[components.llm]\nhost = \"gpu\"\ncommand = [\"llm\"]\nendpoints = { http = \"http://127.0.0.1:8080\" }\n[components.t]\nadapter = \"ssh-tunnel\"\ntunnel = { via = \"gpu\", target = \"llm.http\", listen_port = 9000 }\n[components.x]\ncommand = [\"x\"]\nendpoints = { http = \"http://127.0.0.1:9000/x\" }\n",
            &[],
            "9000/x",
            "9000 }",
            "give one of them another port",
        ),
        (
            "the ssh-tunnel template's listen_port",
            "[hosts.gpu]\ntransport = \"ssh\"\n[components.llm]\nhost = \"gpu\"\ncommand = [\"llm\"]\nendpoints = { http = \"http://127.0.0.1:8080\" }\n[components.x]\ncommand = [\"x\"]\nendpoints = { http = \"http://127.0.0.1:9001/x\" }\n[components.t]\ntemplate = \"ssh-tunnel\"\nparams = { via = \"gpu\", target = \"llm.http\", listen_port = 9001 }\n",
            &[],
            "9001 }",
            "9001/x",
            "give one of them another port",
        ),
        (
            "external-http's url parameter",
            "[components.e]\ntemplate = \"external-http\"\nparams = { url = \"http://127.0.0.1:7070/v1\" }\n[components.z]\ncommand = [\"z\"]\nendpoints = { http = \"http://127.0.0.1:7070/z\" }\n",
            &[],
            "7070/z",
            "7070/v1",
            "give one of them another port",
        ),
    ];
    let mut failures = Vec::new();
    for (name, inventory, templates, at, label_at, help) in cases {
        let (sources, result) = run(inventory, templates);
        let diags = result.expect_err("a port conflict");
        let conflicts: Vec<_> = diags
            .iter()
            .filter(|d| d.code == Code::PortConflict)
            .collect();
        let [d] = conflicts[..] else {
            failures.push(format!("case `{name}`: {diags:#?}"));
            continue;
        };
        let d = d.locate(&sources);
        let pos = |p: &flotilla_model::diag::Place| (p.file.clone(), p.start.line, p.start.column);
        let want = position_of(&sources, at).unwrap();
        let want_label = position_of(&sources, label_at).unwrap();
        let got = pos(d.location.as_ref().unwrap());
        let got_label = d.labels.first().map(|l| pos(&l.location));
        if got != want || got_label.as_ref() != Some(&want_label) {
            failures.push(format!(
                "case `{name}`: at {got:?} (want {want:?}), label at {got_label:?} (want {want_label:?})"
            ));
        }
        if !d.help.as_deref().unwrap_or("").contains(help) {
            failures.push(format!("case `{name}`: help {:?} lacks {help:?}", d.help));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn bytes_that_are_not_utf8_are_one_located_error() {
    let mut sources = Sources::new();
    let id = sources.add(SourceFile::from_bytes(
        "flotilla.toml",
        Format::Toml,
        b"[components.a]\ncommand = [\"a\"]\ndescription = \"caf\xc3\xa9 \xff\xfe\"\n".to_vec(),
    ));
    let diags = validate(&sources, id, &[]).expect_err("not UTF-8");
    assert_eq!(diags.len(), 1, "{diags:#?}");
    let d = diags[0].locate(&sources);
    assert_eq!(d.code, Code::NotUtf8);
    assert_eq!(
        d.message,
        "not valid UTF-8 at byte offset 52 (line 3, column 21): byte 0xff is not part of a valid character"
    );
    let p = d.location.expect("located");
    assert_eq!((p.start.line, p.start.column), (3, 21));
}

// ---------------------------------------------------------------------------
// Properties.

/// A random DAG: node `i` depends on some nodes before it (in topological index), by
/// `depends_on` (`false`) or a connection (`true`); `names[i]` is node `i`'s name,
/// shuffled so that name order and dependency order differ.
#[derive(Debug, Clone)]
struct Dag {
    names: Vec<String>,
    deps: Vec<Vec<(usize, bool)>>,
}

fn dag() -> impl Strategy<Value = Dag> {
    (1usize..=10).prop_flat_map(|n| {
        let perm = Just((0..n).collect::<Vec<usize>>()).prop_shuffle();
        let deps: Vec<_> = (0..n)
            .map(|i| {
                proptest::sample::subsequence((0..i).collect::<Vec<_>>(), 0..=i.min(3))
                    .prop_flat_map(|ups| {
                        let k = ups.len();
                        (Just(ups), proptest::collection::vec(any::<bool>(), k))
                    })
                    .prop_map(|(ups, kinds)| ups.into_iter().zip(kinds).collect::<Vec<_>>())
            })
            .collect();
        (perm, deps).prop_map(|(perm, deps)| Dag {
            names: perm.iter().map(|p| format!("c{p:02}")).collect(),
            deps,
        })
    })
}

impl Dag {
    fn render(&self) -> String {
        let mut out = String::new();
        for (i, name) in self.names.iter().enumerate() {
            out.push_str(&format!(
                "[components.{name}]\ncommand = [\"svc\", \"{name}\"]\nendpoints = {{ http = \"http://127.0.0.1:{}\" }}\n",
                9000 + i
            ));
            let plain: Vec<String> = self.deps[i]
                .iter()
                .filter(|(_, conn)| !conn)
                .map(|(u, _)| format!("\"{}\"", self.names[*u]))
                .collect();
            if !plain.is_empty() {
                out.push_str(&format!("depends_on = [{}]\n", plain.join(", ")));
            }
            let conns: Vec<String> = self.deps[i]
                .iter()
                .filter(|(_, conn)| *conn)
                .map(|(u, _)| format!("up_{0} = \"{0}.http\"", self.names[*u]))
                .collect();
            if !conns.is_empty() {
                out.push_str(&format!("connections = {{ {} }}\n", conns.join(", ")));
            }
            out.push('\n');
        }
        out
    }

    /// Whether `from` depends on `to`, directly or not.
    fn reaches(&self, from: usize, to: usize) -> bool {
        let mut stack = vec![from];
        let mut seen = BTreeSet::new();
        while let Some(x) = stack.pop() {
            for &(u, _) in &self.deps[x] {
                if u == to {
                    return true;
                }
                if seen.insert(u) {
                    stack.push(u);
                }
            }
        }
        false
    }
}

/// A valid inventory touching every phase: hosts (ssh options, platform), templates,
/// profiles, connections, tunnels, probes (own and stack), stacks.
const RICH: &str = r#"[hosts.studio]
transport = "ssh"
address = "studio.lan"
platform = "darwin-aarch64"
ssh_options = { ProxyJump = "bastion" }

[components.llm]
host = "studio"
template = "llama-server"
params = { model = "/models/q4.gguf", port = 8080 }
profile = "small"
[components.llm.profiles.small]
params = { model = "/models/small.gguf" }

[components.tunnel]
template = "ssh-tunnel"
params = { via = "studio", target = "llm.http", listen_port = 18080 }

[components.proxy]
command = ["litellm", "--port", "${endpoints.http.port}", "--upstream", "${connections.llm}"]
env = { KEY = { secret = "proxy-key" }, MODE = "fast" }
endpoints = { http = "http://127.0.0.1:4000" }
connections = { llm = "tunnel.http" }
readiness = { http = { endpoint = "http", path = "/health" }, period = "2s" }
liveness = { tcp = { endpoint = "http" } }

[components.stt]
template = "whisper"
params = { model = "base.bin", port = 9000 }

[components.vectors]
owner = "external"
endpoints = { http = "http://127.0.0.1:6333" }
readiness = { http = { endpoint = "http" } }

[stacks.chat]
description = "chat"
components = ["proxy", "vectors"]
readiness = [{ request = { endpoint = "proxy.http", path = "/v1/models" } }]
"#;

const RICH_JSON: &str = r#"{
  "hosts": { "gpu": { "transport": "ssh", "user": "ops" } },
  "components": {
    "a": { "host": "gpu", "command": ["a"], "endpoints": { "http": "http://0.0.0.0:8000" } },
    "b": { "command": ["b", "${connections.up.port}"], "connections": { "up": "a.http" },
           "stop": { "signal": "SIGINT", "grace_period": "3s" } },
    "stt": { "template": "whisper", "params": { "model": "m.bin" } }
  },
  "stacks": { "s": { "components": ["a", "b"] } }
}
"#;

#[test]
fn the_rich_inventories_are_valid() {
    for text in [RICH, RICH_JSON] {
        let (_, result) = run(text, &[("whisper", WHISPER)]);
        if let Err(d) = result {
            panic!("{d:#?}");
        }
    }
}

/// Every location of `d` (primary and labels) lies inside its file, on character
/// boundaries, and resolves to a line and column.
fn assert_located_inside(sources: &Sources, d: &Diagnostic) {
    let locations = d
        .location
        .iter()
        .chain(d.labels.iter().map(|l| &l.location));
    for loc in locations {
        let text = &sources.get(loc.file).text;
        assert!(
            loc.span.start <= loc.span.end && loc.span.end <= text.len(),
            "span {:?} outside a file of {} bytes: {d:?}",
            loc.span,
            text.len()
        );
        assert!(
            text.is_char_boundary(loc.span.start) && text.is_char_boundary(loc.span.end),
            "span {:?} splits a character: {d:?}",
            loc.span
        );
    }
    if let Some(p) = d.locate(sources).location {
        assert!(p.start.line >= 1 && p.start.column >= 1);
    }
}

/// Damage to a text's bytes: flip, overwrite, delete or insert a byte, truncate, or
/// change a letter or digit into a letter (which mostly keeps the syntax and breaks a
/// name, a reference or a value instead).
#[derive(Debug, Clone)]
enum Damage {
    Letter(usize, u8),
    Xor(usize, u8),
    Set(usize, u8),
    Delete(usize),
    Insert(usize, u8),
    Truncate(usize),
}

fn damage() -> impl Strategy<Value = Damage> {
    // Bytes that matter to TOML and JSON, or any byte (UTF-8 or not).
    let byte = prop_oneof![
        proptest::sample::select(b"{}[]=\",.:#\n \\$x0-".to_vec()),
        any::<u8>()
    ];
    let at = any::<usize>();
    prop_oneof![
        3 => (at, b'a'..=b'z').prop_map(|(i, b)| Damage::Letter(i, b)),
        1 => (at, 1u8..=255).prop_map(|(i, b)| Damage::Xor(i, b)),
        1 => (at, byte.clone()).prop_map(|(i, b)| Damage::Set(i, b)),
        1 => at.prop_map(Damage::Delete),
        1 => (at, byte).prop_map(|(i, b)| Damage::Insert(i, b)),
        1 => at.prop_map(Damage::Truncate),
    ]
}

fn apply(text: &str, damages: &[Damage]) -> Vec<u8> {
    let mut b = text.as_bytes().to_vec();
    for d in damages {
        let n = b.len().max(1);
        match *d {
            Damage::Letter(i, x) => {
                if let Some(j) = (i % n..b.len()).find(|&j| b[j].is_ascii_alphanumeric()) {
                    b[j] = x;
                }
            }
            Damage::Xor(i, x) if !b.is_empty() => b[i % n] ^= x,
            Damage::Set(i, x) if !b.is_empty() => b[i % n] = x,
            Damage::Delete(i) if !b.is_empty() => {
                b.remove(i % n);
            }
            Damage::Insert(i, x) => b.insert(i % (b.len() + 1), x),
            Damage::Truncate(i) => b.truncate(i % (b.len() + 1)),
            _ => {}
        }
    }
    b
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// (a) A random DAG validates, and `order()` lists every component once, each
    /// after all its dependencies, ties broken by name (the smallest name among the
    /// ready ones comes next); the host's snapshot rebuilds the same order.
    #[test]
    fn dags_validate_in_dependency_order(g in dag()) {
        let text = g.render();
        let (_, result) = run(&text, &[]);
        let t = match result {
            Ok(t) => t,
            Err(d) => panic!("a DAG must validate:\n{text}\n{d:#?}"),
        };
        let order: Vec<&str> = t.order().iter().map(|&id| t.component(id).name.as_str()).collect();
        prop_assert_eq!(order.len(), g.names.len());
        let pos = |name: &str| order.iter().position(|n| *n == name).expect("every component is ordered");
        for (i, name) in g.names.iter().enumerate() {
            for &(u, _) in &g.deps[i] {
                prop_assert!(pos(&g.names[u]) < pos(name), "{} must come before {}", g.names[u], name);
            }
        }
        // The reference order: repeatedly take the smallest name whose dependencies
        // are all placed.
        let mut placed: Vec<&str> = Vec::new();
        let mut by_name: Vec<usize> = (0..g.names.len()).collect();
        by_name.sort_by(|a, b| g.names[*a].cmp(&g.names[*b]));
        while placed.len() < g.names.len() {
            let next = by_name
                .iter()
                .copied()
                .find(|&i| !placed.contains(&g.names[i].as_str())
                    && g.deps[i].iter().all(|(u, _)| placed.contains(&g.names[*u].as_str())))
                .expect("a DAG always has a ready component");
            placed.push(&g.names[next]);
        }
        prop_assert_eq!(&order, &placed);
        let rebuilt = Topology::from_snapshot(t.snapshot("local")).expect("a valid snapshot");
        prop_assert_eq!(rebuilt.order(), t.order());
    }

    /// (b) Making `b` depend on a component `a` that already depends on `b` (or a
    /// component on itself) yields exactly one error: the dependency cycle, naming `a`
    /// and `b`, every component it names on a cycle, located at a dependency its first
    /// component declares on its second.
    #[test]
    fn a_back_edge_is_reported_as_a_cycle(g in dag(), pick in any::<proptest::sample::Index>()) {
        let n = g.names.len();
        let pairs: Vec<(usize, usize)> = (0..n)
            .flat_map(|a| (0..n).map(move |b| (a, b)))
            .filter(|&(a, b)| g.reaches(a, b))
            .collect();
        let (a, b) = if pairs.is_empty() { (0, 0) } else { pairs[pick.index(pairs.len())] };
        let mut cyclic = g.clone();
        cyclic.deps[b].push((a, false));
        let text = cyclic.render();
        let (sources, result) = run(&text, &[]);
        let diags = match result {
            Ok(_) => panic!("a cycle must not validate:\n{text}"),
            Err(d) => d,
        };
        prop_assert_eq!(diags.len(), 1, "{:#?}", diags);
        let d = &diags[0];
        prop_assert_eq!(d.code, Code::DependencyCycle);
        let path = d.message.strip_prefix("dependency cycle: ").expect("the cycle's path");
        let named: Vec<&str> = path.split(" → ").collect();
        prop_assert_eq!(named.first(), named.last());
        prop_assert!(
            named.contains(&g.names[a].as_str()) && named.contains(&g.names[b].as_str()),
            "{}", d.message
        );
        for name in &named {
            let i = g.names.iter().position(|x| x == name).expect("a declared name");
            prop_assert!(cyclic.reaches(i, i), "`{}` is not on a cycle: {}", name, d.message);
        }
        // Located at the first component's dependency on the second, inside its entry.
        let loc = d.location.expect("located");
        let at = &sources.get(loc.file).text[loc.span.start..];
        prop_assert!(at.starts_with(&format!("\"{}", named[1])), "located at {:?}", &at[..at.len().min(20)]);
        let header = format!("[components.{}]", named[0]);
        let entry_line = text.lines().position(|l| l == header).expect("declared") + 1;
        let next_entry = text
            .lines()
            .enumerate()
            .skip(entry_line)
            .find(|(_, l)| l.starts_with("[components."))
            .map_or(usize::MAX, |(i, _)| i + 1);
        let line = d.locate(&sources).location.expect("located").start.line;
        prop_assert!(entry_line < line && line < next_entry, "line {} is not in `{}`", line, named[0]);
    }

    /// (c) Validation never panics on damaged valid inventories or templates (bytes
    /// flipped, set, deleted, inserted, or the text truncated — UTF-8 or not): it
    /// returns a topology or diagnostics, each located inside its file, and a file that
    /// is not UTF-8 gets its `not-utf8` error at the first bad byte.
    #[test]
    fn damaged_inventories_never_panic(
        which in 0usize..3,
        damages in proptest::collection::vec(damage(), 1..4),
        in_template in proptest::bool::weighted(0.2),
    ) {
        let base = [
            RICH,
            RICH_JSON,
            "[components.stt]\ntemplate = \"whisper\"\nparams = { model = \"m.bin\" }\n",
        ][which];
        let (inventory, template) = if in_template {
            (base.as_bytes().to_vec(), apply(WHISPER, &damages))
        } else {
            (apply(base, &damages), WHISPER.as_bytes().to_vec())
        };
        let mut sources = Sources::new();
        let name = if which == 1 { "flotilla.json" } else { "flotilla.toml" };
        let id = sources.add(SourceFile::from_bytes(name, Format::from_path(name), inventory));
        let tpl = sources.add(SourceFile::from_bytes("templates/whisper.toml", Format::Toml, template));
        let refs = [TemplateRef { name: "whisper".into(), file: tpl }];
        let diags = match validate(&sources, id, &refs) {
            Ok(v) => v.warnings,
            Err(diags) => {
                prop_assert!(diags.iter().any(|d| d.severity == Severity::Error));
                diags
            }
        };
        for d in &diags {
            assert_located_inside(&sources, d);
        }
        // The inventory's own not-UTF-8 error stops validation before templates load.
        let inventory_bad = sources.get(id).invalid_utf8().is_some();
        for (fid, f) in sources.iter() {
            let Some(bad) = f.invalid_utf8() else { continue };
            if fid != id && inventory_bad {
                continue;
            }
            let expected = f.line_column(bad.offset);
            let found = diags.iter().any(|d| {
                d.code == Code::NotUtf8
                    && d.locate(&sources).location.is_some_and(|p| p.file == f.name && p.start == expected)
            });
            prop_assert!(found, "no not-utf8 error for {} at {:?}: {:#?}", f.name, expected, diags);
        }
    }
}

#[test]
fn component_releases_are_checked_where_declared() {
    use Code::*;
    table(&[
        (
            "release root relative, name not a file name, the agent's release",
            "[components.a]\ncommand = [\"/opt/a/current/a\"]\nrelease = { name = \"a\", root = \"opt/a\" }\n[components.b]\ncommand = [\"b\"]\nrelease = { name = \"b/c\", root = \"/opt/b\" }\n[components.c]\ncommand = [\"c\"]\nrelease = { name = \"flotilla-agent\", root = \"/opt/c\" }\n",
            &[],
            &[
                (InvalidValue, "\"opt/a\""),
                (InvalidValue, "\"b/c\""),
                (InvalidValue, "\"flotilla-agent\""),
            ],
        ),
        (
            "release on an external component",
            "[components.db]\nowner = \"external\"\nrelease = { name = \"pg\", root = \"/opt/pg\" }\n",
            &[],
            &[(ExternalLifecycle, "release =")],
        ),
    ]);
    // A command that does not run `<root>/current/<name>`: a warning at the program,
    // still valid; the release resolved into the topology; the config digest unmoved.
    let ok = "[components.llm]\ncommand = [\"/opt/llama/current/llama-server\", \"--port\", \"1\"]\nrelease = { name = \"llama-server\", root = \"/opt/llama\" }\n";
    let (_, t) = run(ok, &[]);
    let t = t.expect("valid");
    let c = t.component(t.id("llm").unwrap());
    assert_eq!(c.release.as_ref().unwrap().name, "llama-server");
    assert_eq!(
        c.release_program().as_deref(),
        Some("/opt/llama/current/llama-server")
    );
    let (_, plain) = run(
        "[components.llm]\ncommand = [\"/opt/llama/current/llama-server\", \"--port\", \"1\"]\n",
        &[],
    );
    let plain = plain.unwrap();
    assert_eq!(
        plain.component(plain.id("llm").unwrap()).config_digest(),
        c.config_digest(),
        "declaring a release does not change the config identity"
    );
    let stale = "[components.llm]\ncommand = [\"/usr/bin/llama-server\"]\nrelease = { name = \"llama-server\", root = \"/opt/llama\" }\n";
    let mut sources = Sources::new();
    let id = sources.add(SourceFile::new("flotilla.toml", Format::Toml, stale));
    let v = validate(&sources, id, &[]).expect("a warning, not an error");
    let w: Vec<_> = v
        .warnings
        .iter()
        .filter(|d| d.code == Suspicious && d.message.contains("/opt/llama/current/llama-server"))
        .collect();
    assert_eq!(w.len(), 1, "{:#?}", v.warnings);
    let at = w[0].locate(&sources).location.unwrap();
    assert_eq!(
        (at.start.line, at.start.column),
        (2, 12),
        "at the program in `command`"
    );
}

#[test]
fn container_components() {
    use Code::*;
    const OK: &str = "[components.web]\nadapter = \"container\"\n[components.web.container]\nimage = \"busybox:1.36\"\n";
    table(&[
        (
            "container adapter without a container table",
            "[components.web]\nadapter = \"container\"\n",
            &[],
            &[(NoStartMethod, "web]")],
        ),
        (
            "container table on a process",
            "[components.web]\ncommand = [\"x\"]\ncontainer = { image = \"busybox\" }\n",
            &[],
            &[(InvalidValue, "container =")],
        ),
        (
            "container table without an image",
            "[components.web]\nadapter = \"container\"\ncontainer = { pull = \"never\" }\n",
            &[],
            &[(MissingKey, "{ pull")],
        ),
        (
            "image reference that does not parse",
            "[components.web]\nadapter = \"container\"\ncontainer = { image = \"Open-WebUI:main\" }\n",
            &[],
            &[(InvalidValue, "\"Open-WebUI:main\"")],
        ),
        (
            "a container's env secret that no shell can export, or no file name holds",
            "[components.web]\nadapter = \"container\"\ncontainer = { image = \"busybox\" }\nenv = { KEY = { secret = \"WEBUI_KEY\" }, \"K.2\" = { secret = \"S\" }, K3 = { secret = \"a/b\" }, MODE = \"x\" }\n",
            &[],
            &[
                (InvalidValue, "{ secret = \"S\" }"),
                (InvalidValue, "{ secret = \"a/b\" }"),
            ],
        ),
        (
            "two restart owners",
            "[components.web]\nadapter = \"container\"\nrestart = { policy = \"on-failure\" }\ncontainer = { image = \"busybox\", restart = \"always\" }\n",
            &[],
            &[(InvalidValue, "\"always\"")],
        ),
        (
            "ports out of range, of an unknown protocol",
            "[components.web]\nadapter = \"container\"\n[components.web.container]\nimage = \"busybox\"\nports = [\n  { target = 0, published = 3000 },\n  { target = 80, published = 70000 },\n  { target = 80, published = 3002, protocol = \"sctp\" },\n]\n",
            &[],
            &[
                (InvalidValue, "0, published = 3000"),
                (InvalidValue, "70000"),
                (InvalidValue, "\"sctp\""),
            ],
        ),
        (
            "ports on a host_ip that is not an address, published twice",
            "[components.web]\nadapter = \"container\"\n[components.web.container]\nimage = \"busybox\"\nports = [\n  { target = 80, published = 3001, host_ip = \"localhost\" },\n  { target = 81, published = 3000 },\n  { target = 82, published = 3000 },\n]\n",
            &[],
            &[(InvalidValue, "\"localhost\""), (PortConflict, "3000 },\n]")],
        ),
        (
            "volumes, secrets, healthcheck, gpus, devices, name",
            "[components.web]\nadapter = \"container\"\n[components.web.container]\nimage = \"busybox\"\nname = \"-bad\"\nvolumes = [{ type = \"bind\", source = \"./data\", target = \"data\" }, { type = \"volume\", source = \"a/b\", target = \"/x\" }]\nsecrets = [\"../etc\"]\nhealthcheck = { test = [\"curl\"] }\ngpus = { count = 1, device_ids = [\"0\"] }\ndevices = [\"dri\"]\n",
            &[],
            &[
                (InvalidValue, "\"-bad\""),
                (InvalidValue, "\"data\""),
                (InvalidValue, "\"a/b\""),
                (InvalidValue, "\"../etc\""),
                (InvalidValue, "[\"curl\"]"),
                (InvalidValue, "{ count"),
                (InvalidValue, "\"dri\""),
            ],
        ),
        (
            "keys that mean nothing for a container",
            "[components.web]\nadapter = \"container\"\ncwd = \"/srv\"\ncontainer = { image = \"busybox\" }\n",
            &[],
            &[(InvalidValue, "cwd")],
        ),
        (
            "container_health on a process",
            "[components.web]\ncommand = [\"x\"]\nreadiness = { container_health = {} }\n",
            &[],
            &[(InvalidProbe, "{} }")],
        ),
        (
            "container_api that is not a unix socket",
            &format!("[hosts.local]\ncontainer_api = \"tcp://127.0.0.1:2375\"\n{OK}"),
            &[],
            &[(InvalidValue, "\"tcp://")],
        ),
    ]);
}

#[test]
fn container_components_resolve_with_defaults_and_their_own_digest() {
    let (_, t) = run(
        "[hosts.local]\ncontainer_api = \"unix:///run/podman/podman.sock\"\n\
         [components.web]\nadapter = \"container\"\nstop = { signal = \"SIGINT\" }\n\
         readiness = { container_health = {} }\n\
         [components.web.container]\nimage = \"ghcr.io/open-webui/open-webui:main\"\n\
         ports = [{ target = 8080, published = 3000 }]\nsecrets = [\"WEBUI_KEY\"]\n\
         gpus = { count = \"all\" }\n\
         [components.p]\ncommand = [\"p\"]\n",
        &[],
    );
    let t = t.unwrap();
    let web = t.component(t.id("web").unwrap());
    let c = web.container.as_ref().unwrap();
    assert_eq!(c.name, None, "the default name depends on the project");
    assert_eq!(c.pull, Some(flotilla_model::inventory::PullPolicy::Never));
    assert_eq!(c.network.as_deref(), Some("bridge"));
    assert_eq!(c.ports[0].host_ip.as_deref(), Some("127.0.0.1"));
    assert_eq!(c.stop_signal.as_ref().unwrap().as_str(), "SIGINT");
    assert_eq!(
        web.readiness.as_ref().unwrap().check,
        flotilla_model::topology::Check::ContainerHealth
    );
    assert_eq!(
        t.hosts["local"].container_api.as_deref(),
        Some("unix:///run/podman/podman.sock")
    );
    assert!(web.runtime_config().contains("\"container\":{"));
    // A component without a container keeps the config (and digest) it had before.
    let p = t.component(t.id("p").unwrap());
    assert!(!p.runtime_config().contains("container"));
    let (_, t2) = run("[components.p]\ncommand = [\"p\"]\n", &[]);
    let t2 = t2.unwrap();
    assert_eq!(
        t2.component(t2.id("p").unwrap()).config_digest(),
        p.config_digest()
    );
    assert!(!serde_json::to_string(&t2.hosts["local"])
        .unwrap()
        .contains("container_api"));
}

#[test]
fn kubernetes_hosts_and_components() {
    use Code::*;
    const CLUSTER: &str =
        "[hosts.gpu]\ntransport = \"kubernetes\"\ncontext = \"lab\"\nnamespace = \"inference\"\n";
    let ok = |body: &str| {
        format!("{CLUSTER}[components.llm]\nhost = \"gpu\"\nadapter = \"kubernetes\"\n{body}")
    };
    table(&[
        (
            "cluster keys on an ssh host",
            "[hosts.box]\ntransport = \"ssh\"\ncontext = \"lab\"\n[components.p]\ncommand = [\"p\"]\n",
            &[],
            &[(InvalidValue, "\"lab\"")],
        ),
        (
            "ssh keys and a container engine on a cluster",
            "[hosts.gpu]\ntransport = \"kubernetes\"\nuser = \"me\"\ncontainer_api = \"unix:///x.sock\"\n[components.p]\ncommand = [\"p\"]\n",
            &[],
            &[(InvalidValue, "\"me\""), (InvalidValue, "\"unix:///x.sock\"")],
        ),
        (
            "a namespace that is not a DNS label",
            "[hosts.gpu]\ntransport = \"kubernetes\"\nnamespace = \"Infer_ence\"\n[components.p]\ncommand = [\"p\"]\n",
            &[],
            &[(InvalidValue, "\"Infer_ence\"")],
        ),
        (
            "a kubernetes component on this machine",
            "[components.llm]\nadapter = \"kubernetes\"\nkubernetes = { image = \"busybox\" }\n",
            &[],
            &[(InvalidValue, "llm]")],
        ),
        (
            "a process on a cluster",
            &format!("{CLUSTER}[components.p]\nhost = \"gpu\"\ncommand = [\"p\"]\n"),
            &[],
            &[(InvalidValue, "p]")],
        ),
        (
            "kubernetes adapter without its table",
            &ok(""),
            &[],
            &[(NoStartMethod, "llm]")],
        ),
        (
            "the table's rules",
            &ok("cwd = \"/srv\"\nenv = { KEY = { secret = \"KEY\" } }\n[components.llm.kubernetes]\nimage = \"Bad Image\"\nname = \"LLM\"\nports = [{ name = \"much-too-long-name\", container_port = 8080, node_port = 30080 }, { container_port = 8080 }]\nvolumes = [{ claim = \"models\", mount_path = \"models\" }]\nrequests = { memory = \"8GB\" }\n"),
            &[],
            &[
                (InvalidValue, "cwd"),
                (InvalidValue, "{ secret"),
                (InvalidValue, "\"Bad Image\""),
                (InvalidValue, "\"LLM\""),
                (InvalidValue, "\"much-too-long-name\""),
                (InvalidValue, "30080"),
                (PortConflict, "{ container_port = 8080 }"),
                (InvalidValue, "\"models\" }"),
                (InvalidValue, "\"8GB\""),
            ],
        ),
        (
            "no pods, and two components on one Deployment",
            &format!("{CLUSTER}[components.a]\nhost = \"gpu\"\nadapter = \"kubernetes\"\nkubernetes = {{ image = \"busybox\", replicas = 0 }}\n[components.b]\nhost = \"gpu\"\nadapter = \"kubernetes\"\nkubernetes = {{ image = \"busybox\", name = \"a\" }}\n"),
            &[],
            &[(InvalidValue, "0 }"), (InvalidValue, "\"a\" }")],
        ),
        (
            "a broken port hides the list's own checks, not the others'",
            &ok("kubernetes = { image = \"busybox\", ports = [{ name = \"A_x\", container_port = 80800 }, { name = \"b\", container_port = 81, node_port = 30080 }] }\n"),
            &[],
            &[(InvalidValue, "80800")],
        ),
        (
            "a node selector the API server would refuse",
            &ok("kubernetes = { image = \"busybox\", node_selector = { \"bad key!\" = \"x\", \"kubernetes.io/arch\" = \"arm 64\", \"gpu\" = \"yes\" } }\n"),
            &[],
            &[(InvalidValue, "\"x\","), (InvalidValue, "\"arm 64\"")],
        ),
        (
            "a component name that is no object name",
            &format!("{CLUSTER}[components.big_llm]\nhost = \"gpu\"\nadapter = \"kubernetes\"\nkubernetes = {{ image = \"busybox\" }}\n"),
            &[],
            &[(InvalidValue, "{ image")],
        ),
        (
            "a name starting with a digit names no Service (DNS-1035), only a Deployment",
            &format!("{CLUSTER}[components.1web]\nhost = \"gpu\"\nadapter = \"kubernetes\"\nkubernetes = {{ image = \"busybox\", ports = [{{ container_port = 80 }}] }}\n[components.2job]\nhost = \"gpu\"\nadapter = \"kubernetes\"\nkubernetes = {{ image = \"busybox\" }}\n"),
            &[],
            &[(InvalidValue, "{ image = \"busybox\", ports")],
        ),
    ]);
}

#[test]
fn kubernetes_components_resolve_with_defaults_and_their_own_digest() {
    use flotilla_model::inventory::{PortProtocol, ServiceType, WorkloadKind};
    let (_, t) = run(
        "[hosts.gpu]\ntransport = \"kubernetes\"\nkubeconfig = \"~/.kube/lab\"\ncontext = \"lab\"\nnamespace = \"inference\"\n\
         [components.llm]\nhost = \"gpu\"\nadapter = \"kubernetes\"\ncommand = [\"--port\", \"8080\"]\n\
         [components.llm.kubernetes]\nimage = \"ghcr.io/ggml-org/llama.cpp:server\"\ngpus = 1\n\
         ports = [{ container_port = 8080, service_port = 80 }]\n\
         [components.web]\nhost = \"gpu\"\nadapter = \"kubernetes\"\n\
         kubernetes = { image = \"busybox\", namespace = \"web\", kind = \"statefulset\", replicas = 3, ports = [{ name = \"http\", container_port = 80 }] }\n",
        &[],
    );
    let t = t.unwrap();
    assert!(
        !t.hosts["gpu"].is_remote(),
        "the adapter talks to the API server from here"
    );
    let llm = t.component(t.id("llm").unwrap());
    let k = llm.kubernetes.as_ref().unwrap();
    assert_eq!(k.kind, Some(WorkloadKind::Deployment));
    assert_eq!(k.name.as_deref(), Some("llm"));
    assert_eq!(k.namespace.as_deref(), Some("inference"));
    assert_eq!(k.replicas, Some(1));
    assert_eq!(k.service_type, Some(ServiceType::ClusterIP));
    assert_eq!(k.ports[0].name.as_deref(), Some("p8080"));
    assert_eq!(k.ports[0].protocol, Some(PortProtocol::Tcp));
    let cluster = llm.cluster.as_ref().unwrap();
    assert_eq!(cluster.context.as_deref(), Some("lab"));
    assert_eq!(cluster.kubeconfig.as_deref(), Some("~/.kube/lab"));
    assert_eq!(llm.command, ["--port", "8080"]);
    let web = t.component(t.id("web").unwrap());
    let w = web.kubernetes.as_ref().unwrap();
    assert_eq!(w.namespace.as_deref(), Some("web"));
    assert_eq!(w.kind, Some(WorkloadKind::StatefulSet));
    assert_eq!(w.ports[0].service_port.map(|p| p.0), Some(80));
    assert!(llm.runtime_config().contains("\"kubernetes\":{"));
    assert!(
        !llm.runtime_config().contains("kubeconfig"),
        "where the cluster is found is not what runs"
    );
}
