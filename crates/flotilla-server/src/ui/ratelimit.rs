//! Sign-in attempts limited per client address: a token bucket of [`BURST`]
//! attempts refilled at one per [`REFILL`], in memory.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Attempts a client may make at once.
pub const BURST: f64 = 10.0;
/// One more attempt per this long.
pub const REFILL: Duration = Duration::from_secs(6);
/// Buckets kept at most (full ones are forgotten first).
const MAX_CLIENTS: usize = 100_000;

/// The buckets, by client address.
#[derive(Default)]
pub struct SignInLimit {
    buckets: Mutex<HashMap<IpAddr, (f64, Instant)>>,
}

impl SignInLimit {
    /// Takes one attempt for `client` at `now`: `Ok`, or `Err(wait)` with how long
    /// until the next attempt is allowed.
    pub fn take(&self, client: IpAddr, now: Instant) -> Result<(), Duration> {
        let mut map = self.buckets.lock().expect("not poisoned");
        let refill = |(tokens, at): (f64, Instant)| {
            let gained = now.saturating_duration_since(at).as_secs_f64() / REFILL.as_secs_f64();
            (BURST.min(tokens + gained), now)
        };
        if map.len() >= MAX_CLIENTS {
            map.retain(|_, b| refill(*b).0 < BURST);
        }
        let b = map.entry(client).or_insert((BURST, now));
        *b = refill(*b);
        if b.0 >= 1.0 {
            b.0 -= 1.0;
            Ok(())
        } else {
            Err(REFILL.mul_f64(1.0 - b.0))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_one_per_refill_per_client() {
        let l = SignInLimit::default();
        let t0 = Instant::now();
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "::1".parse().unwrap();
        for _ in 0..BURST as usize {
            assert!(l.take(a, t0).is_ok());
        }
        let wait = l.take(a, t0).unwrap_err();
        assert!(wait > Duration::ZERO && wait <= REFILL);
        assert!(l.take(b, t0).is_ok(), "another client has its own bucket");
        assert!(l.take(a, t0 + REFILL).is_ok());
        assert!(l.take(a, t0 + REFILL).is_err());
    }
}
