//! One convention for every Baton program's command line, so that a script can tell a typo from
//! what a program reports: a command line that does not parse exits 64 (`EX_USAGE`) with clap's
//! message on stderr, whichever program it is (2 means a timeout to `bus-inspect wait` and a bad
//! read to `bus-stress read`); `--help` prints and exits 0.

mod common;

use std::process::Command;

use common::PROGRAMS;

#[test]
fn every_program_exits_64_for_a_command_line_that_does_not_parse() {
    for program in PROGRAMS {
        let out = Command::new(common::bin(program))
            .arg("--no-such-option")
            // A domain nobody uses, should a program get as far as the bus.
            .env("BUS_DOMAIN", "command-lines-test")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{program}: {err}");
        assert!(err.contains("--no-such-option"), "{program}: {err}");
        assert!(out.stdout.is_empty(), "{program}: {out:?}");

        let out = Command::new(common::bin(program))
            .arg("--help")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{program} --help: {out:?}");
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(help.contains("Usage:"), "{program} --help: {help}");
    }
}

#[test]
fn a_value_refused_is_a_usage_error_too() {
    // By a value parser of the program's own (a domain, a slot name) or by a check made once
    // clap is done (two options that contradict each other). Under `timeout`: a program that
    // took these arguments would run (a registry, a simulator) and fail the test, not hang it.
    for (program, args, said) in [
        (
            "robot-sim",
            &["--arm", "x", "--drive", "x"][..],
            "must name different arbiters",
        ),
        (
            "robot-controller",
            &[
                "--name",
                "c",
                "--status",
                "compromising",
                "--set",
                "arm/turret=1",
                "--set",
                "arm/turret=2",
            ][..],
            "is given twice",
        ),
        (
            "registry-server",
            &["--domain", "no/slash"][..],
            "invalid domain name",
        ),
        (
            "bus-inspect",
            &["get", "no-leading-slash"][..],
            "starts with '/'",
        ),
        // A negative number is a value out of range, not an unknown option.
        (
            "bus-inspect",
            &["watch", "/x", "--timeout", "-3"][..],
            "give seconds above 0",
        ),
        (
            "robot-sim",
            &["--rate-hz", "-5"][..],
            "expected 0.1 <= rate",
        ),
        ("robot-sim", &["--rate-hz", "1e-20"], "expected 0.1 <= rate"),
        (
            "robot-sim",
            &["--command-timeout-ms", "-5"][..],
            "expected milliseconds",
        ),
        (
            "bus-stress",
            &["read", "--name", "/x", "--seconds", "-1"][..],
            "give 0 to 31536000 seconds",
        ),
        (
            "registry-server",
            &["--keep-unused", "-3"][..],
            "expected a count of slots",
        ),
        // A count the benchmarks would try to allocate samples for (and abort, leaving their
        // registry behind) or would run with too few samples to compute anything.
        (
            "bus-bench",
            &["--iterations", "4294967296"][..],
            "from 10 to 1000000",
        ),
        (
            "arbiter-bench",
            &["--iterations", "9"][..],
            "from 10 to 1000000",
        ),
        (
            "net-bench",
            &["run", "--iterations", "19"][..],
            "from 20 to 1000000",
        ),
        (
            "net-bench",
            &["run", "--flood-seconds", "nan"][..],
            "expected seconds from 0.1 to 3600",
        ),
        (
            "bus-stress",
            &[
                "read",
                "--name",
                "/w",
                "--slots",
                "128",
                "--seconds",
                "1",
                "--wait",
            ][..],
            "--wait reads at most 127 slots",
        ),
        (
            "net-bench",
            &["run", "--rate-slots", "1"][..],
            "expected a count of slots from 2 to 1000",
        ),
        (
            "net-bench",
            &["--domain", "a.b", "run"][..],
            "invalid domain name",
        ),
        // Its slot series' domains would be named past the limit (`<domain>-slots10000`).
        (
            "bus-bench",
            &["--domain", "a-domain-of-22-letters"][..],
            "give a shorter --domain",
        ),
        // Its own naming, which its sweep of killed runs would take for one.
        (
            "bus-bench",
            &["--domain", "bench-1"][..],
            "names bus-bench's own domains",
        ),
    ] {
        let out = Command::new("timeout")
            .arg("20")
            .arg(common::bin(program))
            .args(args)
            .env("BUS_DOMAIN", "command-lines-test")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{program} {args:?}: {err}");
        assert!(err.contains(said), "{program} {args:?}: {err}");
    }
}
