//! Parse + validate + plan `up` for generated inventories of 100, 1,000 and 10,000
//! components with about three dependencies each, in two shapes:
//! - `lean`: a command and the dependencies (the shape the targets are stated for);
//! - `rich`: also an endpoint, a `${...}` reference, env and an HTTP readiness probe.
//!
//! `plan_up` includes computing the topology digest (each iteration plans against a
//! fresh copy of the topology). Throughput is per component, so linear growth shows as
//! a flat time per element. `scripts/bench` runs this and prints the ratios.

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use flotilla_model::status::ObservedComponent;
use flotilla_model::{validate, Format, Observed, SourceFile, Sources};
use flotilla_plan::{plan, Operation, Verb};
use std::hint::black_box;

/// An inventory of `n` components; component i depends on three earlier ones
/// (chosen by a fixed linear congruential sequence, so every run is identical).
pub fn generate(n: usize, rich: bool) -> String {
    let mut out = String::with_capacity(n * 300);
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |bound: usize| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((seed >> 33) as usize) % bound
    };
    for i in 0..n {
        if rich {
            out.push_str(&format!(
                "[components.c{i:05}]\ncommand = [\"svc\", \"--port\", \"${{endpoints.http.port}}\"]\n\
                 endpoints = {{ http = \"http://127.0.0.1:{}\" }}\n\
                 env = {{ ROLE = \"worker\" }}\n\
                 readiness = {{ http = {{ endpoint = \"http\", path = \"/health\" }}, period = \"250ms\" }}\n",
                10000 + i
            ));
        } else {
            out.push_str(&format!(
                "[components.c{i:05}]\ncommand = [\"svc\", \"--id\", \"{i}\"]\n"
            ));
        }
        if i > 0 {
            let mut deps: Vec<usize> = (0..3.min(i)).map(|_| next(i)).collect();
            deps.sort_unstable();
            deps.dedup();
            let names: Vec<String> = deps.iter().map(|d| format!("\"c{d:05}\"")).collect();
            out.push_str(&format!("depends_on = [{}]\n", names.join(", ")));
        }
        out.push('\n');
    }
    // The stack holds the last tenth; `up` pulls in everything they depend on.
    let members: Vec<String> = (n - n / 10..n).map(|i| format!("\"c{i:05}\"")).collect();
    out.push_str(&format!(
        "[stacks.all]\ncomponents = [{}]\n",
        members.join(", ")
    ));
    out
}

fn sources(text: &str) -> (Sources, flotilla_model::FileId) {
    let mut s = Sources::new();
    let id = s.add(SourceFile::new("bench.toml", Format::Toml, text));
    (s, id)
}

fn bench(c: &mut Criterion) {
    for (shape, rich) in [("lean", false), ("rich", true)] {
        let mut group = c.benchmark_group(shape);
        for n in [100usize, 1_000, 10_000] {
            let text = generate(n, rich);
            group.throughput(Throughput::Elements(n as u64));
            group.sample_size(if n >= 10_000 { 20 } else { 50 });
            group.bench_with_input(BenchmarkId::new("validate", n), &text, |b, text| {
                b.iter(|| {
                    let (s, id) = sources(text);
                    black_box(validate(&s, id, &[]).expect("valid"))
                })
            });
            let (s, id) = sources(&text);
            let topology = validate(&s, id, &[]).expect("valid").topology;
            // Nothing runs yet: every component observed stopped.
            let observed = Observed {
                components: topology
                    .components
                    .iter()
                    .map(|c| (c.name.clone(), ObservedComponent::STOPPED))
                    .collect(),
                ..Observed::default()
            };
            let op = Operation::new(Verb::Start, "all");
            group.bench_with_input(BenchmarkId::new("plan_up", n), &topology, |b, t| {
                b.iter_batched(
                    || t.clone(),
                    |fresh| black_box(plan(&fresh, &observed, &op).expect("plan")),
                    BatchSize::LargeInput,
                )
            });
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
