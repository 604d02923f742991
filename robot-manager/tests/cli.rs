//! The `robot-manager` command line: an invalid configuration at start is one clear line and a
//! non-zero exit. (These tests also make `cargo test` build the binary.)

use std::process::Command;

#[test]
fn an_invalid_config_at_start_is_refused() {
    let dir = std::env::temp_dir().join(format!("manager-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("manager.toml");
    std::fs::write(&file, "controllers = [\"a\", \"a\"]\narbiters = []\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_robot-manager"))
        .args(["--domain", "manager-cli-test", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("\"a\" is listed twice"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--check` says whether a file is valid, and what it sets, and exits without a registry.
#[test]
fn check_validates_a_file_and_exits() {
    let dir = std::env::temp_dir().join(format!("manager-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let check = |text: &str| {
        let file = dir.join("manager.toml");
        std::fs::write(&file, text).unwrap();
        Command::new(env!("CARGO_BIN_EXE_robot-manager"))
            .args(["--domain", "manager-check-test", "--check", "--config"])
            .arg(&file)
            .output()
            .unwrap()
    };
    let out = check("controllers = [\"teleop\", \"auto\"]\narbiters = [\"arm\"]\n");
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("controllers, highest priority first: teleop, auto; arbiters: arm; unlisted controllers ignored"),
        "{said}"
    );
    assert!(!said.contains("caution"), "{said}");
    // Valid, but no application gets anything: said as cautions.
    let out = check("controllers = []\narbiters = []\n");
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("caution: no arbiter listed: every arbiter is out of service")
            && said.contains("caution: no controller listed, and unlisted ones ignored"),
        "{said}"
    );
    let out = check("controllers = [\"a\", \"a\"]\narbiters = []\n");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("\"a\" is listed twice"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
