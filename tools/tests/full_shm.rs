//! A full /dev/shm is an error, never a crash: segments are reserved when created, so the
//! registry refuses a slot that does not fit (with ENOSPC in its reason) instead of creating it
//! sparse, and the writer is not killed by SIGBUS on its first write. Runs the registry in a
//! mount namespace of its own whose /dev/shm is a small tmpfs (needs root).

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{bin, TestBus, WATCHDOG};

fn require_root() {
    if !nix::unistd::geteuid().is_root() {
        panic!("this test mounts a tmpfs in a mount namespace: run the tests as root");
    }
}

/// `registry-server` in a new mount namespace whose /dev/shm holds `size`.
fn registry_with_small_shm(t: &mut TestBus, size: &str) -> usize {
    let script = format!("mount -t tmpfs -o size={size} tmpfs /dev/shm && exec \"$0\" \"$@\"",);
    let registry = bin("registry-server");
    t.spawn(
        PathBuf::from("unshare"),
        &[
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            &script,
            registry.to_str().unwrap(),
        ],
    )
}

/// `bus-stress` in the registry's mount namespace, writing four values of `size` bytes (one
/// into each of the slot's buffers).
fn write_in(t: &TestBus, registry: usize, name: &str, size: usize) -> std::process::Output {
    let size = size.to_string();
    Command::new("timeout")
        .arg(WATCHDOG.as_secs().to_string())
        .args([
            "nsenter",
            "--target",
            &t.pid(registry).to_string(),
            "--mount",
        ])
        .arg(bin("bus-stress"))
        .args(["--domain", t.domain.as_str(), "write", "--name", name])
        .args(["--min-size", &size, "--max-size", &size, "--count", "4"])
        .output()
        .expect("nsenter (util-linux)")
}

#[test]
fn a_slot_that_does_not_fit_in_dev_shm_is_refused_not_a_crash() {
    require_root();
    let mut t = TestBus::new();
    // 6 MiB: the registry's directory slot (4 MiB) fits, a 2 MB value's slot (four buffers)
    // does not. Created sparse, it was accepted, and the writer died of SIGBUS at its third
    // value.
    let registry = registry_with_small_shm(&mut t, "6m");
    let deadline = Instant::now() + WATCHDOG;
    while bus::protocol::connect(&t.domain).is_err() {
        assert!(t.is_running(registry), "{}", t.stderr_of(registry));
        assert!(Instant::now() < deadline, "registry-server did not come up");
        std::thread::sleep(Duration::from_millis(5));
    }
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

    // A /dev/shm too small for the registry's own directory slot: it says so and exits 1.
    let mut t = TestBus::new();
    let registry = registry_with_small_shm(&mut t, "2m");
    let out = t.finish(registry);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
}
