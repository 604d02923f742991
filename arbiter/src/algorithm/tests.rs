//! The algorithm pinned down: a table of cases (the patents' arm example first) and properties
//! over random controller sets and priorities.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

const NOW: u64 = 1_000_000_000_000;

fn arm() -> Vec<ResourceSpec> {
    ["turret", "shoulder", "elbow1", "elbow2"]
        .iter()
        .map(|n| ResourceSpec {
            name: (*n).into(),
            kind: Kind::Position,
            limits: Limits {
                min: -2.0,
                max: 2.0,
            },
            safe: SafeCommand::Hold,
        })
        .collect()
}

fn block(name: &str, status: Status, commands: &[(&str, f64)]) -> ControllerBlock {
    ControllerBlock {
        name: name.into(),
        status,
        commands: commands.iter().map(|(k, v)| ((*k).into(), *v)).collect(),
        stamp_ns: NOW,
        ttl_ms: 100,
        session: 1,
    }
}

fn run(blocks: &[&ControllerBlock]) -> Decision {
    let candidates: Vec<Candidate> = blocks
        .iter()
        .map(|b| Candidate {
            name: &b.name,
            block: Some(b),
            writer_alive: true,
        })
        .collect();
    arbitrate("arm", &arm(), &candidates, &BTreeMap::new(), None, NOW)
}

fn owner(d: &Decision, r: &str) -> Option<String> {
    d.owners[r].clone()
}

use crate::protocol::{ControllerBlock, Limits, Outcome, Status};
use Status::*;

#[test]
fn the_patents_arm_example() {
    let a = block("a", NonCompromising, &[("arm/shoulder", 0.3)]);
    let b = block(
        "b",
        Compromising,
        &[("arm/shoulder", 0.5), ("arm/turret", 1.0)],
    );
    let n = block(
        "n",
        NonCompromising,
        &[
            ("arm/shoulder", 0.1),
            ("arm/elbow1", 0.2),
            ("arm/elbow2", 0.3),
        ],
    );
    let d = run(&[&a, &b, &n]);
    assert_eq!(owner(&d, "shoulder").as_deref(), Some("a"));
    assert_eq!(owner(&d, "turret").as_deref(), Some("b"));
    assert_eq!(owner(&d, "elbow1"), None);
    assert_eq!(owner(&d, "elbow2"), None);
    assert_eq!(d.outcomes["a"], Outcome::Full);
    assert_eq!(d.outcomes["b"], Outcome::Partial);
    assert_eq!(d.outcomes["n"], Outcome::Denied);
    assert_eq!(d.setpoints["shoulder"], 0.3);
    assert_eq!(d.setpoints["turret"], 1.0);
    // N gets all three once A no longer wants the shoulder.
    let a_idle = block("a", NonCompromising, &[]);
    let d = run(&[&a_idle, &b, &n]);
    assert_eq!(d.outcomes["a"], Outcome::Idle);
    // B (higher) now takes the shoulder too, so N is still denied...
    assert_eq!(owner(&d, "shoulder").as_deref(), Some("b"));
    assert_eq!(d.outcomes["n"], Outcome::Denied);
    // ...and only when B releases it does N get all three at once.
    let b_turret = block("b", Compromising, &[("arm/turret", 1.0)]);
    let d = run(&[&a_idle, &b_turret, &n]);
    assert_eq!(d.outcomes["n"], Outcome::Full);
    for r in ["shoulder", "elbow1", "elbow2"] {
        assert_eq!(owner(&d, r).as_deref(), Some("n"));
    }
}

#[test]
fn expired_blocks_and_dead_writers_are_absent() {
    let mut old = block("old", NonCompromising, &[("arm/turret", 1.0)]);
    old.stamp_ns = NOW - 200_000_000; // ttl 100 ms
    let dead = block("dead", NonCompromising, &[("arm/shoulder", 1.0)]);
    let live = block(
        "live",
        Compromising,
        &[("arm/turret", 0.5), ("arm/shoulder", 0.5)],
    );
    let candidates = [
        Candidate {
            name: "old",
            block: Some(&old),
            writer_alive: true,
        },
        Candidate {
            name: "dead",
            block: Some(&dead),
            writer_alive: false,
        },
        Candidate {
            name: "live",
            block: Some(&live),
            writer_alive: true,
        },
    ];
    let d = arbitrate("arm", &arm(), &candidates, &BTreeMap::new(), None, NOW);
    assert_eq!(d.outcomes["old"], Outcome::Expired);
    assert_eq!(d.outcomes["dead"], Outcome::Expired);
    assert_eq!(d.outcomes["live"], Outcome::Full);
    assert_eq!(owner(&d, "turret").as_deref(), Some("live"));
    assert_eq!(d.next_expiry_ns, Some(live.expires_at_ns(NOW)));
}

/// A block stamped in the future (a faulty writer, a computer whose clock is ahead) lives one
/// time to live from when the arbiter read it, and no time to live counts past an hour: a
/// stopped writer's block cannot outlive its last write by more than that.
#[test]
fn a_stamp_in_the_future_or_a_huge_time_to_live_is_capped() {
    let mut ahead = block("ahead", NonCompromising, &[("arm/turret", 1.0)]);
    ahead.stamp_ns = NOW + 20_000_000_000;
    let mut forever = block("forever", NonCompromising, &[("arm/shoulder", 1.0)]);
    forever.ttl_ms = u64::MAX;
    assert_eq!(ahead.expires_at_ns(NOW), NOW + 100_000_000);
    assert_eq!(
        forever.expires_at_ns(NOW),
        NOW + crate::protocol::MAX_TTL_MS * 1_000_000
    );
    let d = run(&[&ahead, &forever]);
    assert_eq!(d.next_expiry_ns, Some(NOW + 100_000_000));
    // Read at NOW, decided 150 ms later: the block from the future has expired.
    let request = Request::parse("arm", &arm(), &ahead, ReadAt::wall(NOW));
    let mut allocation = Allocation::default();
    allocate(
        &arm(),
        &[Some(request)],
        &[true],
        &BTreeMap::new(),
        None,
        NOW + 150_000_000,
        &mut allocation,
    );
    assert_eq!(allocation.outcomes, vec![Some(Outcome::Expired)]);
}

/// The arbiter counts a block's life on its own monotonic clock from when it read the block:
/// the wall clock set back or forward after the read changes nothing, and a block read late
/// has only what is left of its time to live.
#[test]
fn expiry_counts_from_the_read_on_the_arbiters_own_clock() {
    // Stamped 40 ms before it was read: 60 ms of its 100 ms left.
    let late = block("late", Compromising, &[("arm/turret", 1.0)]);
    let read = ReadAt {
        wall_ns: NOW + 40_000_000,
        clock_ns: 5_000_000_000,
    };
    let request = Request::parse("arm", &arm(), &late, read);
    assert_eq!(request.expires_at_ns, 5_060_000_000);
    let outcome_at = |request: &Request, clock_ns: u64| {
        let mut allocation = Allocation::default();
        allocate(
            &arm(),
            &[Some(request.clone())],
            &[true],
            &BTreeMap::new(),
            None,
            clock_ns,
            &mut allocation,
        );
        allocation.outcomes[0]
    };
    assert_eq!(outcome_at(&request, 5_059_000_000), Some(Outcome::Full));
    assert_eq!(outcome_at(&request, 5_061_000_000), Some(Outcome::Expired));
    // Read 50 ms after its time to live had passed on the wall clock: expired 50 ms ago.
    let stale = ReadAt {
        wall_ns: NOW + 150_000_000,
        clock_ns: 5_000_000_000,
    };
    let request = Request::parse("arm", &arm(), &late, stale);
    assert_eq!(request.expires_at_ns, 4_950_000_000);
    assert_eq!(outcome_at(&request, 5_000_000_000), Some(Outcome::Expired));
    // A stamp ahead of the reader's wall clock: one whole time to live from the read.
    let ahead = ReadAt {
        wall_ns: NOW - 600_000_000_000,
        clock_ns: 7,
    };
    assert_eq!(
        Request::parse("arm", &arm(), &late, ahead).expires_at_ns,
        100_000_007
    );
}

#[test]
fn unknown_controllers_empty_commands_and_foreign_resources() {
    let other = block("other", NonCompromising, &[("drive/left", 1.0)]);
    let none = Candidate {
        name: "ghost",
        block: None,
        writer_alive: false,
    };
    let candidates = [
        none,
        Candidate {
            name: "other",
            block: Some(&other),
            writer_alive: true,
        },
    ];
    let d = arbitrate("arm", &arm(), &candidates, &BTreeMap::new(), None, NOW);
    assert!(
        !d.outcomes.contains_key("ghost"),
        "a controller without a block has no outcome"
    );
    assert_eq!(
        d.outcomes["other"],
        Outcome::Idle,
        "no resource of this arbiter wanted"
    );
    assert!(d.owners.values().all(Option::is_none));
    assert_eq!(d.next_expiry_ns, Some(other.expires_at_ns(NOW)));
}

/// A command for a resource this arbiter does not have (its config lost it under a running
/// controller) asks for something never free: a non-compromising controller is denied all of
/// it here, never given the part that exists; a compromising one takes what is free.
#[test]
fn a_resource_the_arbiter_lacks_is_asked_for_and_never_free() {
    let nc = block(
        "nc",
        NonCompromising,
        &[("arm/elbow1", 1.1), ("arm/gone", 0.3)],
    );
    let c = block("c", Compromising, &[("arm/turret", 0.5), ("arm/gone", 0.3)]);
    let only_gone = block("g", Compromising, &[("arm/gone", 0.3)]);
    let d = run(&[&nc, &c, &only_gone]);
    assert_eq!(d.outcomes["nc"], Outcome::Denied);
    assert_eq!(owner(&d, "elbow1"), None, "no part of what nc asked for");
    assert_eq!(d.outcomes["c"], Outcome::Partial);
    assert_eq!(owner(&d, "turret").as_deref(), Some("c"));
    assert_eq!(d.outcomes["g"], Outcome::Denied);
}

#[test]
fn a_command_that_is_not_a_finite_number_asks_for_its_resource_but_never_reaches_it() {
    // A faulty writer (the library refuses these). Ownership follows DESIGN's rule as for any
    // command; the value sent is the safe command, never NaN or a limit.
    let faulty = block(
        "faulty",
        NonCompromising,
        &[("arm/turret", f64::NAN), ("arm/shoulder", f64::INFINITY)],
    );
    let next = block("next", Compromising, &[("arm/shoulder", 0.25)]);
    let state: BTreeMap<String, f64> = [("shoulder".to_string(), 0.5)].into();
    let candidates = [&faulty, &next].map(|b| Candidate {
        name: &b.name,
        block: Some(b),
        writer_alive: true,
    });
    let d = arbitrate("arm", &arm(), &candidates, &state, None, NOW);
    // The arm sags while the faulty owner keeps it: the hold stays where it was latched.
    let sagged: BTreeMap<String, f64> = [("shoulder".to_string(), 0.3)].into();
    let later = arbitrate("arm", &arm(), &candidates, &sagged, Some(&d), NOW);
    assert_eq!(
        later.setpoints["shoulder"], 0.5,
        "latched, not following the state"
    );
    assert_eq!(d.outcomes["faulty"], Outcome::Full);
    assert_eq!(d.outcomes["next"], Outcome::Denied);
    assert_eq!(owner(&d, "shoulder").as_deref(), Some("faulty"));
    assert_eq!(d.setpoints["shoulder"], 0.5, "held where it is");
    assert!(
        !d.setpoints.contains_key("turret"),
        "not measured: no setpoint"
    );
    assert!(d.setpoints.values().all(|v| v.is_finite()));
    // Non-compromising: a NaN command for a taken resource keeps it from the rest.
    let a = block("a", NonCompromising, &[("arm/shoulder", 0.3)]);
    let n = block(
        "n",
        NonCompromising,
        &[("arm/shoulder", f64::NAN), ("arm/elbow1", 0.2)],
    );
    let d = run(&[&a, &n]);
    assert_eq!(d.outcomes["n"], Outcome::Denied);
    assert_eq!(owner(&d, "elbow1"), None);
}

#[test]
fn every_resource_committed_early_denies_the_rest() {
    let all = block(
        "all",
        NonCompromising,
        &[
            ("arm/turret", 0.0),
            ("arm/shoulder", 0.0),
            ("arm/elbow1", 0.0),
            ("arm/elbow2", 0.0),
        ],
    );
    let comp = block("comp", Compromising, &[("arm/turret", 1.0)]);
    let idle = block("idle", Compromising, &[]);
    let d = run(&[&all, &comp, &idle]);
    assert_eq!(d.outcomes["all"], Outcome::Full);
    assert_eq!(d.outcomes["comp"], Outcome::Denied);
    assert_eq!(d.outcomes["idle"], Outcome::Idle);
}

#[test]
fn uncommitted_resources_get_their_safe_commands() {
    let mut specs = arm();
    specs[0].safe = SafeCommand::Value(0.25);
    specs.push(ResourceSpec {
        name: "wheel".into(),
        kind: Kind::Velocity,
        limits: Limits {
            min: -1.0,
            max: 1.0,
        },
        safe: SafeCommand::Value(0.0),
    });
    let state: BTreeMap<String, f64> = [("shoulder".to_string(), 0.7)].into();
    let b = block(
        "b",
        NonCompromising,
        &[("arm/wheel", 5.0), ("arm/elbow1", -9.0)],
    );
    let candidates = [Candidate {
        name: "b",
        block: Some(&b),
        writer_alive: true,
    }];
    let first = arbitrate("arm", &specs, &candidates, &state, None, NOW);
    assert_eq!(first.setpoints["turret"], 0.25, "fixed safe value");
    assert_eq!(first.setpoints["shoulder"], 0.7, "hold where it is");
    assert!(
        !first.setpoints.contains_key("elbow2"),
        "no state, nothing sent before: nowhere known to hold, no setpoint"
    );
    assert_eq!(
        first.setpoints["wheel"], 1.0,
        "owner's command clamped to the limits"
    );
    assert_eq!(first.setpoints["elbow1"], -2.0);
    // Released: the wheel stops, elbow1 holds where it was measured, shoulder keeps its latch.
    let moved: BTreeMap<String, f64> =
        [("shoulder".to_string(), 0.9), ("elbow1".to_string(), -1.5)].into();
    let second = arbitrate("arm", &specs, &[], &moved, Some(&first), NOW);
    assert_eq!(second.setpoints["wheel"], 0.0);
    assert_eq!(second.setpoints["elbow1"], -1.5);
    assert_eq!(
        second.setpoints["shoulder"], 0.7,
        "latched when released, not chasing state"
    );
    assert!(!second.setpoints.contains_key("elbow2"));
    // The driver reports elbow2 (and NaN for elbow1): elbow2 holds where it is measured; a
    // NaN measures nothing, elbow1 keeps its latch.
    let reported: BTreeMap<String, f64> = [
        ("elbow2".to_string(), 0.4),
        ("elbow1".to_string(), f64::NAN),
    ]
    .into();
    let third = arbitrate("arm", &specs, &[], &reported, Some(&second), NOW);
    assert_eq!(third.setpoints["elbow2"], 0.4);
    assert_eq!(third.setpoints["elbow1"], -1.5);
    let fourth = arbitrate("arm", &specs, &[], &moved, Some(&third), NOW);
    assert_eq!(fourth.setpoints["elbow2"], 0.4, "latched once measured");
}

#[test]
fn a_hold_never_measured_takes_the_first_measurement() {
    let nan: BTreeMap<String, f64> = [("shoulder".to_string(), f64::NAN)].into();
    let first = arbitrate("arm", &arm(), &[], &nan, None, NOW);
    assert!(first.setpoints.is_empty(), "{:?}", first.setpoints);
    let measured: BTreeMap<String, f64> = [("shoulder".to_string(), 0.7)].into();
    let second = arbitrate("arm", &arm(), &[], &measured, Some(&first), NOW);
    assert_eq!(second.setpoints["shoulder"], 0.7);
}

/// A joint driven to its limit that settles a hair short of it (the simulator stops at
/// 0.4999979 for 0.5) was left without a setpoint when released, the arbiter warning of a
/// resource outside its limits that it had put there itself. It is held at the limit.
#[test]
fn a_hold_a_hair_outside_the_limits_is_held_at_the_limit() {
    for (command, measured, held) in [
        (3.0, 2.0005, Some(2.0)),
        (-3.0, -2.0015, Some(-2.0)),
        (3.0, 2.01, None),
        // Not driven to that limit: measured past it, it stays without a setpoint.
        (-3.0, 2.0005, None),
        (1.0, 2.0005, None),
    ] {
        let x = block("x", Compromising, &[("arm/shoulder", command)]);
        let candidate = Candidate {
            name: "x",
            block: Some(&x),
            writer_alive: true,
        };
        let state: BTreeMap<String, f64> = [("shoulder".to_string(), measured)].into();
        let owned = arbitrate("arm", &arm(), &[candidate], &state, None, NOW);
        let released = arbitrate("arm", &arm(), &[], &state, Some(&owned), NOW);
        assert_eq!(
            released.setpoints.get("shoulder").copied(),
            held,
            "{command} then {measured}: {released:?}"
        );
    }
    // A range with one end far away gives no more room than the limit's size.
    let mut far = arm();
    far[1].limits.min = -1e308;
    assert_eq!(far[1].name, "shoulder");
    let x = block("x", Compromising, &[("arm/shoulder", 3.0)]);
    let candidate = Candidate {
        name: "x",
        block: Some(&x),
        writer_alive: true,
    };
    let state: BTreeMap<String, f64> = [("shoulder".to_string(), 2.5)].into();
    let owned = arbitrate("arm", &far, &[candidate], &state, None, NOW);
    let released = arbitrate("arm", &far, &[], &state, Some(&owned), NOW);
    assert!(!released.setpoints.contains_key("shoulder"), "{released:?}");
    // Nor one found there at start, before anything was sent.
    let state: BTreeMap<String, f64> = [("shoulder".to_string(), 2.0005)].into();
    let first = arbitrate("arm", &arm(), &[], &state, None, NOW);
    assert!(!first.setpoints.contains_key("shoulder"), "{first:?}");
}

/// A resource to hold measured outside its limits gets no setpoint (the driver keeps it where
/// it is): clamped, the hold would move a resource nobody owns; sent as measured, it would be
/// a setpoint out of range (the arm's limits are -2..2).
#[test]
fn a_hold_outside_the_limits_does_not_move_the_resource() {
    let measured: BTreeMap<String, f64> = [("shoulder".to_string(), 2.5)].into();
    let first = arbitrate("arm", &arm(), &[], &measured, None, NOW);
    assert!(!first.setpoints.contains_key("shoulder"), "{first:?}");
    assert!(first.holding.contains("shoulder"));
    // An owner's command is clamped as ever; released, the resource holds where it is then.
    let x = block("x", Compromising, &[("arm/shoulder", 3.0)]);
    let candidate = Candidate {
        name: "x",
        block: Some(&x),
        writer_alive: true,
    };
    let owned = arbitrate("arm", &arm(), &[candidate], &measured, Some(&first), NOW);
    assert_eq!(owned.setpoints["shoulder"], 2.0);
    let released = arbitrate("arm", &arm(), &[], &measured, Some(&owned), NOW);
    assert!(!released.setpoints.contains_key("shoulder"), "{released:?}");
    // Measured within them again (the driver brought it back): held there.
    let back: BTreeMap<String, f64> = [("shoulder".to_string(), 1.5)].into();
    let held = arbitrate("arm", &arm(), &[], &back, Some(&released), NOW);
    assert_eq!(held.setpoints["shoulder"], 1.5);
}

#[test]
fn a_name_listed_twice_keeps_its_higher_place_even_without_a_block_there() {
    let x = block("x", NonCompromising, &[("arm/shoulder", 1.0)]);
    let y = block("y", NonCompromising, &[("arm/turret", 1.0)]);
    let candidates = [
        Candidate {
            name: "x",
            block: None,
            writer_alive: false,
        },
        Candidate {
            name: "y",
            block: Some(&y),
            writer_alive: true,
        },
        Candidate {
            name: "x",
            block: Some(&x),
            writer_alive: true,
        },
    ];
    let d = arbitrate("arm", &arm(), &candidates, &BTreeMap::new(), None, NOW);
    assert_eq!(owner(&d, "shoulder"), None);
    assert!(!d.outcomes.contains_key("x"));
}

#[test]
fn a_name_listed_twice_keeps_its_higher_place() {
    let a = block("a", NonCompromising, &[("arm/turret", 1.0)]);
    let b = block("b", NonCompromising, &[("arm/turret", 2.0)]);
    let d = run(&[&a, &b, &a]);
    assert_eq!(owner(&d, "turret").as_deref(), Some("a"));
    assert_eq!(d.outcomes["b"], Outcome::Denied);
}

const RESOURCES: [&str; 4] = ["turret", "shoulder", "elbow1", "elbow2"];

fn arb_block(i: usize) -> impl Strategy<Value = (ControllerBlock, bool)> {
    (
        any::<bool>(),
        proptest::collection::btree_set(0..6usize, 0..5),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(move |(compromising, wanted, expired, alive)| {
            let commands: Vec<(String, f64)> = wanted
                .into_iter()
                .map(|r| {
                    // 4 and 5 are another arbiter's and an unknown resource.
                    let key = match r {
                        0..=3 => format!("arm/{}", RESOURCES[r]),
                        4 => "drive/left".into(),
                        _ => "arm/unknown".into(),
                    };
                    (key, r as f64 / 10.0)
                })
                .collect();
            let mut b = block(
                &format!("c{i}"),
                if compromising {
                    Compromising
                } else {
                    NonCompromising
                },
                &[],
            );
            b.commands = commands.into_iter().collect();
            if expired {
                b.stamp_ns = NOW - 1_000_000_000;
            }
            (b, alive || !expired)
        })
}

/// Generated blocks named `c0`, `c1`, ... in priority order.
fn named(blocks: Vec<(ControllerBlock, bool)>) -> Vec<(ControllerBlock, bool)> {
    blocks
        .into_iter()
        .enumerate()
        .map(|(i, (mut b, alive))| {
            b.name = format!("c{i}");
            (b, alive)
        })
        .collect()
}

fn candidates_of(blocks: &[(ControllerBlock, bool)]) -> Vec<Candidate<'_>> {
    blocks
        .iter()
        .map(|(b, alive)| Candidate {
            name: &b.name,
            block: Some(b),
            writer_alive: *alive,
        })
        .collect()
}

proptest! {
    #[test]
    fn arbitration_properties(blocks in proptest::collection::vec((0..8usize).prop_flat_map(arb_block), 0..8)) {
        let blocks = named(blocks);
        let candidates = candidates_of(&blocks);
        let d = arbitrate("arm", &arm(), &candidates, &BTreeMap::new(), None, NOW);
        let live = |b: &ControllerBlock, alive: bool| alive && b.expires_at_ns(NOW) >= NOW;
        let wants = |b: &ControllerBlock| -> Vec<&str> {
            RESOURCES.iter().copied().filter(|r| b.commands.contains_key(&format!("arm/{r}"))).collect()
        };
        // A resource the arbiter does not have: asked for, never free.
        let lacking = |b: &ControllerBlock| b.commands.contains_key("arm/unknown");
        // Exactly one entry per resource (so at most one owner), every setpoint within limits.
        prop_assert_eq!(d.owners.len(), 4);
        prop_assert!(d.setpoints.values().all(|v| (-2.0..=2.0).contains(v)));
        for (i, (b, alive)) in blocks.iter().enumerate() {
            let held: Vec<&str> = RESOURCES.iter().copied()
                .filter(|r| d.owners[*r].as_deref() == Some(b.name.as_str()))
                .collect();
            // Only live controllers own, and only what they asked for.
            if !live(b, *alive) {
                prop_assert!(held.is_empty());
                prop_assert_eq!(d.outcomes[&b.name], Outcome::Expired);
                continue;
            }
            prop_assert!(held.iter().all(|r| wants(b).contains(r)));
            // A non-compromising controller holds all it asked for, or nothing.
            if b.status == NonCompromising {
                prop_assert!(held.is_empty() || (held.len() == wants(b).len() && !lacking(b)));
            }
            // No resource goes to a lower-priority controller when a higher one wanted it and
            // could take it.
            for r in &held {
                for (h, h_alive) in &blocks[..i] {
                    if !live(h, *h_alive) || !wants(h).contains(r) {
                        continue;
                    }
                    prop_assert_eq!(h.status, NonCompromising, "compromising {} wanted {} before {}", h.name, r, b.name);
                    // The higher NC controller was blocked by something owned above it.
                    let blocked = wants(h).iter().any(|hr| {
                        d.owners[*hr].as_deref().is_some_and(|o| {
                            blocks.iter().position(|(x, _)| x.name == o).unwrap() < blocks.iter().position(|(x, _)| x.name == h.name).unwrap()
                        })
                    });
                    prop_assert!(blocked || lacking(h), "{} could have taken {}", h.name, r);
                }
            }
            let expected = if wants(b).is_empty() && !lacking(b) { Outcome::Idle }
                else if held.is_empty() { Outcome::Denied }
                else if held.len() == wants(b).len() && !lacking(b) { Outcome::Full }
                else { Outcome::Partial };
            prop_assert_eq!(d.outcomes[&b.name], expected);
        }
    }
}

proptest! {
    /// The arbiter process's path (requests parsed once, `allocate` by position, named
    /// afterwards) decides exactly what `arbitrate` decides, over two cycles so that the
    /// hold-position safe command sees a previous cycle in both forms.
    #[test]
    fn allocate_by_position_matches_arbitrate(
        first in proptest::collection::vec((0..8usize).prop_flat_map(arb_block), 0..6),
        second in proptest::collection::vec((0..8usize).prop_flat_map(arb_block), 0..6),
    ) {
        let state: BTreeMap<String, f64> = [("elbow1".to_string(), 0.5)].into();
        let mut previous_decision: Option<Decision> = None;
        let mut previous_allocation: Option<Allocation> = None;
        let mut reused: Vec<Request> = Vec::new();
        for blocks in [first, second] {
            let blocks = named(blocks);
            let candidates = candidates_of(&blocks);
            let by_name = arbitrate("arm", &arm(), &candidates, &state, previous_decision.as_ref(), NOW);
            let requests: Vec<Option<Request>> =
                blocks.iter().map(|(b, _)| Some(Request::parse("arm", &arm(), b, ReadAt::wall(NOW)))).collect();
            // Re-parsing into the previous cycle's requests gives the same requests.
            for (old, (b, _)) in reused.iter_mut().zip(&blocks) {
                old.reparse("arm", &arm(), b, ReadAt::wall(NOW));
                prop_assert_eq!(&*old, &Request::parse("arm", &arm(), b, ReadAt::wall(NOW)));
            }
            reused = requests.iter().flatten().cloned().collect();
            let alive: Vec<bool> = blocks.iter().map(|(_, alive)| *alive).collect();
            // Storage reused from two cycles back, as the arbiter process does.
            let mut allocation = previous_allocation.clone().unwrap_or_default();
            allocate(&arm(), &requests, &alive, &state, previous_allocation.as_ref(), NOW, &mut allocation);
            let names: Vec<&str> = blocks.iter().map(|(b, _)| b.name.as_str()).collect();
            prop_assert_eq!(&allocation.to_decision(&arm(), &names), &by_name);
            previous_decision = Some(by_name);
            previous_allocation = Some(allocation);
        }
    }
}
