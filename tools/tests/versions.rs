//! Every program's `--version` tells builds apart: the package version, the commit the binaries
//! were built from (what git says HEAD is here, `unknown` outside a checkout) and the slot
//! layout version; the registry's also the network wire version.

mod common;

use std::process::Command;

use common::PROGRAMS;

fn head() -> String {
    let out = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output();
    match out {
        Ok(out) if out.status.success() => String::from_utf8(out.stdout).unwrap().trim().into(),
        _ => "unknown".into(),
    }
}

#[test]
fn every_program_names_its_commit_and_layout_versions() {
    let commit = head();
    for program in PROGRAMS {
        let out = Command::new(common::bin(program))
            .arg("--version")
            .output()
            .unwrap();
        assert!(out.status.success(), "{program} --version: {out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        let expected = format!(
            "{program} {} (commit {commit}, slot layout version {}",
            env!("CARGO_PKG_VERSION"),
            bus::slot::VERSION
        );
        assert!(text.starts_with(&expected), "{text:?} against {expected:?}");
        let rest = &text[expected.len()..];
        if program == "registry-server" {
            let wire = rest
                .strip_prefix(", network wire version ")
                .and_then(|r| r.strip_suffix(")\n"))
                .map(|n| n.parse::<u8>());
            assert!(matches!(wire, Some(Ok(_))), "{text:?}");
        } else {
            assert_eq!(rest, ")\n", "{text:?}");
        }
    }
}
