//! A full /dev/shm is an error, never a crash: segments are reserved when created, so the
//! registry refuses a slot that does not fit (with ENOSPC in its reason) instead of creating it
//! sparse, and the writer is not killed by SIGBUS on its first write. Runs the registry in a
//! mount namespace of its own whose /dev/shm is a small tmpfs (needs root).

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{bin, eventually, TestBus, WATCHDOG};

fn require_root() {
    if !nix::unistd::geteuid().is_root() {
        panic!("this test mounts a tmpfs in a mount namespace: run the tests as root");
    }
}

/// `registry-server` in a new mount namespace whose /dev/shm holds `size`.
fn registry_with_small_shm(t: &mut TestBus, size: &str) -> usize {
    registry_with_small_shm_after(t, size, "true")
}

/// `registry-server` in a new mount namespace whose /dev/shm holds `size`, started after the
/// shell command `before` has run there.
fn registry_with_small_shm_after(t: &mut TestBus, size: &str, before: &str) -> usize {
    registry_in_namespaces(t, &["--mount"], size, before, "")
}

/// `registry-server ARGS` in new namespaces (`unshare` options, a mount namespace among them)
/// whose /dev/shm holds `size`, started after the shell command `before` has run there.
fn registry_in_namespaces(
    t: &mut TestBus,
    namespaces: &[&str],
    size: &str,
    before: &str,
    args: &str,
) -> usize {
    let script = format!(
        "mount -t tmpfs -o size={size} tmpfs /dev/shm && {before} && exec \"$0\" {args} \"$@\""
    );
    let registry = bin("registry-server");
    let mut all = namespaces.to_vec();
    all.extend(["--propagation", "private", "sh", "-c", &script]);
    all.push(registry.to_str().unwrap());
    t.spawn(PathBuf::from("unshare"), &all)
}

/// `program args` in the registry's mount namespace (its /dev/shm), under the watchdog.
fn run_in(t: &TestBus, registry: usize, program: &str, args: &[&str]) -> std::process::Output {
    run_in_namespaces(t, registry, &["--mount"], program, args)
}

/// `program args` in the registry's `namespaces` (`nsenter` options), under the watchdog.
fn run_in_namespaces(
    t: &TestBus,
    registry: usize,
    namespaces: &[&str],
    program: &str,
    args: &[&str],
) -> std::process::Output {
    Command::new("timeout")
        .arg(WATCHDOG.as_secs().to_string())
        .args(["nsenter", "--target", &t.pid(registry).to_string()])
        .args(namespaces)
        .arg(program)
        .args(args)
        .output()
        .expect("nsenter (util-linux)")
}

/// Starts the workspace's `program` with `args` in the registry's mount namespace (its
/// /dev/shm), as a child of the test.
fn spawn_in(t: &mut TestBus, registry: usize, program: &str, args: &[&str]) -> usize {
    let pid = t.pid(registry).to_string();
    let program = bin(program);
    let mut all = vec!["--target", &pid, "--mount", program.to_str().unwrap()];
    all.extend_from_slice(args);
    t.spawn_with_args_only(PathBuf::from("nsenter"), &all)
}

/// `bus-stress` in the registry's mount namespace, writing four values of `size` bytes (one
/// into each of the slot's buffers).
fn write_in(t: &TestBus, registry: usize, name: &str, size: usize) -> std::process::Output {
    let size = size.to_string();
    let bus_stress = bin("bus-stress");
    let domain = t.domain.as_str();
    let args = [
        "--domain",
        domain,
        "write",
        "--name",
        name,
        "--min-size",
        &size,
        "--max-size",
        &size,
        "--count",
        "4",
    ];
    run_in(t, registry, bus_stress.to_str().unwrap(), &args)
}

/// The registry's directory as `bus-inspect get --json` prints it in its namespace, if it
/// reads.
fn directory_in(t: &TestBus, registry: usize) -> Option<String> {
    let inspect = bin("bus-inspect");
    let out = run_in(
        t,
        registry,
        inspect.to_str().unwrap(),
        &[
            "--domain",
            t.domain.as_str(),
            "get",
            "/baton/registry/directory",
            "--json",
        ],
    );
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn wait_for_registry(t: &mut TestBus, registry: usize) {
    let deadline = Instant::now() + WATCHDOG;
    while bus::protocol::connect(&t.domain).is_err() {
        assert!(t.is_running(registry), "{}", t.stderr_of(registry));
        assert!(Instant::now() < deadline, "registry-server did not come up");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The registry's own directory slot, damaged while /dev/shm has no room to make it anew, is
/// made again once there is room: nobody registers to publish it, and it used to stay gone
/// (`bus-inspect get` of it failed, its subscribers waited) until the registry restarted.
#[test]
fn the_registrys_own_slot_is_made_again_once_dev_shm_has_room() {
    require_root();
    let mut t = TestBus::new();
    // 10 MiB: the directory slot (4 MiB) and a 4 MiB file leave no room for a second
    // directory slot.
    let registry = registry_with_small_shm(&mut t, "10m");
    wait_for_registry(&mut t, registry);
    assert!(directory_in(&t, registry).is_some());
    let filler = "/dev/shm/filler";
    let out = run_in(
        &t,
        registry,
        "dd",
        &["if=/dev/zero", &format!("of={filler}"), "bs=1M", "count=4"],
    );
    assert!(out.status.success(), "{out:?}");
    // Moved aside (still mapped by the registry, so its room is still taken): the registry
    // finds the slot gone and cannot make it anew.
    let directory = t.segment_path("/baton/registry/directory");
    let aside = format!("{directory}.aside");
    let out = run_in(&t, registry, "mv", &[&directory, &aside]);
    assert!(out.status.success(), "{out:?}");
    eventually(
        "the registry says it cannot make the directory anew",
        || t.stderr_of(registry).contains("cannot make it anew"),
    );
    assert!(directory_in(&t, registry).is_none());
    let out = run_in(&t, registry, "rm", &[filler]);
    assert!(out.status.success(), "{out:?}");
    eventually("the directory is made again", || {
        directory_in(&t, registry).is_some()
    });
    assert!(t.stderr_of(registry).contains("made anew at last"));
    // And it is the registry's directory again: it lists what registers now.
    let out = write_in(&t, registry, "/full/after", 64);
    assert!(out.status.success(), "{out:?}");
    eventually("the directory lists a new publication", || {
        directory_in(&t, registry).is_some_and(|d| d.contains("/full/after"))
    });
}

#[test]
fn a_slot_that_does_not_fit_in_dev_shm_is_refused_not_a_crash() {
    require_root();
    let mut t = TestBus::new();
    // 6 MiB: the registry's directory slot (4 MiB) fits, a 2 MB value's slot (four buffers)
    // does not. Created sparse, it was accepted, and the writer died of SIGBUS at its third
    // value.
    let registry = registry_with_small_shm(&mut t, "6m");
    wait_for_registry(&mut t, registry);
    let out = write_in(&t, registry, "/full/big", 2_000_000);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        err.contains("registry refused /full/big") && err.contains("No space left on device"),
        "{err}"
    );
    assert!(err.contains("is /dev/shm full?"), "{err}");
    // The registry lives on and still creates what fits.
    let out = write_in(&t, registry, "/full/small", 64);
    assert!(out.status.success(), "{out:?}");
    assert!(t.is_running(registry));
}

/// A /dev/shm without room for the registry's own directory slot as the registry starts (a
/// restart on a full /dev/shm, its directory removed): it used to exit, leaving the bus without
/// a registry; it serves the bus without the directory, says so, and makes the directory once
/// there is room.
#[test]
fn a_registry_without_room_for_its_directory_serves_the_bus_and_makes_it_later() {
    require_root();
    let mut t = TestBus::new();
    // 6 MiB less 3 MiB taken: no room for the directory's 4 MiB.
    let registry = registry_with_small_shm_after(
        &mut t,
        "6m",
        "dd if=/dev/zero of=/dev/shm/filler bs=1M count=3 2>/dev/null",
    );
    wait_for_registry(&mut t, registry);
    eventually("the registry says it serves without the directory", || {
        t.stderr_of(registry)
            .contains("serving the bus without /baton/registry/directory")
    });
    assert!(t.stderr_of(registry).contains("No space left on device"));
    let out = write_in(&t, registry, "/full/without", 64);
    assert!(out.status.success(), "{out:?}");
    assert!(directory_in(&t, registry).is_none());
    let out = run_in(&t, registry, "rm", &["/dev/shm/filler"]);
    assert!(out.status.success(), "{out:?}");
    eventually(
        "the directory is made, and lists what was published",
        || directory_in(&t, registry).is_some_and(|d| d.contains("/full/without")),
    );
    assert!(t.stderr_of(registry).contains("made anew at last"));
}

/// The directory removed from a full /dev/shm is made anew at once when its own room is
/// enough: the registry held a second mapping of it, which kept that room taken, and it could
/// not be made anew even once everything else was gone.
#[test]
fn the_directory_removed_from_a_full_dev_shm_is_made_anew_in_its_own_room() {
    require_root();
    let mut t = TestBus::new();
    // 9 MiB: the directory (4 MiB) and a 4 MiB file leave less than 1 MiB.
    let registry = registry_with_small_shm(&mut t, "9m");
    wait_for_registry(&mut t, registry);
    let out = run_in(
        &t,
        registry,
        "dd",
        &["if=/dev/zero", "of=/dev/shm/filler", "bs=1M", "count=4"],
    );
    assert!(out.status.success(), "{out:?}");
    let directory = t.segment_path("/baton/registry/directory");
    let out = run_in(&t, registry, "rm", &[&directory]);
    assert!(out.status.success(), "{out:?}");
    eventually("the directory is made anew", || {
        t.stderr_of(registry).contains("making it anew") && directory_in(&t, registry).is_some()
    });
    assert!(
        !t.stderr_of(registry).contains("cannot make it anew"),
        "{}",
        t.stderr_of(registry)
    );
}

/// A publication that asks for a larger slot than the one a gone publisher's value is kept in
/// replaces that slot; refused for want of room, it took the slot and the value with it.
#[test]
fn a_larger_publication_refused_for_room_leaves_the_kept_value() {
    require_root();
    let mut t = TestBus::new();
    let registry = registry_with_small_shm(&mut t, "10m");
    wait_for_registry(&mut t, registry);
    let out = write_in(&t, registry, "/full/kept", 1000);
    assert!(out.status.success(), "{out:?}");
    // About 6 MiB free less 5 MiB: no room for four buffers of 400 kB.
    let out = run_in(
        &t,
        registry,
        "dd",
        &["if=/dev/zero", "of=/dev/shm/filler", "bs=1M", "count=5"],
    );
    assert!(out.status.success(), "{out:?}");
    let out = write_in(&t, registry, "/full/kept", 400_000);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("No space left on device"),
        "{out:?}"
    );
    let inspect = bin("bus-inspect");
    let args = [
        "--domain",
        t.domain.as_str(),
        "list",
        "/full/kept",
        "--json",
    ];
    let out = run_in(&t, registry, inspect.to_str().unwrap(), &args);
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(listed.contains("\"sequence\":4"), "{out:?}");
    assert!(
        t.stderr_of(registry)
            .contains("/full/kept: kept as it was, with its value"),
        "{}",
        t.stderr_of(registry)
    );
}

/// A slot damaged while /dev/shm has no room to make it anew: its publication and its
/// subscription are told and cannot follow yet. The publication's writes are kept meanwhile,
/// as before a registry runs; once there is room the registry makes the slot at its next
/// check (nobody registers anew to make it), the value written meanwhile goes in, and the
/// subscription reads it there. They used to stay on the old memory for good: the writes
/// failed (`Replaced`), and the subscription never read another value.
#[test]
fn a_slot_that_could_not_be_made_anew_is_made_once_there_is_room_and_followed() {
    require_root();
    let mut t = TestBus::new();
    const NAME: &str = "/full/anew";
    // 10 MiB: the directory (4 MiB), the slot (four buffers of 400 KB: 1.6 MB) and a 3 MiB
    // file leave no room for a second copy of the slot.
    let registry = registry_with_small_shm(&mut t, "10m");
    wait_for_registry(&mut t, registry);
    let domain = t.domain.to_string();
    // Values 1, 2 and 3, two seconds apart, then the publication stays: the third is written
    // while the slot cannot be made (the test waits for it before it makes room), so only the
    // new slot can hold it, and the reader ends only once it read it.
    let writer = spawn_in(
        &mut t,
        registry,
        "bus-stress",
        &[
            "--domain",
            &domain,
            "write",
            "--name",
            NAME,
            "--min-size",
            "400000",
            "--max-size",
            "400000",
            "--count",
            "3",
            "--interval-ms",
            "2000",
            "--linger",
            "60",
        ],
    );
    let reader = spawn_in(
        &mut t,
        registry,
        "bus-stress",
        &[
            "--domain",
            &domain,
            "read",
            "--name",
            NAME,
            "--wait",
            "--seconds",
            "60",
            "--until",
            "3",
        ],
    );
    let info = |t: &TestBus| {
        let inspect = bin("bus-inspect");
        let out = run_in(
            t,
            registry,
            inspect.to_str().unwrap(),
            &["--domain", t.domain.as_str(), "info", NAME],
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    eventually("the writer writes and the reader subscribes", || {
        let info = info(&t);
        info.contains("value       sequence")
            && info
                .lines()
                .any(|l| l.starts_with("subscribers") && !l.contains("none"))
    });
    let out = run_in(
        &t,
        registry,
        "dd",
        &["if=/dev/zero", "of=/dev/shm/filler", "bs=1M", "count=3"],
    );
    assert!(out.status.success(), "{out:?}");
    // Moved aside (still mapped, so its room is still taken): found gone, and no room.
    let segment = t.segment_path(NAME);
    let out = run_in(&t, registry, "mv", &[&segment, &format!("{segment}.aside")]);
    assert!(out.status.success(), "{out:?}");
    eventually("the registry says it cannot make the slot anew", || {
        t.stderr_of(registry).contains("cannot make it anew")
    });
    eventually("the publication waits for the new slot", || {
        t.stderr_of(writer)
            .contains("could not make the new one yet")
    });
    assert!(
        !t.stdout_of(writer).contains("\"written\":3"),
        "the third value came before the slot was damaged: the test machine was too slow"
    );
    eventually("the third value is written", || {
        t.stdout_of(writer).contains("\"written\":3")
    });
    assert!(t.is_running(reader), "{}", t.stdout_of(reader));
    let out = run_in(&t, registry, "rm", &["/dev/shm/filler"]);
    assert!(out.status.success(), "{out:?}");
    eventually("the slot is made anew at last", || {
        t.stderr_of(registry)
            .contains(&format!("{NAME}: made anew at last"))
    });
    let deadline = Instant::now() + WATCHDOG;
    while t.is_running(reader) {
        assert!(
            Instant::now() < deadline,
            "the reader never read the third value in the new slot: {}",
            info(&t)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let summary = t.stdout_of(reader);
    assert!(
        summary.contains("\"bad\":1,") && summary.contains("\"last\":3,"),
        "{summary}"
    );
    assert_eq!(
        t.stderr_of(reader)
            .matches("bus-stress: read error: /full/anew was replaced by the registry")
            .count(),
        1,
        "{}",
        t.stderr_of(reader)
    );
    assert!(t.is_running(writer), "{}", t.stderr_of(writer));
}

/// `registry-server --net --host fullnet` in mount and network namespaces of its own: its
/// /dev/shm holds `size`, and one end of a veth pair is its network (multicast needs an
/// interface that is not loopback). Started after the shell command `before`. Its socket is
/// in that network namespace: reach it with `run_in_namespaces(.., &["--mount", "--net"], ..)`.
fn networked_registry_with_small_shm_after(t: &mut TestBus, size: &str, before: &str) -> usize {
    let network = format!(
        "ip link add v0 type veth peer name v1 && ip addr add 10.77.0.1/24 dev v0 && ip link set \
         v1 up && ip link set v0 up && {before}"
    );
    registry_in_namespaces(
        t,
        &["--mount", "--net"],
        size,
        &network,
        "--net --interface v0 --host fullnet",
    )
}

/// With `--net`, a /dev/shm without room for the network statistics slot (its segment missing,
/// as after a first start with `--net` or an `rm`) is no reason to stop: the registry used to
/// exit, and under systemd to be restarted every second with the bus down. It reflects and
/// serves, says so, and makes the statistics slot once there is room.
#[test]
fn a_registry_without_room_for_its_network_statistics_serves_and_makes_them_later() {
    require_root();
    let mut t = TestBus::new();
    // 5 MiB less 900 KiB: room for the directory (4 MiB and a page), not for the statistics
    // slot (260 KiB) as well.
    let registry = networked_registry_with_small_shm_after(
        &mut t,
        "5m",
        "dd if=/dev/zero of=/dev/shm/filler bs=1K count=900 2>/dev/null",
    );
    eventually(
        "the registry says it reflects without its statistics",
        || {
            assert!(t.is_running(registry), "{}", t.stderr_of(registry));
            t.stderr_of(registry)
                .contains("reflecting without /baton/registry/fullnet/net")
        },
    );
    assert!(t
        .stderr_of(registry)
        .contains("reflecting as host 'fullnet'"));
    let stats = |t: &TestBus| {
        let inspect = bin("bus-inspect");
        let domain = t.domain.as_str();
        let args = [
            "--domain",
            domain,
            "get",
            "/baton/registry/fullnet/net",
            "--json",
        ];
        let out = run_in_namespaces(
            t,
            registry,
            &["--mount", "--net"],
            inspect.to_str().unwrap(),
            &args,
        );
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let out = run_in(&t, registry, "rm", &["/dev/shm/filler"]);
    assert!(out.status.success(), "{out:?}");
    eventually("the statistics are made and written", || {
        stats(&t).is_some_and(|s| s.contains("\"host\":\"fullnet\""))
    });
    assert!(t.is_running(registry));
}
