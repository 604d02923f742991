//! Computers made of Linux namespaces, for running Baton across "hosts" on one machine (the
//! demo's `--hosts 2`). Each host is a network namespace with a veth into a shared bridge (so
//! multicast passes) and a private mount namespace whose /dev/shm is its own tmpfs (network
//! namespaces alone share /dev/shm, and would share slots). Processes enter a host with
//! `nsenter`. Everything is removed on drop. Needs root and iproute2.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, Once};
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
    /// What the names of this lab's namespaces begin with (see `Lab::new`).
    tag: String,
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
    /// lab creates; nothing leaves the machine). The namespaces are named `baton-`, `kind`
    /// (lowercase letters: "bt" for the tests), this process's pid, a count and the host
    /// (`baton-bt812x0-hA`), so that labs of one process and of several never share a name, and
    /// so that the labs of a process that was killed before it could remove them are known, and
    /// removed here.
    pub fn new(kind: &str, names: &[&str]) -> Result<Lab, String> {
        static SWEEP: Once = Once::new();
        if !nix::unistd::geteuid().is_root() {
            return Err("several hosts need root (network and mount namespaces)".into());
        }
        if kind.is_empty() || !kind.bytes().all(|b| b.is_ascii_lowercase()) {
            return Err(format!("a lab's kind is lowercase letters, not {kind:?}"));
        }
        SWEEP.call_once(remove_abandoned_labs);
        // Made whole before a sweep of this process looks (`remove_own_labs` on a signal).
        let _making = lock_labs();
        let tag = format!(
            "baton-{kind}{}x{}",
            std::process::id(),
            LABS_MADE.fetch_add(1, Ordering::Relaxed)
        );
        let switch = format!("{tag}-sw");
        let mut lab = Lab {
            tag,
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
            let namespace = format!("{}-{name}", lab.tag);
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

    /// What this lab's namespace names begin with (`baton-bt812x0`), unique among the labs that
    /// exist: a prefix for scratch files of the lab's own.
    pub fn tag(&self) -> &str {
        &self.tag
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

/// How many labs this process has made (the count in their names).
static LABS_MADE: AtomicU32 = AtomicU32::new(0);

/// Held while this process makes a lab or sweeps: a sweep never sees a lab half made, nor
/// counts labs while one is being made.
static LABS: Mutex<()> = Mutex::new(());

fn lock_labs() -> MutexGuard<'static, ()> {
    LABS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Removes the namespaces of labs whose process is gone: killed before its `Lab` was dropped
/// (SIGKILL, a watchdog, a machine's restart of the test runner). Their holders, which
/// outlive the process, are killed first so that the namespaces go with the names. A name of
/// this process's own pid is abandoned too while this process has made no lab: it is from an
/// earlier process of that pid. A name not made by `Lab::new` is left alone, and so is a lab
/// of a process that runs. Best effort: what cannot be removed stays, as before.
pub fn remove_abandoned_labs() {
    let _sweeping = lock_labs();
    let own = std::process::id();
    let none_made = LABS_MADE.load(Ordering::Relaxed) == 0;
    remove_labs(|pid| {
        if pid == own {
            none_made
        } else {
            !Path::new(&format!("/proc/{pid}")).exists()
        }
    });
}

/// Removes this process's labs, processes in them first, when it cannot drop them: on a
/// signal that ends it (`net-bench` on Ctrl-C), from the signal's thread.
pub fn remove_own_labs() {
    let _sweeping = lock_labs();
    let own = std::process::id();
    remove_labs(|pid| pid == own);
}

/// Removes the labs whose owner's pid `remove` picks (see `remove_abandoned_labs`).
fn remove_labs(remove: impl Fn(u32) -> bool) {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        let Some(pid) = lab_owner(name) else {
            continue;
        };
        if !remove(pid) {
            continue;
        }
        if let Ok(pids) = Command::new("ip").args(["netns", "pids", name]).output() {
            for pid in String::from_utf8_lossy(&pids.stdout).split_whitespace() {
                if let Ok(pid) = pid.parse::<i32>() {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
        }
        let _ = ip(&["netns", "del", name]);
    }
}

/// The pid in a namespace name made by `Lab::new` (`baton-bt812x0-hA` gives 812); None for
/// other names.
fn lab_owner(name: &str) -> Option<u32> {
    let (tag, host) = name.strip_prefix("baton-")?.split_once('-')?;
    let digits = tag.trim_start_matches(|c: char| c.is_ascii_lowercase());
    let (pid, count) = digits.split_once('x')?;
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let made_here = digits.len() < tag.len() && all_digits(count) && !host.is_empty();
    if made_here {
        pid.parse().ok().filter(|_| all_digits(pid))
    } else {
        None
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

#[cfg(test)]
mod tests {
    use super::lab_owner;

    #[test]
    fn the_owner_of_a_lab_is_read_from_its_names_only() {
        assert_eq!(lab_owner("baton-bt812x0-hA"), Some(812));
        assert_eq!(lab_owner("baton-nb77x3-sw"), Some(77));
        assert_eq!(lab_owner("baton-bd9x0-payload"), Some(9));
        for other in [
            "bt812x0-hA",
            "baton-bt812x0",
            "baton-812x0-hA",
            "baton-btx0-hA",
            "baton-bt812-hA",
            "baton-bt812x-hA",
            "baton-bt8a2x0-hA",
            "baton-bt812x0-",
            "myns",
        ] {
            assert_eq!(lab_owner(other), None, "{other}");
        }
    }
}
