//! `bus-stress`: writes or checks self-checking values on a slot. Used by Baton's test suite and
//! to burn in a machine: any bad read means a torn or corrupt value.

#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use tools::stress::{cycling_size, Checked};

#[derive(Parser)]
#[command(
    name = "bus-stress",
    version = daemon::version(bus::slot::VERSION, None),
    about = "Write or check self-checking values on a Baton slot",
    after_help = "Exit status: 0 done (read: every value checked good); 1 an error, or read \
no value at all; 2 read: a bad value; 64 a command line that does not parse."
)]
struct Args {
    /// Bus domain.
    #[arg(long, global = true, env = "BUS_DOMAIN", default_value = bus::names::DEFAULT_DOMAIN,
          value_parser = bus::Domain::parse_arg)]
    domain: bus::Domain,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write values as fast as possible (or every --interval-ms), sizes cycling min..max.
    /// Prints a JSON summary line; exits 1 when no registry ever took the publication (the
    /// values went nowhere).
    Write {
        /// Public name of the slot to publish (e.g. /stress/a).
        #[arg(long)]
        name: String,
        /// Slots: with N above 1, the N slots NAME/0 to NAME/{N-1}, each value written to
        /// every one in turn (1 to 1,000).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1000))]
        slots: u16,
        /// Smallest payload, bytes (0 allowed: each value also carries its sequence number and
        /// a checksum over both).
        #[arg(long, default_value_t = 8)]
        min_size: usize,
        /// Largest payload, bytes; the slot is made this big (plus 64 bytes).
        #[arg(long, default_value_t = 1 << 20)]
        max_size: usize,
        /// Stop after this many seconds (default: run until killed).
        #[arg(long, value_parser = seconds, allow_negative_numbers = true)]
        seconds: Option<f64>,
        /// Stop after this many values.
        #[arg(long)]
        count: Option<u64>,
        /// Pause between values.
        #[arg(long, default_value_t = 0)]
        interval_ms: u64,
        /// After the last value, keep running (holding the publication) this many seconds.
        #[arg(long, default_value_t = 0.0, value_parser = seconds, allow_negative_numbers = true)]
        linger: f64,
    },
    /// Read and check every value seen; prints a JSON summary line. Exits 2 on any bad read: a
    /// value whose checksum fails, one numbered below the one before from the same writer
    /// (a writer restarted numbers from 1 again: counted in `writers_changed`, not as read
    /// backwards; a value of a writer earlier than the slot's current one, read late, names no
    /// writer and is compared with nothing), or a read the bus reported as an error (said on stderr: a value that did
    /// not decode, or the slot made anew by the registry). Exits 1 when it read no value at
    /// all (of one of its slots): a check of nothing passes nothing.
    Read {
        /// Public name of the slot to subscribe to.
        #[arg(long)]
        name: String,
        /// Slots: with N above 1, the N slots NAME/0 to NAME/{N-1}, each checked on its
        /// own (`last` is the lowest of their last values) (1 to 1,000; with --wait, to 127).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1000))]
        slots: u16,
        /// Read for this many seconds.
        #[arg(long, value_parser = seconds, allow_negative_numbers = true)]
        seconds: f64,
        /// Wait for updates (futex) instead of busy polling.
        #[arg(long)]
        wait: bool,
        /// Stop early once a value with this sequence field or higher was read (of every
        /// slot).
        #[arg(long)]
        until: Option<u64>,
        /// Stop early once the slot's writer is gone (every slot's): its process exited or died,
        /// on this computer or, for a mirrored slot, on its origin computer.
        #[arg(long)]
        until_writer_gone: bool,
    },
}

fn main() {
    // Warnings of the bus library (a registration refused, a value never published) reach
    // the user; RUST_LOG raises or lowers the level.
    daemon::init_logging("warn");
    let args: Args = daemon::parse_args();
    let result = bus::Bus::open(args.domain)
        .map_err(|e| e.to_string())
        .and_then(|bus| run(&bus, args.command));
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("bus-stress: {e}");
            std::process::exit(1);
        }
    }
}

fn run(bus: &bus::Bus, command: Command) -> Result<i32, String> {
    match command {
        Command::Write {
            name,
            slots,
            min_size,
            max_size,
            seconds,
            count,
            interval_ms,
            linger,
        } => {
            if min_size > max_size {
                return Err(format!(
                    "--min-size {min_size} is above --max-size {max_size}"
                ));
            }
            let mut publications = Vec::new();
            for slot in slot_names(&name, slots) {
                let publication = bus
                    .publication(&slot)
                    .map_err(|e| e.to_string())?
                    .capacity(max_size.saturating_add(64))
                    .create::<Checked, bus::Serde>()
                    .map_err(|e| e.to_string())?;
                publications.push(publication);
            }
            let end = seconds.map(|s| Instant::now() + Duration::from_secs_f64(s));
            let mut i = 0u64;
            while count.is_none_or(|c| i < c) && end.is_none_or(|e| Instant::now() < e) {
                i += 1;
                let value = Checked::new(i, cycling_size(i, min_size, max_size));
                for publication in &mut publications {
                    publication.write(&value).map_err(|e| e.to_string())?;
                }
                if interval_ms > 0 {
                    std::thread::sleep(Duration::from_millis(interval_ms));
                }
            }
            println!("{{\"written\":{i}}}");
            std::thread::sleep(Duration::from_secs_f64(linger));
            if !publications.iter().all(|p| p.is_bound()) {
                // Written into nothing: a run that checks nothing must not pass.
                eprintln!(
                    "bus-stress: no registry-server took the publication of {name}: none of \
                     the {i} values was published"
                );
                return Ok(1);
            }
            Ok(0)
        }
        Command::Read {
            name,
            slots,
            seconds,
            wait,
            until,
            until_writer_gone,
        } => {
            // The kernel's futex_waitv limit, one word kept for the group's binding.
            let most = bus::futex::WAITV_MAX - 1;
            if wait && usize::from(slots) > most {
                // A command line that cannot work: a usage error, as clap's own.
                eprintln!(
                    "bus-stress: --wait reads at most {most} slots (a subscription group waits \
                     on at most that many); read {slots} without --wait, or in several readers"
                );
                return Ok(64);
            }
            // A group, also of one: its wait also reports a change of the writer's state.
            let mut group = bus::SubscriptionGroup::new();
            let mut tracks = Vec::new();
            for slot in slot_names(&name, slots) {
                let member = group.add(bus.subscribe::<Checked>(&slot).map_err(|e| e.to_string())?);
                tracks.push((member, Track::default()));
            }
            let end = Instant::now() + Duration::from_secs_f64(seconds);
            while Instant::now() < end {
                let changed = if wait {
                    group.wait_any(end.saturating_duration_since(Instant::now()))
                } else {
                    group.update_all()
                };
                // A group keeps a member's failure (a value that did not decode, say) for
                // take_error rather than failing the call: both count as bad reads.
                if let Err(e) = changed {
                    eprintln!("bus-stress: read error: {e}");
                    tracks[0].1.bad += 1;
                    continue;
                }
                for (member, track) in &mut tracks {
                    if let Some(e) = group.take_error(member.index()) {
                        track.failed(&e);
                    } else {
                        track.read(group.get(*member));
                    }
                }
                let last = lowest_last(&tracks);
                let gone = tracks
                    .iter()
                    .all(|(m, _)| group.get(*m).writer() == Some(bus::WriterState::Gone));
                if until.is_some_and(|u| last >= u) || (until_writer_gone && gone) {
                    break;
                }
            }
            let writer = group
                .get(tracks[0].0)
                .writer()
                .map_or("unbound".to_owned(), |w| format!("{w:?}"));
            let sum = |f: fn(&Track) -> u64| tracks.iter().map(|(_, t)| f(t)).sum::<u64>();
            let (reads, bad, backwards) = (sum(|t| t.reads), sum(|t| t.bad), sum(|t| t.backwards));
            let last = lowest_last(&tracks);
            let restarts = sum(|t| t.restarts);
            println!(
                "{{\"reads\":{reads},\"bad\":{bad},\"backwards\":{backwards},\"last\":{last},\"writer\":\"{writer}\",\"writers_changed\":{restarts}}}"
            );
            if bad > 0 || backwards > 0 {
                return Ok(2);
            }
            if tracks.iter().any(|(_, t)| t.reads == 0) {
                eprintln!(
                    "bus-stress: read no value of {name}{} in {seconds} s (its slot never \
                     appeared, or nothing was written to it)",
                    if slots > 1 { " (one of its slots)" } else { "" }
                );
                return Ok(1);
            }
            Ok(0)
        }
    }
}

/// The slots of `--name` and `--slots`: the name itself, or NAME/0 to NAME/{N-1}.
fn slot_names(name: &str, slots: u16) -> Vec<String> {
    if slots == 1 {
        vec![name.to_owned()]
    } else {
        (0..slots).map(|i| format!("{name}/{i}")).collect()
    }
}

/// The sequence field read last of the slot that is furthest behind.
fn lowest_last<M>(tracks: &[(M, Track)]) -> u64 {
    tracks.iter().map(|(_, t)| t.last).min().unwrap_or(0)
}

/// What a reader saw of one slot.
#[derive(Default)]
struct Track {
    reads: u64,
    bad: u64,
    backwards: u64,
    /// The sequence field of the value read last.
    last: u64,
    slot_sequence: u64,
    /// The writer of the values read, and how often it changed: a writer restarted numbers
    /// its values from 1 again, which is no value read backwards.
    writer_id: Option<bus::WriterId>,
    restarts: u64,
    /// The writer of the value read last: only a value of the same writer is compared.
    last_writer: Option<bus::WriterId>,
}

impl Track {
    fn failed(&mut self, e: &bus::BusError) {
        eprintln!("bus-stress: read error: {e}");
        self.bad += 1;
        if matches!(e, bus::BusError::Replaced { .. }) {
            // The subscription follows the new slot, whose sequence numbers start again at
            // 1: its first value is new whatever its number.
            self.slot_sequence = 0;
        }
    }

    fn read(&mut self, sub: &bus::Subscription<Checked>) {
        // The writer is None for a value of a writer earlier than the slot's current one (pid
        // 0: a reader that fell behind reads the last value of a writer that exited after the
        // next took the name). Which earlier writer is not known: such a value is no change
        // of writer, and is not compared with the one before.
        let fresh = sub
            .meta()
            .map(|m| (m.sequence, (m.writer_pid != 0).then_some(m.writer_id)))
            .filter(|(s, _)| *s != self.slot_sequence);
        let (Some((seq, id)), Some(value)) = (fresh, sub.value()) else {
            return;
        };
        self.slot_sequence = seq;
        self.reads += 1;
        if let Some(id) = id {
            if self
                .writer_id
                .replace(id)
                .is_some_and(|before| before != id)
            {
                self.restarts += 1;
            }
        }
        if !value.is_valid() {
            self.bad += 1;
        }
        if id.is_some() && id == self.last_writer && value.sequence < self.last {
            self.backwards += 1;
        }
        (self.last, self.last_writer) = (value.sequence, id);
    }
}

/// A number of seconds: finite, 0 to a year.
fn seconds(text: &str) -> Result<f64, String> {
    text.parse::<f64>()
        .ok()
        .filter(|s| (0.0..=365.0 * 86400.0).contains(s))
        .ok_or_else(|| format!("{text:?}: give 0 to 31536000 seconds"))
}
