//! A host's announcement in parts. A registry with many publications announces more than one
//! datagram holds. Sent as one fragmented message it would reach a peer only when every
//! fragment of one repetition got through: on a lossy link (a ten-datagram announcement at 10 %
//! loss gets through 35 % of the time, at 30 % loss 3 %) a new publication or subscription
//! would wait many intervals to be learnt. So the announcement is cut into parts that each fit
//! one datagram and stand alone.
//!
//! Each item (a publication, a wanted name) goes in the part its name hashes to: with `n`
//! parts, part `fnv1a(name) % n`. An item never moves to another part while `n` stays, so a
//! part received is the whole truth about its names: a peer takes what it adds, changes and
//! removes at once, part by part, whatever the loss of the others. `n` is a power of two
//! chosen for about half-full datagrams; it changes only when the announcement grows or
//! shrinks past one. Then the items move, and a peer keeps what it knew under the old `n`
//! (`Assembly`'s `carried`) until the part each such name hashes to under the new `n`
//! arrives, so a name the host still announces never drops out of the peer's view.

use std::collections::BTreeMap;

use super::wire::{fnv1a, Announce, PubInfo, Want, MAX_ANNOUNCE_PARTS};

/// Bytes of an announcement message besides its items: the kind byte and the fixed fields.
fn fixed_size(whole: &Announce) -> usize {
    let empty = Announce {
        publications: Vec::new(),
        wants: Vec::new(),
        ..whole.clone()
    };
    1 + encoded_size(&empty)
}

fn encoded_size<T: serde::Serialize>(item: &T) -> usize {
    let mut out = Vec::new();
    // Encoding these types cannot fail; a failure would show as an unsent announcement.
    bus::codec::encode_into(item, &mut out).map_or(0, |()| out.len())
}

/// The part of `parts` a name belongs in.
pub fn part_of(name: &str, parts: u16) -> u16 {
    (fnv1a(name.as_bytes()) % u64::from(parts.max(1))) as u16
}

/// How many parts for `items` bytes of items when a part has room for `room` bytes of them:
/// one if they fit, else the power of two that fills parts about half (hashing fills them
/// unevenly), at most `MAX_ANNOUNCE_PARTS`.
fn part_count(items: usize, room: usize) -> u16 {
    if items <= room {
        return 1;
    }
    let wanted = (2 * items).div_ceil(room.max(1));
    wanted
        .next_power_of_two()
        .min(usize::from(MAX_ANNOUNCE_PARTS)) as u16
}

/// Cuts `whole` (its part fields are ignored) into the parts of `generation`, each an
/// announcement message meant to fit `budget` bytes. Items go where their names hash to, so a
/// part can come out larger than `budget` (it is then sent in fragments); at the part counts
/// chosen that is rare. Every part is sent, also an empty one: it says its names are gone.
pub fn split(whole: &Announce, generation: u64, budget: usize) -> Vec<Announce> {
    let fixed = fixed_size(whole);
    let items: usize = whole.publications.iter().map(encoded_size).sum::<usize>()
        + whole.wants.iter().map(encoded_size).sum::<usize>();
    let count = part_count(items, budget.saturating_sub(fixed));
    let mut parts: Vec<Announce> = (0..count)
        .map(|i| Announce {
            generation,
            part: i,
            parts: count,
            publications: Vec::new(),
            wants: Vec::new(),
            ..whole.clone()
        })
        .collect();
    for p in &whole.publications {
        parts[usize::from(part_of(&p.name, count))]
            .publications
            .push(p.clone());
    }
    for w in &whole.wants {
        parts[usize::from(part_of(&w.name, count))]
            .wants
            .push(w.clone());
    }
    parts
}

/// Bytes of announcement parts held at most per host (about ten thousand publications): parts
/// past it are not taken. Announcement parts bypass the reassembler's memory bound when they
/// fit one datagram, so without this a made-up sender could park 4,096 parts of 64 KiB each.
pub const MAX_HELD_BYTES: usize = 4 << 20;

/// Bytes a part is counted for: its strings, and a fixed amount per item for the
/// rest (the heap copies of the view and of the carried items are at most as big).
fn held_size(part: &Announce) -> usize {
    part.host.len() + 64 + items_size(&part.publications, &part.wants)
}

fn items_size(publications: &[PubInfo], wants: &[Want]) -> usize {
    let p: usize = publications
        .iter()
        .map(|p| p.name.len() + p.type_name.len() + 64)
        .sum();
    p + wants.iter().map(|w| w.name.len() + 24).sum::<usize>()
}

/// Whether two parts say the same (their generations aside).
fn same_items(a: &Announce, b: &Announce) -> bool {
    a.publications == b.publications
        && a.wants == b.wants
        && a.data_port == b.data_port
        && a.interval_ms == b.interval_ms
}

/// The parts of one host's announcement heard in one of its sessions, and the view drawn
/// from them: the items of the parts held, and the carried items whose part has not been
/// heard under the current part count.
#[derive(Default)]
pub struct Assembly {
    /// The newest part heard at each index, all of the current part count.
    parts: BTreeMap<u16, Announce>,
    /// The current part count (0 before the first part).
    count: u16,
    /// The newest generation heard: older parts are late, and not taken.
    newest: u64,
    /// `held_size` of `parts`, summed.
    held: usize,
    /// What was known before the part count changed (or before the host restarted).
    carried: Vec<PubInfo>,
    carried_wants: Vec<Want>,
}

impl Assembly {
    /// An assembly for a restarted host that starts from what it announced before: kept until
    /// the new session's parts say otherwise, name by name.
    pub fn resumed(before: &Announce) -> Assembly {
        Assembly {
            carried: before.publications.clone(),
            carried_wants: before.wants.clone(),
            ..Assembly::default()
        }
    }

    /// Takes one part. Returns the host's announcement as now known (its part fields those of
    /// the part taken), or `None` when the part brings nothing new: the items of the part held
    /// at its index again (the usual case: parts are repeated, and most stay the same when
    /// another changes), a
    /// part of a generation older than one heard, or a part past `MAX_HELD_BYTES`.
    pub fn take(&mut self, part: Announce) -> Option<Announce> {
        if part.generation < self.newest {
            return None;
        }
        if part.parts != self.count {
            // The items moved: what is known now is carried until their new parts come. At
            // most `MAX_HELD_BYTES` of it: a sender flipping its part count must not pile up
            // carried items (no real host comes near the bound).
            if let Some(view) = self.view() {
                let size = items_size(&view.publications, &view.wants);
                if size <= MAX_HELD_BYTES {
                    (self.carried, self.carried_wants) = (view.publications, view.wants);
                } else {
                    self.carried = self
                        .parts
                        .values()
                        .flat_map(|p| p.publications.clone())
                        .collect();
                    self.carried_wants =
                        self.parts.values().flat_map(|p| p.wants.clone()).collect();
                }
            }
            self.parts.clear();
            self.held = 0;
            self.count = part.parts;
        }
        let replaced = match self.parts.get_mut(&part.part) {
            // The same items under a newer generation (another part changed): nothing new.
            Some(held) if same_items(held, &part) => {
                held.generation = part.generation;
                self.newest = part.generation;
                return None;
            }
            Some(held) => held_size(held),
            None => 0,
        };
        let size = held_size(&part);
        if self.held - replaced + size > MAX_HELD_BYTES {
            return None;
        }
        self.held = self.held - replaced + size;
        self.newest = part.generation;
        let (index, count) = (part.part, self.count);
        self.parts.insert(index, part);
        // The part heard is the truth about the names that hash to it.
        self.carried.retain(|p| part_of(&p.name, count) != index);
        self.carried_wants
            .retain(|w| part_of(&w.name, count) != index);
        self.view()
    }

    /// Every item held, sorted by name; the fixed fields of the newest part.
    fn view(&self) -> Option<Announce> {
        let newest = self.parts.values().max_by_key(|p| p.generation)?;
        let mut publications: BTreeMap<&str, &PubInfo> = BTreeMap::new();
        let mut wants: BTreeMap<&str, &Want> = BTreeMap::new();
        publications.extend(self.carried.iter().map(|p| (p.name.as_str(), p)));
        wants.extend(self.carried_wants.iter().map(|w| (w.name.as_str(), w)));
        for part in self.parts.values() {
            publications.extend(part.publications.iter().map(|p| (p.name.as_str(), p)));
            wants.extend(part.wants.iter().map(|w| (w.name.as_str(), w)));
        }
        Some(Announce {
            publications: publications.into_values().cloned().collect(),
            wants: wants.into_values().cloned().collect(),
            ..newest.clone()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::wire::{decode_message, encode_announce, Message};

    fn info(name: &str, type_len: usize) -> PubInfo {
        PubInfo {
            name: name.into(),
            type_name: "T".repeat(type_len),
            schema_hash: 1,
            capacity: 8,
            writer_alive: true,
            writer_first: 0,
            series: 0,
            kept: false,
            kept_written_ns: 0,
        }
    }

    fn whole(pubs: &[String], wants: &[&str]) -> Announce {
        Announce {
            host: "a".into(),
            data_port: 9,
            interval_ms: 100,
            generation: 0,
            part: 0,
            parts: 1,
            publications: pubs.iter().map(|n| info(n, 40)).collect(),
            wants: wants
                .iter()
                .map(|w| Want {
                    name: (*w).into(),
                    mirror: 0,
                    schema: false,
                })
                .collect(),
        }
    }

    fn names(prefix: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("/{prefix}{i:03}")).collect()
    }

    fn view_names(a: &Announce) -> Vec<String> {
        a.publications.iter().map(|p| p.name.clone()).collect()
    }

    fn sorted(mut v: Vec<String>) -> Vec<String> {
        v.sort();
        v
    }

    /// Takes every part; the last view.
    fn take_all(asm: &mut Assembly, parts: &[Announce]) -> Option<Announce> {
        parts.iter().fold(None, |v, p| asm.take(p.clone()).or(v))
    }

    #[test]
    fn every_item_is_in_the_part_its_name_hashes_to_once() {
        let pubs = names("robot/p", 100);
        let w = whole(&pubs, &["/w1", "/w2"]);
        let parts = split(&w, 3, 1400);
        let count = parts.len() as u16;
        assert!(count.is_power_of_two() && count >= 8, "{count} parts");
        let mut message = Vec::new();
        let (mut all, mut wants) = (Vec::new(), Vec::new());
        for (i, p) in parts.iter().enumerate() {
            assert_eq!((p.part, p.parts, p.generation), (i as u16, count, 3));
            encode_announce(p, &mut message).unwrap();
            assert!(message.len() <= 1400, "part {i}: {} bytes", message.len());
            let Message::Announce(back) = decode_message(&message).unwrap() else {
                panic!("not an announcement");
            };
            assert!(back
                .publications
                .iter()
                .all(|x| part_of(&x.name, count) == p.part));
            all.extend(back.publications.into_iter().map(|x| x.name));
            wants.extend(back.wants.into_iter().map(|w| w.name));
        }
        assert_eq!(sorted(all), sorted(pubs));
        assert_eq!(sorted(wants), ["/w1", "/w2"]);
        let one = split(&whole(&[], &[]), 1, 1400);
        assert_eq!(one.len(), 1);
        assert_eq!((one[0].part, one[0].parts), (0, 1));
    }

    /// Parts of `w` at `generation`: 40-byte schemas, a small budget, many parts.
    fn parts_of(w: &Announce, generation: u64) -> Vec<Announce> {
        split(w, generation, 400)
    }

    #[test]
    fn a_part_adds_changes_and_removes_its_names_at_once() {
        let pubs = names("p", 24);
        let g1 = parts_of(&whole(&pubs, &["/w"]), 1);
        let mut asm = Assembly::default();
        let view = take_all(&mut asm, &g1).unwrap();
        assert_eq!(view_names(&view), pubs);
        assert!(
            asm.take(g1[0].clone()).is_none(),
            "a repetition brings nothing"
        );
        // Generation 2: /p005 goes, /p100 comes, /p000 changes.
        let mut next: Vec<String> = pubs.iter().filter(|n| *n != "/p005").cloned().collect();
        next.push("/p100".into());
        let mut w2 = whole(&next, &["/w"]);
        w2.publications[0].writer_alive = false;
        let g2 = parts_of(&w2, 2);
        assert_eq!(g2.len(), g1.len(), "the same part count");
        let count = g2.len() as u16;
        let gone = &g2[usize::from(part_of("/p005", count))];
        let view = asm.take(gone.clone()).unwrap();
        assert!(
            !view_names(&view).contains(&"/p005".to_string()),
            "removed at once"
        );
        assert_eq!(view.publications.len(), 23, "nothing else lost");
        let view = asm
            .take(g2[usize::from(part_of("/p100", count))].clone())
            .unwrap_or(view);
        assert!(
            view_names(&view).contains(&"/p100".to_string()),
            "added at once"
        );
        let view = asm
            .take(g2[usize::from(part_of("/p000", count))].clone())
            .unwrap_or(view);
        assert!(!view.publications[0].writer_alive, "changed at once");
        // A late part of generation 1 is not taken.
        assert!(asm
            .take(g1[usize::from(part_of("/p005", count))].clone())
            .is_none());
    }

    #[test]
    fn names_still_announced_stay_while_the_part_count_changes() {
        let small = names("p", 6);
        let g1 = parts_of(&whole(&small, &[]), 1);
        let mut asm = Assembly::default();
        take_all(&mut asm, &g1).unwrap();
        // Grown, without /p002: more parts, so every name may move.
        let mut big: Vec<String> = small.iter().filter(|n| *n != "/p002").cloned().collect();
        big.extend(names("q", 40));
        let g2 = parts_of(&whole(&big, &[]), 2);
        assert!(g2.len() > g1.len());
        let count = g2.len() as u16;
        for (i, part) in g2.iter().enumerate() {
            let view = asm.take(part.clone()).unwrap();
            let known = view_names(&view);
            for name in &small {
                let heard = usize::from(part_of(name, count)) <= i;
                let expected = name != "/p002" || !heard;
                assert_eq!(known.contains(name), expected, "{name} after part {i}");
            }
        }
        let view = take_all(&mut asm, &g2).unwrap_or_else(|| asm.view().unwrap());
        assert_eq!(view_names(&view), sorted(big));
    }

    #[test]
    fn a_restarted_host_keeps_its_previous_view_until_its_parts_say_otherwise() {
        let before = whole(&names("p", 24), &["/w"]);
        let mut asm = Assembly::resumed(&before);
        let mut now: Vec<String> = names("p", 24);
        now.retain(|n| n != "/p003");
        let parts = parts_of(&whole(&now, &["/w"]), 1);
        let count = parts.len() as u16;
        let other = (part_of("/p003", count) + 1) % count;
        let view = asm.take(parts[usize::from(other)].clone()).unwrap();
        assert_eq!(view.publications.len(), 24, "still every name");
        let wanted: Vec<&str> = view.wants.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(wanted, ["/w"]);
        let view = take_all(&mut asm, &parts).unwrap();
        assert_eq!(view_names(&view), now);
    }

    /// A want's mirror series is what its part says, not what was carried: a host that made
    /// its mirror anew is seen asking for the new one (and sent the current value).
    #[test]
    fn a_part_replaces_the_mirror_series_of_a_carried_want() {
        let mut before = whole(&names("p", 24), &["/w"]);
        before.wants[0].mirror = 7;
        let mut asm = Assembly::resumed(&before);
        let mut now = whole(&names("p", 24), &["/w"]);
        now.wants[0].mirror = 8;
        let parts = parts_of(&now, 1);
        let count = parts.len() as u16;
        let mirror_of_w =
            |view: &Announce| -> Vec<u64> { view.wants.iter().map(|w| w.mirror).collect() };
        let other = (part_of("/w", count) + 1) % count;
        let view = asm.take(parts[usize::from(other)].clone()).unwrap();
        assert_eq!(mirror_of_w(&view), [7], "carried until its part comes");
        let view = asm
            .take(parts[usize::from(part_of("/w", count))].clone())
            .unwrap();
        assert_eq!(mirror_of_w(&view), [8], "one want, the part's");
    }

    #[test]
    fn parts_past_the_byte_bound_are_not_taken() {
        let mut w = whole(&names("big", 4), &[]);
        for p in &mut w.publications {
            p.type_name = "T".repeat(MAX_HELD_BYTES / 3 - 256);
        }
        let parts = split(&w, 1, 1400);
        let full: Vec<&Announce> = parts
            .iter()
            .filter(|p| !p.publications.is_empty())
            .collect();
        assert_eq!(full.len(), 4, "one item per part");
        let mut asm = Assembly::default();
        for p in &full[..3] {
            assert!(asm.take((*p).clone()).is_some());
        }
        assert!(asm.take(full[3].clone()).is_none(), "past the bound");
        assert!(asm.held <= MAX_HELD_BYTES);
    }

    #[test]
    fn a_part_unchanged_in_a_newer_generation_brings_nothing_but_its_generation() {
        let pubs = names("p", 24);
        let g1 = parts_of(&whole(&pubs, &[]), 1);
        let g2 = parts_of(&whole(&pubs, &[]), 2);
        let mut asm = Assembly::default();
        take_all(&mut asm, &g1).unwrap();
        assert!(asm.take(g2[0].clone()).is_none());
        assert!(
            asm.take(g1[1].clone()).is_none(),
            "generation 1 is older now"
        );
    }

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Over any history of a host's announcement (names coming and going, the part count
        /// changing with its size) delivered with loss, duplication, reordering and late parts:
        /// a name the host announces all along never leaves the view once in it, and once every
        /// part of the last version has arrived the view is exactly that version.
        #[test]
        fn views_follow_any_history_of_parts(
            versions in proptest::collection::vec(
                proptest::collection::btree_set(0u16..120, 0..60), 1..6),
            deliveries in proptest::collection::vec((any::<bool>(), any::<u16>(), any::<u8>()), 0..200),
        ) {
            let stable = names("stable", 4);
            let announced: Vec<Vec<String>> = versions
                .iter()
                .map(|v| {
                    let mut n: Vec<String> = v.iter().map(|i| format!("/n{i:03}")).collect();
                    n.extend(stable.iter().cloned());
                    n
                })
                .collect();
            let parts: Vec<Vec<Announce>> = announced
                .iter()
                .enumerate()
                .map(|(g, n)| parts_of(&whole(n, &[]), g as u64 + 1))
                .collect();
            let mut asm = Assembly::default();
            let mut seen_stable = std::collections::BTreeSet::new();
            let mut current = 0;
            for (advance, pick, late) in deliveries {
                if advance && current + 1 < parts.len() {
                    current += 1;
                }
                // Mostly a part of the current version, sometimes a late one of an older.
                let version = if late % 4 == 0 { usize::from(late) % (current + 1) } else { current };
                let ps = &parts[version];
                let part = ps[usize::from(pick) % ps.len()].clone();
                if let Some(view) = asm.take(part) {
                    let names = view_names(&view);
                    for s in &seen_stable {
                        prop_assert!(names.contains(s), "{s} left the view");
                    }
                    seen_stable.extend(stable.iter().filter(|s| names.contains(s)).cloned());
                }
            }
            let last = parts.last().unwrap();
            let view = take_all(&mut asm, last).or_else(|| asm.view()).unwrap();
            prop_assert_eq!(view_names(&view), sorted(announced.last().unwrap().clone()));
        }
    }
}
