//! The registry's directory: the value of `/baton/registry/directory`, which every registry
//! publishes for the processes of its own computer. It lists every public publication the
//! registry knows, local ones and those announced by the registries of other computers, and is
//! rewritten whenever that set (or a publisher's liveness) changes. Processes that discover
//! publications by name pattern (the robot manager finding controllers) subscribe to it and wait
//! on it like on any slot.
//!
//! The directory is host-local: it is never announced to, reflected to or mirrored from other
//! computers (each registry publishes its own under the same name).

use serde::{Deserialize, Serialize};

/// Name of the directory slot.
pub const DIRECTORY_SLOT: &str = "/baton/registry/directory";

/// Capacity of the directory slot, bytes: room for several thousand entries.
pub const DIRECTORY_CAPACITY: usize = 1 << 20;

/// Whether a public name belongs to one computer only: never announced, reflected or mirrored.
pub fn is_host_local(name: &str) -> bool {
    name == DIRECTORY_SLOT
}

/// The value of `/baton/registry/directory`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Directory {
    /// The host this registry runs on (its network host name).
    pub host: String,
    /// Public publications, sorted by name.
    pub entries: Vec<DirectoryEntry>,
}

/// One public publication.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectoryEntry {
    pub name: String,
    pub type_name: String,
    pub schema_hash: u64,
    /// The host that publishes it; `None`: this host.
    pub origin_host: Option<String>,
    /// Whether its publisher is running (a local writer that exited or died, or a remote one
    /// its host announced as gone, is `false`).
    pub publisher_alive: bool,
    /// When its publisher's process started, in clock ticks since this computer booted (as
    /// `process::start_time`); `None` for a remote publisher. Tells which of several
    /// publications found at once came first (the robot manager places unlisted controllers
    /// in order of appearance).
    pub publisher_started: Option<u64>,
}

impl Directory {
    /// Entries whose name starts with `prefix`.
    pub fn with_prefix<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = &'a DirectoryEntry> {
        self.entries
            .iter()
            .filter(move |e| e.name.starts_with(prefix))
    }
}
