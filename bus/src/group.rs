//! Subscription groups: update many subscriptions at once, and wait select-like until any of
//! them changes (one `futex_waitv` over every member's notify word).

use std::any::Any;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::{ClientShared, Endpoint};
use crate::endpoints::Subscription;
use crate::error::BusError;
use crate::futex::{self, WaitOn, WAITV_MAX};
use crate::value::Codec;

/// A typed handle on a group member, returned by `SubscriptionGroup::add`; it names a member
/// of that group only.
pub struct Member<T, C> {
    index: usize,
    /// The group it came from (`SubscriptionGroup::id`).
    group: u64,
    _type: PhantomData<fn() -> (T, C)>,
}

impl<T, C> Member<T, C> {
    /// Position of the member in the group, as `update_all` and `wait_any` report it.
    pub fn index(&self) -> usize {
        self.index
    }
}

impl<T, C> Clone for Member<T, C> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T, C> Copy for Member<T, C> {}

trait AnySubscription {
    fn update(&mut self) -> Result<bool, BusError>;
    fn writer_state(&self) -> Option<crate::slot::WriterState>;
    fn sequence(&self) -> u64;
    /// A slot made anew that the next update reports or moves on to.
    fn replacement_pending(&self) -> bool;
    fn endpoint(&self) -> &Arc<Endpoint>;
    fn slot(&self) -> Option<&crate::slot::Slot> {
        self.endpoint().slot.get()
    }
    fn client(&self) -> &Arc<ClientShared> {
        &self.endpoint().client
    }
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}

impl<T: 'static, C: Codec<T>> AnySubscription for Subscription<T, C> {
    fn update(&mut self) -> Result<bool, BusError> {
        Subscription::update(self)
    }
    fn writer_state(&self) -> Option<crate::slot::WriterState> {
        self.writer()
    }
    fn sequence(&self) -> u64 {
        self.last_sequence()
    }
    fn replacement_pending(&self) -> bool {
        self.replaced_unreported() || self.moves_on()
    }
    fn endpoint(&self) -> &Arc<Endpoint> {
        Subscription::endpoint(self)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

/// Subscriptions updated and waited on together. A member counts as changed when it holds a
/// newer value, or when its slot's writer came or went (so that a process waiting on a group
/// learns at once that a publisher died or was dropped).
///
/// One member's failure does not fail the group: a member whose update fails is reported as
/// changed, with its error kept for [`SubscriptionGroup::take_error`]. A value that cannot be
/// read (it does not decode, or the slot's memory is inconsistent) is passed over (see
/// `Subscription::update`), and the member is pulled again at its slot's next write. A member
/// that cannot bind (the registry refused it: its slot holds another type; or its slot could
/// not be mapped here) is left out of the group's pulls until it is bound after all (the client
/// registers it again with every registry that starts, and one may accept it).
///
/// `wait_any` counts the group as a waiter on every member's slot and keeps it counted until the
/// next `wait_any`, `update_all` or drop: a loop that handles a change and waits again (an
/// arbiter) then registers once instead of twice per member per wake-up, and the wake-up goes
/// straight to reading the member that woke it. Meanwhile a write to a member's slot makes one
/// futex wake system call that may find nobody asleep (about a microsecond of the writer's
/// time). A count kept from before needs no fresh read-modify-write: a writer that sees it
/// always bumps the notify word and wakes, and the waiter re-checks after reading that word.
/// A writer may drop such a count as stale (`slot::waiters`) after many wakes that found the
/// group awake; the group then sees its ticket gone at its next wait and counts again.
pub struct SubscriptionGroup {
    members: Vec<MemberState>,
    /// Unique in the process: a `Member` of another group is told apart.
    id: u64,
    /// The waker `wait_any` also sleeps on (`wake_on`), and its count when last looked at.
    waker: Option<(GroupWaker, u32)>,
}

impl Default for SubscriptionGroup {
    fn default() -> Self {
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        SubscriptionGroup {
            members: Vec::new(),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            waker: None,
        }
    }
}

/// Ends a `SubscriptionGroup::wait_any` from another thread (a signal handler's thread, a
/// timer): the wait returns, with no member changed unless one did. For a process that must
/// act on something besides the bus without polling. Clones wake the same groups; a wake
/// while nobody waits ends the next wait at once.
#[derive(Clone, Default)]
pub struct GroupWaker(Arc<AtomicU32>);

impl GroupWaker {
    pub fn new() -> Self {
        Self::default()
    }

    /// Wakes every group that waits on this waker (or will: see the type).
    pub fn wake(&self) {
        // SeqCst against the group's load of the count before it sleeps on it: either the
        // group sees the new count, or the kernel finds the word changed or wakes it.
        self.0.fetch_add(1, Ordering::SeqCst);
        futex::wake_all(&self.0, false);
    }
}

/// One member and what the group keeps about it between calls.
struct MemberState {
    subscription: Box<dyn AnySubscription>,
    /// Its writer's state when last pulled (a change counts as a change of the member).
    writer: Option<crate::slot::WriterState>,
    /// The waiter count this group holds on its slot, if any, with the endpoint whose slot
    /// it is on: the member may have moved on to a slot made anew since (`move_on`, also
    /// through `get_mut`), and a count goes back to the slot it was taken on.
    counted: Option<(crate::slot::WaiterTicket, Arc<Endpoint>)>,
    /// The error of a failed update, until taken.
    error: Option<BusError>,
    /// Left out after the registry refused to bind it (that would repeat at every update).
    broken: bool,
}

impl MemberState {
    /// Takes back this member's waiter count, if the group holds one.
    fn uncount(&mut self) {
        if let Some((ticket, endpoint)) = self.counted.take() {
            if let Some(slot) = endpoint.slot.get() {
                slot.uncount_waiter(ticket);
            }
        }
    }

    /// Pulls the member; whether it changed (new value, writer came or went, or it failed).
    fn pull(&mut self) -> bool {
        if self.broken {
            if self.subscription.slot().is_none() {
                return false;
            }
            // Bound since (accepted at a later registration): taken back.
            self.broken = false;
        }
        let new_value = match self.subscription.update() {
            Ok(new_value) => new_value,
            Err(e) => {
                // A bound member's failure is one value passed over; an unbound one's is the
                // registry's refusal.
                if self.subscription.slot().is_none() {
                    self.broken = true;
                    self.uncount();
                }
                self.error = Some(e);
                return true;
            }
        };
        let now = self.subscription.writer_state();
        let changed = new_value || now != self.writer;
        self.writer = now;
        if changed {
            // An error left untaken stands until the member changes again: then it would be
            // taken for the cause of this good change. (Not before: a caller may pull again,
            // `update_all` after `wait_any`, before it takes the error.)
            self.error = None;
        }
        changed
    }
}

impl SubscriptionGroup {
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes `waker.wake()` end this group's `wait_any` (see `GroupWaker`). Wakes from before
    /// this call do not count.
    pub fn wake_on(&mut self, waker: &GroupWaker) {
        let seen = waker.0.load(Ordering::SeqCst);
        self.waker = Some((waker.clone(), seen));
    }

    /// Whether the waker was woken since last looked at (and now it has been).
    fn woken(&mut self) -> bool {
        let Some((waker, seen)) = &mut self.waker else {
            return false;
        };
        let now = waker.0.load(Ordering::SeqCst);
        std::mem::replace(seen, now) != now
    }

    /// Adds a subscription; the handle gives typed access to it later.
    pub fn add<T: 'static, C: Codec<T>>(
        &mut self,
        subscription: Subscription<T, C>,
    ) -> Member<T, C> {
        self.members.push(MemberState {
            writer: subscription.writer(),
            subscription: Box::new(subscription),
            counted: None,
            error: None,
            broken: false,
        });
        Member {
            index: self.members.len() - 1,
            group: self.id,
            _type: PhantomData,
        }
    }

    /// Member `member`'s subscription.
    ///
    /// # Panics
    ///
    /// If `member` came from another group (a mistake in the program, like indexing another
    /// vector).
    pub fn get<T: 'static, C: Codec<T>>(&self, member: Member<T, C>) -> &Subscription<T, C> {
        self.check(member.group);
        self.members[member.index]
            .subscription
            .as_any()
            .downcast_ref()
            .expect("a Member handle always names a subscription of its own type")
    }

    /// As `get`, mutable; the same panic.
    pub fn get_mut<T: 'static, C: Codec<T>>(
        &mut self,
        member: Member<T, C>,
    ) -> &mut Subscription<T, C> {
        self.check(member.group);
        self.members[member.index]
            .subscription
            .as_any_mut()
            .downcast_mut()
            .expect("a Member handle always names a subscription of its own type")
    }

    fn check(&self, group: u64) {
        check_member_of(group, self.id);
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Pulls every member; returns the indices of those that changed (new value, or writer
    /// came or went). Ends the waiter registration `wait_any` keeps (see the type).
    pub fn update_all(&mut self) -> Result<Vec<usize>, BusError> {
        self.uncount();
        Ok(self.pull_all())
    }

    fn pull_all(&mut self) -> Vec<usize> {
        (0..self.members.len())
            .filter(|&i| self.members[i].pull())
            .collect()
    }

    /// Blocks until at least one member changed (a newer value, its writer came or went, or
    /// its update failed: see the type), pulls the members that changed and returns their
    /// indices; an empty list means `timeout` passed, or a `GroupWaker` of the group woke it.
    /// A member reported may have no value yet (its publisher appeared before writing). At
    /// most 127 members can be waited on (the kernel's `futex_waitv` limit, one word kept for
    /// binding; 126 with a waker), one fewer for each further `Bus` the members come from
    /// (each has its bind word); more is `BusError::GroupTooLarge`.
    ///
    /// Before sleeping every member is pulled. After a wake-up only the member whose write woke
    /// the group is (when the kernel names it and it did change): touching one slot instead of
    /// all keeps a wake-up as fast with 30 members as with one. Members that changed at the
    /// same moment are reported by the next call, which then returns at once.
    pub fn wait_any(&mut self, timeout: Duration) -> Result<Vec<usize>, BusError> {
        let deadline = futex::deadline_after(timeout);
        // Words kept besides the members': one bind word per client the members come from
        // (one per `Bus`, usually one in all), one for a waker. Counted only for a group large
        // enough for it to matter (there are at most as many clients as members).
        let waker = usize::from(self.waker.is_some());
        let clients = if 2 * self.members.len().max(1) + waker <= WAITV_MAX {
            1
        } else {
            let mut clients: Vec<*const ClientShared> = self
                .members
                .iter()
                .map(|m| Arc::as_ptr(m.subscription.client()))
                .collect();
            clients.sort_unstable();
            clients.dedup();
            clients.len().max(1)
        };
        let reserved = clients + waker;
        if self.members.len() + reserved > WAITV_MAX {
            return Err(BusError::GroupTooLarge {
                members: self.members.len(),
                max: WAITV_MAX - reserved,
            });
        }
        loop {
            let changed = self.pull_all();
            if !changed.is_empty() {
                return Ok(changed);
            }
            if self.woken() {
                return Ok(Vec::new());
            }
            match self.sleep(deadline) {
                futex::Wake::TimedOut => return Ok(self.pull_all()),
                futex::Wake::Maybe(Some(member)) => {
                    if self.members[member].pull() {
                        return Ok(vec![member]);
                    }
                }
                futex::Wake::Maybe(None) => {}
                futex::Wake::Failed(errno) => return Err(waitv_failed(errno)),
            }
        }
    }

    /// The error that made `wait_any` or `update_all` report member `index` as changed, if
    /// any, left for `take_error` until the member next changes without one.
    pub fn error(&self, index: usize) -> Option<&BusError> {
        self.members.get(index).and_then(|m| m.error.as_ref())
    }

    /// Whether a member in `changed` (as `wait_any` or `update_all` reported them) found its
    /// slot made anew by the registry (`BusError::Replaced`): the member follows the new slot
    /// from its next pull on, starting afresh there; a process may subscribe again instead.
    pub fn any_replaced(&self, changed: &[usize]) -> bool {
        changed
            .iter()
            .any(|&i| matches!(self.error(i), Some(BusError::Replaced { .. })))
    }

    /// The error that made `wait_any` or `update_all` report member `index` as changed, if any
    /// (see the type).
    pub fn take_error(&mut self, index: usize) -> Option<BusError> {
        self.members.get_mut(index).and_then(|m| m.error.take())
    }

    /// Ends the group and hands its subscriptions back (`Released::take`), bound as they are
    /// and holding their values: a process that rebuilds a group (other members, another
    /// order) keeps following the slots it already followed, also while no registry runs to
    /// bind new subscriptions.
    pub fn release(mut self) -> Released {
        self.uncount();
        Released {
            members: std::mem::take(&mut self.members)
                .into_iter()
                .map(|m| Some(m.subscription))
                .collect(),
            group: self.id,
        }
    }

    /// Drops the waiter counts this group holds.
    fn uncount(&mut self) {
        self.members.iter_mut().for_each(MemberState::uncount);
    }

    /// Sleeps until a member's notify word (or a client's bind word) moves. `Maybe(Some(i))`:
    /// member `i`'s word woke us.
    fn sleep(&mut self, deadline: Option<Instant>) -> futex::Wake {
        let mut words = Vec::with_capacity(self.members.len() + 1);
        // Per word: the member it belongs to (`None`: a client's bind word).
        let mut word_members = Vec::with_capacity(self.members.len() + 1);
        let mut clients: Vec<&Arc<ClientShared>> = Vec::new();
        let mut ready = false;
        for (i, m) in self.members.iter_mut().enumerate() {
            if m.broken {
                // Left out until bound after all: the bind word says when.
                let sub = &m.subscription;
                watch_bind_word(sub.client(), &mut clients, &mut word_members, &mut words);
                ready |= sub.slot().is_some();
                continue;
            }
            if m.counted
                .as_ref()
                .is_some_and(|(_, on)| !Arc::ptr_eq(on, m.subscription.endpoint()))
            {
                // Counted on a slot the member has left (made anew): given back there.
                m.uncount();
            }
            let sub = &m.subscription;
            match sub.slot() {
                Some(slot) => {
                    // As in `Subscription::wait_update`: be counted, read the notify word, then
                    // re-check, so that a concurrent write either sees us or we see it. A count
                    // kept from the previous wait serves as well as a fresh one; one a writer
                    // dropped as stale (`slot::waiters`) is let go, and the next sleep counts
                    // again.
                    let (ticket, _) = m
                        .counted
                        .get_or_insert_with(|| (slot.count_waiter(), Arc::clone(sub.endpoint())));
                    let expected = slot.notify_to_sleep_on(ticket);
                    if expected.is_none() {
                        m.counted = None;
                    }
                    word_members.push(Some(i));
                    words.push(WaitOn {
                        word: slot.notify_word(),
                        expected: expected.unwrap_or(0),
                        shared: true,
                    });
                    // The client's bind word too: the registry's news that a slot was made
                    // anew bumps it, while a wake through the slot's own word can miss us (a
                    // segment cut short puts a private page where the shared one was).
                    watch_bind_word(sub.client(), &mut clients, &mut word_members, &mut words);
                    ready |= expected.is_none()
                        || slot.has_news(sub.sequence())
                        || sub.writer_state() != m.writer
                        || sub.replacement_pending();
                }
                None => {
                    watch_bind_word(sub.client(), &mut clients, &mut word_members, &mut words);
                    // Bound, or refused, after our update but before we read the bind word:
                    // don't sleep.
                    ready |= sub.slot().is_some() || sub.endpoint().error().is_some();
                }
            }
        }
        if let Some((waker, seen)) = &self.waker {
            word_members.push(None);
            words.push(WaitOn {
                word: &waker.0,
                expected: *seen,
                shared: false,
            });
        }
        if ready {
            return futex::Wake::Maybe(None);
        }
        if words.is_empty() {
            // No member (or every one left out after a failure), no waker: nothing can wake us.
            std::thread::sleep(futex::time_left(deadline));
            return futex::Wake::TimedOut;
        }
        // At most `RECHECK_EVERY` at a time, as `wait_update`: a member's count can be lost
        // under the group (its slot's waiters word overwritten), and writers then wake nobody;
        // the next sleep finds that out (`Slot::is_counted`) and counts again.
        let recheck = Instant::now() + crate::endpoints::RECHECK_EVERY;
        match futex::wait_any(&words, Some(deadline.map_or(recheck, |d| d.min(recheck)))) {
            futex::Wake::Maybe(Some(w)) => {
                futex::Wake::Maybe(word_members.get(w).copied().flatten())
            }
            futex::Wake::TimedOut if deadline.is_none_or(|d| recheck < d) => {
                futex::Wake::Maybe(None)
            }
            other => other,
        }
    }
}

/// Adds `client`'s bind word to the words slept on, once per client: it moves when the registry
/// binds one of the client's endpoints, or tells it that a slot was made anew.
fn watch_bind_word<'a>(
    client: &'a Arc<ClientShared>,
    clients: &mut Vec<&'a Arc<ClientShared>>,
    word_members: &mut Vec<Option<usize>>,
    words: &mut Vec<WaitOn<'a>>,
) {
    if !clients.iter().any(|c| Arc::ptr_eq(c, client)) {
        clients.push(client);
        word_members.push(None);
        words.push(WaitOn {
            word: &client.bind_word,
            expected: client.bind_word.load(Ordering::SeqCst),
            shared: false,
        });
    }
}

/// The subscriptions of a group that ended (`SubscriptionGroup::release`).
pub struct Released {
    members: Vec<Option<Box<dyn AnySubscription>>>,
    group: u64,
}

impl Released {
    /// Member `member`'s subscription, once; `None` if taken already.
    ///
    /// # Panics
    ///
    /// If `member` came from another group (as `SubscriptionGroup::get`).
    pub fn take<T: 'static, C: Codec<T>>(
        &mut self,
        member: Member<T, C>,
    ) -> Option<Subscription<T, C>> {
        check_member_of(member.group, self.group);
        let subscription = self.members.get_mut(member.index)?.take()?;
        let subscription = subscription
            .into_any()
            .downcast()
            .expect("a Member handle always names a subscription of its own type");
        Some(*subscription)
    }
}

/// Panics unless a `Member` made by group `member_group` is used with that group, `group`.
fn check_member_of(member_group: u64, group: u64) {
    assert!(
        member_group == group,
        "a Member handle used with another SubscriptionGroup than the one that made it"
    );
}

impl Drop for SubscriptionGroup {
    fn drop(&mut self) {
        self.uncount();
    }
}

/// `wait_any`'s error when the kernel will not wait on several words: an error, rather than a
/// loop that fails again at once, for ever, at full speed.
fn waitv_failed(errno: i32) -> BusError {
    BusError::io(
        "waiting on a subscription group (futex_waitv)",
        format!(
            "{}: it needs Linux 5.16 or later, and a seccomp profile (container runtime) that \
             allows futex_waitv",
            std::io::Error::from_raw_os_error(errno)
        ),
    )
}
