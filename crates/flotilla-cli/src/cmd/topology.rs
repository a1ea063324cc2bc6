//! `flotilla topology`: the validated dependency graph.

use crate::{render, Cli, EXIT_OK};
use flotilla_model::inventory::Owner;

/// Arguments of `flotilla topology`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Print Graphviz dot (components clustered by host; edges point at dependencies).
    #[arg(long, conflicts_with = "json")]
    pub dot: bool,
    /// Print the resolved topology as JSON ({hosts, components, stacks, digest}).
    #[arg(long)]
    pub json: bool,
}

/// Runs the subcommand; returns the exit status.
pub fn run(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    let (_, validated) = match super::topology_or_exit(cli)? {
        Ok(v) => v,
        Err(code) => return Ok(code),
    };
    let t = &validated.topology;
    if args.json {
        #[derive(serde::Serialize)]
        struct Json<'a> {
            digest: &'a str,
            #[serde(flatten)]
            topology: &'a flotilla_model::Topology,
        }
        let json = Json {
            digest: t.digest(),
            topology: t,
        };
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else if args.dot {
        print!("{}", dot(t));
    } else {
        let mut rows = vec![vec![
            "COMPONENT".into(),
            "HOST".into(),
            "OWNER".into(),
            "DEPENDS ON".into(),
            "ENDPOINTS".into(),
        ]];
        for &id in t.order() {
            let c = t.component(id);
            let owner = match (c.owner, c.adapter) {
                (Owner::External, _) => "external".to_string(),
                (Owner::Managed, Some(a)) => format!("managed ({})", a.as_str()),
                (Owner::Managed, None) => "managed".to_string(),
            };
            let deps = if c.depends_on.is_empty() {
                "-".to_string()
            } else {
                c.depends_on.join(", ")
            };
            let eps = if c.endpoints.is_empty() {
                "-".to_string()
            } else {
                c.endpoints
                    .iter()
                    .map(|(n, e)| format!("{n}={}", e.url))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            rows.push(vec![c.name.clone(), c.host.clone(), owner, deps, eps]);
        }
        print!("{}", render::table(&rows));
        if !t.stacks.is_empty() {
            println!();
            let mut rows = vec![vec!["STACK".to_string(), "COMPONENTS".to_string()]];
            for s in t.stacks.values() {
                rows.push(vec![s.name.clone(), s.components.join(", ")]);
            }
            print!("{}", render::table(&rows));
        }
        println!("\ntopology {}", t.digest());
    }
    Ok(EXIT_OK)
}

fn dot(t: &flotilla_model::Topology) -> String {
    let q = |s: &str| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
    let mut out = String::from("digraph flotilla {\n  rankdir=LR;\n  node [shape=box];\n");
    for (i, h) in t.hosts.keys().enumerate() {
        let members: Vec<_> = t.components.iter().filter(|c| &c.host == h).collect();
        if members.is_empty() {
            continue;
        }
        out.push_str(&format!("  subgraph cluster_{i} {{\n    label={};\n", q(h)));
        for c in members {
            let style = if c.owner == Owner::External {
                " [style=dashed]"
            } else {
                ""
            };
            out.push_str(&format!("    {}{style};\n", q(&c.name)));
        }
        out.push_str("  }\n");
    }
    for c in &t.components {
        for d in &c.depends_on {
            out.push_str(&format!("  {} -> {};\n", q(&c.name), q(d)));
        }
    }
    out.push_str("}\n");
    out
}
