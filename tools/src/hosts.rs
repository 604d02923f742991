//! Computers made of Linux namespaces, for running Baton across "hosts" on one machine (the
//! demo's `--hosts 2`). Each host is a network namespace with a veth into a shared bridge (so
//! multicast passes) and a private mount namespace whose /dev/shm is its own tmpfs (network
//! namespaces alone share /dev/shm, and would share slots). Processes enter a host with
//! `nsenter`. Everything is removed on drop. Needs root and iproute2.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One host: its namespace name, address and the process that holds its mount namespace.
pub struct Host {
    pub name: String,
    pub namespace: String,
    pub address: String,
    holder: Child,
}

/// A bridge and the hosts attached to it.
pub struct Lab {
    switch: String,
    pub hosts: Vec<Host>,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run `ip` (install iproute2): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Makes the switch's bridge forward frames as an Ethernet switch does, without passing them
/// through the firewall. Where `br_netfilter` is loaded (Docker loads it), a bridge hands every
/// frame to iptables by default, with a route lookup of its own (`br_nf_pre_routing`,
/// `ip_route_input_slow` in a profile of `net-bench`'s flood, on the sending CPU): work that no
/// switch between two computers does. The settings are the switch namespace's own (the
/// machine's stay as they are); where the module is absent they do not exist and there is
/// nothing to do.
fn switch_without_firewall(switch: &str) -> Result<(), String> {
    ip(&[
        "netns",
        "exec",
        switch,
        "sh",
        "-c",
        "for f in /proc/sys/net/bridge/bridge-nf-call-*; do \
         if [ -e \"$f\" ]; then echo 0 > \"$f\" || exit 1; fi; done",
    ])
}

/// Gives host `i` (namespace `namespace`) its `eth0`: a veth into the switch's bridge, with
/// `address`, up, and the route multicast takes.
fn plug_in(switch: &str, namespace: &str, i: usize, address: &str) -> Result<(), String> {
    let port = format!("p{i}");
    ip(&[
        "-n", namespace, "link", "add", "eth0", "type", "veth", "peer", "name", &port, "netns",
        switch,
    ])?;
    ip(&["-n", switch, "link", "set", &port, "master", "br0", "up"])?;
    ip(&[
        "-n",
        namespace,
        "addr",
        "add",
        &format!("{address}/24"),
        "dev",
        "eth0",
    ])?;
    ip(&["-n", namespace, "link", "set", "eth0", "up"])?;
    ip(&["-n", namespace, "link", "set", "lo", "up"])?;
    ip(&[
        "-n",
        namespace,
        "route",
        "add",
        "224.0.0.0/4",
        "dev",
        "eth0",
    ])
}

impl Lab {
    /// `names.len()` hosts on one bridge, addressed 10.77.0.1, .2, ... (inside namespaces this
    /// lab creates; nothing leaves the machine). `tag` prefixes the namespace names and must
    /// be unique among labs that exist at the same time.
    pub fn new(tag: &str, names: &[&str]) -> Result<Lab, String> {
        if !nix::unistd::geteuid().is_root() {
            return Err("several hosts need root (network and mount namespaces)".into());
        }
        let switch = format!("{tag}-sw");
        let mut lab = Lab {
            switch: switch.clone(),
            hosts: Vec::new(),
        };
        ip(&["netns", "add", &switch])?;
        ip(&[
            "-n",
            &switch,
            "link",
            "add",
            "br0",
            "type",
            "bridge",
            "mcast_snooping",
            "0",
        ])?;
        ip(&["-n", &switch, "link", "set", "br0", "up"])?;
        switch_without_firewall(&switch)?;
        for (i, name) in names.iter().enumerate() {
            let namespace = format!("{tag}-{name}");
            ip(&["netns", "add", &namespace])?;
            let address = format!("10.77.0.{}", i + 1);
            plug_in(&switch, &namespace, i, &address)?;
            let holder = Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &namespace,
                    "unshare",
                    "--mount",
                    "--propagation",
                    "private",
                ])
                .args([
                    "sh",
                    "-c",
                    "mount -t tmpfs tmpfs /dev/shm && exec sleep infinity",
                ])
                .stdin(Stdio::null())
                .spawn()
                .map_err(|e| format!("starting the holder of {namespace}: {e}"))?;
            lab.hosts.push(Host {
                name: (*name).to_owned(),
                namespace,
                address,
                holder,
            });
        }
        // A holder runs `sleep` only once its tmpfs is mounted (`mount && exec sleep`).
        let deadline = Instant::now() + Duration::from_secs(10);
        for h in &lab.hosts {
            let comm = format!("/proc/{}/comm", h.holder.id());
            while std::fs::read_to_string(&comm).map_or(true, |c| c.trim() != "sleep") {
                if Instant::now() > deadline {
                    return Err(format!("host {} did not get its own /dev/shm", h.name));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Ok(lab)
    }

    /// Plugs host `host`'s cable into the switch, or pulls it (its port on the bridge up or
    /// down; the host's own interface and routes stay as they are).
    pub fn set_connected(&self, host: usize, connected: bool) -> Result<(), String> {
        let state = if connected { "up" } else { "down" };
        ip(&[
            "-n",
            &self.switch,
            "link",
            "set",
            &format!("p{host}"),
            state,
        ])
    }

    /// Unplugs host `host`'s network adapter and plugs it in again (a USB adapter, a
    /// hot-plugged NIC): its `eth0` is removed, with the group memberships on it, and made
    /// again with the same address and routes, under a new interface index.
    pub fn replug(&self, host: usize) -> Result<(), String> {
        let h = &self.hosts[host];
        ip(&["-n", &h.namespace, "link", "del", "eth0"])?;
        plug_in(&self.switch, &h.namespace, host, &h.address)
    }

    /// Pid of the process holding host `host`'s namespaces (for `nsenter -t`).
    pub fn holder_pid(&self, host: usize) -> u32 {
        self.hosts[host].holder.id()
    }

    /// A command that runs `program` inside host `host`.
    pub fn command(&self, host: usize, program: &Path) -> Command {
        let mut c = Command::new("nsenter");
        c.args(self.nsenter_args(host)).arg(program);
        c
    }

    /// A command that runs `program` inside host `host`, on CPU `cpu` only (`taskset`, from
    /// util-linux): a host of the lab then has a processor of its own, as a computer does.
    pub fn command_on_cpu(&self, host: usize, cpu: usize, program: &Path) -> Command {
        let mut c = Command::new("taskset");
        c.args(["-c", &cpu.to_string(), "nsenter"])
            .args(self.nsenter_args(host))
            .arg(program);
        c
    }

    /// `nsenter`'s options that enter host `host`'s mount and network namespaces.
    fn nsenter_args(&self, host: usize) -> [String; 5] {
        let holder = self.hosts[host].holder.id().to_string();
        ["-t".into(), holder, "-m".into(), "-n".into(), "--".into()]
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for h in &mut self.hosts {
            let _ = h.holder.kill();
            let _ = h.holder.wait();
            let _ = ip(&["netns", "del", &h.namespace]);
        }
        let _ = ip(&["netns", "del", &self.switch]);
    }
}
