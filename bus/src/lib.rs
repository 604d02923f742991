//! Baton's bus: named, typed, latest-value slots in shared memory, created by the domain's
//! `registry-server`.
//!
//! ```no_run
//! use std::time::Duration;
//! # fn main() -> Result<(), bus::BusError> {
//! // Values reach the slots once the domain's `registry-server` runs: until then every call
//! // succeeds and the endpoints wait for it (`Bus::wait_for_registry` waits, or says why not).
//! let bus = bus::Bus::from_env()?;                       // BUS_DOMAIN, or "default"
//! let mut pose = bus.publish::<(f64, f64)>("/example/xy")?;
//! let mut sub = bus.subscribe::<(f64, f64)>("/example/xy")?;
//! pose.write(&(1.0, 2.0))?;
//! if sub.wait_update(Duration::from_secs(1))? {
//!     println!("{:?} {:?}", sub.value(), sub.meta());
//! }
//! # Ok(()) }
//! ```
//!
//! Modules: `names` (domains and slot names), `schema` and `codec` (types on the wire), `slot`
//! (the shared-memory layout and seqlock), `shm` and `futex` (the only modules with `unsafe`),
//! `client` (the registry connection), `protocol` (registry messages), `endpoints` and `group`
//! (the API), `directory` (the registry's list of publications, published for discovery).

// `unsafe` lives in `shm` (the mapping, its copies, the SIGBUS handler) and `futex`; every
// block says why it is sound. The other crates forbid it.
#![deny(clippy::undocumented_unsafe_blocks, unsafe_op_in_unsafe_fn)]

mod client;
pub mod codec;
pub mod directory;
mod endpoints;
pub mod error;
pub mod futex;
mod group;
pub mod names;
pub mod payload;
pub mod process;
pub mod protocol;
pub mod schema;
pub mod shm;
pub mod slot;
pub mod value;

pub use endpoints::{Bus, Publication, PublicationBuilder, Subscription, ValueMeta};
pub use error::{BusError, NameError, SegmentError};
pub use group::{GroupWaker, Member, Released, SubscriptionGroup};
pub use names::{Domain, SlotName};
pub use slot::{WriterId, WriterState};
pub use value::{Codec, Pod, Serde, DEFAULT_CAPACITY};
