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

/// `--check` says whether a file is valid and exits, without a registry and without touching
/// the bus (the domain's shared memory stays empty).
#[test]
fn check_validates_a_file_and_exits() {
    let dir = std::env::temp_dir().join(format!("arbiter-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let check = |text: &str| {
        let file = dir.join("arm.toml");
        std::fs::write(&file, text).unwrap();
        Command::new(env!("CARGO_BIN_EXE_arbiter"))
            .args(["--domain", "arbiter-check-test", "--check", "--config"])
            .arg(&file)
            .output()
            .unwrap()
    };
    let out = check("name = \"arm\"\n[[resources]]\nname = \"shoulder\"\nmin = -1.5\nmax = 1.5\n");
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("valid: arbiter \"arm\", heartbeat 100 ms")
            && said.contains("shoulder (position, -1.5..1.5, safe hold)"),
        "{said}"
    );
    // Valid, but "zero" on a position moves it when released: said as a caution.
    let out = check("name = \"arm\"\n[[resources]]\nname = \"shoulder\"\nsafe = \"zero\"\n");
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("caution: resource \"shoulder\": safe = \"zero\" drives this position to 0"),
        "{said}"
    );
    let out = check("name = \"arm\"\n[[resources]]\nname = \"shoulder\"\nsafe = true\n");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("expected \"hold\", \"zero\", \"off\" or a number"),
        "{err}"
    );
    let touched = std::fs::read_dir("/dev/shm").unwrap().flatten().any(|e| {
        e.file_name()
            .to_string_lossy()
            .contains("arbiter-check-test")
    });
    assert!(!touched, "a check creates no shared memory");
    let _ = std::fs::remove_dir_all(&dir);
}
