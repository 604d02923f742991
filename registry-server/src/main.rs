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
readable and writable by the owner and --group, never by others; likewise only root, the \
registry's user and members of --group may connect to it."
)]
struct Args {
    /// Bus domain to serve.
    #[arg(long, env = "BUS_DOMAIN", default_value = bus::names::DEFAULT_DOMAIN)]
    domain: String,
    /// Group (name or number) given read/write access to the slots; default: this process's group.
    #[arg(long)]
    group: Option<String>,
    #[command(flatten)]
    net: NetArgs,
}

/// Network reflection: share this domain's slots with the registries of other computers.
#[derive(clap::Args)]
#[command(next_help_heading = "Network reflection")]
struct NetArgs {
    /// Reflect slots to and from other computers (off by default).
    #[arg(long)]
    net: bool,
    /// This computer's name on the bus (origin of its values; letters, digits, '_', '-', '.');
    /// default: the host name.
    #[arg(long, env = "BATON_HOST")]
    host: Option<String>,
    /// Multicast group registries announce themselves on.
    #[arg(long, default_value = "239.255.66.66")]
    mcast_group: std::net::Ipv4Addr,
    /// UDP port of the multicast group (discovery).
    #[arg(long, default_value_t = 7447)]
    mcast_port: u16,
    /// Interface for multicast: a name (eth0) or its IPv4 address; default: the routing table's.
    #[arg(long)]
    interface: Option<String>,
    /// Multicast TTL (1: this network segment only).
    #[arg(long, default_value_t = 1)]
    ttl: u32,
    /// Registry reached by unicast (IP:PORT of its discovery port), for networks without
    /// multicast. Repeat for several.
    #[arg(long = "peer")]
    peers: Vec<std::net::SocketAddr>,
    /// Path MTU in bytes: no datagram is larger; bigger values are fragmented.
    #[arg(long, default_value_t = 1500)]
    mtu: usize,
    /// Announcement interval, milliseconds.
    #[arg(long, default_value_t = 500)]
    announce_ms: u64,
    /// A host not heard from for this long is forgotten, milliseconds.
    #[arg(long, default_value_t = 3000)]
    forget_ms: u64,
    /// Current values are re-sent to subscribing hosts this often (loss recovery), milliseconds.
    #[arg(long, default_value_t = 1000)]
    refresh_ms: u64,
    /// Shared key file (any bytes, at least 16): datagrams carry a keyed MAC and unauthenticated
    /// ones are dropped. Without it the network is unauthenticated.
    #[arg(long)]
    key_file: Option<std::path::PathBuf>,
    /// Largest value accepted or sent over the network, bytes.
    #[arg(long, default_value_t = 64 << 20)]
    max_value: u32,
    /// Memory held at most for incomplete (fragmented) values, bytes.
    #[arg(long, default_value_t = 256 << 20)]
    reassembly_limit: usize,
}

fn main() {
    daemon::init_logging("info");
    if let Err(e) = run(Args::parse()) {
        eprintln!("registry-server: {e}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<(), String> {
    let domain = bus::Domain::new(&args.domain).map_err(|e| e.to_string())?;
    let group = args.group.as_deref().map(parse_group).transpose()?;
    let listener = registry::server::bind(&domain).map_err(|e| e.to_string())?;
    let net = args
        .net
        .net
        .then(|| net_config(&args.net, &domain))
        .transpose()?;
    let config = registry::ServerConfig {
        domain: domain.clone(),
        group,
        net,
    };
    registry::serve(config, listener, |adopted| {
        tracing::info!("serving domain '{domain}' ({adopted} existing slot(s) adopted)");
        daemon::ready(&format!("serving domain '{domain}'"));
        // Healthy while the registry answers a listing end to end (accept loop and state).
        let watched = domain.clone();
        // Pings for the process's life.
        std::mem::forget(daemon::start_watchdog(move || {
            bus::protocol::ask(&watched, &bus::protocol::Request::List).is_ok()
        }));
    })
    .map_err(|e| e.to_string())
}

fn net_config(a: &NetArgs, domain: &bus::Domain) -> Result<registry::net::NetConfig, String> {
    use std::time::Duration;
    let host = match &a.host {
        Some(h) => h.clone(),
        None => nix::unistd::gethostname()
            .map_err(|e| format!("cannot read the host name ({e}); give --host"))?
            .to_string_lossy()
            .into_owned(),
    };
    let key = a
        .key_file
        .as_deref()
        .map(|p| registry::net::auth::Key::from_file(p, domain.as_str()))
        .transpose()?;
    let faults = registry::net::faults::Faults::from_env()?;
    if faults.is_some() {
        tracing::warn!(
            "network: injecting faults from {} (a test switch)",
            registry::net::faults::ENV
        );
    }
    Ok(registry::net::NetConfig {
        host,
        group: a.mcast_group,
        port: a.mcast_port,
        interface: a
            .interface
            .as_deref()
            .map(registry::net::interface_address)
            .transpose()?,
        ttl: a.ttl,
        peers: a.peers.clone(),
        mtu: a.mtu,
        announce_every: Duration::from_millis(a.announce_ms.max(10)),
        forget_after: Duration::from_millis(a.forget_ms.max(50)),
        refresh_every: Duration::from_millis(a.refresh_ms.max(10)),
        key,
        max_message: a.max_value.saturating_add(1024),
        reassembly_limit: a.reassembly_limit,
        faults,
    })
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
