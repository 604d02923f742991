//! Results of bus-bench: latency samples turned into percentiles, one `Row` per measured case,
//! the ratios between rows (to the raw baselines and to iceoryx2), the target checks, and the
//! printed table and JSON lines. Nothing here measures; it only summarises.

use std::fmt::Write as _;

use serde::Serialize;

/// Percentiles of one latency series, in nanoseconds (nearest-rank on the sorted samples).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Stats {
    pub n: usize,
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
    pub mean: f64,
}

impl Stats {
    /// Sorts `samples` and summarises them. `None` when there is no sample.
    pub fn of(samples: &mut [u64]) -> Option<Stats> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable();
        let n = samples.len();
        let rank = |q: f64| samples[((q * n as f64).ceil() as usize).clamp(1, n) - 1];
        let sum: u128 = samples.iter().map(|&s| u128::from(s)).sum();
        Some(Stats {
            n,
            p50: rank(0.50),
            p99: rank(0.99),
            p999: rank(0.999),
            max: samples[n - 1],
            mean: sum as f64 / n as f64,
        })
    }
}

/// Which implementation a row measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum System {
    /// The raw shared-memory / futex baselines.
    Raw,
    /// Baton's bus.
    Bus,
    /// The iceoryx2 peer library.
    Iceoryx2,
}

/// How the receiving side waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Spin on the value (update() in a loop).
    Busy,
    /// Sleep in the kernel until woken (wait_update, futex, iceoryx2 listener).
    Wait,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Busy => "busy",
            Mode::Wait => "wait",
        }
    }
}

/// One measured result.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Table the row belongs to (also the `--only` group that produced it).
    pub group: &'static str,
    pub system: System,
    /// Human name of the case, unique within the run.
    pub case: String,
    pub mode: Option<Mode>,
    /// Payload bytes of the value that travels (0 where not meaningful).
    pub bytes: usize,
    /// Pause between messages (idle-gap case), in milliseconds.
    pub gap_ms: u64,
    pub stats: Stats,
    /// Throughput rows: values written per second over the whole timed run.
    pub per_second: Option<f64>,
    /// Case of the baseline row this one is compared with, and p50 / baseline p50.
    pub baseline: Option<String>,
    pub vs_baseline: Option<f64>,
    /// p50 / iceoryx2's p50 for the same size and mode, when iceoryx2 was measured.
    pub vs_iceoryx2: Option<f64>,
    /// p50 / p50 of the raw row of the same mode that copies no payload (counters only).
    pub vs_counters: Option<f64>,
    /// The targets this row is held to, each with whether it is met.
    pub targets: Vec<(String, bool)>,
    /// Anything the reader must know to read the row honestly.
    pub note: Option<String>,
    /// Series whose p50 must stay flat (publish-cost rows), by name.
    pub series: Vec<&'static str>,
}

impl Row {
    pub fn new(group: &'static str, system: System, case: impl Into<String>, stats: Stats) -> Row {
        Row {
            group,
            system,
            case: case.into(),
            mode: None,
            bytes: 0,
            gap_ms: 0,
            stats,
            per_second: None,
            baseline: None,
            vs_baseline: None,
            vs_iceoryx2: None,
            vs_counters: None,
            targets: Vec::new(),
            note: None,
            series: Vec::new(),
        }
    }

    pub fn mode(mut self, mode: Mode) -> Row {
        self.mode = Some(mode);
        self
    }

    pub fn bytes(mut self, bytes: usize) -> Row {
        self.bytes = bytes;
        self
    }

    pub fn gap_ms(mut self, gap_ms: u64) -> Row {
        self.gap_ms = gap_ms;
        self
    }

    pub fn note(mut self, note: impl Into<String>) -> Row {
        self.note = Some(note.into());
        self
    }

    pub fn baseline(mut self, case: impl Into<String>) -> Row {
        self.baseline = Some(case.into());
        self
    }

    pub fn series(mut self, series: &[&'static str]) -> Row {
        self.series = series.to_vec();
        self
    }
}

/// One target and whether the run met it, for the summary.
#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    pub target: String,
    pub met: bool,
    pub detail: String,
}

/// Fills in ratios and per-row targets: each bus or iceoryx2 ping-pong row against the raw row
/// of the same mode, size and gap (atomic for busy, futex for wait), against the raw row of the
/// same mode without payload, and each bus row against the iceoryx2 row of the same mode, size
/// and gap. Other rows against the row their `baseline` names.
pub fn compare(rows: &mut [Row]) {
    let snapshot: Vec<Row> = rows.to_vec();
    let find = |system: System, row: &Row, bytes: usize, gap_ms: u64| {
        snapshot.iter().find(|r| {
            r.system == system
                && r.group == "pingpong"
                && r.mode == row.mode
                && r.bytes == bytes
                && r.gap_ms == gap_ms
        })
    };
    let ratio = |row: &Row, other: &Row| row.stats.p50 as f64 / other.stats.p50.max(1) as f64;
    for row in rows.iter_mut().filter(|r| r.group == "pingpong") {
        if row.system == System::Raw && row.bytes == 0 {
            continue;
        }
        if let Some(base) = find(System::Raw, row, 0, 0) {
            row.vs_counters = Some(ratio(row, base));
        }
        if row.system == System::Raw {
            continue;
        }
        if let Some(base) = find(System::Raw, row, row.bytes, row.gap_ms) {
            let r = ratio(row, base);
            row.baseline = Some(base.case.clone());
            row.vs_baseline = Some(r);
            if row.system == System::Bus {
                let limit = match row.mode {
                    Some(Mode::Busy) => 1.5,
                    _ => 1.3,
                };
                row.targets
                    .push((format!("p50 <= {limit}x raw"), r <= limit));
            }
        }
        if row.system == System::Bus {
            if let Some(peer) = find(System::Iceoryx2, row, row.bytes, row.gap_ms) {
                let r = ratio(row, peer);
                row.vs_iceoryx2 = Some(r);
                row.targets.push(("p50 < iceoryx2".into(), r < 1.0));
            }
        }
    }
    for row in rows.iter_mut().filter(|r| r.group != "pingpong") {
        if let Some(base) = row.baseline.as_ref().and_then(|b| {
            snapshot
                .iter()
                .find(|r| &r.case == b && r.group == row.group)
        }) {
            row.vs_baseline = Some(ratio(row, base));
        }
    }
}

/// Publish-cost series held to the flatness target: 1, 10 and 100 polling subscribers, and 10,
/// 1,000 and 10,000 slots.
pub const FLAT_SERIES: [&str; 2] = ["subscribers", "slots"];

/// The summary of targets: every ping-pong row with a target, and the flatness of the publish
/// cost across each series in `FLAT_SERIES`.
pub fn verdicts(rows: &[Row]) -> Vec<Verdict> {
    let mut out = Vec::new();
    for row in rows {
        for (target, met) in &row.targets {
            let mut detail = format!("p50 {}", fmt_ns(row.stats.p50 as f64));
            if let Some(r) = row.vs_baseline {
                let _ = write!(detail, ", {r:.2}x raw with the same payload");
            }
            if let Some(r) = row.vs_counters {
                let _ = write!(detail, ", {r:.2}x raw counters only");
            }
            if let Some(r) = row.vs_iceoryx2 {
                let _ = write!(detail, ", {r:.2}x iceoryx2");
            }
            out.push(Verdict {
                target: format!(
                    "{} ({}): {target}",
                    row.case,
                    row.mode.map_or("-", Mode::as_str)
                ),
                met: *met,
                detail,
            });
        }
    }
    for series in FLAT_SERIES {
        let members: Vec<&Row> = rows
            .iter()
            .filter(|r| r.group == "publish" && r.series.contains(&series))
            .collect();
        if members.len() < 2 {
            continue;
        }
        let lo = members
            .iter()
            .map(|r| r.stats.p50)
            .min()
            .unwrap_or(0)
            .max(1);
        let hi = members.iter().map(|r| r.stats.p50).max().unwrap_or(0);
        let spread = (hi - lo) as f64 / lo as f64;
        out.push(Verdict {
            target: format!("publish cost p50 flat (within 10%) across {series}"),
            met: spread <= 0.10,
            detail: format!(
                "p50 from {} to {} ({:.0}% spread) over {} rows",
                fmt_ns(lo as f64),
                fmt_ns(hi as f64),
                spread * 100.0,
                members.len()
            ),
        });
    }
    out
}

/// Formats nanoseconds with a unit that keeps three or four significant digits.
pub fn fmt_ns(ns: f64) -> String {
    if ns < 10_000.0 {
        format!("{ns:.0} ns")
    } else if ns < 10_000_000.0 {
        format!("{:.1} µs", ns / 1e3)
    } else {
        format!("{:.2} ms", ns / 1e6)
    }
}

/// Formats a payload size.
pub fn fmt_bytes(bytes: usize) -> String {
    match bytes {
        0 => "-".into(),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

const GROUP_TITLES: [(&str, &str); 3] = [
    (
        "pingpong",
        "Round trips between two processes (A writes /ping, B writes it back on /pong)",
    ),
    (
        "throughput",
        "Single-writer throughput, nobody reading (per-write time = whole run / writes)",
    ),
    (
        "publish",
        "Publish cost: time of one write() (16 timed together; with sleepers, one by one)",
    ),
];

/// The human table, one section per group, then the targets.
pub fn render(rows: &[Row], verdicts: &[Verdict]) -> String {
    let mut out = String::new();
    for (group, title) in GROUP_TITLES {
        let members: Vec<&Row> = rows.iter().filter(|r| r.group == group).collect();
        if members.is_empty() {
            continue;
        }
        let _ = writeln!(out, "\n== {title}");
        let _ = writeln!(
            out,
            "{:<34} {:>4} {:>7} {:>7} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8}  notes",
            "case",
            "mode",
            "size",
            "n",
            "p50",
            "p99",
            "p99.9",
            "max",
            "vs base",
            "vs ctr",
            "vs iox2"
        );
        for r in members {
            let ratio = |v: Option<f64>| v.map_or("-".into(), |x| format!("{x:.2}x"));
            let mut notes = Vec::new();
            if let Some(per_s) = r.per_second {
                notes.push(format!("{:.2} M writes/s", per_s / 1e6));
            }
            for (t, met) in &r.targets {
                notes.push(format!("{t}: {}", if *met { "met" } else { "NOT met" }));
            }
            if let Some(b) = &r.baseline {
                notes.push(format!("base = {b}"));
            }
            if let Some(n) = &r.note {
                notes.push(n.clone());
            }
            let _ = writeln!(
                out,
                "{:<34} {:>4} {:>7} {:>7} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8}  {}",
                r.case,
                r.mode.map_or("-", Mode::as_str),
                fmt_bytes(r.bytes),
                r.stats.n,
                fmt_ns(r.stats.p50 as f64),
                fmt_ns(r.stats.p99 as f64),
                fmt_ns(r.stats.p999 as f64),
                fmt_ns(r.stats.max as f64),
                ratio(r.vs_baseline),
                ratio(r.vs_counters),
                ratio(r.vs_iceoryx2),
                notes.join("; ")
            );
        }
    }
    if !verdicts.is_empty() {
        let _ = writeln!(out, "\n== Targets");
        for v in verdicts {
            let mark = if v.met { "met    " } else { "NOT met" };
            let _ = writeln!(out, "{mark}  {}  ({})", v.target, v.detail);
        }
    }
    out
}

/// One JSON object per row, then one per verdict.
pub fn json_lines(rows: &[Row], verdicts: &[Verdict]) -> String {
    let mut out = String::new();
    for r in rows {
        let value = serde_json::json!({
            "kind": "result",
            "group": r.group,
            "system": r.system,
            "case": r.case,
            "mode": r.mode,
            "bytes": r.bytes,
            "gap_ms": r.gap_ms,
            "n": r.stats.n,
            "p50_ns": r.stats.p50,
            "p99_ns": r.stats.p99,
            "p999_ns": r.stats.p999,
            "max_ns": r.stats.max,
            "mean_ns": r.stats.mean,
            "per_second": r.per_second,
            "baseline": r.baseline,
            "vs_baseline": r.vs_baseline,
            "vs_iceoryx2": r.vs_iceoryx2,
            "vs_counters_only": r.vs_counters,
            "targets": r.targets.iter().map(|(t, met)| serde_json::json!({"target": t, "met": met})).collect::<Vec<_>>(),
            "note": r.note,
            "series": r.series,
        });
        let _ = writeln!(out, "{value}");
    }
    for v in verdicts {
        let value = serde_json::json!({
            "kind": "target",
            "target": v.target,
            "met": v.met,
            "detail": v.detail,
        });
        let _ = writeln!(out, "{value}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let mut samples: Vec<u64> = (1..=1000).rev().collect();
        let s = Stats::of(&mut samples).expect("samples");
        assert_eq!((s.p50, s.p99, s.p999, s.max), (500, 990, 999, 1000));
        assert!(Stats::of(&mut []).is_none());
        let mut one = [7u64];
        let s = Stats::of(&mut one).expect("one sample");
        assert_eq!((s.p50, s.p999, s.max), (7, 7, 7));
    }

    #[test]
    fn units_follow_magnitude() {
        assert_eq!(fmt_ns(850.0), "850 ns");
        assert_eq!(fmt_ns(12_345.0), "12.3 µs");
        assert_eq!(fmt_ns(12_345_678.0), "12.35 ms");
        assert_eq!(fmt_bytes(4096), "4 KiB");
        assert_eq!(fmt_bytes(1 << 20), "1 MiB");
        assert_eq!(fmt_bytes(64), "64 B");
    }
}
