//! The `registry-server` command line: help that explains, clear errors for bad input. (These
//! tests also make `cargo test` build the binary that the cross-process tests start.)

use std::process::Command;

fn registry() -> Command {
    Command::new(env!("CARGO_BIN_EXE_registry-server"))
}

#[test]
fn help_explains_domain_group_and_restarts() {
    let out = registry().arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in ["--domain", "--group", "adopts", "0660"] {
        assert!(help.contains(needle), "help lacks {needle:?}:\n{help}");
    }
}

#[test]
fn a_bad_domain_name_is_refused_with_the_rule() {
    let out = registry()
        .args(["--domain", "no/slashes"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("invalid domain name") && err.contains("A-Z"),
        "{err}"
    );
}
