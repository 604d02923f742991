//! The `arbiter` command line: a missing or invalid configuration is one clear line and a
//! non-zero exit. (These tests also make `cargo test` build the binary.)

use std::process::Command;

fn arbiter(config: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_arbiter"))
        .args(["--domain", "arbiter-cli-test", "--config"])
        .arg(config)
        .output()
        .unwrap()
}

#[test]
fn missing_and_invalid_configs_are_clear_errors() {
    let dir = std::env::temp_dir().join(format!("arbiter-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = arbiter(&dir.join("absent.toml"));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read"));

    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "name = \"arm\"\n[[resources]]\nname = \"x\"\nspeed = 3\n",
    )
    .unwrap();
    let out = arbiter(&bad);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.toml") && err.contains("unknown field"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn help_shows_the_config_format() {
    let out = Command::new(env!("CARGO_BIN_EXE_arbiter"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("[[resources]]") && help.contains("safe"),
        "{help}"
    );
}
