//! Records the commit the binaries are built from (`daemon::COMMIT`, shown by every program's
//! `--version`), so that two builds of one package version can be told apart on a robot. A
//! build outside a git checkout (a source archive, or git not installed) records `unknown`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .args(args)
            .current_dir(&manifest_dir)
            .output()
            .ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=BATON_COMMIT={commit}");
    println!("cargo:rerun-if-changed=build.rs");
    // Built again when HEAD moves: a commit, a checkout, a pull. `--git-path` names each file
    // where it is also in a worktree (whose refs live in the main repository's directory);
    // the branch's directory is watched as well, since a branch packed by `git gc` comes
    // back as a new loose file at the next commit. Only paths that exist are named (cargo
    // runs the script at every build for a missing one).
    let path = |name: &str| {
        git(&["rev-parse", "--git-path", name]).map(|p| Path::new(&manifest_dir).join(p))
    };
    let mut watched: Vec<PathBuf> = ["HEAD", "packed-refs"]
        .iter()
        .filter_map(|n| path(n))
        .collect();
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some(loose) = path(&branch) {
            watched.extend(loose.parent().map(Path::to_path_buf));
            watched.push(loose);
        }
    }
    for path in watched.iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}
