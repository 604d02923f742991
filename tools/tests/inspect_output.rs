//! `bus-inspect` whose standard output cannot be written: a full disk (`/dev/full`) is an error,
//! status 1 with the cause on stderr, also after a `put` has written (it used to panic with
//! status 101, or exit 0 having printed nothing); a pipe whose reader left is no error.

mod common;

use std::io::Read;
use std::process::{Command, Stdio};

use common::{bin, TestBus};

fn inspect_into(t: &TestBus, stdout: Stdio, args: &[&str]) -> std::process::Output {
    Command::new("timeout")
        .arg("20")
        .arg(bin("bus-inspect"))
        .args(["--domain", t.domain.as_str()])
        .args(args)
        .stdout(stdout)
        .stderr(Stdio::piped())
        .output()
        .expect("run bus-inspect")
}

fn dev_full() -> Stdio {
    std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full")
        .into()
}

#[test]
fn output_that_cannot_be_written_is_status_1_and_a_closed_pipe_is_none() {
    let mut t = TestBus::new();
    t.start_registry();
    t.leave_value("/out/value", 7);
    for args in [
        &["get", "/out/value", "--json"][..],
        &["get", "/out/value"],
        &["info", "/out/value"],
        &["info", "/out/value", "--json"],
        &["list"],
        &["put", "/out/value", "8"],
        &["put", "/out/value", "9", "--json"],
    ] {
        let out = inspect_into(&t, dev_full(), args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("writing the output: No space left on device"),
            "{args:?}: {err}"
        );
    }
    // The puts wrote all the same.
    let out = t.inspect(&["get", "/out/value", "--json"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "9");
    // A reader that left before anything was printed.
    for args in [
        &["info", "/out/value"][..],
        &["list"],
        &["get", "/out/value"],
    ] {
        let (reader, writer) = nix::unistd::pipe().expect("pipe");
        drop(reader);
        let out = inspect_into(&t, writer.into(), args);
        let mut err = String::new();
        (&out.stderr[..]).read_to_string(&mut err).unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(err.is_empty(), "{args:?}: {err}");
    }
}
