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
    // A command-line error, as any other bad value (status 64, as in every Baton program).
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("invalid domain name") && err.contains("A-Z"),
        "{err}"
    );
    // An empty BUS_DOMAIN (a unit's `Environment=BUS_DOMAIN=`) is said to be the likely cause.
    let out = registry().env("BUS_DOMAIN", "").output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is BUS_DOMAIN set to nothing?"), "{err}");
}

#[test]
fn a_peer_is_an_address_with_or_without_its_port() {
    let out = registry()
        .args(["--peer", "10.0.0.5.7447"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("expected IP:PORT or IP, e.g. 10.0.0.5:7447 or 10.0.0.5"),
        "{err}"
    );
    // A bare address is taken (here refused only for the missing --net: no traffic is sent).
    let out = registry()
        .args(["--domain", "cli-peer-unused", "--peer", "10.0.0.5"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--peer only applies to network reflection"),
        "{err}"
    );
}

/// Runs the registry for a fresh domain until it logs that it serves, then stops it; what it
/// logged. With `terminal` its stderr is a terminal (through `script`), else a file.
fn first_log_lines(tag: &str, envs: &[(&str, &str)], terminal: bool) -> String {
    use std::time::{Duration, Instant};
    let domain = format!("cli-{tag}-{}", std::process::id());
    let log = std::env::temp_dir().join(format!("baton-{domain}.log"));
    let bin = env!("CARGO_BIN_EXE_registry-server");
    let mut command = if terminal {
        // `script` gives the registry a terminal and copies what it prints to the log.
        let mut c = Command::new("script");
        c.args(["-q", "-e", "-f", "-c", &format!("{bin} --domain {domain}")])
            .arg(&log)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null());
        c
    } else {
        let mut c = Command::new(bin);
        c.args(["--domain", &domain])
            .stderr(std::fs::File::create(&log).unwrap());
        c
    };
    command.env("RUST_LOG", "info").env_remove("NO_COLOR");
    for (k, v) in envs {
        command.env(k, v);
    }
    let mut child = command.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("serving domain") || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // The registry itself is stopped, not `script`: `script` may end first, and a registry
    // left on a hung-up terminal ignores SIGHUP and would outlive the test (its segments too:
    // removed under it, it makes them anew).
    for pid in registries_serving(&domain) {
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    }
    let gone_by = Instant::now() + Duration::from_secs(10);
    while Instant::now() < gone_by && !registries_serving(&domain).is_empty() {
        std::thread::sleep(Duration::from_millis(20));
    }
    for pid in registries_serving(&domain) {
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_file(&log);
    let _ = bus::Domain::new(&domain).unwrap().remove_all_segments();
    assert!(
        text.contains("serving domain"),
        "no start-up line: {text:?}"
    );
    text
}

/// The registry processes started with `--domain domain` (exactly: not the `script` or shell
/// that started one, nor the registry of a concurrent run whose pid extends this one's).
fn registries_serving(domain: &str) -> Vec<nix::unistd::Pid> {
    bus::process::pids()
        .into_iter()
        .filter_map(|pid| {
            let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let args: Vec<&str> = raw
                .split(|b| *b == 0)
                .filter_map(|a| std::str::from_utf8(a).ok())
                .collect();
            let registry = args.first()?.ends_with("registry-server");
            let serving = args.windows(2).any(|w| w == ["--domain", domain]);
            (registry && serving).then(|| nix::unistd::Pid::from_raw(pid as i32))
        })
        .collect()
}

/// systemd sets STATE_DIRECTORY for every registry unit (`StateDirectory=`), with `--net` or
/// without. Taken from there the directory is not a network option given by hand: a registry
/// without `--net` starts (refused, every such unit would fail and restart for ever).
#[test]
fn a_state_directory_from_systemd_is_taken_without_net() {
    let dir = std::env::temp_dir();
    let text = first_log_lines(
        "statedir",
        &[("STATE_DIRECTORY", dir.to_str().unwrap())],
        false,
    );
    assert!(!text.contains("only applies"), "{text}");
}

/// Colours only on a terminal without NO_COLOR: the journal and log files get plain text.
#[test]
fn logs_are_coloured_only_on_a_terminal() {
    let plain = first_log_lines("file", &[], false);
    assert!(!plain.contains('\x1b'), "escape codes in a file: {plain:?}");
    let Ok(status) = Command::new("script").arg("--version").output() else {
        eprintln!("no `script` (util-linux): terminal case not checked");
        return;
    };
    assert!(status.status.success());
    let coloured = first_log_lines("tty", &[], true);
    assert!(
        coloured.contains("\x1b["),
        "no colour on a terminal: {coloured:?}"
    );
    let no_color = first_log_lines("nocolor", &[("NO_COLOR", "1")], true);
    assert!(!no_color.contains('\x1b'), "NO_COLOR ignored: {no_color:?}");
}
