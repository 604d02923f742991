//! `baton-demo`: the whole Baton system in one command, narrated (see `tools::demo`).

#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "baton-demo",
    version = daemon::version(bus::slot::VERSION, None),
    about = "Run the whole Baton system for about 20 seconds and narrate what the arbiters decide",
    long_about = "Run the whole Baton system for about 20 seconds and narrate what the arbiters \
decide: a registry, the robot manager, an arm and a drive arbiter, the simulator and three \
applications (teleop > autonomy > payload; payload compromising). A high-priority application \
takes over and lets go, another crashes; then everything stops and no shared memory is left.\n\n\
--hosts 2 (as root) runs the payload application on a second host made of Linux namespaces, \
reaching the robot through network reflection."
)]
struct Args {
    /// 1, or 2 to put the payload application on a second host (needs root).
    #[arg(long, default_value_t = 1, value_parser = daemon::whole_number(1, 2, "a count of hosts"))]
    hosts: u64,
    #[command(subcommand)]
    role: Option<Role>,
}

#[derive(Subcommand)]
enum Role {
    /// (internal) print the arbiters' decisions as they change.
    #[command(hide = true)]
    Narrate {
        #[arg(long)]
        t0_ns: u64,
        #[arg(long)]
        domain: String,
    },
}

fn main() {
    daemon::init_logging("warn");
    let args: Args = daemon::parse_args();
    let result = match args.role {
        // Started with the signals blocked (the demo takes them): stopped by them all the same.
        Some(Role::Narrate { t0_ns, domain }) => daemon::on_stop(|_| std::process::exit(0))
            .and_then(|()| bus::Domain::new(&domain).map_err(|e| e.to_string()))
            .and_then(|d| tools::demo::narrate(&d, t0_ns))
            .map(|()| 0),
        // Stopped by a signal, it exits as a shell reports a process killed by it (130 for
        // Ctrl-C), having cleaned up.
        None => tools::demo::run(args.hosts as usize).map(|ended| match ended {
            tools::demo::Ended::Finished => 0,
            tools::demo::Ended::Stopped(signal) => tools::interrupted::status_after(signal),
        }),
    };
    match result {
        Ok(status) => std::process::exit(status),
        Err(e) => {
            eprintln!("baton-demo: {e}");
            std::process::exit(1);
        }
    }
}
