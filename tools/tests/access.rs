//! Who may use a bus, and what a registry refuses at start: segments belong to their owner and
//! the bus's group, a user outside the group is refused (and binds once admitted; connecting
//! again and again ties the registry up no more), key files and groups that cannot work stop
//! the registry before it makes anything, a planted segment is never adopted (nor one the
//! registry may not close to others), and a segment the registry or `bus-inspect clean` may not
//! remove is named with its owner.

mod common;

use std::time::Duration;

use common::{require_root, runnable_by_anyone, TestBus, AS_NOBODY, WATCHDOG};

#[test]
fn segments_belong_to_owner_and_group_never_to_others() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let mut t = TestBus::new();
    // As root we may give segments to any group: check that --group takes effect.
    let root = nix::unistd::geteuid().is_root();
    if root {
        t.start_registry_with(&["--group", "12345"]);
    } else {
        t.start_registry();
    }
    let bus = t.bus();
    let p = bus.publish::<u8>("/perm").unwrap();
    p.wait_bound(WATCHDOG).unwrap();
    let seg = t.domain.segment_name(p.name());
    let meta = std::fs::metadata(format!("/dev/shm{seg}")).unwrap();
    let mode = meta.permissions().mode();
    assert_eq!(mode & 0o777, 0o660, "mode {:o}", mode & 0o777);
    if root {
        assert_eq!(meta.gid(), 12345);
        // Restarted with another group, the registry gives it what it adopts.
        t.kill_registry();
        t.start_registry_with(&["--group", "23456"]);
        common::eventually("the adopted segment changes group", || {
            std::fs::metadata(format!("/dev/shm{seg}")).is_ok_and(|m| m.gid() == 23456)
        });
    }
    // A segment open to everyone (made or changed by hand) is closed to others when a registry
    // without --group adopts it.
    t.kill_registry();
    let path = format!("/dev/shm{seg}");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    t.start_registry();
    common::eventually("the adopted segment is closed to others", || {
        std::fs::metadata(&path).is_ok_and(|m| m.permissions().mode() & 0o777 == 0o660)
    });
}

/// The registry's socket has no file permissions (it is abstract), so the registry checks who
/// connects: a process of another user, outside the segments' group, is refused with a message
/// saying who may (the group by name) and what to do, and nothing it asks for is created.
#[test]
fn a_user_outside_the_group_may_not_use_the_bus() {
    require_root();
    let mut t = TestBus::new();
    t.start_registry();
    let inspect = runnable_by_anyone(&t, "bus-inspect");
    let stats_as_nobody = |t: &TestBus| {
        let out = std::process::Command::new("setpriv")
            .args(AS_NOBODY)
            .arg(&inspect)
            .args(["--domain", t.domain.as_str(), "stats"])
            .output()
            .expect("setpriv (util-linux)");
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    };
    let text = stats_as_nobody(&t);
    assert!(text.contains("uid 65534"), "{text}");
    assert!(text.contains("may not use this bus"), "{text}");
    // The registry's own group (root's: no --group), named, and what to do about it.
    assert!(text.contains("members of group root (gid 0)"), "{text}");
    assert!(
        text.contains("add the user to that group") && text.contains("--group"),
        "{text}"
    );
    // bus-inspect says the registry runs and refuses, rather than telling to start one.
    let out = std::process::Command::new("setpriv")
        .args(AS_NOBODY)
        .arg(&inspect)
        .args(["--domain", t.domain.as_str(), "list"])
        .output()
        .expect("setpriv (util-linux)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refuses this user") && !err.contains("start `registry-server"),
        "{err}"
    );
    // Every segment is closed to this user: an error, not an empty list and status 0.
    assert_eq!(out.status.code(), Some(1), "{err}");
    // A segment opened directly says whose it is and how to be let in (it said only
    // "shm_open: EACCES: Permission denied").
    let out = std::process::Command::new("setpriv")
        .args(AS_NOBODY)
        .arg(&inspect)
        .args([
            "--domain",
            t.domain.as_str(),
            "get",
            "/baton/registry/directory",
        ])
        .output()
        .expect("setpriv (util-linux)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("this user (nobody) may not open it: it is mode 0660, owner root, group root")
            && err.contains("usermod -aG root nobody"),
        "{err}"
    );
    // `doctor` says the segments are closed to this user (it said "ok permissions").
    let out = std::process::Command::new("setpriv")
        .args(AS_NOBODY)
        .arg(&inspect)
        .args(["--domain", t.domain.as_str(), "doctor"])
        .output()
        .expect("setpriv (util-linux)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("this user (nobody) may not read and write"),
        "{text}"
    );
    // Nor does it call the segments it may not read stale: it called every live segment
    // "unreadable header: not adopted by the registry" and `clean` set out to remove them all.
    assert!(
        text.contains("cannot tell: the registry refuses this user") && !text.contains("stale:"),
        "{text}"
    );
    assert!(
        text.contains("cannot check: the registry refuses this user"),
        "{text}"
    );
    let out = std::process::Command::new("setpriv")
        .args(AS_NOBODY)
        .arg(&inspect)
        .args(["--domain", t.domain.as_str(), "clean", "--yes"])
        .output()
        .expect("setpriv (util-linux)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot tell which segments") && err.contains("nothing removed"),
        "{err}"
    );
    // The registry's own user still may.
    let ok = t.inspect(&["stats"]);
    assert!(ok.status.success(), "{ok:?}");

    // With --group, the group given is named, with the command that adds the user to it.
    let daemon = nix::unistd::Group::from_name("daemon")
        .unwrap()
        .expect("group daemon");
    t.kill_registry();
    t.start_registry_with(&["--group", "daemon"]);
    let text = stats_as_nobody(&t);
    assert!(
        text.contains(&format!("members of group daemon (gid {})", daemon.gid)),
        "{text}"
    );
    assert!(text.contains("usermod -aG daemon"), "{text}");
}

/// A process whose user the registry refuses says so once, retries slowly (it used to
/// reconnect at once and log tens of thousands of lines a second), and keeps its endpoints
/// pending: once a registry admits its user they bind and its values go through.
#[test]
fn a_refused_process_says_so_once_and_binds_once_admitted() {
    require_root();
    let mut t = TestBus::new();
    t.start_registry();
    let controller = runnable_by_anyone(&t, "robot-controller");
    let controller = controller.to_string_lossy().into_owned();
    let mut args = AS_NOBODY.to_vec();
    args.extend([
        controller.as_str(),
        "--name",
        "refused",
        "--status",
        "compromising",
        "--duration-s",
        "120",
    ]);
    let child = t.spawn("setpriv".into(), &args);
    let log = t.dir().join(format!("child-{child}.err"));
    let stderr = || std::fs::read_to_string(&log);
    let refusals = |text: &str| {
        text.lines()
            .filter(|l| l.contains("may not use this bus"))
            .count()
    };
    common::eventually("the refusal logged", || {
        stderr().is_ok_and(|text| refusals(&text) > 0)
    });
    // Long enough for a dozen retries of the back-off, thousands of immediate reconnections.
    std::thread::sleep(Duration::from_secs(3));
    let text = stderr().unwrap();
    let head: String = text.chars().take(3000).collect();
    assert_eq!(refusals(&text), 1, "{} bytes of log:\n{head}", text.len());
    assert!(
        text.contains("refuses this process") && text.contains("group root (gid 0)"),
        "{head}"
    );
    assert!(
        t.inspect(&["get", "/robot/controller/refused", "--json"])
            .status
            .code()
            != Some(0),
        "nothing was created for the refused process"
    );

    // The registry restarted with the process's group: the endpoints bind, the block arrives.
    t.kill_registry();
    t.start_registry_with(&["--group", "65534"]);
    common::eventually("the refused controller's block", || {
        t.inspect(&["get", "/robot/controller/refused", "--json"])
            .status
            .success()
    });
    assert!(t.is_running(child), "the controller kept running");
    let text = stderr().unwrap();
    assert_eq!(refusals(&text), 1, "{text}");
    assert!(text.contains("now accepts this process"), "{text}");
    // Its own output said it was refused, then what it waits for once admitted (no manager).
    common::eventually("robot-controller's wait after the refusal", || {
        t.stdout_of(child).contains("waiting for the robot manager")
    });
    let said = t.stdout_of(child);
    assert!(said.contains("refuses this process"), "{said}");
}

/// Runs `command` and returns its output, failing the test if it is still running after the
/// watchdog (a server that should have refused to start).
fn output_within_watchdog(command: &mut std::process::Command) -> std::process::Output {
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + WATCHDOG;
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "still running after {WATCHDOG:?}; stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn key_file(t: &TestBus, mode: u32) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = t.dir().join("net.key");
    std::fs::write(&path, "a key of more than sixteen bytes\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

/// A key file without --net would be ignored, leaving a network that looks secured: the
/// registry refuses to start instead, before it has created anything.
#[test]
fn a_key_file_without_net_is_refused_at_start() {
    let t = TestBus::new();
    let key = key_file(&t, 0o600);
    let out = output_within_watchdog(
        std::process::Command::new(common::bin("registry-server"))
            .args(["--domain", t.domain.as_str(), "--key-file"])
            .arg(&key),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("--key-file {}", key.display())) && stderr.contains("add --net"),
        "{stderr}"
    );
    assert_eq!(
        t.domain.segment_files().unwrap().len(),
        0,
        "nothing created"
    );
}

/// A key file every user may read gives the key away: refused at start, naming the file, its
/// mode and the chmod that fixes it.
#[test]
fn a_key_file_others_may_read_is_refused_at_start() {
    let t = TestBus::new();
    let key = key_file(&t, 0o644);
    // Should the check ever go, the network stays on this computer: loopback, TTL 0.
    let out = output_within_watchdog(
        std::process::Command::new(common::bin("registry-server"))
            .args(["--domain", t.domain.as_str(), "--net", "--host", "keytest"])
            .args(["--interface", "127.0.0.1", "--ttl", "0", "--key-file"])
            .arg(&key),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let path = key.display();
    assert!(
        stderr.contains(&format!(
            "key file {path} is mode 0644, readable by every user"
        )) && stderr.contains(&format!("chmod 0640 {path}")),
        "{stderr}"
    );
    assert_eq!(
        t.domain.segment_files().unwrap().len(),
        0,
        "nothing created"
    );
}

/// A directory given as the key file is named as such (the mode advice it used to get was
/// followed in vain).
#[test]
fn a_directory_given_as_key_file_is_named_as_such() {
    let t = TestBus::new();
    let dir = t.dir();
    let out = output_within_watchdog(
        std::process::Command::new(common::bin("registry-server"))
            .args(["--domain", t.domain.as_str(), "--net", "--host", "keytest"])
            .args(["--interface", "127.0.0.1", "--ttl", "0", "--key-file"])
            .arg(&dir),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("is not a regular file"), "{stderr}");
}

#[test]
fn an_unknown_group_is_refused_at_start() {
    for (group, says) in [
        ("no-such-group-here", "no group named"),
        ("4294967295", "is no group"),
    ] {
        let out = std::process::Command::new(common::bin("registry-server"))
            .args(["--domain", "unused-grp", "--group", group])
            .output()
            .unwrap();
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{stderr}");
    }
}

/// A registry whose user is not in --group cannot give segments to it: said at start, before
/// anything is made (it failed at the first segment with a bare "fchown: EPERM").
#[test]
fn a_group_the_registry_user_is_not_in_is_refused_at_start() {
    require_root();
    let t = TestBus::new();
    let registry = runnable_by_anyone(&t, "registry-server");
    let out = output_within_watchdog(
        std::process::Command::new("setpriv")
            .args(AS_NOBODY)
            .arg(&registry)
            .args(["--domain", t.domain.as_str(), "--group", "daemon"]),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--group daemon: this user (nobody) is not in that group"),
        "{stderr}"
    );
    assert_eq!(t.domain.segment_files().unwrap().len(), 0, "nothing made");
}

/// Anyone may put a file in /dev/shm under a slot's name before the registry starts. A
/// registry adopted any such file it could open, also one of another user open to all (only
/// warning that it could not give it to its group), or a hard link to a segment of another bus:
/// a user outside the bus's group could then write the slot (their arbiter's command driving
/// this robot; security audit). It adopts neither (nor the segment linked to: both names share
/// one memory); a publication of the name gets a slot of the registry's own making.
#[test]
fn a_segment_another_user_planted_is_never_adopted() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    require_root();
    let mut t = TestBus::new();
    t.start_registry();
    t.leave_value("/orig", 7);
    t.kill_registry();
    // A copy of a good segment, as a user outside the bus's group (nobody) would leave it.
    let planted = t.segment_path("/planted");
    std::fs::copy(t.segment_path("/orig"), &planted).unwrap();
    std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o666)).unwrap();
    // A second name of a segment, which shares its memory.
    std::fs::hard_link(t.segment_path("/orig"), t.segment_path("/linked")).unwrap();
    t.start_registry();
    let bus = t.bus();
    for name in ["/planted", "/linked", "/orig"] {
        let mut sub = bus.subscribe::<u64>(name).unwrap();
        let publication = bus.publish::<u64>(name).unwrap();
        publication.wait_bound(WATCHDOG).unwrap();
        sub.wait_bound(WATCHDOG).unwrap();
        assert!(
            !sub.update().unwrap(),
            "{name}: the planted value was served"
        );
        let meta = std::fs::metadata(t.segment_path(name)).unwrap();
        assert_eq!(
            (meta.uid(), meta.nlink(), meta.mode() & 0o777),
            (0, 1, 0o660),
            "{name}: a segment of the registry's own making"
        );
    }
}

/// A registry run as another user than the one whose segments it adopted (by hand as one user,
/// then as the service's) may not remove them: /dev/shm lets only a file's owner and root
/// remove it. It said it "forgot" a slot whose file stayed (unseen by --keep-unused from then
/// on), and refused the name's next publication with "shm_open(create): EEXIST" (multi-user
/// audit). It says that the file stays, whose it is and what to do.
#[test]
fn a_registry_says_whose_segment_it_may_not_remove() {
    use std::os::unix::fs::PermissionsExt;
    require_root();
    let mut t = TestBus::new();
    let daemon = nix::unistd::Group::from_name("daemon")
        .unwrap()
        .expect("group daemon");
    t.start_registry();
    t.leave_value("/left", 7);
    let path = t.segment_path("/left");
    t.kill_registry();
    // The registry's own directory is made again by the next one.
    let directory = bus::SlotName::parse(bus::directory::DIRECTORY_SLOT).unwrap();
    std::fs::remove_file(format!("/dev/shm{}", t.domain.segment_name(&directory))).unwrap();
    // Another member's segment: group daemon, closed to others, so it is adopted.
    std::os::unix::fs::chown(&path, Some(65534), Some(daemon.gid.as_raw())).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o660)).unwrap();
    let registry = runnable_by_anyone(&t, "registry-server");
    let as_daemon = format!(
        "--reuid={}",
        nix::unistd::User::from_name("daemon").unwrap().unwrap().uid
    );
    let regid = format!("--regid={}", daemon.gid);
    let r = t.spawn(
        "setpriv".into(),
        &[
            &as_daemon,
            &regid,
            "--clear-groups",
            registry.to_str().unwrap(),
            "--group",
            "daemon",
            "--keep-unused",
            "0",
        ],
    );
    common::eventually_or(
        "the slot is forgotten, its file left",
        || t.stderr_of(r),
        || {
            t.stderr_of(r).contains(
                "/left: forgotten, but its segment stays: shm_unlink: EACCES: Permission denied; \
             a file of that name is in the way (owner nobody, group daemon, mode 0660, 1 link(s)), \
             which this registry (user daemon) may not remove",
            )
        },
    );
    assert!(std::path::Path::new(&path).exists());
    // The name's next publication is refused, saying why.
    let bus = t.bus();
    let e = match bus.publish::<u64>("/left") {
        Ok(publication) => publication.wait_bound(WATCHDOG).unwrap_err(),
        Err(e) => e,
    }
    .to_string();
    assert!(
        e.contains("which this registry (user daemon) may not remove") && !e.contains("EEXIST"),
        "{e}"
    );
    std::fs::remove_file(&path).unwrap();
}

/// `doctor` and `clean` run by a member of the bus's group on segments of another user: the
/// stale reason says what this user can see, and `clean` says whose a segment it may not
/// remove is (it said "mapped by no process" after "the maps of N processes are unreadable",
/// and a bare "Operation not permitted").
#[test]
fn clean_by_a_member_says_whose_segment_it_may_not_remove() {
    use std::os::unix::fs::PermissionsExt;
    require_root();
    let mut t = TestBus::new();
    t.start_registry();
    t.leave_value("/members", 1);
    t.kill_registry();
    let daemon = nix::unistd::Group::from_name("daemon")
        .unwrap()
        .expect("group daemon");
    for (_, path) in t.domain.segment_files().unwrap() {
        std::os::unix::fs::chown(&path, None, Some(daemon.gid.as_raw())).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o660)).unwrap();
    }
    let inspect = runnable_by_anyone(&t, "bus-inspect");
    let as_member = |args: &[&str]| {
        output_within_watchdog(
            std::process::Command::new("setpriv")
                .args([
                    "--reuid=65534",
                    &format!("--regid={}", daemon.gid),
                    "--clear-groups",
                ])
                .arg(&inspect)
                .args(["--domain", t.domain.as_str()])
                .args(args),
        )
    };
    let out = as_member(&["doctor"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("mapped by no process this user can see"),
        "{text}"
    );
    let out = as_member(&["clean", "--yes"]);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("it belongs to root; run clean as root"),
        "{text}"
    );
}

/// A user outside the bus's group who opens connection after connection, and keeps each one
/// busy, ties up no more than a few of the registry's threads (each refused connection held a
/// thread and a descriptor for as long as it sent a byte a second, so that a few thousand used
/// up the registry's descriptors); members go on using the bus meanwhile.
#[test]
fn a_user_outside_the_group_cannot_tie_up_the_registry_by_connecting() {
    require_root();
    let mut t = TestBus::new();
    t.start_registry();
    let registry = t.pid(t.registry());
    let threads = || {
        let status = std::fs::read_to_string(format!("/proc/{registry}/status")).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .and_then(|n| n.trim().parse::<usize>().ok())
            .unwrap()
    };
    let before = threads();
    // 200 connections (perl-base is part of every Debian system), each sent a byte every half
    // second for 10 s.
    let flood = "use Socket; $| = 1; $SIG{PIPE} = 'IGNORE'; my @s; for (1..200) { \
                 socket(my $f, AF_UNIX, SOCK_STREAM, 0) or last; \
                 connect($f, pack_sockaddr_un(\"\\0\" . $ARGV[0])) and push @s, $f; } \
                 print scalar(@s), \" connected\\n\"; \
                 for (1..20) { syswrite($_, 'x') for @s; select(undef, undef, undef, 0.5); }";
    let socket = t.domain.registry_socket();
    let mut args = AS_NOBODY.to_vec();
    args.extend(["perl", "-e", flood, &socket]);
    let flooder = t.spawn_with_args_only("setpriv".into(), &args);
    common::eventually("the connections are made", || {
        t.stdout_of(flooder).contains("connected")
    });
    let mut most = 0;
    for _ in 0..20 {
        most = most.max(threads());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        most <= before + 20,
        "{most} registry threads during the flood, {before} before: {}",
        t.stdout_of(flooder)
    );
    let bus = t.bus();
    let mut publication = bus.publish::<u32>("/during/flood").unwrap();
    publication.wait_bound(WATCHDOG).unwrap();
    publication.write(&7).unwrap();
    let mut sub = bus.subscribe::<u32>("/during/flood").unwrap();
    assert!(sub.wait_update(WATCHDOG).unwrap());
    assert_eq!(sub.value(), Some(&7));
    t.kill(flooder);
}

/// A registry that is not root finds a segment of root's open to every user: it may not give it
/// to the bus's group with mode 0660, and so does not adopt it (it adopted it as it was, open
/// to everyone, with a warning).
#[test]
fn a_registry_that_may_not_close_a_segment_to_others_does_not_adopt_it() {
    use std::os::unix::fs::PermissionsExt;
    require_root();
    let mut t = TestBus::new();
    t.start_registry();
    t.leave_value("/open/to/all", 5);
    t.kill_registry();
    let path = t.segment_path("/open/to/all");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let registry = runnable_by_anyone(&t, "registry-server");
    let mut args = AS_NOBODY.to_vec();
    let domain = t.domain.as_str().to_owned();
    args.extend([registry.to_str().unwrap(), "--domain", &domain]);
    let nobody = t.spawn_with_args_only("setpriv".into(), &args);
    common::eventually("the registry as nobody serves", || {
        t.stderr_of(nobody).contains("serving domain")
    });
    let log = t.stderr_of(nobody);
    assert!(
        log.contains("not adopting") && log.contains("open~to~all: it cannot be given"),
        "{log}"
    );
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o666);
}
