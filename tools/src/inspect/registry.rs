//! What the registry knows (its `List` request: slots, endpoints, connections), merged with the
//! slot's own header for `info`. Asking the registry changes nothing on the bus: `List` only
//! reads its tables.

use bus::protocol::{EndpointInfo, EndpointKind, Reply, Request, SlotListing};
use bus::slot::WriterState;
use bus::{Domain, SlotName};
use serde::Serialize;

use super::{Error, Result};

/// Every slot the registry of `domain` knows, with its endpoints.
pub fn listing(domain: &Domain) -> Result<Vec<SlotListing>> {
    match bus::protocol::ask(domain, &Request::List)? {
        Reply::Listing { slots } => Ok(slots),
        // Too big to send in one frame (the registry says so rather than closing).
        Reply::Error { message } => Err(Error::Refused(message)),
        other => Err(Error::Refused(format!(
            "unexpected answer from the registry of '{domain}': {other:?}"
        ))),
    }
}

/// The pid of the registry serving `domain` (from its `Welcome`), or why it cannot be reached
/// (`BusError::Refused` when it runs but refuses this user).
pub fn registry_pid(domain: &Domain) -> Result<u32, bus::BusError> {
    let hello = Request::Hello {
        program: bus::process::own_program(),
    };
    match bus::protocol::ask(domain, &hello)? {
        Reply::Welcome { registry_pid } => Ok(registry_pid),
        other => Err(bus::BusError::RegistryUnreachable {
            domain: domain.to_string(),
            socket: domain.registry_socket(),
            reason: format!("unexpected answer {other:?}"),
        }),
    }
}

/// Whether a registry-server answers for `domain`, as `doctor`'s registry check decides it:
/// its pid, or the sentence that says none does and how to start one (doctor's detail, and the
/// note `list`, `get` and `info` print without a registry).
pub fn answers(domain: &Domain) -> Result<u32, NoAnswer> {
    registry_pid(domain).map_err(|e| match e {
        // It runs: starting one would not help.
        bus::BusError::Refused { reason, .. } => NoAnswer {
            message: format!(
                "the registry-server of domain '{domain}' refuses this user: {reason}"
            ),
            refuses: true,
            silent: false,
        },
        e @ bus::BusError::RegistryNotAnswering { .. } => NoAnswer {
            message: e.to_string(),
            refuses: false,
            silent: true,
        },
        bus::BusError::RegistryUnreachable { reason, .. } => NoAnswer {
            message: format!(
                "no registry-server answers on domain '{domain}' (socket @{}: {reason}); start \
                 `registry-server --domain {domain}`{}",
                domain.registry_socket(),
                domains_in_use(domain)
            ),
            refuses: false,
            silent: false,
        },
        other => NoAnswer {
            message: other.to_string(),
            refuses: false,
            silent: false,
        },
    })
}

/// A mistyped domain: the ones in use here are the likelier answer. At most 8, those that
/// begin most like `domain` first; empty when there is none.
fn domains_in_use(domain: &Domain) -> String {
    const SHOWN: usize = 8;
    let mut others = likeliest_first(other_domains(domain), domain);
    if others.is_empty() {
        return String::new();
    }
    let more = others.len().saturating_sub(SHOWN);
    others.truncate(SHOWN);
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!(
        ", or name a domain in use here (segments): {}{more}",
        others.join(", ")
    )
}

/// `others` (from [`other_domains`]), those that begin most like `domain` first: the one a
/// mistyped name meant is likely among the first.
fn likeliest_first(mut others: Vec<String>, domain: &Domain) -> Vec<String> {
    let alike = |other: &String| {
        other
            .bytes()
            .zip(domain.as_str().bytes())
            .take_while(|(a, b)| a == b)
            .count()
    };
    others.sort_by_key(|other| std::cmp::Reverse(alike(other)));
    others
}

/// Other domains with segments in /dev/shm, with their segment counts.
pub fn other_domains(domain: &Domain) -> Vec<String> {
    let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
    for entry in std::fs::read_dir(bus::names::SHM_DIR)
        .into_iter()
        .flatten()
        .flatten()
    {
        let Some(other) = Domain::of_segment_file(&entry.file_name().to_string_lossy()) else {
            continue;
        };
        if other != *domain {
            *counts.entry(other.as_str().to_owned()).or_default() += 1;
        }
    }
    counts
        .into_iter()
        .map(|(d, n)| format!("{d} ({n})"))
        .collect()
}

/// Why no registry answered, in doctor's words.
#[derive(Debug)]
pub struct NoAnswer {
    pub message: String,
    /// One runs, but refuses this user (outside the bus's group): its pid is not known.
    pub refuses: bool,
    /// One listens, but did not answer (hung, stopped, out of file descriptors).
    pub silent: bool,
}

impl std::fmt::Display for NoAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// One endpoint, for printing.
#[derive(Debug, Serialize, Clone)]
pub struct Endpoint {
    pub pid: u32,
    pub program: String,
    /// `false` while a subscription waits for its slot.
    pub bound: bool,
}

impl From<&EndpointInfo> for Endpoint {
    fn from(e: &EndpointInfo) -> Endpoint {
        Endpoint {
            pid: e.pid,
            program: e.program.clone(),
            bound: e.bound,
        }
    }
}

/// Endpoints of one slot as the registry lists them.
#[derive(Debug, Serialize)]
pub struct Endpoints {
    pub name: String,
    #[serde(rename = "type")]
    pub type_name: String,
    pub segment: Option<String>,
    pub capacity: u64,
    pub writer: WriterState,
    pub publishers: Vec<Endpoint>,
    pub subscribers: Vec<Endpoint>,
    /// (publisher pid, subscriber pid) of bound pairs.
    pub connections: Vec<(u32, u32)>,
}

impl From<&SlotListing> for Endpoints {
    fn from(s: &SlotListing) -> Endpoints {
        let of = |kind| {
            s.endpoints
                .iter()
                .filter(|e| e.kind == kind)
                .map(Endpoint::from)
                .collect()
        };
        Endpoints {
            name: s.name.to_string(),
            type_name: s.type_name.clone(),
            segment: s.segment.clone(),
            capacity: s.capacity,
            writer: s.writer,
            publishers: of(EndpointKind::Publication),
            subscribers: of(EndpointKind::Subscription),
            connections: s
                .connections()
                .iter()
                .map(|(p, s)| (p.pid, s.pid))
                .collect(),
        }
    }
}

/// Everything `info` shows about one slot.
#[derive(Debug, Serialize)]
pub struct Info {
    pub name: String,
    #[serde(rename = "type")]
    pub type_name: String,
    /// Structural schema hash (hex).
    pub schema_hash: String,
    /// The schema, human-readable (`Schema::describe`).
    pub schema: String,
    /// The slot's header and newest value; `None` when no segment exists (only subscriptions
    /// waiting for a publication).
    pub slot: Option<super::SlotSummary>,
    /// Why the slot's value could not be summarised (its memory is corrupt); the rest is shown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slot_error: Option<String>,
    /// Local publishers, subscribers and connections from the registry; `None` when it does
    /// not answer (`registry_error` says why).
    pub endpoints: Option<Endpoints>,
    pub registry_error: Option<String>,
    /// Host whose publication this slot mirrors; `None` for a slot published here.
    pub origin: Option<String>,
    /// Other hosts this host's registry exchanges slots with (from its network statistics);
    /// the registry does not say which of them subscribe to this slot.
    pub peer_hosts: Vec<String>,
}

/// Gathers `info` for `name` from its segment and from the registry. A name only another
/// computer publishes is mirrored here while `info` looks (`remote::open_to_read`); this tool's own
/// subscription to it is left out of the endpoints shown.
pub fn info(domain: &Domain, name: &SlotName) -> Result<Info> {
    let (slot, following) = super::remote::open_to_read(domain, name)?;
    let (mut listed, registry_error) = match listing(domain) {
        Ok(slots) => (slots.into_iter().find(|s| &s.name == name), None),
        Err(e) => (None, Some(e.to_string())),
    };
    if let (Some(l), Some(_)) = (&mut listed, &following) {
        l.endpoints.retain(|e| e.pid != std::process::id());
    }
    let (type_name, hash, schema) = match (&slot, &listed) {
        (Some(slot), _) => {
            let stored = slot.schema();
            let schema = stored
                .parse()
                .map_or_else(|e| format!("(unreadable: {e})"), |s| s.describe());
            (stored.type_name.clone(), stored.hash.0, schema)
        }
        (None, Some(l)) => (
            l.type_name.clone(),
            l.schema_hash,
            "(no slot yet: the schema is stored when a publication creates it)".to_owned(),
        ),
        (None, None) => {
            return Err(Error::NoSlot {
                name: name.to_string(),
                domain: domain.to_string(),
            })
        }
    };
    // A value that cannot be read (the slot's memory corrupt) leaves the rest worth showing.
    let (summary, slot_error) = match slot
        .as_ref()
        .map(|s| super::summarize(s, &super::local_host(domain)))
        .transpose()
    {
        Ok(summary) => (summary, None),
        Err(e) => {
            // The segment and its room, from the header, which was read whole.
            let at = slot.as_ref().map_or(String::new(), |s| {
                format!(
                    " (segment {}, capacity {} bytes)",
                    s.segment(),
                    s.capacity()
                )
            });
            (None, Some(format!("{e}{at}")))
        }
    };
    let origin = summary
        .as_ref()
        .filter(|s| s.mirrored)
        .map(|s| s.origin.clone());
    // This computer's running registry's statistics only (as doctor takes them): others in
    // /dev/shm are mirrors of other hosts' (whose peers include this host), or a run under
    // another --host name, which are not this registry's peers.
    let peer_hosts = super::stats::read(domain)
        .into_iter()
        .find(|s| !s.mirrored && s.writer_alive)
        .map(|s| s.peers().into_iter().map(|p| p.host).collect())
        .unwrap_or_default();
    Ok(Info {
        name: name.to_string(),
        type_name,
        schema_hash: bus::schema::SchemaHash(hash).to_string(),
        schema,
        slot: summary,
        slot_error,
        endpoints: listed.as_ref().map(Endpoints::from),
        registry_error,
        origin,
        peer_hosts,
    })
}
