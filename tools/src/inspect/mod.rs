//! Reading a Baton bus without disturbing it, for `bus-inspect`.
//!
//! Everything here maps slot segments read-only and asks the registry only its `List` request,
//! so looking at a bus changes nothing on it: no slot byte, no waiter count, no endpoint. The
//! exceptions are explicit: `put` writes one value as the slot's writer would, `clean` removes
//! segments that `doctor` found stale, and `get`, `watch`, `info`, `hz` and `bw` of a name only
//! another computer publishes have the registry mirror it here for as long as they read (the
//! registry's one other request, `Follow`: `remote`).
//!
//! Modules: `slots` (list, get, the header facts of one slot), `remote` (names published on
//! another computer), `rate` (hz and bw from the buffers' sequence numbers and write times),
//! `watch` (watch and wait by polling sequences),
//! `registry` (the registry's listing: info, endpoints, graph), `stats` (the registries' network
//! counters), `doctor` and `net` (health checks, clean), `put`, `graph` (Graphviz DOT), and
//! `table` and `render` (the aligned text forms).

pub mod doctor;
pub mod followed;
pub mod graph;
pub mod net;
pub mod put;
pub mod rate;
pub mod registry;
pub mod remote;
pub mod render;
pub mod slots;
pub mod stats;
pub mod table;
pub mod watch;

use std::fmt;

use bus::slot::Slot;
use bus::{BusError, Domain, SlotName};

pub use remote::get;
pub use slots::{list, summarize, Reading, SlotSummary};

/// Why a `bus-inspect` command failed; printed as its one line.
#[derive(Debug)]
pub enum Error {
    Bus(BusError),
    /// No segment of that name in the domain.
    NoSlot {
        name: String,
        domain: String,
    },
    /// The command cannot do what was asked (bad input, refusal); the text says why.
    Refused(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Bus(e) => e.fmt(f),
            Error::NoSlot { name, domain } => write!(
                f,
                "{}, here or published by another computer (`bus-inspect --domain {domain} \
                 list --remote` shows the names there are)",
                no_slot(name, domain)
            ),
            Error::Refused(reason) => f.write_str(reason),
        }
    }
}

/// That `name` has no slot in `domain`, without saying where else to look (`Error::NoSlot`
/// points at `list --remote`, which needs a registry).
pub fn no_slot(name: &str, domain: &str) -> String {
    format!("no slot {name} in domain '{domain}'")
}

impl std::error::Error for Error {}

impl From<BusError> for Error {
    fn from(e: BusError) -> Error {
        Error::Bus(e)
    }
}

impl From<bus::NameError> for Error {
    fn from(e: bus::NameError) -> Error {
        Error::Bus(e.into())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Opens a slot of `domain` read-only (the mapping has no write permission at all).
pub fn open(domain: &Domain, name: &SlotName) -> Result<Slot> {
    open_mode(domain, name, false)
}

/// The value of the slot here, as it is: nothing asked of the registry, no wait for an empty
/// mirror's first value (for `doctor` and `stats`, which look at every slot they list and must
/// not register as their subscribers; `get` follows an empty mirror, `remote::get`).
pub(crate) fn read_here(domain: &Domain, name: &SlotName) -> Result<Option<Reading>> {
    slots::read_newer(&open(domain, name)?, 0)
}

/// Opens a slot; `writable` only for `put`.
pub(crate) fn open_mode(domain: &Domain, name: &SlotName, writable: bool) -> Result<Slot> {
    let segment = domain.segment_name(name);
    if !segment_file(domain, name).exists() {
        return Err(Error::NoSlot {
            name: name.to_string(),
            domain: domain.to_string(),
        });
    }
    Ok(Slot::open(&segment, writable).map_err(BusError::from)?)
}

/// The file in /dev/shm that holds `name`'s slot (when it exists).
pub(crate) fn segment_file(domain: &Domain, name: &SlotName) -> std::path::PathBuf {
    let segment = domain.segment_name(name);
    std::path::Path::new(bus::names::SHM_DIR).join(&segment[1..])
}

/// Parses a slot name, as an error the inspect commands report.
pub fn slot_name(name: &str) -> Result<SlotName> {
    Ok(SlotName::parse(name)?)
}

/// Whether `name` matches a `list` pattern: a glob when it holds `*` or `?` (`*` matches any
/// run of characters, `/` included, so `/robot/*` is everything under `/robot/`), otherwise a
/// substring.
pub fn matches(pattern: &str, name: &str) -> bool {
    if !pattern.contains(['*', '?']) {
        return name.contains(pattern);
    }
    glob(pattern.as_bytes(), name.as_bytes())
}

/// Iterative glob match with backtracking to the last `*` (linear in practice, no recursion).
fn glob(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == s[si]) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, si));
            pi += 1;
        } else if let Some((sp, ss)) = star {
            pi = sp + 1;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// This computer's name on the bus of `domain`: the host its last registry wrote into its
/// directory (its `--host` with `--net`, else the computer's host name); without a directory,
/// the host of the registry's own (not mirrored) statistics slot `/baton/registry/<host>/net`,
/// the running registry's first; otherwise the host name, which is the registry's default.
pub fn local_host(domain: &Domain) -> String {
    // The last registry to run here writes its host name into its directory, with --net or
    // without (then the computer's host name): the statistics below may be those of an earlier
    // run with another --host.
    if let Some(host) = remote::directory(domain)
        .ok()
        .flatten()
        .map(|d| d.host)
        .filter(|h| !h.is_empty())
    {
        return host;
    }
    let files = domain.segment_files().unwrap_or_default();
    // (whether its registry writes it now, host): a computer renamed keeps the statistics of
    // its old name, their writer gone; the running registry's are the ones that count.
    let mut own: Vec<(bool, String)> = files
        .iter()
        .filter_map(|(name, _)| {
            let host = name
                .as_str()
                .strip_prefix(stats::PREFIX)?
                .strip_suffix("/net")?;
            let slot = open(domain, name).ok()?;
            let running = slot.writer().is_running();
            slot.origin().is_empty().then(|| (running, host.to_owned()))
        })
        .collect();
    own.sort_by_key(|(running, _)| !running);
    own.into_iter()
        .next()
        .map_or_else(hostname, |(_, host)| host)
}

/// This computer's host name.
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "localhost".into())
}

/// The program name of a process, if it runs and is readable: the base name of its `argv[0]`
/// (`/proc/<pid>/cmdline`, what the bus's own endpoints call a program), else its
/// `/proc/<pid>/comm`, which the kernel cuts to 15 characters (`robot-controlle`).
pub fn program_of(pid: u32) -> Option<String> {
    if pid == 0 {
        return None;
    }
    let argv0 = net::cmdline(pid).and_then(|args| {
        let base = std::path::Path::new(args.first()?).file_name()?;
        Some(base.to_string_lossy().into_owned())
    });
    argv0.or_else(|| {
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .ok()
            .map(|s| s.trim().to_owned())
    })
}

/// Nanoseconds since the Unix epoch now.
pub fn now_ns() -> u64 {
    bus::slot::now_ns()
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn patterns_are_globs_or_substrings() {
        assert!(matches("/robot/*", "/robot/arm/state"));
        assert!(!matches("/robot/*", "/robots"));
        assert!(matches("arm", "/robot/arm/state"));
        assert!(matches("*/state", "/robot/arm/state"));
        assert!(matches("/r?bot/*", "/robot/x"));
        assert!(!matches("*/state", "/robot/arm/status"));
        assert!(matches("*", "/x"));
        assert!(matches("/a*b*c", "/aXbYbZc"));
    }
}
