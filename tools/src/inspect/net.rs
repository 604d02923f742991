//! `doctor`'s network and clock checks: the registry's reflection settings (read from its
//! command line in `/proc`), the multicast route and group membership in the registry's own
//! network namespace (`/proc/<pid>/net/route` and `/proc/<pid>/net/igmp`), and what mirrored
//! values say about remote clocks.

use std::net::Ipv4Addr;

use bus::Domain;
use serde::Serialize;

/// Outcome of one check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
    Fail,
    /// Not applicable or not checkable here; the detail says why.
    Skip,
}

/// One line of `doctor`.
#[derive(Debug, Serialize)]
pub struct Check {
    pub check: String,
    pub status: Status,
    pub detail: String,
}

impl Check {
    pub fn new(check: &str, status: Status, detail: String) -> Check {
        Check {
            check: check.to_owned(),
            status,
            detail,
        }
    }
}

/// The registry's defaults (registry-server/src/main.rs), used when its command line does not
/// set them.
const DEFAULT_GROUP: Ipv4Addr = Ipv4Addr::new(239, 255, 66, 66);
const DEFAULT_TTL: u32 = 1;
/// A mirrored value written this far in our future means the origin's clock is ahead.
const CLOCK_TOLERANCE_S: f64 = 0.05;

/// A process's command line, if readable.
pub fn cmdline(pid: u32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<String> = raw
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    (!args.is_empty()).then_some(args)
}

/// The value of `--flag VALUE` or `--flag=VALUE`.
fn option<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == flag {
            return it.next().map(String::as_str);
        }
        if let Some(v) = a.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
            return Some(v);
        }
    }
    None
}

/// The group the registry gives access to: its `--group`, or its own file-system group.
pub fn registry_group(pid: u32) -> Option<u32> {
    if let Some(group) = cmdline(pid).as_deref().and_then(|a| option(a, "--group")) {
        if let Ok(gid) = group.parse() {
            return Some(gid);
        }
        return nix::unistd::Group::from_name(group)
            .ok()
            .flatten()
            .map(|g| g.gid.as_raw());
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let gids = status.lines().find_map(|l| l.strip_prefix("Gid:"))?;
    // real, effective, saved, file-system: segments are created with the last.
    gids.split_whitespace().nth(3)?.parse().ok()
}

/// An address as `/proc/net` prints it (hex of the network-order word read natively).
fn proc_addr(hex: &str) -> Option<Ipv4Addr> {
    u32::from_str_radix(hex, 16)
        .ok()
        .map(|w| Ipv4Addr::from(w.to_ne_bytes()))
}

/// The interface the most specific route for `to` uses, from a `/proc/net/route` text.
fn route_for(table: &str, to: Ipv4Addr) -> Option<(String, Ipv4Addr, u32)> {
    let to = u32::from(to);
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (dest, mask) = (proc_addr(f.get(1)?)?, proc_addr(f.get(7)?)?);
            let (dest, mask) = (u32::from(dest), u32::from(mask));
            (to & mask == dest & mask).then(|| (f[0].to_owned(), Ipv4Addr::from(dest), mask))
        })
        .max_by_key(|(_, _, mask)| mask.count_ones())
        .map(|(iface, dest, mask)| (iface, dest, mask.count_ones()))
}

/// Devices that joined `group`, from a `/proc/net/igmp` text.
fn joined(igmp: &str, group: Ipv4Addr) -> Vec<String> {
    let mut device = String::new();
    let mut found = Vec::new();
    for line in igmp.lines().skip(1) {
        if !line.starts_with(['\t', ' ']) {
            // "2\teth0      :     2      V3"
            device = line
                .split_whitespace()
                .nth(1)
                .unwrap_or("")
                .trim_end_matches(':')
                .to_owned();
        } else if line
            .split_whitespace()
            .next()
            .and_then(proc_addr)
            .is_some_and(|g| g == group)
        {
            found.push(device.clone());
        }
    }
    found
}

/// The network and clock checks. `refused`: a registry runs but does not answer this user.
pub fn checks(domain: &Domain, registry: Option<u32>, refused: bool) -> Vec<Check> {
    let mut checks = Vec::new();
    let Some(pid) = registry else {
        checks.push(Check::new(
            "multicast",
            Status::Skip,
            if refused {
                "cannot check: the registry refuses this user".into()
            } else {
                "cannot check without a running registry".into()
            },
        ));
        checks.push(clock(domain));
        return checks;
    };
    let args = cmdline(pid).unwrap_or_default();
    if !args.iter().any(|a| a == "--net") {
        checks.push(Check::new(
            "multicast",
            Status::Skip,
            "the registry runs without --net: nothing is reflected to other computers".into(),
        ));
        checks.push(clock(domain));
        return checks;
    }
    let group = option(&args, "--mcast-group")
        .and_then(|g| g.parse().ok())
        .unwrap_or(DEFAULT_GROUP);
    let ttl = option(&args, "--ttl")
        .and_then(|t| t.parse().ok())
        .unwrap_or(DEFAULT_TTL);
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/route")).unwrap_or_default();
    let interface = option(&args, "--interface");
    let peers = args
        .iter()
        .any(|a| a == "--peer" || a.starts_with("--peer="));
    let statistics = own_statistics(domain);
    checks.push(match (route_for(&table, group), interface) {
        // --interface names the device multicast leaves by (IP_MULTICAST_IF): no route needed.
        (None, Some(i)) => Check::new(
            "multicast route",
            Status::Ok,
            format!("no route for {group}, none needed: the registry sends on --interface {i}"),
        ),
        // The registry joins the group before it opens its network; without a route or an
        // interface the join has nothing to go through, so it has not opened: no datagram
        // leaves, to the --peer addresses neither. Told by its statistics, which it publishes
        // from the moment its network opens.
        (None, None) if statistics.is_none() => Check::new(
            "multicast route",
            Status::Fail,
            format!(
                "no route for {group} in the registry's network namespace, and no network \
                 statistics: the registry's network has not opened (its log says `network: \
                 not ready`), so nothing is sent{}; give the registry --interface (the device \
                 towards the other computers) or add a route (`ip route add 224.0.0.0/4 dev \
                 eth0`)",
                if peers {
                    ", to the --peer addresses neither"
                } else {
                    ""
                }
            ),
        ),
        // Opened while a route was there (removed since): the --peer addresses are still
        // reached.
        (None, None) if peers => Check::new(
            "multicast route",
            Status::Warn,
            format!(
                "no route for {group} in the registry's network namespace: multicast discovery \
                 cannot leave this computer, only the --peer addresses are reached (by unicast); \
                 add a route (`ip route add 224.0.0.0/4 dev eth0`) or give --interface to find \
                 other computers too"
            ),
        ),
        (None, None) => Check::new(
            "multicast route",
            Status::Fail,
            format!(
                "no route for {group} in the registry's network namespace: discovery cannot \
                 leave this computer; give the registry --interface (the device towards the \
                 other computers), add a route (`ip route add 224.0.0.0/4 dev eth0`) or give \
                 it --peer addresses"
            ),
        ),
        (Some((iface, _, _)), _) if iface == "lo" => Check::new(
            "multicast route",
            Status::Warn,
            format!("{group} is routed to the loopback interface: other computers never see it"),
        ),
        (Some((iface, dest, bits)), _) => Check::new(
            "multicast route",
            Status::Ok,
            format!(
                "{group} leaves through {iface} (route {}){}",
                if bits == 0 {
                    "default".to_owned()
                } else {
                    format!("{dest}/{bits}")
                },
                interface.map_or(String::new(), |i| format!(
                    "; the registry sends on --interface {i}"
                ))
            ),
        ),
    });
    let igmp = std::fs::read_to_string(format!("/proc/{pid}/net/igmp")).unwrap_or_default();
    let devices = joined(&igmp, group);
    checks.push(if devices.is_empty() {
        Check::new(
            "multicast group",
            Status::Warn,
            format!(
                "no interface has joined {group}: announcements from other hosts are not received"
            ),
        )
    } else {
        Check::new(
            "multicast group",
            Status::Ok,
            format!("joined {group} on {}", devices.join(", ")),
        )
    });
    checks.push(match ttl {
        // Linux keeps a multicast datagram of TTL 0 on this computer.
        0 => Check::new(
            "multicast ttl",
            if peers { Status::Ok } else { Status::Warn },
            format!(
                "TTL 0: multicast never leaves this computer{}",
                if peers {
                    " (the --peer addresses are reached by unicast)"
                } else {
                    ": no other computer hears this registry; give --ttl 1 or more, or --peer"
                }
            ),
        ),
        1 => Check::new(
            "multicast ttl",
            Status::Ok,
            "TTL 1: datagrams stay on the local network segment (no router forwards them)".into(),
        ),
        _ => Check::new(
            "multicast ttl",
            Status::Ok,
            format!("TTL {ttl}: datagrams cross up to {} router(s)", ttl - 1),
        ),
    });
    checks.push(peers_heard(statistics));
    checks.push(clock(domain));
    checks
}

/// The running registry's network statistics; `None` until its network opened. This run's: an
/// earlier run under another host name left its slot, its writer gone.
fn own_statistics(domain: &Domain) -> Option<super::stats::NetSlot> {
    super::stats::read(domain)
        .into_iter()
        .find(|s| !s.mirrored && s.writer_alive)
}

/// Whom the registry hears, from its own statistics slot: the rows above say the network is
/// set up, not that anything passes (a cut cable, a different key and a missing route on the
/// other computer all look fine from here).
fn peers_heard(statistics: Option<super::stats::NetSlot>) -> Check {
    let Some(own) = statistics else {
        // The registry publishes its statistics from the moment its network opens.
        return Check::new(
            "peers",
            Status::Warn,
            "no network statistics yet: the registry's network has not opened (its log says \
             why: `network: not ready (...)`), or opened a moment ago; nothing is sent or heard \
             until it does"
                .into(),
        );
    };
    let peers = own.peers();
    if peers.is_empty() {
        let drops = own.drops();
        return Check::new(
            "peers",
            Status::Warn,
            format!(
                "this registry hears no other computer: none runs a registry of this domain \
                 with --net, the network between is cut, or what they send is dropped ({}; \
                 `bus-inspect stats` has the counters)",
                // Totals: a cause that stopped long ago still shows, so say since when.
                if drops.is_empty() {
                    "nothing dropped since the registry started".to_owned()
                } else {
                    format!("dropped since the registry started: {}", drops.join(", "))
                }
            ),
        );
    }
    let heard: Vec<String> = peers
        .iter()
        .map(|p| format!("{} at {} ({} ms ago)", p.host, p.address, p.last_heard_ms))
        .collect();
    Check::new("peers", Status::Ok, format!("hears {}", heard.join(", ")))
}

/// What mirrored values tell about remote clocks. A mirror keeps its origin's write time, so
/// `now - write time` is latency plus how far the origin's clock is behind ours: a negative
/// value means the origin's clock is ahead. A clock behind ours looks like latency, and the
/// registry's statistics carry no peer clocks, so that case cannot be checked.
fn clock(domain: &Domain) -> Check {
    let Ok((slots, _)) = super::list(domain, None) else {
        return Check::new("clocks", Status::Skip, "cannot list the slots".into());
    };
    let mut ahead: std::collections::BTreeMap<String, f64> = Default::default();
    let now = super::now_ns() as f64 / 1e9;
    for s in slots.iter().filter(|s| s.mirrored) {
        let Ok(name) = super::slot_name(&s.name) else {
            continue;
        };
        let Ok(Some(reading)) = super::read_here(domain, &name) else {
            continue;
        };
        let lag = now - reading.time_ns as f64 / 1e9;
        let e = ahead.entry(s.origin.clone()).or_insert(lag);
        *e = e.min(lag);
    }
    if ahead.is_empty() {
        return Check::new(
            "clocks",
            Status::Skip,
            "cannot check remote clocks: no mirrored value here, and the registry's statistics \
             carry no peer clocks"
                .into(),
        );
    }
    let wrong: Vec<String> = ahead
        .iter()
        .filter(|(_, lag)| **lag < -CLOCK_TOLERANCE_S)
        .map(|(h, lag)| format!("{h} is ahead by at least {:.3}s", -lag))
        .collect();
    let hosts: Vec<&str> = ahead.keys().map(String::as_str).collect();
    if wrong.is_empty() {
        Check::new(
            "clocks",
            Status::Ok,
            format!(
                "no clock ahead of ours among {} (values mirrored from them are not from the \
                 future); a clock behind ours cannot be told from latency",
                hosts.join(", ")
            ),
        )
    } else {
        Check::new(
            "clocks",
            Status::Warn,
            format!(
                "{}: their values carry write times in our future; synchronise clocks (chrony, \
                 PTP)",
                wrong.join(", ")
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_and_groups_parse() {
        let route = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\n\
                     eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\n\
                     eth1\t000000E0\t00000000\t0001\t0\t0\t0\t000000F0\n";
        let g = Ipv4Addr::new(239, 255, 66, 66);
        assert_eq!(route_for(route, g).unwrap().0, "eth1");
        assert_eq!(route_for(route, Ipv4Addr::new(8, 8, 8, 8)).unwrap().2, 0);
        let igmp = "Idx\tDevice    : Count Querier\tGroup    Users Timer\tReporter\n\
                    1\tlo        :     1      V3\n\t\t\t\t010000E0     1 0:00000000\t\t0\n\
                    2\teth0      :     2      V3\n\t\t\t\t4242FFEF     1 0:00000000\t\t0\n";
        assert_eq!(joined(igmp, g), vec!["eth0".to_owned()]);
        let args: Vec<String> = ["x", "--ttl=3", "--group", "robots"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(option(&args, "--ttl"), Some("3"));
        assert_eq!(option(&args, "--group"), Some("robots"));
    }
}
