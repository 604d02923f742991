//! The registry server of one bus domain: it creates and initialises every slot's shared memory,
//! registers publications and subscriptions (endpoints) over the domain's local socket, lists
//! what it knows, removes the endpoints of processes that died, and on start adopts the slots
//! that already exist, so that it can be restarted (even after SIGKILL) under running processes.
//!
//! `server` owns the socket and threads, `admission` who may connect to it; `net` reflects
//! slots to other computers; `state` is the bookkeeping, free of I/O so that it reads as the
//! rules it enforces.

#![forbid(unsafe_code)]

mod admission;
pub mod net;
pub mod server;
pub mod state;

pub use server::{serve, ServerConfig};
