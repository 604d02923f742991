//! `bus-inspect`: see what is on a Baton bus. Reads shared memory read-only; never writes.

use clap::{Parser, Subcommand};

use bus::protocol::{EndpointKind, Reply, Request};
use bus::{Domain, SlotName};
use tools::inspect;

#[derive(Parser)]
#[command(
    version,
    about = "See what is on a Baton bus",
    long_about = "See what is on a Baton bus.\n\n`list` and `get` read the slots' shared memory \
directly (read-only), so they work with or without a registry-server and never disturb the bus. \
`endpoints` asks the domain's registry-server who publishes and subscribes.\n\nExamples:\n  \
bus-inspect list\n  bus-inspect get /robot/pose --json\n  bus-inspect --domain test endpoints"
)]
struct Args {
    /// Bus domain.
    #[arg(long, global = true, env = "BUS_DOMAIN", default_value = bus::names::DEFAULT_DOMAIN)]
    domain: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Every slot: name, type, size, sequence, age of the last write, writer alive.
    List {
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// The current value of one slot, decoded from the schema stored in the slot.
    Get {
        /// Slot name, e.g. /robot/pose.
        name: String,
        /// Print the value alone as one line of JSON.
        #[arg(long)]
        json: bool,
    },
    /// Endpoints (publications, subscriptions) and connections known to the registry.
    Endpoints {
        /// One JSON object per slot per line.
        #[arg(long)]
        json: bool,
    },
}

fn main() {
    let args = Args::parse();
    let result = Domain::new(&args.domain)
        .map_err(|e| e.to_string())
        .and_then(|domain| run(&domain, args.command));
    if let Err(e) = result {
        eprintln!("bus-inspect: {e}");
        std::process::exit(1);
    }
}

fn run(domain: &Domain, command: Command) -> Result<(), String> {
    match command {
        Command::List { json } => list(domain, json),
        Command::Get { name, json } => get(domain, &name, json),
        Command::Endpoints { json } => endpoints(domain, json),
    }
}

fn list(domain: &Domain, json: bool) -> Result<(), String> {
    let (slots, errors) = inspect::list(domain).map_err(|e| e.to_string())?;
    if json {
        for s in &slots {
            println!("{}", serde_json::to_string(s).map_err(|e| e.to_string())?);
        }
    } else {
        println!(
            "{:<40} {:<28} {:>9} {:>8} {:>10} {:>9}  WRITER",
            "NAME", "TYPE", "CAPACITY", "SIZE", "SEQUENCE", "AGE"
        );
        for s in &slots {
            let age = s
                .age_s
                .map_or_else(|| "-".to_owned(), |a| format!("{a:.2}s"));
            let writer = match (s.writer, s.writer_alive) {
                (bus::WriterState::None, _) => "none".to_owned(),
                (_, true) => format!("alive (pid {})", s.writer_pid),
                (_, false) => format!("gone (pid {})", s.writer_pid),
            };
            println!(
                "{:<40} {:<28} {:>9} {:>8} {:>10} {:>9}  {}",
                s.name,
                short_type(&s.type_name),
                s.capacity,
                s.size,
                s.sequence,
                age,
                writer
            );
        }
    }
    for e in &errors {
        eprintln!("bus-inspect: unreadable: {e}");
    }
    Ok(())
}

fn short_type(t: &str) -> String {
    if t.len() <= 28 {
        t.to_owned()
    } else {
        format!("…{}", &t[t.len() - 27..])
    }
}

fn get(domain: &Domain, name: &str, json: bool) -> Result<(), String> {
    let name = SlotName::parse(name).map_err(|e| e.to_string())?;
    let reading = inspect::get(domain, &name).map_err(|e| e.to_string())?;
    let Some(reading) = reading else {
        return Err(format!("{name} has no value yet"));
    };
    if json {
        println!("{}", reading.value);
    } else {
        println!(
            "{} ({}) sequence {} writer {:?}",
            reading.name, reading.type_name, reading.sequence, reading.writer
        );
        println!(
            "{}",
            serde_json::to_string_pretty(&reading.value).map_err(|e| e.to_string())?
        );
    }
    Ok(())
}

fn endpoints(domain: &Domain, json: bool) -> Result<(), String> {
    let reply = bus::protocol::ask(domain, &Request::List).map_err(|e| e.to_string())?;
    let Reply::Listing { slots } = reply else {
        return Err(format!("unexpected answer from the registry: {reply:?}"));
    };
    for slot in &slots {
        if json {
            let endpoints: Vec<_> = slot
                .endpoints
                .iter()
                .map(|e| {
                    serde_json::json!({
                        "kind": match e.kind { EndpointKind::Publication => "publication", EndpointKind::Subscription => "subscription" },
                        "pid": e.pid, "program": e.program, "bound": e.bound,
                    })
                })
                .collect();
            let line = serde_json::json!({
                "name": slot.name.as_str(), "type": slot.type_name, "segment": slot.segment,
                "capacity": slot.capacity, "endpoints": endpoints,
                "connections": slot.connections().len(),
            });
            println!("{line}");
        } else {
            println!(
                "{} ({}){}",
                slot.name,
                slot.type_name,
                if slot.segment.is_none() {
                    " [no slot yet]"
                } else {
                    ""
                }
            );
            for e in &slot.endpoints {
                let kind = match e.kind {
                    EndpointKind::Publication => "pub",
                    EndpointKind::Subscription => "sub",
                };
                let state = if e.bound {
                    ""
                } else {
                    " (waiting for a publication)"
                };
                println!("  {kind} pid {} {}{state}", e.pid, e.program);
            }
            for (p, s) in slot.connections() {
                println!("  connection pid {} -> pid {}", p.pid, s.pid);
            }
        }
    }
    Ok(())
}
