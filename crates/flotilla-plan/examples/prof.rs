use flotilla_model::{validate, Format, SourceFile, Sources};
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

fn main() {
    let n: usize = std::env::args().nth(1).unwrap().parse().unwrap();
    let text = generate(n);
    let t0 = std::time::Instant::now();
    let mut s = Sources::new();
    let id = s.add(SourceFile::new("b.toml", Format::Toml, text.as_str()));
    let r = validate(&s, id, &[]).unwrap();
    eprintln!("{} components in {:?}", r.topology.len(), t0.elapsed());
}
