//! The systemd units: installed by `scripts/install.sh` into a staging root and checked with
//! `systemd-analyze verify`; and the properties the deployment relies on (readiness and
//! watchdog through sd_notify, restart on failure, shared memory kept, no start order).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

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
