//! `registry-server`: the process that owns one bus domain on this computer.

use clap::Parser;

#[derive(Parser)]
#[command(
    version,
    about = "Creates Baton's shared-memory slots and registers their publications and subscriptions",
    long_about = "Creates Baton's shared-memory slots and registers their publications and \
subscriptions for one bus domain on this computer.\n\n\
Run one per domain and computer. Processes may start before or after it: their endpoints bind \
when it comes up. Restarting it (even after SIGKILL) loses nothing: it adopts the slots that \
exist in /dev/shm, and running processes register again. Segments are created mode 0660, \
readable and writable by the owner and --group, never by others."
)]
struct Args {
    /// Bus domain to serve.
    #[arg(long, env = "BUS_DOMAIN", default_value = bus::names::DEFAULT_DOMAIN)]
    domain: String,
    /// Group (name or number) given read/write access to the slots; default: this process's group.
    #[arg(long)]
    group: Option<String>,
}

fn main() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    if let Err(e) = run(Args::parse()) {
        eprintln!("registry-server: {e}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<(), String> {
    let domain = bus::Domain::new(&args.domain).map_err(|e| e.to_string())?;
    let group = args.group.as_deref().map(parse_group).transpose()?;
    let listener = registry::server::bind(&domain).map_err(|e| e.to_string())?;
    let config = registry::ServerConfig {
        domain: domain.clone(),
        group,
    };
    registry::serve(config, listener, |adopted| {
        tracing::info!("serving domain '{domain}' ({adopted} existing slot(s) adopted)");
    })
    .map_err(|e| e.to_string())
}

fn parse_group(group: &str) -> Result<nix::unistd::Gid, String> {
    if let Ok(gid) = group.parse::<u32>() {
        return Ok(nix::unistd::Gid::from_raw(gid));
    }
    match nix::unistd::Group::from_name(group) {
        Ok(Some(g)) => Ok(g.gid),
        Ok(None) => Err(format!("no group named {group:?}")),
        Err(e) => Err(format!("looking up group {group:?}: {e}")),
    }
}
