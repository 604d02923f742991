//! A host's announcement in parts. A registry with many publications announces more than one
//! datagram holds. Sent as one fragmented message it would reach a peer only when every
//! fragment of one repetition got through: on a lossy link (a ten-datagram announcement at 10 %
//! loss gets through 35 % of the time, at 30 % loss 3 %) a new publication or subscription
//! would wait many intervals to be learnt. So the announcement is cut into parts that each fit
//! one datagram and stand alone.
//!
//! A peer takes what any part adds or changes at once, and what disappeared only once it holds
//! every part of one generation: when a publication is added, the ones after it may move to the
//! next part, and taking an item's absence from one part as its removal would make it flicker.
//! Invariant kept by [`Assembly`]: the view it gives is the last whole generation, with every
//! item of a newer part laid over it; so it never loses an item the host still announces, and
//! it equals what the host announces once all parts of a generation have arrived.

use std::collections::{BTreeMap, BTreeSet};

use super::wire::{Announce, PubInfo, MAX_ANNOUNCE_PARTS};

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

/// Cuts `whole` (its part fields are ignored) into the parts of `generation`, each an
/// announcement message of at most `budget` bytes, but for an item bigger than that on its
/// own, which goes alone in its part (the part is then sent in fragments). Publications come
/// first, then wants, each in the order given. Never more than `MAX_ANNOUNCE_PARTS` parts:
/// past that the last part takes the rest (and is fragmented).
pub fn split(whole: &Announce, generation: u64, budget: usize) -> Vec<Announce> {
    let empty = Announce {
        generation,
        part: 0,
        parts: 1,
        publications: Vec::new(),
        wants: Vec::new(),
        ..whole.clone()
    };
    let mut packer = Packer {
        fixed: fixed_size(whole),
        budget,
        size: fixed_size(whole),
        parts: vec![empty.clone()],
        empty,
    };
    for p in &whole.publications {
        packer.room(encoded_size(p)).publications.push(p.clone());
    }
    for w in &whole.wants {
        packer.room(encoded_size(w)).wants.push(w.clone());
    }
    let mut parts = packer.parts;
    let count = parts.len() as u16;
    for (i, p) in parts.iter_mut().enumerate() {
        p.part = i as u16;
        p.parts = count;
    }
    parts
}

/// Parts being filled by `split`.
struct Packer {
    fixed: usize,
    budget: usize,
    /// Message bytes of the last part so far.
    size: usize,
    parts: Vec<Announce>,
    empty: Announce,
}

impl Packer {
    /// The part an item of `bytes` goes in: the last one, or a new one if it would overflow
    /// (and holds something already, and the parts are not at their limit).
    fn room(&mut self, bytes: usize) -> &mut Announce {
        let used = self.size > self.fixed;
        if used
            && self.size + bytes > self.budget
            && self.parts.len() < usize::from(MAX_ANNOUNCE_PARTS)
        {
            self.parts.push(self.empty.clone());
            self.size = self.fixed;
        }
        self.size += bytes;
        let last = self.parts.len() - 1;
        &mut self.parts[last]
    }
}

/// Bytes of announcement parts held at most per host (about ten thousand publications): parts
/// past it are not taken. Announcement parts bypass the reassembler's memory bound when they
/// fit one datagram, so without this a made-up sender could park 4,096 parts of 64 KiB each.
pub const MAX_HELD_BYTES: usize = 4 << 20;

/// Bytes a part is counted for: its strings and schemas, and a fixed amount per item for the
/// rest (the heap copies of the view and of the last whole generation are at most as big).
fn held_size(part: &Announce) -> usize {
    let publications: usize = part
        .publications
        .iter()
        .map(|p| p.name.len() + p.type_name.len() + p.schema.len() + 64)
        .sum();
    let wants: usize = part.wants.iter().map(|w| w.len() + 16).sum();
    part.host.len() + 64 + publications + wants
}

/// The parts of one host's announcement heard in one of its sessions, and the view drawn
/// from them (see the module's invariant).
#[derive(Default)]
pub struct Assembly {
    /// The newest part heard at each index (below the newest generation's part count).
    parts: BTreeMap<u16, Announce>,
    /// `held_size` of `parts`, summed.
    held: usize,
    /// The items of the last generation held whole, and that generation (older parts are late
    /// and never laid over it).
    whole: Option<(Vec<PubInfo>, Vec<String>)>,
    whole_generation: u64,
}

impl Assembly {
    /// An assembly for a restarted host that starts from what it announced before, as if that
    /// were its last whole generation.
    pub fn resumed(before: &Announce) -> Assembly {
        Assembly {
            whole: Some((before.publications.clone(), before.wants.clone())),
            ..Assembly::default()
        }
    }

    /// Takes one part. Returns the host's announcement as now known (its part fields those of
    /// the part taken), or `None` when the part brings nothing new: a repetition of the part
    /// held at its index (the usual case: a generation's parts are the same every time), a
    /// part older than the one held there or than the last whole generation, an older
    /// generation's part past the newest generation's count, or a part past `MAX_HELD_BYTES`.
    pub fn take(&mut self, part: Announce) -> Option<Announce> {
        if part.generation < self.whole_generation {
            return None;
        }
        let newest = self.parts.values().map(|p| (p.generation, p.parts)).max();
        if let Some((generation, parts)) = newest {
            if part.generation < generation && part.part >= parts {
                return None;
            }
        }
        if let Some(held) = self.parts.get(&part.part) {
            if held.generation > part.generation || *held == part {
                return None;
            }
        }
        if newest.is_none_or(|(generation, _)| part.generation >= generation) {
            // This generation has `part.parts` parts: indices past them no longer exist.
            let gone: Vec<u16> = self.parts.range(part.parts..).map(|(i, _)| *i).collect();
            for i in gone {
                self.remove(i);
            }
        }
        let size = held_size(&part);
        let replaced = self.parts.get(&part.part).map_or(0, held_size);
        if self.held - replaced + size > MAX_HELD_BYTES {
            return None;
        }
        self.held = self.held - replaced + size;
        let (generation, count) = (part.generation, part.parts);
        self.parts.insert(part.part, part);
        let whole = self.parts.len() == usize::from(count)
            && self.parts.values().all(|p| p.generation == generation);
        if whole {
            let publications = self
                .parts
                .values()
                .flat_map(|p| p.publications.iter().cloned())
                .collect();
            let wants = self
                .parts
                .values()
                .flat_map(|p| p.wants.iter().cloned())
                .collect();
            self.whole = Some((publications, wants));
            self.whole_generation = generation;
        }
        self.view()
    }

    fn remove(&mut self, index: u16) {
        if let Some(p) = self.parts.remove(&index) {
            self.held -= held_size(&p);
        }
    }

    /// The last whole generation's items with every held part's laid over them, oldest
    /// generation first; the fixed fields of the newest part.
    fn view(&self) -> Option<Announce> {
        let mut held: Vec<&Announce> = self.parts.values().collect();
        held.sort_by_key(|p| p.generation);
        let newest = *held.last()?;
        let mut publications: BTreeMap<&str, &PubInfo> = BTreeMap::new();
        let mut wants: BTreeSet<&str> = BTreeSet::new();
        if let Some((pubs, w)) = &self.whole {
            publications.extend(pubs.iter().map(|p| (p.name.as_str(), p)));
            wants.extend(w.iter().map(String::as_str));
        }
        for part in held {
            publications.extend(part.publications.iter().map(|p| (p.name.as_str(), p)));
            wants.extend(part.wants.iter().map(String::as_str));
        }
        Some(Announce {
            publications: publications.into_values().cloned().collect(),
            wants: wants.into_iter().map(str::to_owned).collect(),
            ..newest.clone()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::wire::{decode_message, encode_announce, Message};

    fn info(name: &str, schema_len: usize) -> PubInfo {
        PubInfo {
            name: name.into(),
            type_name: "T".into(),
            schema_hash: 1,
            capacity: 8,
            writer_alive: true,
            schema: vec![7; schema_len],
        }
    }

    fn whole(pubs: &[&str], wants: &[&str]) -> Announce {
        Announce {
            host: "a".into(),
            data_port: 9,
            interval_ms: 100,
            generation: 0,
            part: 0,
            parts: 1,
            publications: pubs.iter().map(|n| info(n, 40)).collect(),
            wants: wants.iter().map(|w| (*w).into()).collect(),
        }
    }

    fn names(a: &Announce) -> Vec<&str> {
        a.publications.iter().map(|p| p.name.as_str()).collect()
    }

    #[test]
    fn parts_fit_the_budget_and_hold_everything_once() {
        let pubs: Vec<String> = (0..100).map(|i| format!("/robot/p{i:03}")).collect();
        let pubs: Vec<&str> = pubs.iter().map(String::as_str).collect();
        let mut w = whole(&pubs, &["/w1", "/w2"]);
        w.publications[50].schema = vec![1; 5000];
        let parts = split(&w, 3, 1400);
        assert!(parts.len() > 5, "{} parts", parts.len());
        let mut message = Vec::new();
        let (mut all, mut wants) = (Vec::new(), Vec::new());
        for (i, p) in parts.iter().enumerate() {
            assert_eq!(
                (p.part, p.parts, p.generation),
                (i as u16, parts.len() as u16, 3)
            );
            encode_announce(p, &mut message).unwrap();
            let big = p.publications.iter().any(|p| p.schema.len() == 5000);
            assert!(message.len() <= 1400 || (big && p.publications.len() == 1));
            let Message::Announce(back) = decode_message(&message).unwrap() else {
                panic!("not an announcement");
            };
            all.extend(back.publications);
            wants.extend(back.wants);
        }
        assert_eq!(all, w.publications);
        assert_eq!(wants, w.wants);
        let one = split(&whole(&[], &[]), 1, 1400);
        assert_eq!(one.len(), 1);
        assert_eq!((one[0].part, one[0].parts), (0, 1));
    }

    /// Parts of `w` at `generation`, two publications each: a publication with its 40-byte
    /// schema encodes to 84 bytes, the fixed fields to 44.
    fn parts_of(w: &Announce, generation: u64) -> Vec<Announce> {
        split(w, generation, 250)
    }

    #[test]
    fn any_part_adds_at_once_and_removals_wait_for_a_whole_generation() {
        let g1 = parts_of(&whole(&["/a", "/b", "/c", "/d", "/e", "/f"], &["/w"]), 1);
        assert!(g1.len() >= 3, "{} parts", g1.len());
        let mut asm = Assembly::default();
        // Parts arrive in any order; each adds what it holds.
        let view = asm.take(g1[2].clone()).unwrap();
        assert!(!names(&view).contains(&"/a"));
        let view = asm.take(g1[0].clone()).unwrap();
        assert!(names(&view).contains(&"/a"));
        for p in &g1 {
            asm.take(p.clone());
        }
        assert!(
            asm.take(g1[1].clone()).is_none(),
            "a repetition brings nothing"
        );
        // Generation 2 drops /b and adds /a0 in front: the others move to later parts.
        let g2 = parts_of(&whole(&["/a", "/a0", "/c", "/d", "/e", "/f"], &[]), 2);
        let view = asm.take(g2[0].clone()).unwrap();
        assert_eq!(
            names(&view),
            ["/a", "/a0", "/b", "/c", "/d", "/e", "/f"],
            "nothing removed, nothing lost while the generation is incomplete"
        );
        assert_eq!(view.wants, ["/w"]);
        // A late part of generation 1 changes nothing.
        assert!(asm.take(g1[0].clone()).is_none());
        let mut view = view;
        for p in &g2[1..] {
            view = asm.take(p.clone()).unwrap();
        }
        assert_eq!(names(&view), ["/a", "/a0", "/c", "/d", "/e", "/f"]);
        assert!(view.wants.is_empty());
        // A changed item is taken from the newer part at once.
        let mut changed = whole(&["/a", "/a0", "/c", "/d", "/e", "/f"], &[]);
        changed.publications[0].writer_alive = false;
        let g3 = parts_of(&changed, 3);
        let view = asm.take(g3[0].clone()).unwrap();
        assert!(!view.publications[0].writer_alive);
    }

    #[test]
    fn a_generation_with_fewer_parts_drops_the_parts_past_its_count() {
        let g1 = parts_of(&whole(&["/a", "/b", "/c", "/d", "/e", "/f", "/g"], &[]), 1);
        let g2 = parts_of(&whole(&["/a"], &[]), 2);
        assert_eq!(g2.len(), 1);
        let mut asm = Assembly::default();
        for p in &g1 {
            asm.take(p.clone()).unwrap();
        }
        let view = asm.take(g2[0].clone()).unwrap();
        assert_eq!(names(&view), ["/a"], "one part is the whole generation");
        // A late last part of generation 1 is past generation 2's count: ignored.
        assert!(asm.take(g1[g1.len() - 1].clone()).is_none());
    }

    #[test]
    fn a_resumed_assembly_keeps_the_previous_view_until_a_whole_generation() {
        let before = whole(&["/a", "/b", "/c", "/d", "/e", "/f"], &["/w"]);
        let mut asm = Assembly::resumed(&before);
        let g1 = parts_of(&whole(&["/a", "/c", "/d", "/e", "/f"], &["/w"]), 1);
        let view = asm.take(g1[g1.len() - 1].clone()).unwrap();
        assert_eq!(names(&view), names(&before));
        let mut view = view;
        for p in &g1 {
            view = asm.take(p.clone()).unwrap_or(view);
        }
        assert_eq!(names(&view), ["/a", "/c", "/d", "/e", "/f"]);
    }

    #[test]
    fn a_late_part_of_a_generation_older_than_the_last_whole_one_is_not_taken() {
        let g1 = parts_of(&whole(&["/a", "/b", "/c", "/d", "/e", "/f"], &[]), 1);
        let g2 = parts_of(&whole(&["/a", "/c"], &[]), 2);
        let g3 = parts_of(&whole(&["/a", "/c", "/d", "/e", "/f", "/g", "/h"], &[]), 3);
        assert_eq!((g1.len(), g2.len(), g3.len()), (3, 1, 4));
        let mut asm = Assembly::default();
        asm.take(g2[0].clone()).unwrap();
        asm.take(g3[0].clone()).unwrap();
        // g1's part 2 (/e, /f), delayed: past g2's count, within g3's, and older than g2, the
        // last whole generation. /b and /e must not come back from it.
        assert!(asm.take(g1[0].clone()).is_none());
        assert!(asm.take(g1[2].clone()).is_none());
    }

    #[test]
    fn parts_past_the_byte_bound_are_not_taken() {
        let big: Vec<String> = (0..4).map(|i| format!("/big{i}")).collect();
        let big: Vec<&str> = big.iter().map(String::as_str).collect();
        let mut w = whole(&big, &[]);
        for p in &mut w.publications {
            p.schema = vec![0; MAX_HELD_BYTES / 3 - 256];
        }
        let parts = split(&w, 1, 1400);
        assert_eq!(parts.len(), 4, "one oversized item per part");
        let mut asm = Assembly::default();
        for p in &parts[..2] {
            assert!(asm.take(p.clone()).is_some());
        }
        assert!(asm.take(parts[2].clone()).is_some());
        assert!(asm.take(parts[3].clone()).is_none(), "past the bound");
        assert!(asm.held <= MAX_HELD_BYTES);
    }
}
