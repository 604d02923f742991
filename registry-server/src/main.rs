//! `registry-server`: the process that owns one bus domain on this computer.

#![forbid(unsafe_code)]

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use clap::{CommandFactory, FromArgMatches, Parser};

/// The discovery port registries announce on, and the port a `--peer` given without one gets.
const DEFAULT_PORT: u16 = 7447;
/// The smallest `--mtu` (without a key; a key's MAC takes more, checked at start).
const LEAST_MTU: u64 = registry::net::wire::least_mtu(false) as u64;
/// The largest UDP datagram over IPv4, bytes: no `--mtu` above it can be sent.
const MAX_UDP: u64 = 65_507;
/// The largest `--max-value`: a message (the value, its name and fields) has a 32-bit length.
const MAX_VALUE: u64 = u32::MAX as u64 - 1024;
/// The longest interval taken, milliseconds (a day).
const DAY_MS: u64 = 86_400_000;

#[derive(Parser)]
#[command(
    version = daemon::version(bus::slot::VERSION, Some(registry::net::wire::VERSION)),
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
    #[arg(long, env = "BUS_DOMAIN", default_value = bus::names::DEFAULT_DOMAIN,
          value_parser = bus::Domain::parse_arg)]
    domain: bus::Domain,
    /// Group (name or number) given read/write access to the slots; default: this process's group.
    #[arg(long)]
    group: Option<String>,
    /// Slots whose publisher is gone and that nobody uses any more are kept, with their last
    /// value, up to this many (and --keep-unused-mib); the ones unused longest are removed
    /// first. (A private slot goes 5 s after it is last used, and so does a mirror whose host
    /// still has the value, its publisher running there or its value kept: its values are then
    /// no longer asked for.) With --net the 1,000 written last are offered to other hosts.
    #[arg(long, default_value_t = registry::state::DEFAULT_KEEP_UNUSED as u64,
          value_parser = daemon::whole_number(0, u64::MAX, "a count of slots"), allow_negative_numbers = true)]
    keep_unused: u64,
    /// The slots kept by --keep-unused take at most this many MiB of shared memory together
    /// (a slot's segment holds its capacity about four times over; /dev/shm is RAM). A slot
    /// whose segment alone is larger is not kept once unused.
    #[arg(long, default_value_t = registry::state::DEFAULT_KEEP_UNUSED_MIB,
          value_parser = daemon::whole_number(0, 1 << 20, "MiB"), allow_negative_numbers = true)]
    keep_unused_mib: u64,
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
    #[arg(long, env = "BATON_HOST", value_parser = host_arg)]
    host: Option<String>,
    /// Multicast group registries announce themselves on (an IPv4 multicast address,
    /// 224.0.0.0 to 239.255.255.255).
    #[arg(long, default_value = "239.255.66.66", value_parser = mcast_group_arg)]
    mcast_group: std::net::Ipv4Addr,
    /// UDP port of the multicast group (discovery), 1 to 65535.
    #[arg(long, default_value_t = DEFAULT_PORT, value_parser = clap::value_parser!(u16).range(1..), allow_negative_numbers = true)]
    mcast_port: u16,
    /// Interface for multicast: a name (eth0) or its IPv4 address; default: the routing table's.
    #[arg(long)]
    interface: Option<String>,
    /// Multicast TTL, 0 to 255 (1: this network segment only; 0: this computer only).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=255), allow_negative_numbers = true)]
    ttl: u32,
    /// Registry reached by unicast, for networks without multicast: its IPv4 address and
    /// discovery port (10.0.0.5:7447), or the address alone for the port of --mcast-port.
    /// Repeat for several. One side is enough: the registry named answers by unicast.
    #[arg(long = "peer", value_name = "IP[:PORT]", value_parser = parse_peer)]
    peers: Vec<PeerArg>,
    /// Path MTU in bytes, at most 65507: no datagram is larger; bigger values are fragmented.
    /// Lowered at start to the MTU of the route to the multicast group and to each --peer, when
    /// that is smaller (said in the log). At least room for a datagram's headers and 64 bytes:
    /// 164 bytes, 180 with --key-file (its MAC).
    #[arg(long, default_value_t = 1500,
          value_parser = daemon::whole_number(LEAST_MTU, MAX_UDP, "bytes"), allow_negative_numbers = true)]
    mtu: u64,
    /// Announcement interval, milliseconds (10 to 86400000, a day).
    #[arg(long, default_value_t = 500, value_parser = daemon::whole_number(10, DAY_MS, "milliseconds"), allow_negative_numbers = true)]
    announce_ms: u64,
    /// A host not heard from for this long is forgotten, milliseconds (50 to 86400000; or for
    /// three of its own announcement intervals, when that is longer).
    #[arg(long, default_value_t = 3000, value_parser = daemon::whole_number(50, DAY_MS, "milliseconds"), allow_negative_numbers = true)]
    forget_ms: u64,
    /// Current values are re-sent to subscribing hosts this often (loss recovery), milliseconds
    /// (10 to 86400000).
    #[arg(long, default_value_t = 1000, value_parser = daemon::whole_number(10, DAY_MS, "milliseconds"), allow_negative_numbers = true)]
    refresh_ms: u64,
    /// Shared key file (any bytes, at least 16; not readable or writable by others): datagrams
    /// carry a keyed MAC and unauthenticated ones are dropped. Without it the network is
    /// unauthenticated. Needs --net.
    #[arg(long)]
    key_file: Option<std::path::PathBuf>,
    /// Largest value accepted or sent over the network, bytes (at least 1).
    #[arg(long, default_value_t = 64 << 20, value_parser = daemon::whole_number(1, MAX_VALUE, "bytes"), allow_negative_numbers = true)]
    max_value: u64,
    /// Memory held at most for incomplete (fragmented) values, bytes (their buffers plus 256
    /// bytes each; at most 4,096 are held whatever their size); at least 65536, or no value of
    /// more than a few datagrams could ever be put together.
    #[arg(long, default_value_t = 256 << 20,
          value_parser = daemon::whole_number(65_536, 1 << 40, "bytes"), allow_negative_numbers = true)]
    reassembly_limit: u64,
    /// Directory for what must outlive a restart: with --net, the last network session number,
    /// so that peers take this registry's datagrams as a new run even if the clock went back
    /// since (a computer without a real-time clock). systemd's StateDirectory= sets it. Without
    /// it, a registry restarted with its clock set back is refused by the peers that heard its
    /// previous run, until they restart. Needs --net (from STATE_DIRECTORY it is taken either
    /// way). Made if missing; its parent must exist.
    #[arg(long, env = "STATE_DIRECTORY", value_name = "DIR")]
    state_dir: Option<std::path::PathBuf>,
}

fn main() {
    daemon::init_logging("info");
    // Its state is in shared memory, which the next registry adopts: nothing to save.
    let exit = daemon::exit_on_stop("registry-server");
    // Other computers forget this one at once rather than after --forget-ms.
    let stop = move |signal| {
        registry::server::farewell_within(std::time::Duration::from_millis(200));
        exit(signal);
    };
    if let Err(e) = daemon::on_stop(stop) {
        daemon::exit_on_error("registry-server", e);
    }
    let matches = Args::command()
        .try_get_matches()
        .unwrap_or_else(|e| daemon::exit_usage(e));
    let args = Args::from_arg_matches(&matches).unwrap_or_else(|e| daemon::exit_usage(e));
    if let Err(e) = run(args, &given_net_settings(&matches)) {
        daemon::exit_on_error("registry-server", e);
    }
}

fn run(args: Args, net_settings_given: &[String]) -> Result<(), String> {
    let domain = args.domain.clone();
    let group = args.group.as_deref().map(parse_group).transpose()?;
    if let Some(gid) = group {
        may_give_to(gid)?;
    }
    check_net_options(&args.net, net_settings_given)?;
    // Before the socket: a configuration that cannot work stops here, having created nothing.
    let net = args
        .net
        .net
        .then(|| net_config(&args.net, &domain))
        .transpose()?;
    let listener = registry::server::bind(&domain).map_err(|e| e.to_string())?;
    let config = registry::ServerConfig {
        domain: domain.clone(),
        group,
        net,
        keep_unused: registry::state::KeepUnused {
            slots: usize::try_from(args.keep_unused).unwrap_or(usize::MAX),
            bytes: args.keep_unused_mib << 20,
        },
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

/// Options that only mean something with `--net` are refused without it rather than ignored:
/// a `--key-file` that is silently unused looks like a secured network.
fn check_net_options(a: &NetArgs, settings_given: &[String]) -> Result<(), String> {
    if a.net {
        return Ok(());
    }
    let mut given = settings_given.to_vec();
    if let Some(key) = &a.key_file {
        given.push(format!("--key-file {}", key.display()));
    }
    if !a.peers.is_empty() {
        given.push("--peer".to_owned());
    }
    if a.interface.is_some() {
        given.push("--interface".to_owned());
    }
    if given.is_empty() {
        return Ok(());
    }
    let (verb, pronoun) = if given.len() == 1 {
        ("applies", "it")
    } else {
        ("apply", "them")
    };
    Err(format!(
        "{} only {verb} to network reflection, which is off: add --net to reflect this domain \
         to other computers, or remove {pronoun}",
        given.join(", "),
    ))
}

/// The network settings with a default (their value cannot tell whether they were given)
/// given on the command line, as `--option`s; `--host` from `BATON_HOST` (the units' environment
/// file) is not one. Nor is `--state-dir` from `STATE_DIRECTORY`: systemd sets that for every
/// registry unit with `StateDirectory=`, with `--net` or without.
fn given_net_settings(matches: &clap::ArgMatches) -> Vec<String> {
    const SETTINGS: [&str; 11] = [
        "host",
        "mcast_group",
        "mcast_port",
        "ttl",
        "mtu",
        "announce_ms",
        "forget_ms",
        "refresh_ms",
        "max_value",
        "reassembly_limit",
        "state_dir",
    ];
    SETTINGS
        .iter()
        .filter(|id| matches.value_source(id) == Some(clap::parser::ValueSource::CommandLine))
        .map(|id| format!("--{}", id.replace('_', "-")))
        .collect()
}

/// A `--peer` as given: the port is `None` when only the address was given.
#[derive(Clone, Debug, PartialEq)]
struct PeerArg {
    ip: Ipv4Addr,
    port: Option<u16>,
}

impl PeerArg {
    fn address(&self, default_port: u16) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(
            self.ip,
            self.port.unwrap_or(default_port),
        ))
    }
}

/// `--peer`: `IP:PORT`, or `IP` alone (the port is then `--mcast-port`, the same on every
/// registry unless changed). IPv4 only: the network sockets are IPv4.
fn parse_peer(text: &str) -> Result<PeerArg, String> {
    let text = text.trim();
    let example = format!(
        "expected IP:PORT or IP, e.g. 10.0.0.5:{DEFAULT_PORT} or 10.0.0.5 (the port of \
         --mcast-port, {DEFAULT_PORT} unless changed)"
    );
    // Another computer's registry: not this computer (a loopback address is never announced
    // to another host), not every address, not a group (--mcast-group is the group).
    let another_computer = |ip: Ipv4Addr| {
        if ip.is_loopback() || ip.is_unspecified() || ip.is_multicast() || ip.is_broadcast() {
            Err(format!(
                "{ip} is not another computer's address (loopback, unspecified, multicast and \
                 broadcast addresses are not peers); {example}"
            ))
        } else {
            Ok(ip)
        }
    };
    if let Ok(ip) = text.parse::<Ipv4Addr>() {
        let ip = another_computer(ip)?;
        return Ok(PeerArg { ip, port: None });
    }
    if let Ok(addr) = text.parse::<SocketAddrV4>() {
        if addr.port() == 0 {
            return Err(format!("port 0 is no registry's port; {example}"));
        }
        return Ok(PeerArg {
            ip: another_computer(*addr.ip())?,
            port: Some(addr.port()),
        });
    }
    if text.parse::<SocketAddr>().is_ok() || text.parse::<std::net::IpAddr>().is_ok() {
        return Err(format!(
            "an IPv6 address; network reflection is IPv4 only: {example}"
        ));
    }
    Err(example)
}

/// `--host`, checked as the command line is parsed.
/// A group that is not multicast is a command-line mistake (exit 64), as a malformed one is.
fn mcast_group_arg(text: &str) -> Result<std::net::Ipv4Addr, String> {
    let group: std::net::Ipv4Addr = text.parse().map_err(|e| format!("{e}"))?;
    registry::net::check_group(group).map(|()| group)
}

fn host_arg(host: &str) -> Result<String, String> {
    registry::net::check_host_name(host).map(|()| host.to_owned())
}

fn net_config(a: &NetArgs, domain: &bus::Domain) -> Result<registry::net::NetConfig, String> {
    use std::time::Duration;
    let host = match &a.host {
        Some(h) => h.clone(),
        None => {
            let name = nix::unistd::gethostname()
                .map_err(|e| format!("cannot read the host name ({e}); give --host"))?
                .to_string_lossy()
                .into_owned();
            // Said as this computer's host name, which the user did not type here.
            registry::net::check_host_name(&name).map_err(|e| {
                format!("this computer's host name cannot name it on the bus: {e}; give --host")
            })?;
            name
        }
    };
    if a.key_file.is_some() {
        // Before the key is read: a process of the same user (every Baton unit and
        // application runs as `baton`) may otherwise read it out of this one's memory
        // (/proc/PID/mem, ptrace). Core dumps go with it.
        nix::sys::prctl::set_dumpable(false).map_err(|e| {
            format!("cannot keep the network key from other processes (prctl PR_SET_DUMPABLE): {e}")
        })?;
    }
    let key = a
        .key_file
        .as_deref()
        .map(|p| registry::net::auth::Key::from_file(p, domain.as_str()))
        .transpose()?;
    // One file per domain and host: two registries may share the directory.
    let session_file = a
        .state_dir
        .as_ref()
        .map(|d| d.join(format!("net-session.{}.{host}", domain.as_str())));
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
        interface: a.interface.clone(),
        ttl: a.ttl,
        peers: a.peers.iter().map(|p| p.address(a.mcast_port)).collect(),
        // Within range: checked by their parsers.
        mtu: a.mtu as usize,
        announce_every: Duration::from_millis(a.announce_ms),
        forget_after: Duration::from_millis(a.forget_ms),
        refresh_every: Duration::from_millis(a.refresh_ms),
        key,
        max_value: a.max_value as u32,
        // Within range: checked by its parser (at most 1 TiB, a usize on 64-bit targets).
        reassembly_limit: usize::try_from(a.reassembly_limit).unwrap_or(usize::MAX),
        faults,
        session_file,
    })
}

/// Whether this process may give its segments to `group`: root may give them to any group,
/// another user only to a group of their own (the kernel's rule for chown), which otherwise
/// failed at the first segment with a bare "fchown: EPERM".
fn may_give_to(group: nix::unistd::Gid) -> Result<(), String> {
    use nix::unistd::{getegid, geteuid, getgroups};
    if geteuid().is_root() || getegid() == group {
        return Ok(());
    }
    if getgroups().is_ok_and(|groups| groups.contains(&group)) {
        return Ok(());
    }
    let user = bus::process::user_or_number(geteuid().as_raw());
    let name = bus::process::group_or_number(group.as_raw());
    Err(format!(
        "--group {name}: this user ({user}) is not in that group, so it may not give segments \
         to it; run the registry as root or as a member of {name} (usermod -aG {name} {user}, \
         then start it again)"
    ))
}

fn parse_group(group: &str) -> Result<nix::unistd::Gid, String> {
    if let Ok(gid) = group.parse::<u32>() {
        // (gid_t)-1 tells chown "leave the group as it is": segments would stay the
        // registry's own group, silently.
        if gid == u32::MAX {
            return Err(format!(
                "{gid} is no group (it means \"unchanged\" to chown)"
            ));
        }
        return Ok(nix::unistd::Gid::from_raw(gid));
    }
    match nix::unistd::Group::from_name(group) {
        Ok(Some(g)) => Ok(g.gid),
        Ok(None) => Err(format!("no group named {group:?}")),
        Err(e) => Err(format!("looking up group {group:?}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_without_a_port_gets_the_discovery_port() {
        let bare = parse_peer("10.0.0.5").unwrap();
        assert_eq!(bare.address(DEFAULT_PORT).to_string(), "10.0.0.5:7447");
        assert_eq!(bare.address(9000).to_string(), "10.0.0.5:9000");
        let full = parse_peer(" 10.0.0.5:7500 ").unwrap();
        assert_eq!(full.address(DEFAULT_PORT).to_string(), "10.0.0.5:7500");
    }

    #[test]
    fn a_bad_peer_says_what_is_expected() {
        for bad in ["10.0.0", "robot.local", "10.0.0.5:", "10.0.0.5:99999", ""] {
            let e = parse_peer(bad).unwrap_err();
            assert!(
                e.contains("expected IP:PORT or IP, e.g. 10.0.0.5:7447"),
                "{bad}: {e}"
            );
        }
        assert!(parse_peer("10.0.0.5:0").unwrap_err().contains("port 0"));
        for not_a_peer in ["127.0.0.1", "0.0.0.0:7447", "239.1.2.3", "255.255.255.255"] {
            let e = parse_peer(not_a_peer).unwrap_err();
            assert!(e.contains("is not another computer's address"), "{e}");
        }
        assert!(parse_peer("[::1]:7447").unwrap_err().contains("IPv4 only"));
        assert!(parse_peer("::1").unwrap_err().contains("IPv4 only"));
    }

    #[test]
    fn network_options_without_net_are_refused() {
        let check = |extra: &[&str]| {
            let mut argv = vec!["registry-server"];
            argv.extend_from_slice(extra);
            let matches = Args::command().try_get_matches_from(argv).unwrap();
            let args = Args::from_arg_matches(&matches).unwrap();
            check_net_options(&args.net, &given_net_settings(&matches))
        };
        assert!(check(&[]).is_ok());
        assert!(check(&["--net", "--key-file", "k", "--mtu", "1400"]).is_ok());
        let e = check(&["--key-file", "/etc/baton/net.key"]).unwrap_err();
        assert!(
            e.contains("--key-file /etc/baton/net.key") && e.contains("add --net"),
            "{e}"
        );
        let e = check(&["--peer", "10.0.0.5", "--interface", "eth0"]).unwrap_err();
        assert!(
            e.contains("--peer, --interface") && e.contains("them"),
            "{e}"
        );
        // Settings with a default, given without --net, are refused alike (they were ignored).
        let e = check(&["--mtu", "1400", "--host", "robot"]).unwrap_err();
        assert!(e.starts_with("--host, --mtu only apply to"), "{e}");
        // The directory keeps only the network session: given by hand, it is refused as well.
        let e = check(&["--state-dir", "/var/lib/baton"]).unwrap_err();
        assert!(e.starts_with("--state-dir only applies to"), "{e}");
        assert!(check(&["--net", "--state-dir", "/var/lib/baton"]).is_ok());
    }

    #[test]
    fn out_of_range_network_numbers_are_usage_errors_that_say_the_range() {
        let parse = |option: &str, value: &str| {
            Args::try_parse_from(["registry-server", "--net", option, value]).map(|_| ())
        };
        for (option, bad, expected) in [
            ("--mtu", "65508", "expected bytes from 164 to 65507"),
            ("--mtu", "163", "expected bytes from 164 to 65507"),
            ("--mcast-port", "0", "0 is not in 1..=65535"),
            ("--reassembly-limit", "0", "expected bytes from 65536 to"),
            (
                "--host",
                "bad/host",
                "must be 1 or more ASCII letters, digits",
            ),
            ("--announce-ms", "0", "expected milliseconds from 10 to"),
            ("--refresh-ms", "0", "expected milliseconds from 10 to"),
            ("--forget-ms", "0", "expected milliseconds from 50 to"),
            ("--max-value", "0", "expected bytes from 1 to"),
            (
                "--max-value",
                "4294967295",
                "expected bytes from 1 to 4294966271",
            ),
            // A negative number is a value out of range, not an unknown option.
            ("--mtu", "-1", "expected bytes from 164 to 65507"),
            ("--mcast-port", "-1", "-1 is not in 1..=65535"),
            ("--ttl", "-1", "-1 is not in 0..=255"),
            ("--announce-ms", "-5", "expected milliseconds from 10 to"),
            ("--forget-ms", "-5", "expected milliseconds from 50 to"),
            ("--refresh-ms", "-5", "expected milliseconds from 10 to"),
            ("--max-value", "-1", "expected bytes from 1 to"),
            ("--reassembly-limit", "-1", "expected bytes from 65536 to"),
            ("--keep-unused-mib", "-1", "expected MiB from 0 to 1048576"),
            (
                "--keep-unused-mib",
                "1048577",
                "expected MiB from 0 to 1048576",
            ),
            (
                "--keep-unused",
                "-1",
                "expected a count of slots, at least 0",
            ),
        ] {
            let e = parse(option, bad).unwrap_err();
            assert_eq!(
                e.kind(),
                clap::error::ErrorKind::ValueValidation,
                "{option} {bad}"
            );
            let text = e.to_string();
            assert!(
                text.contains(option) && text.contains(expected),
                "{option} {bad}: {text}"
            );
        }
        for (option, good) in [
            ("--mtu", "65507"),
            ("--mtu", "576"),
            ("--announce-ms", "10"),
            ("--max-value", "1"),
        ] {
            assert!(parse(option, good).is_ok(), "{option} {good}");
        }
    }
}
