//! The slots one arbiter follows: the manager's order, the resource state and every listed
//! controller's block, in one subscription group, with each block parsed once per change.

use std::collections::BTreeMap;

use bus::{Bus, BusError, Member, Serde, SubscriptionGroup, WriterState};

use super::{StopRequest, MAX_CONTROLLERS};
use crate::algorithm::{ReadAt, Request};
use crate::config::ArbiterConfig;
use crate::protocol::{
    controller_slot, state_slot, ControllerBlock, ManagerConfig, Outcome, ResourceState,
    MANAGER_SLOT, MAX_TTL_MS,
};

/// The slots one arbiter watches, rebuilt when the manager's controller list changes, with each
/// controller's block parsed and its writer's liveness read once per change (`requests`,
/// `alive`, by position in `controllers`): a cycle touches only the slots that changed.
pub(super) struct Watched {
    pub(super) group: SubscriptionGroup,
    pub(super) manager: Member<ManagerConfig, Serde>,
    pub(super) state: Member<ResourceState, Serde>,
    /// `None`: a listed controller this arbiter cannot follow (its slot holds another type,
    /// or the list is longer than one group can wait on); it counts as absent.
    pub(super) controllers: Vec<(String, Option<Member<ControllerBlock, Serde>>)>,
    pub(super) requests: Vec<Option<Request>>,
    pub(super) alive: Vec<bool>,
    /// Per controller: the sequence of the block parsed and when it was first read, so that a
    /// block read again (its member reported for another reason) keeps its first read time,
    /// from which its expiry counts (`Request::expires_at_ns`).
    pub(super) read_at: Vec<Option<(u64, ReadAt)>>,
    /// Per controller: what its blocks were found to be, each said once.
    said: Vec<Said>,
    /// Per controller whose newest write could not be read (it does not decode, or the slot's
    /// memory is corrupt): the sequence of the block held then. It counts as absent until a
    /// newer block is read: what it wrote last (a stop, say) is not known, and the block
    /// before it must not go on being executed for its time to live.
    unreadable: Vec<Option<Option<u64>>>,
}

/// What was said of one controller's blocks.
#[derive(Clone, Copy)]
struct Said {
    /// The arrival said last while its writer lives, or a better one seen since: a worse one
    /// is said (`judge_arrival`).
    arrival: Arrival,
    /// Its last block named another controller.
    misnamed: bool,
    /// How its blocks arrived last, and how many in a row arrived so (see `judge_arrival`).
    last: (Arrival, u32),
}

/// How much of its time to live a controller's block had left when it was first read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Arrival {
    /// Half of it or more.
    OnTime,
    /// Less than half: a controller refreshes its block every third of its time to live, so
    /// a little more delay and each block expires before the next comes, and the controller's
    /// control comes and goes (a computer whose clock is behind by most of the time to live).
    Late,
    /// None: it counts as expired.
    Expired,
}

impl Watched {
    /// Watches `controllers` (distinct names) in that order. A controller that cannot be
    /// followed is logged and counts as absent, so that one bad slot never stops the arbiter.
    /// A `stop` request wakes its group. The subscriptions of `previous` (the slots watched
    /// until now) are kept for the names it watched: a new order takes effect at once, even
    /// while no registry runs to bind new subscriptions (every controller would count as
    /// absent until one did).
    pub(super) fn new(
        bus: &Bus,
        arbiter: &str,
        controllers: &[String],
        stop: &StopRequest,
        previous: Option<Watched>,
    ) -> Result<Watched, BusError> {
        // Per name kept: its member in the old group, and when its block was first read (the
        // cap on its expiry stays the same).
        type Kept = (Member<ControllerBlock, Serde>, Option<(u64, ReadAt)>);
        let mut kept = previous.map(|p| {
            let members: BTreeMap<String, Kept> = p
                .controllers
                .into_iter()
                .zip(p.read_at)
                .filter_map(|((name, member), read_at)| Some((name, (member?, read_at))))
                .collect();
            (p.group.release(), p.manager, p.state, members)
        });
        let mut group = SubscriptionGroup::new();
        group.wake_on(&stop.waker);
        let manager = match kept.as_mut().and_then(|(r, m, _, _)| r.take(*m)) {
            Some(sub) => sub,
            None => bus.subscribe::<ManagerConfig>(MANAGER_SLOT)?,
        };
        let manager = group.add(manager);
        let state = match kept.as_mut().and_then(|(r, _, s, _)| r.take(*s)) {
            Some(sub) => sub,
            None => bus.subscribe::<ResourceState>(&state_slot(arbiter))?,
        };
        let state = group.add(state);
        if controllers.len() > MAX_CONTROLLERS {
            tracing::warn!(
                "{arbiter}: the manager lists {} controllers; following the first \
                 {MAX_CONTROLLERS}, the rest count as absent",
                controllers.len()
            );
        }
        let mut members = Vec::new();
        let mut read_at = Vec::new();
        for (i, name) in controllers.iter().enumerate() {
            let (reused, first_read) = match kept.as_mut() {
                Some((released, _, _, members)) if i < MAX_CONTROLLERS => match members.get(name) {
                    Some((member, first_read)) => (released.take(*member), *first_read),
                    None => (None, None),
                },
                _ => (None, None),
            };
            read_at.push(first_read);
            let member = if i >= MAX_CONTROLLERS {
                None
            } else if let Some(sub) = reused {
                Some(group.add(sub))
            } else {
                match bus.subscribe::<ControllerBlock>(&controller_slot(name)) {
                    Ok(sub) => Some(group.add(sub)),
                    Err(e) => {
                        tracing::warn!("{arbiter}: controller {name} counts as absent: {e}");
                        None
                    }
                }
            };
            members.push((name.clone(), member));
        }
        Ok(Watched {
            group,
            manager,
            state,
            requests: vec![None; members.len()],
            alive: vec![false; members.len()],
            unreadable: vec![None; members.len()],
            read_at,
            said: vec![
                Said {
                    arrival: Arrival::OnTime,
                    misnamed: false,
                    last: (Arrival::OnTime, 0),
                };
                members.len()
            ],
            controllers: members,
        })
    }

    /// As `new`, then pulls every member; returns what changed. A subscription kept from
    /// `previous` that finds its slot made anew (`BusError::Replaced`: the registry found its
    /// segment damaged, or restarted on it) makes it subscribe to every slot afresh: the group
    /// rebuilt at once, rather than member by member at their next pulls.
    pub(super) fn follow(
        bus: &Bus,
        arbiter: &str,
        controllers: &[String],
        stop: &StopRequest,
        previous: Option<Watched>,
    ) -> Result<(Watched, Vec<usize>), BusError> {
        let kept = previous.is_some();
        let mut watched = Watched::new(bus, arbiter, controllers, stop, previous)?;
        let changed = watched.group.update_all()?;
        if !kept || !watched.group.any_replaced(&changed) {
            return Ok((watched, changed));
        }
        tracing::warn!("{arbiter}: slots it follows were made anew; subscribing again");
        let mut watched = Watched::new(bus, arbiter, controllers, stop, None)?;
        let changed = watched.group.update_all()?;
        Ok((watched, changed))
    }

    pub(super) fn controller_names(&self) -> Vec<&str> {
        self.controllers.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// Whether controller `name`'s writer is gone (as last read) and, if so, the host it wrote
    /// from when that is another computer (its mirror's writer is gone: the process ended, or
    /// that computer is cut off).
    pub(super) fn gone_writer(&self, name: &str) -> Option<Option<String>> {
        let (i, (_, member)) = self
            .controllers
            .iter()
            .enumerate()
            .find(|(_, (n, _))| n == name)?;
        if self.alive[i] {
            return None;
        }
        let origin = member.and_then(|m| self.group.get(m).meta()?.origin);
        Some(origin)
    }

    /// Makes `sessions` hold, for each controller given an outcome in `outcomes`, the `session`
    /// of the block it was decided on (`ArbiterBlock::sessions`): in place, so that a cycle
    /// allocates only for a controller that was not there before.
    pub(super) fn sessions_into(
        &self,
        outcomes: &BTreeMap<String, Outcome>,
        sessions: &mut BTreeMap<String, u64>,
    ) {
        sessions.retain(|name, _| outcomes.contains_key(name));
        for ((name, _), request) in self.controllers.iter().zip(&self.requests) {
            let Some(r) = request.as_ref().filter(|_| outcomes.contains_key(name)) else {
                sessions.remove(name);
                continue;
            };
            // A name is copied only for a controller that was not there before.
            if let Some(session) = sessions.get_mut(name) {
                *session = r.session;
            } else {
                sessions.insert(name.clone(), r.session);
            }
        }
    }

    /// Re-reads the members in `changed` (all of them with `all`). The group reports a member
    /// as changed when its writer comes or goes as well as on a new value, so the cached
    /// liveness follows the slot. Returns whether a live controller wrote a new block, which
    /// the arbiter's memory block then acknowledges.
    pub(super) fn parse(
        &mut self,
        config: &ArbiterConfig,
        changed: &[usize],
        all: bool,
        read: ReadAt,
    ) -> bool {
        let mut new_blocks = false;
        let arbiter = config.name.as_str();
        let cached = self
            .requests
            .iter_mut()
            .zip(&mut self.alive)
            .zip(&mut self.read_at)
            .zip(&mut self.said)
            .zip(&mut self.unreadable);
        for ((name, member), ((((request, alive), read_at), said), unreadable)) in
            self.controllers.iter().zip(cached)
        {
            let Some(member) = member else {
                (*request, *alive, *read_at) = (None, false, None);
                continue;
            };
            if all || changed.contains(&member.index()) {
                let error = self.group.take_error(member.index());
                let sub = self.group.get(*member);
                let sequence = sub.sequence();
                if unreadable.is_some_and(|held| held != sequence) {
                    *unreadable = None;
                }
                if let Some(e) = error {
                    // A value that cannot be read is passed over, and the controller counts
                    // as absent until its next write is read (`unreadable`). A slot the
                    // registry refused (another type) has left the group, and its controller
                    // counts as absent.
                    tracing::warn!("{arbiter}: controller {name}: {e}");
                    if matches!(e, BusError::Decode { .. } | BusError::Inconsistent { .. }) {
                        *unreadable = Some(sequence);
                    }
                }
                let new_block = read_at.map(|(s, _)| s) != sequence;
                let read = crate::clock::first_read(read_at, sequence, read);
                match (sub.value(), &mut *request) {
                    (Some(block), Some(request)) => {
                        request.reparse(arbiter, &config.resources, block, read)
                    }
                    (block, request) => {
                        *request =
                            block.map(|b| Request::parse(arbiter, &config.resources, b, read))
                    }
                }
                if unreadable.is_some() {
                    *request = None;
                }
                *alive = sub.writer() == Some(WriterState::Alive);
                if !*alive {
                    // The next process of this name is judged (and warned about) afresh.
                    said.arrival = Arrival::OnTime;
                    said.last = (Arrival::OnTime, 0);
                }
                if new_block {
                    let other = sub.value().map(|b| b.name.as_str()).filter(|n| n != name);
                    if let (Some(other), false) = (other, said.misnamed) {
                        tracing::warn!(
                            "{arbiter}: the block in {} names controller '{other}': it counts \
                             as {name}'s (the slot decides whose a block is); a tool or a \
                             program writing another controller's slot?",
                            controller_slot(name)
                        );
                    }
                    said.misnamed = other.is_some();
                }
                if new_block && *alive {
                    new_blocks = true;
                    if let (Some(request), Some(block)) = (request.as_ref(), sub.value()) {
                        let now = arrival_of(request, block, read);
                        if judge_arrival(said, now) {
                            warn_arrival(arbiter, name, now, block, read);
                        }
                    }
                }
            }
        }
        new_blocks
    }
}

/// Enters how a block arrived; `true` when that is to be said: a worse arrival than the one
/// said before, by two blocks in a row. One block is no sign of a clock behind or a stalled
/// process: after a network cut or a registry restart, a mirror's kept value, written before
/// the cut, may arrive once more before the controller's next block does.
fn judge_arrival(said: &mut Said, now: Arrival) -> bool {
    let (last, count) = said.last;
    let in_a_row = if last == now { count + 1 } else { 1 };
    said.last = (now, in_a_row);
    if now <= said.arrival {
        // As good as before, or better: the next worse arrival is said again.
        said.arrival = now;
        return false;
    }
    if in_a_row < 2 {
        return false;
    }
    said.arrival = now;
    true
}

fn arrival_of(request: &Request, block: &ControllerBlock, read: ReadAt) -> Arrival {
    let left_ns = request.expires_at_ns.saturating_sub(read.clock_ns);
    let ttl_ns = block.ttl_ms.min(MAX_TTL_MS) * 1_000_000;
    if request.expires_at_ns < read.clock_ns {
        Arrival::Expired
    } else if left_ns < ttl_ns / 2 {
        Arrival::Late
    } else {
        Arrival::OnTime
    }
}

/// Says that a controller's blocks arrive expired or late, and why that usually is.
fn warn_arrival(
    arbiter: &str,
    name: &str,
    arrival: Arrival,
    block: &ControllerBlock,
    read: ReadAt,
) {
    let behind_ms = read.wall_ns.saturating_sub(block.stamp_ns) / 1_000_000;
    let ttl_ms = block.ttl_ms;
    match arrival {
        Arrival::OnTime => {}
        Arrival::Late => tracing::warn!(
            "{arbiter}: controller {name}'s block arrives with less than half of its time to \
             live left (stamped {behind_ms} ms before this computer's clock, for a time to live \
             of {ttl_ms} ms): its computer's clock is behind this one's, or its blocks come \
             late (a slow network, a stalled process). A little more and each block expires \
             before the next refresh comes, and the controller's control comes and goes: keep \
             the computers' clocks synchronised, or give the controller a longer time to live"
        ),
        Arrival::Expired => tracing::warn!(
            "{arbiter}: controller {name}'s block arrives already expired (stamped {behind_ms} \
             ms before this computer's clock, for a time to live of {ttl_ms} ms): its \
             computer's clock is behind this one's (keep the computers' clocks synchronised), \
             or it stopped refreshing its block while it lives; it counts as expired"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worse arrival is said once it comes twice in a row: one old block arriving again (a
    /// network cut ending) is not a clock behind; blocks that keep arriving so are.
    #[test]
    fn a_worse_arrival_is_said_when_two_blocks_in_a_row_show_it() {
        use Arrival::{Expired, Late, OnTime};
        let mut said = Said {
            arrival: OnTime,
            misnamed: false,
            last: (OnTime, 0),
        };
        let mut judge = |arrivals: &[Arrival]| -> Vec<bool> {
            arrivals
                .iter()
                .map(|a| judge_arrival(&mut said, *a))
                .collect()
        };
        assert_eq!(
            judge(&[OnTime, Expired, OnTime]),
            [false, false, false],
            "one old block"
        );
        assert_eq!(
            judge(&[Expired, Expired, Expired]),
            [false, true, false],
            "said once"
        );
        assert_eq!(judge(&[OnTime, Late, Late]), [false, false, true]);
        assert_eq!(judge(&[Expired, Expired]), [false, true], "worse than said");
    }
}
