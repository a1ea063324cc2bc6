//! Compose keys one by one: what each becomes in the inventory, and the comment for
//! what is not carried over.

use flotilla_compose::{convert, ComposeError, Options};
use flotilla_model::inventory::{ComponentSpec, EngineRestart, GpuCount, PullPolicy, VolumeType};

fn options() -> Options {
    Options {
        dir_name: "proj".into(),
        file_name: "compose.yaml".into(),
        variables_source: "the environment".into(),
        ..Options::default()
    }
}

/// Converts `services:` + `service` (indented below `  web:`), returning the
/// component `web` and the TOML text.
fn web(service: &str) -> (ComponentSpec, String) {
    let text = format!("services:\n  web:\n{service}volumes:\n  data: {{}}\n");
    let c = convert(&text, &options()).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
    (c.inventory.components["web"].clone(), unwrapped(&c.toml))
}

/// The text with each wrapped comment on one line (a continuation line, `#` and more
/// than one space, joins the line before).
fn unwrapped(toml: &str) -> String {
    let mut out = String::new();
    for line in toml.lines() {
        match line.strip_prefix("#    ") {
            Some(rest) if !out.is_empty() => {
                out.pop();
                out.push(' ');
                out.push_str(rest.trim_start());
            }
            _ => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

fn errors(text: &str) -> Vec<ComposeError> {
    convert(text, &options()).expect_err("an error")
}

#[test]
fn long_syntax_volumes_ports_and_devices() {
    let (c, toml) = web("    image: app:1
    volumes:
      - type: volume
        source: data
        target: /data
        volume: { nocopy: true }
      - type: bind
        source: ./conf
        target: /conf
        read_only: true
      - type: tmpfs
        target: /cache
    ports:
      - target: 80
        published: 8080
        protocol: tcp
        host_ip: 0.0.0.0
      - 53:53/udp
    devices:
      - /dev/dri:/dev/dri
      - source: /dev/kfd
        target: /dev/kfd
        permissions: rwm
      - nvidia.com/gpu=all
");
    let ctr = c.container.unwrap();
    assert_eq!(ctr.volumes.len(), 2);
    assert_eq!(
        (ctr.volumes[0].kind, ctr.volumes[0].source.as_str()),
        (VolumeType::Volume, "proj_data")
    );
    assert!(ctr.volumes[1].read_only);
    assert_eq!(ctr.ports.len(), 2);
    assert_eq!(ctr.ports[0].host_ip.as_deref(), Some("0.0.0.0"));
    assert_eq!(ctr.devices, ["/dev/dri:/dev/dri", "/dev/kfd:/dev/kfd:rwm"]);
    // The TCP port is an endpoint, as clients on this host reach it; the UDP one is not.
    assert_eq!(c.endpoints.len(), 1);
    assert_eq!(c.endpoints["http"], "http://127.0.0.1:8080");
    assert!(
        toml.contains("`volumes[0].volume`: not carried over"),
        "{toml}"
    );
    assert!(
        toml.contains("`/cache` not carried over: a `tmpfs` mount"),
        "{toml}"
    );
    assert!(
        toml.contains("`nvidia.com/gpu=all` not carried over: a CDI device name"),
        "{toml}"
    );
}

#[test]
fn restart_pull_stop_and_gpu_requests() {
    let (c, toml) = web("    image: app:1
    restart: on-failure:3
    pull_policy: if_not_present
    stop_signal: SIGINT
    stop_grace_period: 45s
    user: \"1000:1000\"
    deploy:
      replicas: 2
      resources:
        reservations:
          devices:
            - driver: nvidia
              device_ids: ['0', '1']
              capabilities: [gpu, compute]
            - capabilities: [tpu]
");
    let ctr = c.container.clone().unwrap();
    assert_eq!(ctr.restart, Some(EngineRestart::OnFailure));
    assert_eq!(ctr.pull, Some(PullPolicy::Missing));
    assert_eq!(ctr.stop_signal.as_ref().map(|s| s.as_str()), Some("SIGINT"));
    assert_eq!(ctr.user.as_deref(), Some("1000:1000"));
    let gpus = ctr.gpus.unwrap();
    assert_eq!(gpus.device_ids, ["0", "1"]);
    assert_eq!(gpus.count, None);
    assert_eq!(c.stop.unwrap().grace_period.unwrap().0.as_secs(), 45);
    assert!(toml.contains("without the limit of 3 tries"), "{toml}");
    assert!(
        toml.contains("`deploy.replicas`: not carried over"),
        "{toml}"
    );
    assert!(
        toml.contains("a device request that is not for GPUs"),
        "{toml}"
    );
    let (c, _) = web("    image: app:1\n    gpus: all\n");
    assert_eq!(
        c.container.unwrap().gpus.unwrap().count,
        Some(GpuCount::All)
    );
}

#[test]
fn commands_and_entrypoints_split_like_a_shell() {
    let (c, _) = web("    image: app:1
    entrypoint: /bin/sh -c
    command: [\"echo \\\"$$HOME\\\" and ${NAME}\"]
");
    assert_eq!(c.container.unwrap().entrypoint.unwrap(), ["/bin/sh", "-c"]);
    assert_eq!(c.command.unwrap(), ["echo \"$HOME\" and ${env.NAME}"]);
    let (c, _) = web("    image: app:1\n    command: serve --name 'my model' --x=\"a b\"\n");
    assert_eq!(
        c.command.unwrap(),
        ["serve", "--name", "my model", "--x=a b"]
    );
}

#[test]
fn a_build_only_service_names_the_image_compose_builds() {
    let (c, toml) = web("    build: .\n");
    assert_eq!(c.container.unwrap().image, "proj-web");
    assert!(
        toml.contains("`docker compose build web` tags it `proj-web`"),
        "{toml}"
    );
}

#[test]
fn errors_point_at_the_node() {
    let e = errors("services:\n  web:\n    image: app\n    secrets: [nope]\n");
    assert_eq!((e[0].at().line, e[0].at().column), (4, 15), "{e:?}");
    let e = errors("services:\n  web:\n    image: app\n    volumes: [undeclared:/x]\n");
    assert_eq!((e[0].at().line, e[0].at().column), (4, 15), "{e:?}");
    let e = errors("services:\n  web:\n    image: app\n    restart: sometimes\n");
    assert_eq!((e[0].at().line, e[0].at().column), (4, 14), "{e:?}");
    let e = errors("services:\n  web:\n    image: app\n    healthcheck:\n      test: [curl, x]\n");
    assert_eq!((e[0].at().line, e[0].at().column), (5, 13), "{e:?}");
}
