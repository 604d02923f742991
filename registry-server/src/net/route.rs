//! Where datagrams go: the interface multicast uses (`--interface`, looked up again when its
//! address changes) and the largest datagram the routes carry (`--mtu`, lowered to the route's).

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{lock, Net};

/// The interface multicast goes through: named by `--interface` (its address can change
/// under the registry: DHCP, a cable moved to another network), given as an address, or left
/// to the route to the group (`0.0.0.0`). Multicast is sent and received through an address.
pub(super) struct Interface {
    /// The name given to `--interface`, looked up again for a new address; `None` when an
    /// address or nothing was given.
    pub(super) name: Option<String>,
    /// The address multicast goes through, and when the interface was last looked at.
    pub(super) address: Mutex<(Ipv4Addr, Instant)>,
}

/// How often the interface is looked at again.
const INTERFACE_CHECK_EVERY: Duration = Duration::from_secs(1);

impl Net {
    /// Keeps multicast working through changes of the interface, looking at most every
    /// `INTERFACE_CHECK_EVERY`:
    /// - a new address of the `--interface` named: sends from it and joins the group on it.
    ///   Without this a registry whose interface got another address could neither announce
    ///   nor hear announcements ("Network is unreachable") until restarted. An interface
    ///   without an address keeps the old one (sends fail and are counted meanwhile);
    /// - a membership the kernel dropped: removing an interface (a USB adapter unplugged, a
    ///   veth deleted) drops the group's membership on it, and the interface added again has a
    ///   new index that the sending socket does not know ("No such device"). The registry
    ///   heard nobody again until restarted. Joining again is refused (`EADDRINUSE`) while the
    ///   membership stands, so trying costs one system call a second.
    pub(super) fn follow_interface(&self, now: Instant) {
        let SocketAddr::V4(group) = self.group else {
            return;
        };
        let mut address = lock(&self.interface.address);
        if now < address.1 + INTERFACE_CHECK_EVERY {
            return;
        }
        address.1 = now;
        let discovery = socket2::SockRef::from(&self.discovery);
        let sending = socket2::SockRef::from(&self.data);
        let old = address.0;
        if let Some(name) = &self.interface.name {
            let Ok(new) = interface_address(name) else {
                return;
            };
            if new != old {
                let _ = discovery.leave_multicast_v4(group.ip(), &old);
                match sending
                    .set_multicast_if_v4(&new)
                    .and_then(|()| discovery.join_multicast_v4(group.ip(), &new))
                {
                    Ok(()) => {
                        tracing::info!(
                            "network: interface {name} has address {new} now (was {old}); \
                             multicast follows it"
                        );
                        address.0 = new;
                    }
                    Err(e) => tracing::warn!(
                        "network: interface {name} has address {new} now, but multicast cannot \
                         use it yet: {e}"
                    ),
                }
                return;
            }
        }
        // Refused while still a member, or while there is no interface for the group (tried
        // again next time).
        if discovery.join_multicast_v4(group.ip(), &old).is_ok() {
            let described = match &self.interface.name {
                Some(name) => format!("interface {name}"),
                None if old.is_unspecified() => "the interface the route to the group uses".into(),
                None => format!("interface {old}"),
            };
            // The membership had gone, so the interface was probably added again: the sending
            // socket's interface index is stale too.
            if !old.is_unspecified() {
                if let Err(e) = sending.set_multicast_if_v4(&old) {
                    tracing::warn!("network: sending multicast through {described}: {e}");
                }
            }
            tracing::info!(
                "network: joined {} again on {described}: its membership had gone (the \
                 interface removed and added again, or the route to the group moved)",
                group.ip()
            );
        }
    }
}

/// Resolves `--interface`: an IPv4 address, or the name of an interface with one.
pub fn interface_address(spec: &str) -> Result<Ipv4Addr, String> {
    if let Ok(ip) = spec.parse::<Ipv4Addr>() {
        return Ok(ip);
    }
    let addrs = nix::ifaddrs::getifaddrs().map_err(|e| format!("listing interfaces: {e}"))?;
    let mut exists = false;
    for a in addrs {
        if a.interface_name != spec {
            continue;
        }
        exists = true;
        if let Some(sin) = a.address.as_ref().and_then(|s| s.as_sockaddr_in()) {
            return Ok(sin.ip());
        }
    }
    Err(if exists {
        format!("interface {spec:?} has no IPv4 address")
    } else {
        format!("there is no interface {spec:?} (`ip link` lists them)")
    })
}

/// `mtu` (the `--mtu` asked for), lowered to the MTU of the route to the multicast group and
/// to each unicast peer where the kernel knows it. Value datagrams are sent with UDP
/// segmentation, which refuses (EMSGSIZE) a datagram larger than its device's MTU instead of
/// leaving it to IP fragmentation: with `--mtu 1500` on a link of 1400 (a VPN, a VLAN), every
/// value of more than one datagram was lost while announcements still passed.
pub(super) fn mtu_for_paths(
    mtu: usize,
    group: Ipv4Addr,
    port: u16,
    iface: Ipv4Addr,
    peers: &[SocketAddr],
) -> usize {
    let group = SocketAddr::V4(SocketAddrV4::new(group, port));
    let mut lowest = mtu;
    for to in std::iter::once(&group).chain(peers) {
        let Some(path) = route_mtu(*to, iface) else {
            continue;
        };
        if path < lowest {
            tracing::warn!(
                "--mtu {mtu} is more than the {path} bytes the route to {to} carries: sending \
                 datagrams of at most {path} bytes"
            );
            lowest = path;
        }
    }
    lowest
}

/// The MTU of the route to `to` (through `iface` for a multicast group), if there is one now.
fn route_mtu(to: SocketAddr, iface: Ipv4Addr) -> Option<usize> {
    let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).ok()?;
    if !iface.is_unspecified() {
        socket2::SockRef::from(&socket)
            .set_multicast_if_v4(&iface)
            .ok()?;
    }
    socket.connect(to).ok()?;
    let mtu = nix::sys::socket::getsockopt(&socket, nix::sys::socket::sockopt::IpMtu).ok()?;
    usize::try_from(mtu).ok().filter(|&m| m > 0)
}
