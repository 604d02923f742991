//! The systemd units: installed by `scripts/install.sh` into a staging root and checked with
//! `systemd-analyze verify`; and the properties the deployment relies on (readiness and
//! watchdog through sd_notify, restart on failure, shared memory kept, no start order).

mod common;

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const UNITS: [&str; 5] = [
    "baton-registry.service",
    "baton-manager.service",
    "baton-arbiter@.service",
    "baton-controller@.service",
    "baton-sim.service",
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn copy_dir(from: &Path, to: &Path) {
    let status = Command::new("cp")
        .arg("-r")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(status.success(), "copying {}", from.display());
}

#[test]
fn installed_units_pass_systemd_analyze_verify() {
    let have = Command::new("systemd-analyze").arg("--version").output();
    assert!(
        have.is_ok_and(|o| o.status.success()),
        "systemd-analyze is required (apt-get install systemd); .ci/run installs it"
    );
    let stage = std::env::temp_dir().join(format!("baton-units-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&stage);
    let bin_dir = common::bin("registry-server")
        .parent()
        .unwrap()
        .to_path_buf();
    let out = Command::new(repo().join("scripts/install.sh"))
        .arg("--root")
        .arg(&stage)
        .arg("--bin-dir")
        .arg(&bin_dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "install.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // An option where a directory belongs is a usage error, not a directory named `--bin-dir`
    // (it was taken as one, and realpath failed on it).
    let out = Command::new(repo().join("scripts/install.sh"))
        .args(["--root", "--bin-dir"])
        .arg(&bin_dir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains("--root needs a directory"), "{err}");
    // A minimal image of a real machine for the verifier: systemd's own units, sh and kill.
    std::fs::create_dir_all(stage.join("usr/lib/systemd")).unwrap();
    copy_dir(
        Path::new("/usr/lib/systemd/system"),
        &stage.join("usr/lib/systemd/system"),
    );
    std::fs::create_dir_all(stage.join("bin")).unwrap();
    for tool in ["sh", "kill"] {
        let found = ["/bin", "/usr/bin"]
            .iter()
            .map(|d| Path::new(d).join(tool))
            .find(|p| p.exists());
        std::fs::copy(found.expect(tool), stage.join("bin").join(tool)).unwrap();
    }
    for unit in [
        "baton-registry.service",
        "baton-manager.service",
        "baton-arbiter@arm.service",
        "baton-arbiter@drive.service",
        "baton-controller@teleop.service",
        "baton-controller@autonomy.service",
        "baton-controller@payload.service",
        "baton-sim.service",
    ] {
        let out = Command::new("systemd-analyze")
            .arg("verify")
            .arg(format!("--root={}", stage.display()))
            .arg(unit)
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && said.trim().is_empty(),
            "{unit}: {said}"
        );
    }
    let _ = std::fs::remove_dir_all(&stage);
}

#[test]
fn units_notify_restart_keep_shared_memory_and_need_no_order() {
    for unit in UNITS {
        let text = std::fs::read_to_string(repo().join("scripts/systemd").join(unit)).unwrap();
        let has = |line: &str| text.lines().any(|l| l.trim() == line);
        assert!(has("Type=notify"), "{unit}: readiness through sd_notify");
        assert!(
            text.lines().any(|l| l.starts_with("WatchdogSec=")),
            "{unit}: watchdog"
        );
        assert!(has("Restart=on-failure"), "{unit}");
        assert!(has("RemoveIPC=no"), "{unit}");
        // The reason is written next to it.
        let at = text.find("RemoveIPC=no").unwrap();
        assert!(
            text[..at].contains("shared memory"),
            "{unit}: RemoveIPC=no without its reason"
        );
        for ordering in ["After=", "Requires=", "Wants=", "BindsTo=", "Before="] {
            assert!(
                !text
                    .lines()
                    .any(|l| l.starts_with(ordering) && l.contains("baton")),
                "{unit}: {ordering} on another Baton unit; start order must not matter"
            );
        }
    }
}

/// Under the units (`Type=notify`, `WatchdogSec=`) systemd gives each service `NOTIFY_SOCKET`
/// and `WATCHDOG_USEC`: a service that never says `READY=1` fails its start, and one that stops
/// pinging `WATCHDOG=1` is killed and restarted. Every service, as real processes, with one
/// socket per service standing in for systemd.
#[test]
fn every_service_says_ready_and_feeds_the_watchdog() {
    let mut t = common::TestBus::new();
    let dir = t.dir();
    let manager = dir.join("manager.toml");
    let arm = dir.join("arm.toml");
    std::fs::write(&manager, "controllers = [\"x\"]\narbiters = [\"arm\"]\n").unwrap();
    std::fs::write(&arm, "name = \"arm\"\n[[resources]]\nname = \"turret\"\n").unwrap();
    let (manager, arm) = (manager.to_str().unwrap(), arm.to_str().unwrap());
    let services: [(&str, &[&str]); 5] = [
        ("registry-server", &[]),
        ("robot-manager", &["--config", manager]),
        ("arbiter", &["--config", arm]),
        ("robot-sim", &[]),
        (
            "robot-controller",
            &[
                "--name",
                "x",
                "--status",
                "compromising",
                "--set",
                "arm/turret=0.5",
            ],
        ),
    ];
    // The pings come every 100 ms (half the interval); three of them show the loop of pings.
    const PINGS: usize = 3;
    let mut heard = Vec::new();
    for (program, args) in services {
        let path = dir.join(format!("{program}.notify"));
        let socket = UnixDatagram::bind(&path).unwrap();
        socket.set_nonblocking(true).unwrap();
        let env = [
            ("NOTIFY_SOCKET", path.to_str().unwrap()),
            ("WATCHDOG_USEC", "200000"),
        ];
        t.spawn_with_env(common::bin(program), args, &env);
        heard.push((program, socket, false, 0));
    }
    let deadline = Instant::now() + common::WATCHDOG;
    let mut buf = [0u8; 4096];
    while heard
        .iter()
        .any(|(_, _, ready, pings)| !ready || *pings < PINGS)
    {
        for (_, socket, ready, pings) in &mut heard {
            while let Ok(n) = socket.recv(&mut buf) {
                let message = String::from_utf8_lossy(&buf[..n]);
                *ready |= message.lines().any(|l| l == "READY=1");
                *pings += message.lines().filter(|l| *l == "WATCHDOG=1").count();
            }
        }
        if Instant::now() > deadline {
            let state: Vec<_> = heard
                .iter()
                .map(|(p, _, ready, pings)| format!("{p}: ready {ready}, {pings} pings"))
                .collect();
            panic!("not every service told systemd: {state:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
