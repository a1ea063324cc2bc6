//! Decoding what the macOS kernel (XNU) answers, without asking it: pure functions,
//! compiled into macOS builds and into every OS's tests (so they are tested where
//! the workspace's tests run). `macos.rs` does the asking.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// A process's arguments and initial environment, from `sysctl(KERN_PROCARGS2)`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct ProcArgs {
    /// `argv`, `argv[0]` included.
    pub argv: Vec<Vec<u8>>,
    /// The `KEY=value` strings of the environment it was started with, in order.
    pub env: Vec<Vec<u8>>,
}

impl ProcArgs {
    /// `argv` as Linux's `/proc/<pid>/cmdline` holds it: each argument followed by a
    /// NUL.
    pub fn cmdline(&self) -> Vec<u8> {
        self.argv
            .iter()
            .flat_map(|a| a.iter().copied().chain([0]))
            .collect()
    }

    /// The environment as `(key, value)` pairs, lossily decoded; strings without `=`
    /// are left out.
    pub fn env_pairs(&self) -> Vec<(String, String)> {
        self.env
            .iter()
            .filter_map(|kv| {
                let kv = String::from_utf8_lossy(kv);
                kv.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            })
            .collect()
    }

    /// The value of `key` in the environment, lossily decoded.
    pub fn env_var(&self, key: &str) -> Option<String> {
        let prefix = format!("{key}=");
        self.env
            .iter()
            .find_map(|kv| kv.strip_prefix(prefix.as_bytes()))
            .map(|v| String::from_utf8_lossy(v).into_owned())
    }
}

/// Parses a `KERN_PROCARGS2` buffer: `argc` (a native-endian 32-bit int), the path
/// the program was executed as, NUL padding, `argc` NUL-terminated arguments, then
/// the environment's NUL-terminated strings up to an empty one (the kernel's own
/// `apple[]` strings follow it and are not part of the environment).
///
/// The arguments are read from the process's memory, which it may have rewritten:
/// fewer than `argc` of them are taken as they are, like Linux's `cmdline`. An
/// empty `argv[0]` cannot be told from the padding and is lost (the format's own
/// ambiguity).
pub(crate) fn parse_procargs2(buf: &[u8]) -> Result<ProcArgs, String> {
    let (argc, rest) = buf
        .split_first_chunk::<4>()
        .ok_or("shorter than its argument count")?;
    let argc = i32::from_ne_bytes(*argc);
    let argc = usize::try_from(argc).map_err(|_| format!("negative argument count {argc}"))?;
    let path_end = rest
        .iter()
        .position(|&b| b == 0)
        .ok_or("unterminated executable path")?;
    let rest = &rest[path_end..];
    let first = rest.iter().position(|&b| b != 0).unwrap_or(rest.len());
    let mut strings = NulStrings(&rest[first..]);
    let argv: Vec<Vec<u8>> = strings.by_ref().take(argc).map(<[u8]>::to_vec).collect();
    let env = if argv.len() == argc {
        strings
            .take_while(|s| !s.is_empty())
            .map(<[u8]>::to_vec)
            .collect()
    } else {
        Vec::new()
    };
    Ok(ProcArgs { argv, env })
}

/// The NUL-terminated strings at the start of a buffer; a last one without its NUL
/// counts when it is not empty.
struct NulStrings<'a>(&'a [u8]);

impl<'a> Iterator for NulStrings<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.0.is_empty() {
            return None;
        }
        match self.0.iter().position(|&b| b == 0) {
            Some(n) => {
                let s = &self.0[..n];
                self.0 = &self.0[n + 1..];
                Some(s)
            }
            None => Some(std::mem::take(&mut self.0)),
        }
    }
}

/// Microseconds from `origin` to `at`, both `(seconds, microseconds)` since the
/// epoch as the kernel records a process's start; `None` when `at` is before
/// `origin`.
pub(crate) fn micros_between(origin: (i64, i32), at: (i64, i32)) -> Option<u64> {
    let micros = |(s, us): (i64, i32)| i128::from(s) * 1_000_000 + i128::from(us);
    u64::try_from(micros(at) - micros(origin)).ok()
}

/// `kinfo_proc`'s `p_stat` (`SIDL` 1, `SRUN` 2, `SSLEEP` 3, `SSTOP` 4, `SZOMB` 5) and
/// `p_flag` as the state letter of Linux's `/proc/<pid>/stat`: `Z` for a zombie, `X`
/// for a process already exiting (`P_WEXIT`), `R` for one still being created.
pub(crate) fn state_letter(p_stat: i8, p_flag: i32) -> char {
    const P_WEXIT: i32 = 0x0000_2000;
    match p_stat {
        5 => 'Z',
        _ if p_flag & P_WEXIT != 0 => 'X',
        1 | 2 => 'R',
        3 => 'S',
        4 => 'T',
        _ => '?',
    }
}

/// The text of a C `char` array up to its first NUL, lossily decoded.
pub(crate) fn c_chars(chars: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .map(|&c| c.to_ne_bytes()[0])
        .take_while(|&b| b != 0)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The errno in one of `libproc`'s error messages (`…, errno = 13, message = '…'`).
pub(crate) fn errno_in(message: &str) -> Option<i32> {
    let (_, after) = message.split_once("errno = ")?;
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// A socket's local address from `proc_pidfdinfo`'s `in_sockinfo`: the port as the
/// kernel stores it (network byte order in the low 16 bits of an int), the IPv4
/// address as the bytes of its `in_addr`, the IPv6 address as its 16 bytes.
pub(crate) fn local_address(v6: bool, lport: i32, v4: [u8; 4], v6_bytes: [u8; 16]) -> SocketAddr {
    let port = u16::from_be(lport as u16);
    let ip = if v6 {
        IpAddr::V6(Ipv6Addr::from(v6_bytes))
    } else {
        IpAddr::V4(Ipv4Addr::from(v4))
    };
    SocketAddr::new(ip, port)
}

/// A TCP socket one process holds a descriptor to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeldTcp {
    /// The process.
    pub pid: u32,
    /// The kernel's name for the socket (`soi_so`), the same in every process that
    /// shares it: what Linux's socket inode is to `/proc/net/tcp`.
    pub socket: u64,
    /// Its local address.
    pub local: SocketAddr,
    /// In the `LISTEN` state.
    pub listening: bool,
}

/// The listening sockets among `held` on one of `ports` (every port when `None`):
/// (local address, socket), each socket once, in the order first seen.
pub(crate) fn listeners(held: &[HeldTcp], ports: Option<&HashSet<u16>>) -> Vec<(SocketAddr, u64)> {
    let mut seen = HashSet::new();
    held.iter()
        .filter(|h| h.listening && ports.is_none_or(|p| p.contains(&h.local.port())))
        .filter(|h| seen.insert(h.socket))
        .map(|h| (h.local, h.socket))
        .collect()
}

/// For each of `sockets`, the pids among `held` holding it, each once, in the order
/// seen.
pub(crate) fn owners(held: &[HeldTcp], sockets: &HashSet<u64>) -> HashMap<u64, Vec<u32>> {
    let mut out: HashMap<u64, Vec<u32>> = HashMap::new();
    for h in held.iter().filter(|h| sockets.contains(&h.socket)) {
        let pids = out.entry(h.socket).or_default();
        if !pids.contains(&h.pid) {
            pids.push(h.pid);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn procargs(argc: i32, body: &[u8]) -> Vec<u8> {
        let mut b = argc.to_ne_bytes().to_vec();
        b.extend_from_slice(body);
        b
    }

    #[test]
    fn procargs2_argv_environment_and_apple_strings() {
        let buf = procargs(
            3,
            b"/usr/bin/python3\0\0\0\0python3\0-m\0http.server\0PATH=/usr/bin\0FLOTILLA_INSTANCE=a=b\0\0executable_path=/usr/bin/python3\0ptr_munge=\0\0\0",
        );
        let a = parse_procargs2(&buf).unwrap();
        assert_eq!(a.argv, [&b"python3"[..], b"-m", b"http.server"]);
        assert_eq!(a.cmdline(), b"python3\0-m\0http.server\0");
        assert_eq!(a.env, [&b"PATH=/usr/bin"[..], b"FLOTILLA_INSTANCE=a=b"]);
        assert_eq!(a.env_var("FLOTILLA_INSTANCE").as_deref(), Some("a=b"));
        assert_eq!(a.env_var("PATH").as_deref(), Some("/usr/bin"));
        assert_eq!(a.env_var("PAT"), None);
        assert_eq!(
            a.env_pairs(),
            [
                ("PATH".to_string(), "/usr/bin".to_string()),
                ("FLOTILLA_INSTANCE".to_string(), "a=b".to_string())
            ]
        );
    }

    #[test]
    fn procargs2_empty_arguments_and_short_buffers() {
        // An empty argument in the middle is kept; no environment at all.
        let a = parse_procargs2(&procargs(3, b"/bin/sh\0sh\0\0-c\0\0")).unwrap();
        assert_eq!(a.argv, [&b"sh"[..], b"", b"-c"]);
        assert!(a.env.is_empty());
        // Fewer arguments than argc (rewritten memory, or cut short): what is there.
        let a = parse_procargs2(&procargs(4, b"/bin/x\0\0x\0y")).unwrap();
        assert_eq!(a.argv, [&b"x"[..], b"y"]);
        assert!(a.env.is_empty());
        // argc 0: only the environment.
        let a = parse_procargs2(&procargs(0, b"/bin/x\0\0A=1\0")).unwrap();
        assert!(a.argv.is_empty());
        assert_eq!(a.env, [&b"A=1"[..]]);
        assert!(parse_procargs2(b"\x01\0").is_err());
        assert!(parse_procargs2(&procargs(-1, b"/bin/x\0")).is_err());
        assert!(parse_procargs2(&procargs(1, b"/bin/x")).is_err());
    }

    #[test]
    fn start_times_in_microseconds_from_an_origin() {
        let origin = (1_700_000_000, 250_000);
        assert_eq!(micros_between(origin, origin), Some(0));
        assert_eq!(
            micros_between(origin, (1_700_000_010, 250_001)),
            Some(10_000_001)
        );
        assert_eq!(micros_between(origin, (1_700_000_001, 0)), Some(750_000));
        assert_eq!(micros_between(origin, (1_700_000_000, 249_999)), None);
    }

    #[test]
    fn states_as_linux_letters() {
        assert_eq!(state_letter(5, 0), 'Z');
        assert_eq!(state_letter(2, 0x2000), 'X');
        assert_eq!(state_letter(3, 0), 'S');
        assert_eq!(state_letter(2, 0), 'R');
        assert_eq!(state_letter(4, 0), 'T');
        assert_eq!(state_letter(9, 0), '?');
    }

    #[test]
    fn c_strings_and_libproc_errnos() {
        let chars: Vec<std::ffi::c_char> = b"launchd\0junk".iter().map(|&b| b as _).collect();
        assert_eq!(c_chars(&chars), "launchd");
        assert_eq!(
            errno_in("return code = -1, errno = 13, message = 'Permission denied'"),
            Some(13)
        );
        assert_eq!(errno_in("No process found with pid 7"), None);
    }

    #[test]
    fn socket_addresses_as_the_kernel_stores_them() {
        // Port 8080 in network byte order, read as a native int.
        let lport = i32::from(u16::from_ne_bytes(8080u16.to_be_bytes()));
        assert_eq!(
            local_address(false, lport, [127, 0, 0, 1], [0; 16]),
            "127.0.0.1:8080".parse().unwrap()
        );
        let mut v6 = [0u8; 16];
        v6[15] = 1;
        assert_eq!(
            local_address(true, lport, [0; 4], v6),
            "[::1]:8080".parse().unwrap()
        );
    }

    #[test]
    fn listeners_and_their_owners() {
        let held = |pid, socket, local: &str, listening| HeldTcp {
            pid,
            socket,
            local: local.parse().unwrap(),
            listening,
        };
        // A listener shared by a parent and its child, another on 9000, a connection.
        let all = [
            held(10, 0xa, "0.0.0.0:8080", true),
            held(11, 0xa, "0.0.0.0:8080", true),
            held(12, 0xb, "[::1]:9000", true),
            held(12, 0xc, "127.0.0.1:50000", false),
        ];
        assert_eq!(
            listeners(&all, None),
            [
                ("0.0.0.0:8080".parse().unwrap(), 0xa),
                ("[::1]:9000".parse().unwrap(), 0xb)
            ]
        );
        let ports = HashSet::from([9000]);
        assert_eq!(
            listeners(&all, Some(&ports)),
            [("[::1]:9000".parse().unwrap(), 0xb)]
        );
        let o = owners(&all, &HashSet::from([0xa, 0xb, 0xd]));
        assert_eq!(o[&0xa], [10, 11]);
        assert_eq!(o[&0xb], [12]);
        assert!(!o.contains_key(&0xd));
    }
}
