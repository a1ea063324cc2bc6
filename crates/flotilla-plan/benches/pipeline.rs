//! Parse + validate + plan `up` for generated inventories of 100, 1,000 and 10,000
//! components (three dependencies each, an HTTP readiness probe, an endpoint, env).
//! Throughput is per component, so linear growth shows as a flat time per element.
//! Run with `scripts/bench` (prints the per-component ratios against the 100 case).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use flotilla_model::{validate, Format, Observed, SourceFile, Sources};
use flotilla_plan::{plan, Operation, Verb};
use std::hint::black_box;

/// An inventory of `n` components; component i depends on three earlier ones
/// (chosen by a fixed linear congruential sequence, so every run is identical).
pub fn generate(n: usize) -> String {
    let mut out = String::with_capacity(n * 300);
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |bound: usize| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((seed >> 33) as usize) % bound
    };
    for i in 0..n {
        out.push_str(&format!(
            "[components.c{i:05}]\ncommand = [\"svc\", \"--port\", \"${{endpoints.http.port}}\"]\n\
             endpoints = {{ http = \"http://127.0.0.1:{}\" }}\n\
             env = {{ ROLE = \"worker\" }}\n\
             readiness = {{ http = {{ endpoint = \"http\", path = \"/health\" }}, period = \"250ms\" }}\n",
            10000 + i
        ));
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
    for n in [100usize, 1_000, 10_000] {
        let text = generate(n);
        let mut group = c.benchmark_group("inventory");
        group.throughput(Throughput::Elements(n as u64));
        if n >= 10_000 {
            group.sample_size(20);
        }
        group.bench_with_input(BenchmarkId::new("validate", n), &text, |b, text| {
            b.iter(|| {
                let (s, id) = sources(text);
                black_box(validate(&s, id, &[]).expect("valid"))
            })
        });
        let (s, id) = sources(&text);
        let topology = validate(&s, id, &[]).expect("valid").topology;
        let observed = Observed::default();
        let op = Operation::new(Verb::Start, "all");
        group.bench_with_input(BenchmarkId::new("plan_up", n), &topology, |b, t| {
            b.iter(|| black_box(plan(t, &observed, &op).expect("plan")))
        });
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
