//! Segments damaged under running processes by another process of the bus group: cut short
//! (`truncate`), which made the kernel kill every process touching the lost pages with SIGBUS,
//! and removed, which left new endpoints unable to bind. Nothing dies; the registry makes the
//! slot anew: the processes that subscribed to the old one are told (`BusError::Replaced`), and
//! its writer goes on in the new one.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use common::{eventually, TestBus};

const NAME: &str = "/damaged/value";

/// Cuts or grows the segment file at `path` to `len` bytes, as another process of the group
/// may.
fn set_size(path: &str, len: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|f| f.set_len(len))
        .expect("resize the segment");
}

fn size_of(path: &str) -> Option<u64> {
    std::fs::metadata(path).ok().map(|m| m.len())
}

/// A writer, a waiting reader, a polling reader and `bus-inspect watch` on one slot; returns
/// their child indices.
fn start_users(t: &mut TestBus) -> [usize; 4] {
    let writer = t.spawn_stress(&[
        "write",
        "--name",
        NAME,
        "--min-size",
        "8",
        "--max-size",
        "60000",
        "--interval-ms",
        "1",
        "--seconds",
        "30",
    ]);
    let waiting = t.spawn_stress(&["read", "--name", NAME, "--seconds", "30", "--wait"]);
    let polling = t.spawn_stress(&["read", "--name", NAME, "--seconds", "30"]);
    let watch = t.spawn_bin("bus-inspect", &["watch", NAME]);
    eventually("the value is written and watched", || {
        t.stdout_of(watch).contains("sequence")
    });
    [writer, waiting, polling, watch]
}

/// A subscription of the test's own, held while the readers end one by one on being told of the
/// new slot: a slot made anew may hold no value (a cut segment leaves none to carry over), and
/// one that never held a value goes with its last endpoint (nothing to keep), which would race
/// the test's look at the new file.
fn hold(t: &TestBus) -> (bus::Bus, bus::Subscription<tools::stress::Checked>) {
    let bus = t.bus();
    let held = bus.subscribe(NAME).expect("subscribe");
    (bus, held)
}

/// A registry, the users of `NAME` (`start_users`) and the test's own hold on its slot
/// (`hold`): the start of the tests of a slot damaged under its users.
fn held_by_users_and_the_test() -> (
    TestBus,
    [usize; 4],
    (bus::Bus, bus::Subscription<tools::stress::Checked>),
) {
    let mut t = TestBus::new();
    t.start_registry();
    let users = start_users(&mut t);
    let held = hold(&t);
    (t, users, held)
}

/// The writer of the damaged slot goes on in the slot made anew, and says so; a new
/// subscription reads its values there, from it (alive, its pid), one after another.
fn the_writer_goes_on_in_the_new_slot(t: &mut TestBus, writer: usize) {
    eventually("the writer says it writes into the new slot", || {
        t.stderr_of(writer)
            .contains("this publication writes into the new one")
    });
    let bus = t.bus();
    let mut sub = bus
        .subscribe::<tools::stress::Checked>(NAME)
        .expect("subscribe");
    let pid = t.pid(writer) as u32;
    let mut first = None;
    eventually(
        "values of the same writer, one after another, on the new slot",
        || {
            let _ = sub.update();
            let Some(meta) = sub.meta() else { return false };
            let theirs = meta.writer_pid == pid && meta.writer == bus::WriterState::Alive;
            theirs && *first.get_or_insert(meta.sequence) < meta.sequence
        },
    );
    assert!(t.is_running(writer), "{}", t.stderr_of(writer));
}

/// Whether the child died of SIGBUS (still running, or exited otherwise, is fine here).
fn killed_by_sigbus(t: &mut TestBus, child: usize) -> bool {
    if t.is_running(child) {
        return false;
    }
    t.finish(child).status.signal() == Some(libc::SIGBUS)
}

#[test]
fn a_segment_cut_short_ends_no_process_and_is_made_anew() {
    let (mut t, users, _held) = held_by_users_and_the_test();
    let path = t.segment_path(NAME);
    let full = size_of(&path).expect("segment exists");
    set_size(&path, 0);
    // The writer writes every millisecond and the readers read what it writes: all of them
    // touch the lost pages at once, the registry at its next sweep.
    std::thread::sleep(Duration::from_millis(1500));
    let registry = t.registry();
    assert!(
        t.is_running(registry),
        "the registry ended when a segment it maps was cut short"
    );
    for (child, what) in
        users
            .into_iter()
            .zip(["writer", "waiting reader", "polling reader", "watch"])
    {
        assert!(
            !killed_by_sigbus(&mut t, child),
            "the {what} died of SIGBUS: {}",
            t.stderr_of(child)
        );
    }
    // The registry found the damage and made the slot anew, full size.
    eventually("the registry makes the slot anew", || {
        size_of(&path) == Some(full)
    });
    // The writer goes on in the new slot, new endpoints meet it there, and `watch` follows
    // it, saying so.
    the_writer_goes_on_in_the_new_slot(&mut t, users[0]);
    eventually("watch says the slot was made anew", || {
        t.stderr_of(users[3])
            .contains("the registry made the slot anew")
    });
}

/// A SIGBUS another process sends is no fault, whatever address its siginfo names (sigqueue
/// lets the sender write one): the handler took one naming an address in a bus mapping for a
/// lost page, and put a private zeroed page over the live one. Here the writer's header page:
/// its values no longer reached anyone. It is ignored now: the values keep coming, and a page
/// lost later is still answered (passed on, the signal put the default action back, and the
/// next cut segment ended the process).
#[test]
fn a_sigbus_sent_naming_a_mapped_address_is_no_lost_page() {
    let mut t = TestBus::new();
    t.start_registry();
    let users = start_users(&mut t);
    let (_bus, mut held) = hold(&t);
    let writer = t.pid(users[0]);
    let segment = t.segment_path(NAME);
    let maps = std::fs::read_to_string(format!("/proc/{writer}/maps")).unwrap();
    let start = maps
        .lines()
        .find(|l| l.ends_with(&segment))
        .and_then(|l| l.split('-').next())
        .map(|a| u64::from_str_radix(a, 16).unwrap())
        .expect("the writer maps the slot");
    // siginfo as the kernel lays it out on 64-bit Linux: signo, errno, code, then the fault's
    // address at byte 16. SI_QUEUE: what sigqueue sends.
    let mut info = [0u64; 16];
    info[0] = libc::SIGBUS as u64;
    info[1] = libc::SI_QUEUE as u32 as u64;
    info[2] = start;
    // SAFETY: `info` is a 128-byte siginfo the kernel copies in; nothing else is touched.
    let sent = unsafe {
        libc::syscall(
            libc::SYS_rt_sigqueueinfo,
            writer,
            libc::SIGBUS,
            info.as_ptr(),
        )
    };
    assert_eq!(sent, 0, "{}", std::io::Error::last_os_error());
    std::thread::sleep(Duration::from_millis(100));
    held.update().unwrap();
    let before = held.meta().expect("a value").sequence;
    eventually("the writer's values keep coming", || {
        held.update().is_ok() && held.meta().is_some_and(|m| m.sequence > before + 50)
    });
    assert!(t.is_running(users[0]), "{}", t.stderr_of(users[0]));
    set_size(&segment, 0);
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !killed_by_sigbus(&mut t, users[0]),
        "{}",
        t.stderr_of(users[0])
    );
}

/// A segment cut short and grown back to its size at once (a `cp` over it does the same: it
/// truncates, then writes): its size and header, which the registry checks, look whole again,
/// while the processes that touched the lost pages in between hold private zeroes there,
/// shared with nobody (the readers found every value inconsistent and the writer wrote on
/// alone, for good; shared-memory soak). Such a process spoils the file's header, and the
/// registry makes the slot anew and tells every user.
#[test]
fn a_segment_cut_short_and_grown_back_is_made_anew() {
    let (mut t, users, _held) = held_by_users_and_the_test();
    let path = t.segment_path(NAME);
    let full = size_of(&path).expect("segment exists");
    set_size(&path, 4096);
    std::thread::sleep(Duration::from_millis(50));
    set_size(&path, full);
    the_writer_goes_on_in_the_new_slot(&mut t, users[0]);
}

/// A symbolic link put in place of a segment: segments are opened without following links,
/// so every new endpoint failed (ELOOP) while the registry took the name for its file (it
/// could not look at it); it is another file, and the slot is made anew.
#[test]
fn a_symbolic_link_in_place_of_a_segment_is_made_anew() {
    let mut t = TestBus::new();
    t.start_registry();
    let users = start_users(&mut t);
    let path = t.segment_path(NAME);
    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink("/dev/null", &path).unwrap();
    the_writer_goes_on_in_the_new_slot(&mut t, users[0]);
}

#[test]
fn a_removed_segment_is_made_anew_so_that_new_endpoints_bind() {
    let (mut t, users, _held) = held_by_users_and_the_test();
    let path = t.segment_path(NAME);
    std::fs::remove_file(&path).expect("remove the segment");
    eventually("the registry makes the slot anew", || {
        size_of(&path).is_some()
    });
    // Before, a new endpoint of the name failed to bind (shm_open: ENOENT) until the registry
    // restarted.
    the_writer_goes_on_in_the_new_slot(&mut t, users[0]);
    let registry = t.registry();
    assert!(t.is_running(registry));
}

/// The schema's length in the header overwritten: `Slot::open` refuses the slot, so no new
/// endpoint could bind, and the registry's check of the header used to pass over this field, so
/// the slot stayed broken until the registry restarted.
#[test]
fn a_slot_whose_schema_length_is_overwritten_is_made_anew() {
    a_slot_overwritten_is_made_anew(52, &u32::MAX.to_le_bytes());
}

/// The same with the stored schema itself overwritten (it follows the 1024-byte header).
#[test]
fn a_slot_whose_stored_schema_is_overwritten_is_made_anew() {
    a_slot_overwritten_is_made_anew(1024 + 3, b"garbage!");
}

fn a_slot_overwritten_is_made_anew(at: usize, bytes: &[u8]) {
    let (mut t, users, _held) = held_by_users_and_the_test();
    t.overwrite_segment(NAME, at, bytes);
    the_writer_goes_on_in_the_new_slot(&mut t, users[0]);
}

/// Waiters asleep on a slot when its segment is cut short, with its writer idle: the wakes of
/// the replacement went to the private page put where the shared one was, never to the page
/// they slept on, so a `wait_update` learnt of it only at its timeout (never without one).
#[test]
fn waiters_asleep_on_a_segment_cut_short_learn_that_it_was_made_anew() {
    let mut t = TestBus::new();
    t.start_registry();
    // One value, then an idle writer: only the news of the replacement can wake the waiters.
    t.spawn_stress(&[
        "write",
        "--name",
        NAME,
        "--count",
        "1",
        "--max-size",
        "64",
        "--linger",
        "60",
    ]);
    let group_waiter = t.spawn_stress(&["read", "--name", NAME, "--seconds", "60", "--wait"]);
    let bus = t.bus();
    let mut sub = bus
        .subscribe::<tools::stress::Checked>(NAME)
        .expect("subscribe");
    eventually("the value", || {
        sub.update().is_ok() && sub.value().is_some()
    });
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let woke = sub.wait_update(Duration::from_secs(60));
        let _ = tx.send(woke.map_err(|e| e.to_string()));
    });
    std::thread::sleep(Duration::from_millis(300));
    set_size(&t.segment_path(NAME), 0);
    let woke = rx
        .recv_timeout(common::WATCHDOG)
        .expect("wait_update returned before its timeout");
    assert!(
        woke.as_ref()
            .is_err_and(|e| e.contains("replaced by the registry")),
        "{woke:?}"
    );
    eventually("the group's waiter is told", || {
        t.stderr_of(group_waiter)
            .contains("replaced by the registry")
    });
}

/// A segment grown under the slot: `Slot::open` refuses a file whose size is not its header's,
/// so new endpoints could not bind, and the registry saw nothing wrong. (Held by the test, as
/// in the tests above: without it, the slot made anew, no value in it yet, went with the last
/// of the users told, before the test looked at its file; once in 4 runs beside the others.)
#[test]
fn a_segment_grown_is_made_anew_so_that_new_endpoints_bind() {
    let (mut t, users, _held) = held_by_users_and_the_test();
    let path = t.segment_path(NAME);
    let full = size_of(&path).expect("segment exists");
    set_size(&path, full + 8192);
    eventually("the registry makes the slot anew", || {
        size_of(&path) == Some(full)
    });
    the_writer_goes_on_in_the_new_slot(&mut t, users[0]);
}

/// `NAME` holds one value, its publication dropped.
fn one_value_left(t: &TestBus) {
    t.leave_value(NAME, 1);
}

/// A slot nobody uses any more, removed (by `bus-inspect clean`, or by hand): forgotten, not
/// made anew empty under the hand that removed it.
#[test]
fn an_unused_slot_removed_is_forgotten_not_made_anew() {
    let mut t = TestBus::new();
    t.start_registry();
    one_value_left(&t);
    let path = t.segment_path(NAME);
    eventually("the writer is gone", || {
        let out = t.inspect(&["list", NAME, "--json"]);
        String::from_utf8_lossy(&out.stdout).contains("\"Gone\"")
    });
    std::fs::remove_file(&path).expect("remove the segment");
    // Two sweeps and more: still gone.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(size_of(&path), None, "made anew though nobody uses it");
}

/// Anyone who can write /dev/shm can put a FIFO under a segment's name. Opening a FIFO for
/// reading waits for a writer, so every `bus-inspect` command, the one that cleans up included,
/// used to hang on it.
#[test]
fn a_fifo_in_place_of_a_segment_is_reported_and_cleaned_up_not_waited_on() {
    let mut t = TestBus::new();
    let path = t.segment_path("/stress/a");
    nix::unistd::mkfifo(
        path.as_str(),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .expect("mkfifo");
    let domain = t.domain.as_str().to_owned();
    let run = |t: &mut TestBus, args: &[&str]| {
        let mut all = vec!["--domain", domain.as_str()];
        all.extend_from_slice(args);
        // Watchdog-bounded: a hang fails the test instead of stalling it.
        let child = t.spawn_bin("bus-inspect", &all);
        let out = t.finish(child);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (_, list) = run(&mut t, &["list"]);
    assert!(list.contains("not a regular file"), "{list}");
    let (code, get) = run(&mut t, &["get", "/stress/a", "--json"]);
    assert_eq!(code, Some(1), "{get}");
    assert!(get.contains("not a regular file"), "{get}");
    // `doctor` fails on it, as `list` does (it used to warn and exit 0).
    let child = t.spawn_bin("bus-inspect", &["--domain", domain.as_str(), "doctor"]);
    let out = t.finish(child);
    let doctor = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{doctor}");
    assert!(
        doctor.lines().any(|l| l.starts_with("FAIL")
            && l.contains("segments")
            && l.contains("not a regular file")),
        "{doctor}"
    );
    let (code, clean) = run(&mut t, &["clean", "--yes"]);
    assert_eq!(code, Some(0), "{clean}");
    assert!(!std::path::Path::new(&path).exists(), "{clean}");
}

/// A segment the running registry cannot read (left by a build of another layout version, or
/// damaged while no registry ran) is not adopted, and nothing uses it: `doctor` failed on it
/// but called nothing stale, and `clean` left it while the registry ran (upgrade audit).
#[test]
fn a_segment_the_registry_could_not_adopt_is_stale_and_cleaned() {
    let mut t = TestBus::new();
    t.start_registry();
    one_value_left(&t);
    t.kill_registry();
    // Layout version 1 (this build reads 3): the word after the magic.
    t.overwrite_segment(NAME, 8, &1u32.to_le_bytes());
    t.start_registry();
    let out = t.inspect(&["doctor"]);
    let doctor = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        doctor
            .lines()
            .any(|l| l.starts_with("WARN") && l.contains("stale") && l.contains(NAME)),
        "{doctor}"
    );
    let out = t.inspect(&["clean", "--yes"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(size_of(&t.segment_path(NAME)), None, "{out:?}");
}

/// `hz` over a window in which the slot is made anew (its writer going on in the new one): it
/// once said "no value was written during the window" of a writer that stopped there, the
/// writes before the damage dropped without a word. It measures from the new slot on, and says
/// how many writes came before.
#[test]
fn hz_says_what_was_written_before_the_slot_was_made_anew() {
    let mut t = TestBus::new();
    t.start_registry();
    let writer = t.spawn_stress(&["write", "--name", NAME, "--interval-ms", "5"]);
    let path = t.segment_path(NAME);
    eventually("the writer writes", || size_of(&path).is_some());
    // A subscriber keeps the name in use once the writer has gone: the slot made anew is not
    // forgotten (removed as unused) before a loaded machine lets hz look at it.
    let bus = t.bus();
    let _kept_in_use = bus.subscribe::<tools::stress::Checked>(NAME).unwrap();
    let hz = t.spawn(
        common::bin("bus-inspect"),
        &["hz", NAME, "--window", "3", "--json"],
    );
    // Sampling once it maps the slot; some writes later, the damage.
    let maps = format!("/proc/{}/maps", t.pid(hz));
    let file = path.trim_start_matches("/dev/shm/").to_owned();
    eventually("hz maps the slot", || {
        std::fs::read_to_string(&maps).is_ok_and(|m| m.contains(&file))
    });
    std::thread::sleep(Duration::from_millis(200));
    set_size(&path, 100);
    let out = t.finish(hz);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("hz's JSON");
    let note = report["note"].as_str().unwrap_or_default();
    let before: u64 = note
        .split("measured from then on (")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of the writes before: {report}"));
    assert!(
        note.starts_with("the slot was re-created during the window: measured from then on"),
        "{report}"
    );
    assert!(before >= 1, "{report}");
    // The writer went on in the new slot: hz measured its writes there.
    assert!(report["writes"].as_u64().is_some_and(|w| w > 0), "{report}");
    assert!(t.is_running(writer), "{}", t.stderr_of(writer));
}

/// A registry, the value of a writer that has ended (`bus-stress`, one value of at most 64
/// bytes) in `NAME`, and a subscription of the test's own that read it.
fn a_gone_writers_value_held() -> (TestBus, bus::Bus, bus::Subscription<tools::stress::Checked>) {
    let mut t = TestBus::new();
    t.start_registry();
    let earlier = t.spawn_stress(&["write", "--name", NAME, "--count", "1", "--max-size", "64"]);
    assert!(t.finish(earlier).status.success());
    let bus = t.bus();
    let mut held = bus
        .subscribe::<tools::stress::Checked>(NAME)
        .expect("subscribe");
    assert!(held.wait_update(common::WATCHDOG).unwrap());
    (t, bus, held)
}

/// Removes `NAME`'s segment and waits until `held` is told of the slot made anew.
fn remove_and_wait_for_the_new_slot(t: &TestBus, held: &bus::Subscription<tools::stress::Checked>) {
    std::fs::remove_file(t.segment_path(NAME)).expect("remove the segment");
    eventually("the subscription is told of the new slot", || {
        matches!(held.bind_error(), Some(bus::BusError::Replaced { .. }))
    });
}

/// Only a publication's own value is carried into the slot made anew: a value its process did
/// not write (here an earlier writer's, which has ended) would read there as the live
/// publication's, and a restarted robot controller must never have its dead predecessor's
/// command obeyed.
#[test]
fn an_earlier_writers_value_is_not_carried_into_the_new_slot() {
    let (t, bus, held) = a_gone_writers_value_held();
    assert_eq!(held.writer(), Some(bus::WriterState::Gone));
    // The size bus-stress asked for (`--max-size 64`): a larger one is refused while the
    // subscription holds the slot.
    let mut publication: bus::Publication<tools::stress::Checked> = bus
        .publication(NAME)
        .and_then(|p| p.capacity(128).create())
        .expect("publish");
    publication.wait_bound(common::WATCHDOG).unwrap();
    remove_and_wait_for_the_new_slot(&t, &held);
    let mut again = bus
        .subscribe::<tools::stress::Checked>(NAME)
        .expect("subscribe again");
    assert!(
        !again.wait_update(Duration::from_millis(500)).unwrap(),
        "a value in the new slot before the publication wrote: {:?}",
        again.meta()
    );
    publication
        .write(&tools::stress::Checked::new(7, 16))
        .unwrap();
    assert!(again.wait_update(common::WATCHDOG).unwrap());
    let meta = again.meta().expect("the value");
    assert_eq!(meta.writer, bus::WriterState::Alive);
    assert_eq!(meta.writer_pid, std::process::id());
}

/// A gone publisher's value kept for its subscribers is kept in the slot made anew when the
/// registry still reads it (here the segment was removed, not cut short), as a gone writer's:
/// the slot was made anew empty, and the value lost for every later subscriber.
#[test]
fn a_gone_writers_kept_value_is_kept_in_the_slot_made_anew() {
    let (t, bus, held) = a_gone_writers_value_held();
    let value = held.value().cloned();
    remove_and_wait_for_the_new_slot(&t, &held);
    let mut again = bus
        .subscribe::<tools::stress::Checked>(NAME)
        .expect("subscribe again");
    assert!(
        again.wait_update(common::WATCHDOG).unwrap(),
        "no value kept"
    );
    assert_eq!(again.value().cloned(), value);
    assert_eq!(again.writer(), Some(bus::WriterState::Gone));
}

/// A member of a subscription group whose slot is made anew is reported once with
/// `BusError::Replaced`, then follows the new slot: the group's waits wake for the writer's
/// values there (its waiter count moved from the old slot to the new one).
#[test]
fn a_group_member_follows_its_slot_made_anew() {
    let mut t = TestBus::new();
    t.start_registry();
    let writer = t.spawn_stress(&[
        "write",
        "--name",
        NAME,
        "--max-size",
        "64",
        "--interval-ms",
        "2",
        "--seconds",
        "30",
    ]);
    let bus = t.bus();
    let mut group = bus::SubscriptionGroup::new();
    let member = group.add(
        bus.subscribe::<tools::stress::Checked>(NAME)
            .expect("subscribe"),
    );
    eventually("a value", || {
        group.wait_any(Duration::from_millis(100)).is_ok() && group.get(member).value().is_some()
    });
    std::fs::remove_file(t.segment_path(NAME)).expect("remove the segment");
    eventually("the member is told of the new slot", || {
        let changed = group.wait_any(Duration::from_millis(100)).unwrap();
        group.any_replaced(&changed)
    });
    let pid = t.pid(writer) as u32;
    let mut first = None;
    eventually(
        "the writer's values, one after another, through the group",
        || {
            let changed = group.wait_any(Duration::from_millis(100)).unwrap();
            let Some(meta) = group.get(member).meta() else {
                return false;
            };
            let theirs = changed.contains(&member.index())
                && meta.writer_pid == pid
                && meta.writer == bus::WriterState::Alive;
            theirs && *first.get_or_insert(meta.sequence) < meta.sequence
        },
    );
    assert_eq!(group.get(member).bind_error(), None);
}
