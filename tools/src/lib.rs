//! Library behind Baton's command-line tools: reading the bus without disturbing it
//! (`inspect`). The binaries in `src/bin` are thin shells over it.

#![forbid(unsafe_code)]

pub mod arbitration_bench;
pub mod bench;
pub mod demo;
pub mod demo_bus;
pub mod hosts;
pub mod inspect;
pub mod interrupted;
pub mod sim;
pub mod stress;
pub mod udp_baseline;
