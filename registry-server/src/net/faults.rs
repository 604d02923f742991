//! Test-only fault injection on the send path: loss, duplication and reordering of datagrams,
//! reproducible from a seed. The kernel on the test machines has no netem, so the tests switch
//! this on through the `BATON_NET_FAULTS` environment variable, which is read only when set:
//!
//! `BATON_NET_FAULTS=loss=0.3,dup=0.2,reorder=0.2,seed=7,for_ms=4000`
//!
//! Faults apply from the registry's start for `for_ms` milliseconds (forever without it); then
//! the network "recovers". `clock_back_s=N` starts the registry's session N seconds in the past,
//! as a computer whose clock was set back (no real-time clock, before time synchronisation)
//! would.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

pub const ENV: &str = "BATON_NET_FAULTS";

pub struct Faults {
    loss: f64,
    dup: f64,
    reorder: f64,
    until: Option<Instant>,
    rng: u64,
    held: Option<(Vec<u8>, SocketAddr)>,
    /// How far back the registry's session (its start time) is set.
    pub clock_back: Duration,
}

/// What to send now for one datagram handed to `apply`.
pub enum Action {
    Send,
    Drop,
    Twice,
    /// Hold this datagram and send it after the next one.
    Hold,
}

impl Faults {
    /// Parses the specification; `Err` names the part it could not read.
    pub fn parse(spec: &str) -> Result<Faults, String> {
        let mut f = Faults {
            loss: 0.0,
            dup: 0.0,
            reorder: 0.0,
            until: None,
            rng: 0x2545_f491_4f6c_dd1d,
            held: None,
            clock_back: Duration::ZERO,
        };
        for part in spec.split(',').filter(|p| !p.trim().is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("{ENV}: expected key=value, found {part:?}"))?;
            let num = |v: &str| {
                v.trim()
                    .parse::<f64>()
                    .map_err(|e| format!("{ENV}: {k}={v}: {e}"))
            };
            match k.trim() {
                "loss" => f.loss = num(v)?,
                "dup" => f.dup = num(v)?,
                "reorder" => f.reorder = num(v)?,
                "seed" => f.rng = (num(v)? as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1,
                "for_ms" => f.until = Some(Instant::now() + Duration::from_millis(num(v)? as u64)),
                "clock_back_s" => f.clock_back = Duration::from_secs(num(v)? as u64),
                other => return Err(format!("{ENV}: unknown key {other:?}")),
            }
        }
        Ok(f)
    }

    pub fn from_env() -> Result<Option<Faults>, String> {
        match std::env::var(ENV) {
            Ok(spec) => Faults::parse(&spec).map(Some),
            Err(_) => Ok(None),
        }
    }

    fn next(&mut self) -> f64 {
        // xorshift64*: plenty for test faults, reproducible from the seed.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        (self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn active(&self, now: Instant) -> bool {
        self.until.is_none_or(|u| now < u)
    }

    /// Decides the fate of one datagram.
    pub fn decide(&mut self, now: Instant) -> Action {
        if !self.active(now) {
            return Action::Send;
        }
        let r = self.next();
        if r < self.loss {
            Action::Drop
        } else if r < self.loss + self.dup {
            Action::Twice
        } else if r < self.loss + self.dup + self.reorder && self.held.is_none() {
            Action::Hold
        } else {
            Action::Send
        }
    }

    pub fn hold(&mut self, datagram: &[u8], to: SocketAddr) {
        self.held = Some((datagram.to_vec(), to));
    }

    /// The datagram held back for reordering, to send after the current one.
    pub fn take_held(&mut self) -> Option<(Vec<u8>, SocketAddr)> {
        self.held.take()
    }
}
