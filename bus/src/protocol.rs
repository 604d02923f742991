//! Messages between processes and their registry server, over the domain's abstract Unix stream
//! socket: each frame is a little-endian u32 length and a bincode body (see `codec`).
//!
//! A client sends `Request`s tagged with an id; the registry answers each with a `Reply` carrying
//! the same id, and may push `Reply::Bound` (id 0) when a slot that a pending subscription waits
//! for is created.

use std::io::{Read, Write};

use serde::{Deserialize, Serialize};

use crate::codec;
use crate::error::BusError;
use crate::names::SlotName;
use crate::slot::WriterState;

/// Largest frame either side accepts (schemas are bounded well below this).
pub const MAX_FRAME: usize = 4 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EndpointKind {
    Publication,
    Subscription,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Registration {
    /// Client-chosen id, unique within the process (see `Slot::set_writer`).
    pub endpoint: u64,
    pub name: SlotName,
    pub kind: EndpointKind,
    pub type_name: String,
    pub schema_hash: u64,
    /// `Schema::to_bytes`; the registry stores it in the slot it creates.
    pub schema: Vec<u8>,
    /// Payload bytes the publication needs (ignored for subscriptions).
    pub capacity: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Request {
    /// First message of a connection: who the client is.
    Hello {
        program: String,
    },
    Register(Registration),
    Unregister {
        endpoint: u64,
    },
    /// Every slot with its endpoints.
    List,
    /// A tool reads `name` whatever its type (`bus-inspect get` of a name published on another
    /// computer): bound like a subscription to the slot here if there is one, else the
    /// registry asks the host that publishes the name for its schema and mirrors it with
    /// that. Answered like a subscription's registration (`Registered`, then `Bound`), or
    /// refused when neither this host nor another has the name. Lasts while the connection
    /// does (or until `Unregister`).
    Follow {
        endpoint: u64,
        name: SlotName,
    },
}

/// Why the registry refused a registration.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Refusal {
    TypeMismatch { slot_type: String, slot_hash: u64 },
    CapacityTooSmall { capacity: u64 },
    AlreadyPublished { pid: u32 },
    Failed { reason: String },
}

impl Refusal {
    /// The library error for this refusal of `reg`.
    pub fn into_error(self, reg: &Registration) -> BusError {
        let name = reg.name.to_string();
        match self {
            Refusal::TypeMismatch {
                slot_type,
                slot_hash,
            } => BusError::TypeMismatch {
                name,
                slot_type,
                slot_hash: crate::schema::SchemaHash(slot_hash).to_string(),
                requested_type: reg.type_name.clone(),
                requested_hash: crate::schema::SchemaHash(reg.schema_hash).to_string(),
            },
            Refusal::CapacityTooSmall { capacity } => BusError::CapacityTooSmall {
                name,
                capacity: capacity as usize,
                requested: reg.capacity as usize,
            },
            Refusal::AlreadyPublished { pid } => BusError::AlreadyPublished { name, pid },
            Refusal::Failed { reason } => BusError::Refused { name, reason },
        }
    }
}

/// One endpoint as the registry knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointInfo {
    pub kind: EndpointKind,
    pub pid: u32,
    pub program: String,
    /// `false` while a subscription waits for its slot to be created.
    pub bound: bool,
}

/// One slot as the registry knows it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SlotListing {
    pub name: SlotName,
    pub type_name: String,
    pub schema_hash: u64,
    /// `None` while only pending subscriptions exist.
    pub segment: Option<String>,
    pub capacity: u64,
    pub writer: WriterState,
    pub endpoints: Vec<EndpointInfo>,
}

impl SlotListing {
    /// Connections: (publisher, subscriber) pairs of bound endpoints.
    pub fn connections(&self) -> Vec<(&EndpointInfo, &EndpointInfo)> {
        let bound = |k| {
            self.endpoints
                .iter()
                .filter(move |e| e.kind == k && e.bound)
        };
        bound(EndpointKind::Publication)
            .flat_map(|p| bound(EndpointKind::Subscription).map(move |s| (p, s)))
            .collect()
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Reply {
    Welcome {
        registry_pid: u32,
    },
    /// `segment` is `None` for a subscription whose slot does not exist yet; `Bound` follows.
    Registered {
        endpoint: u64,
        segment: Option<String>,
    },
    Refused {
        endpoint: u64,
        refusal: Refusal,
    },
    Bound {
        endpoint: u64,
        segment: String,
    },
    Unregistered {
        endpoint: u64,
    },
    Listing {
        slots: Vec<SlotListing>,
    },
    Error {
        message: String,
    },
}

/// A frame: request/reply id (0 for pushes) and body.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Frame<T> {
    pub id: u64,
    pub body: T,
}

pub fn write_frame<T: Serialize>(w: &mut impl Write, id: u64, body: &T) -> std::io::Result<()> {
    w.write_all(&encode_frame(id, body)?)
}

/// One frame as it goes on the stream (length prefix and payload), for a writer that queues
/// frames and needs their size; refused (`InvalidData`) above [`MAX_FRAME`].
pub fn encode_frame<T: Serialize>(id: u64, body: &T) -> std::io::Result<Vec<u8>> {
    let mut payload = Vec::new();
    codec::encode_into(&Frame { id, body }, &mut payload)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))?;
    if payload.len() > MAX_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("frame of {} bytes exceeds {MAX_FRAME}", payload.len()),
        ));
    }
    let mut frame = Vec::with_capacity(4 + payload.len());
    frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    frame.extend_from_slice(&payload);
    Ok(frame)
}

/// Reads one frame; `Ok(None)` on a clean end of stream.
pub fn read_frame<T: serde::de::DeserializeOwned>(
    r: &mut impl Read,
) -> std::io::Result<Option<Frame<T>>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("frame of {len} bytes exceeds {MAX_FRAME}"),
        ));
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload)?;
    codec::decode(&payload)
        .map(Some)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))
}

/// Connects to the registry of `domain`.
pub fn connect(domain: &crate::names::Domain) -> std::io::Result<std::os::unix::net::UnixStream> {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(domain.registry_socket())?;
    std::os::unix::net::UnixStream::connect_addr(&addr)
}

/// One request, one reply, on a fresh connection: for tools such as `bus-inspect`.
pub fn ask(domain: &crate::names::Domain, request: &Request) -> Result<Reply, BusError> {
    let unreachable = |reason: String| BusError::RegistryUnreachable {
        domain: domain.to_string(),
        socket: domain.registry_socket(),
        reason,
    };
    let mut stream = connect(domain).map_err(|e| unreachable(e.to_string()))?;
    let waited = std::time::Duration::from_secs(5);
    let _ = stream.set_read_timeout(Some(waited));
    let silent = |e: std::io::Error| {
        if matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ) {
            BusError::RegistryNotAnswering {
                domain: domain.to_string(),
                socket: domain.registry_socket(),
                waited,
            }
        } else {
            unreachable(e.to_string())
        }
    };
    let hello = Request::Hello {
        program: crate::process::own_program(),
    };
    write_frame(&mut stream, 1, &hello).map_err(|e| unreachable(e.to_string()))?;
    write_frame(&mut stream, 2, request).map_err(|e| unreachable(e.to_string()))?;
    loop {
        match read_frame::<Reply>(&mut stream) {
            Ok(Some(frame)) if frame.id == 2 => return Ok(frame.body),
            // A connection the registry refused (frame 0: before any request was read).
            Ok(Some(Frame {
                body: Reply::Error { message },
                ..
            })) => {
                return Err(BusError::Refused {
                    name: "this connection".into(),
                    reason: message,
                })
            }
            Ok(Some(_)) => continue,
            Ok(None) => return Err(unreachable("connection closed".into())),
            Err(e) => return Err(silent(e)),
        }
    }
}
