//! A link whose MTU is below the registry's `--mtu` (a VPN, a VLAN): value datagrams go out
//! with UDP segmentation, which refuses a datagram larger than the device's MTU. Every value
//! of more than one datagram used to be lost while announcements (sent without it) still
//! passed; the registry now sends datagrams that fit the route.

mod common;
mod netns;

use common::summary;
use netns::Lab;

const A: usize = 0;
const B: usize = 1;

#[test]
fn values_cross_a_link_narrower_than_the_mtu_asked_for() {
    let mut lab = Lab::new(2);
    for h in [A, B] {
        let ip = lab
            .command(h, std::path::Path::new("ip"))
            .args(["link", "set", "eth0", "mtu", "1400"])
            .status()
            .expect("run ip");
        assert!(ip.success(), "ip link set eth0 mtu 1400");
    }
    for h in [A, B] {
        lab.start_registry(h, &["--mtu", "1500"], &[]);
    }
    let reader = lab.read_until(B, "/wide", "3", "20");
    lab.write_from(A, "/wide", "3", "200", "20000");
    let s = summary(&lab.finish(reader));
    assert_eq!(s["last"], 3, "{s}");
    assert_eq!(s["bad"], 0, "{s}");
    assert!(
        lab.log(A)
            .contains("sending datagrams of at most 1400 bytes"),
        "{}",
        lab.log(A)
    );
}
