//! Services whose stderr breaks under them (a log pipe whose reader ended, the terminal they
//! were started from closed): logging used to panic the thread that logged, so the registry
//! stopped at its first log line (or lost its network threads) and SIGTERM no longer stopped
//! an arbiter, which then never sent its safe command. They now lose the log line only.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use arbiter::protocol::{command_slot, ResourceCommand};
use common::{bin, eventually, TestBus, WATCHDOG};

/// A child whose stderr is a pipe with no reader left.
struct Orphaned(Child);

impl Orphaned {
    fn start(t: &TestBus, program: &str, args: &[&str]) -> Orphaned {
        let mut child = Command::new(bin(program))
            .args(args)
            .args(["--domain", t.domain.as_str()])
            .env("RUST_LOG", "debug")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        drop(child.stderr.take());
        Orphaned(child)
    }

    /// SIGTERM, then the exit status (watchdog-bounded).
    fn stop(&mut self) -> std::process::ExitStatus {
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
        let deadline = Instant::now() + WATCHDOG;
        loop {
            if let Some(status) = self.0.try_wait().expect("try_wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "SIGTERM did not stop it");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Orphaned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_broken_stderr_neither_ends_a_service_nor_keeps_it_from_stopping() {
    let t = TestBus::new();
    let mut registry = Orphaned::start(&t, "registry-server", &[]);
    eventually("the registry serves", || {
        bus::protocol::connect(&t.domain).is_ok()
    });
    let config = t.dir().join("arm.toml");
    std::fs::write(
        &config,
        "name = \"arm\"\n[[resources]]\nname = \"wheel\"\nkind = \"velocity\"\n",
    )
    .unwrap();
    let mut arbiter = Orphaned::start(&t, "arbiter", &["--config", config.to_str().unwrap()]);
    let bus = t.bus();
    let mut command = bus
        .subscribe::<ResourceCommand>(&command_slot("arm"))
        .expect("subscribe");
    eventually("the arbiter publishes its command", || {
        command.update().is_ok() && command.value().is_some()
    });
    let cycle = command.value().map(|c| c.cycle).unwrap_or_default();
    let status = arbiter.stop();
    assert!(status.success(), "arbiter: {status}");
    // Its last act: the safe command, published as it stopped.
    eventually("the arbiter's last command", || {
        command.update().is_ok() && command.value().is_some_and(|c| c.cycle > cycle)
    });
    assert_eq!(
        command.value().map(|c| c.setpoints.get("wheel").copied()),
        Some(Some(0.0))
    );
    let status = registry.stop();
    assert!(status.success(), "registry-server: {status}");
}
