//! Control arbitration (DESIGN.md, "Control arbitration"): the protocol types that the manager,
//! arbiters, controllers and drivers share on the bus (`protocol`), the pure algorithm
//! (`algorithm`), the arbiter's configuration file (`config`) and the arbiter process loop
//! (`process`). The `arbiter` binary is a thin shell over `process`.

#![forbid(unsafe_code)]

pub mod algorithm;
pub mod clock;
pub mod config;
pub mod process;
pub mod protocol;
