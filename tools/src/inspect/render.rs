//! The text forms `bus-inspect` prints (the `--json` forms are the structs themselves).

use bus::WriterState;

use super::doctor::Report as DoctorReport;
use super::net::Status;
use super::rate::Report as RateReport;
use super::registry::{Endpoint, Endpoints, Info};
use super::remote::RemoteName;
use super::table::{self, Align, Table};
use super::{Reading, SlotSummary};

/// The writer as `list`, `info`, `get` and `watch` print it: `alive teleop (4242)`,
/// `gone (4242)`, `none`. `running`: its process runs (checked by pid and start time). A
/// mirror's writer is this computer's registry, writing for a publisher on `mirror_of`: its
/// state is that publisher's, and the registry's pid would say nothing (`alive on robot`,
/// `gone on robot`, `not fed from robot (...)`).
fn writer_cell(
    state: WriterState,
    running: bool,
    pid: u32,
    program: Option<&str>,
    mirror_of: Option<&str>,
) -> String {
    match (state, running, mirror_of) {
        (WriterState::None, _, _) => "none".into(),
        (WriterState::Alive, true, Some(host)) => format!("alive on {host}"),
        // Its publisher may well run; this mirror is no longer fed.
        (WriterState::Alive, false, Some(host)) => {
            format!("not fed from {host} (this computer's registry is not running)")
        }
        (_, _, Some(host)) => format!("gone on {host}"),
        (_, true, None) => format!(
            "alive {}({pid})",
            program.map_or(String::new(), |p| format!("{p} "))
        ),
        // A value from before the writer registered now: its own writer is not recorded.
        (_, false, None) if pid == 0 => "gone (an earlier writer)".into(),
        (_, false, None) => format!("gone ({pid})"),
    }
}

fn writer(s: &SlotSummary) -> String {
    writer_cell(
        s.writer,
        s.writer_alive,
        s.writer_pid,
        s.writer_program.as_deref(),
        s.mirrored.then_some(s.origin.as_str()),
    )
}

fn origin(s: &SlotSummary) -> String {
    if s.mirrored {
        format!("{} (mirror)", s.origin)
    } else {
        format!("{} (local)", s.origin)
    }
}

/// `list`: a header and one line per slot, then (`--remote`) one per name only another
/// computer publishes.
pub fn list(slots: &[SlotSummary], remote: &[RemoteName]) -> String {
    let mut t = Table::new(&[
        ("NAME", Align::Left),
        ("TYPE", Align::Left),
        ("SIZE", Align::Right),
        ("SEQUENCE", Align::Right),
        ("RATE", Align::Right),
        ("AGE", Align::Right),
        ("WRITER", Align::Left),
        ("ORIGIN", Align::Left),
    ]);
    for s in slots {
        t.row(vec![
            s.name.clone(),
            table::short_type(&s.type_name, 32),
            format!("{}/{}", s.size, s.capacity),
            s.sequence.to_string(),
            table::hz(s.rate_hz),
            table::age(s.age_s),
            writer(s),
            origin(s),
        ]);
    }
    for r in remote {
        let dash = || "-".to_owned();
        t.row(vec![
            r.name.clone(),
            table::short_type(&r.type_name, 32),
            dash(),
            dash(),
            dash(),
            dash(),
            format!(
                "{} on {}",
                if r.writer_alive { "alive" } else { "gone" },
                r.origin
            ),
            format!("{} (not mirrored here)", r.origin),
        ]);
    }
    t.render()
}

fn endpoint(e: &Endpoint) -> String {
    format!(
        "{} ({}){}",
        if e.program.is_empty() {
            "?"
        } else {
            &e.program
        },
        e.pid,
        if e.bound {
            ""
        } else {
            " waiting for a publication"
        }
    )
}

/// `endpoints`: one block per slot.
pub fn endpoints(e: &Endpoints) -> String {
    let mut out = format!(
        "{} ({}){}",
        e.name,
        e.type_name,
        if e.segment.is_none() {
            " [no slot yet]"
        } else {
            ""
        }
    );
    for p in &e.publishers {
        out.push_str(&format!("\n  publisher   {}", endpoint(p)));
    }
    for s in &e.subscribers {
        out.push_str(&format!("\n  subscriber  {}", endpoint(s)));
    }
    for (p, s) in &e.connections {
        out.push_str(&format!("\n  connection  {p} -> {s}"));
    }
    out
}

/// `info`: labelled lines, the schema indented.
pub fn info(i: &Info) -> String {
    let mut lines = vec![
        format!("name        {}", i.name),
        format!("type        {}", i.type_name),
        format!(
            "schema      {} (hash {})",
            first_line(&i.schema),
            i.schema_hash
        ),
    ];
    for more in i.schema.lines().skip(1) {
        lines.push(format!("            {more}"));
    }
    match (&i.slot, &i.slot_error) {
        (_, Some(e)) => lines.push(format!("value       unreadable: {e}")),
        (Some(s), None) => {
            lines.push(format!(
                "segment     {} (capacity {} bytes)",
                s.segment, s.capacity
            ));
            lines.push(format!(
                "value       sequence {}, {} bytes, age {}, rate {}",
                s.sequence,
                s.size,
                table::age(s.age_s),
                table::hz(s.rate_hz)
            ));
            lines.push(format!("writer      {}", writer(s)));
            lines.push(format!("origin      {}", origin(s)));
        }
        (None, None) => {
            lines.push("segment     none yet (subscriptions wait for a publication)".into())
        }
    }
    match (&i.endpoints, &i.registry_error) {
        (Some(e), _) => {
            let list = |v: &[Endpoint]| {
                if v.is_empty() {
                    "none".to_owned()
                } else {
                    v.iter().map(endpoint).collect::<Vec<_>>().join(", ")
                }
            };
            let registrys_own = i.name.starts_with(super::stats::PREFIX)
                && i.slot
                    .as_ref()
                    .is_some_and(|s| !s.mirrored && s.writer_alive);
            if e.publishers.is_empty() && registrys_own {
                // It has a writer, which `put` defends, but no publication: said so, lest
                // "none" read as a slot nobody writes.
                lines.push("publishers  none: the registry writes this slot itself".into());
            } else {
                lines.push(format!("publishers  {}", list(&e.publishers)));
            }
            lines.push(format!("subscribers {}", list(&e.subscribers)));
            let c: Vec<String> = e
                .connections
                .iter()
                .map(|(p, s)| format!("{p} -> {s}"))
                .collect();
            lines.push(format!(
                "connections {}",
                if c.is_empty() {
                    "none".into()
                } else {
                    c.join(", ")
                }
            ));
        }
        (None, Some(err)) => lines.push(format!("registry    {err}")),
        (None, None) => lines.push("registry    does not know this slot".into()),
    }
    if !i.peer_hosts.is_empty() {
        lines.push(format!("peer hosts  {}", i.peer_hosts.join(", ")));
    }
    lines.join("\n")
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

/// `get` and `watch`: a header line and the value as pretty JSON.
pub fn reading(r: &Reading, skipped: u64) -> String {
    let written = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(r.time_ns);
    let age = std::time::SystemTime::now()
        .duration_since(written)
        .ok()
        .map(|d| d.as_secs_f64());
    let mut head = format!(
        "{} ({}) sequence {}, written {} ago, writer {}",
        r.name,
        table::short_type(&r.type_name, 48),
        r.sequence,
        table::age(age),
        // The reading's state is already `Gone` for a local writer marked alive whose process
        // died; a mirror's is as recorded, told apart by whether its registry runs.
        writer_cell(
            r.writer,
            r.writer_alive,
            r.writer_pid,
            r.writer_program.as_deref(),
            r.origin.as_deref()
        )
    );
    if let (Some(o), WriterState::None) = (&r.origin, r.writer) {
        // The writer cell names a mirror's host, except when it has no writer.
        head.push_str(&format!(", from host {o}"));
    }
    if skipped > 0 {
        head.push_str(&format!(
            " ({skipped} value(s) written in between not seen)"
        ));
    }
    let body = serde_json::to_string_pretty(&r.value).unwrap_or_else(|_| r.value.to_string());
    format!("{head}\n{body}")
}

fn notes(reports: &[RateReport]) -> String {
    reports
        .iter()
        .filter_map(|r| r.note.as_ref().map(|n| format!("{}: {n}\n", r.name)))
        .collect()
}

/// `hz`: rate and period spread per slot.
pub fn hz(reports: &[RateReport]) -> String {
    let mut t = Table::new(&[
        ("NAME", Align::Left),
        ("RATE", Align::Right),
        ("WRITES", Align::Right),
        ("SEEN", Align::Right),
        ("MIN", Align::Right),
        ("P50", Align::Right),
        ("P99", Align::Right),
        ("MAX", Align::Right),
    ]);
    for r in reports {
        let p = |f: fn(&super::rate::Spread) -> f64| {
            r.period_ms.as_ref().map_or("-".into(), |s| table::ms(f(s)))
        };
        t.row(vec![
            r.name.clone(),
            table::hz(r.rate_hz),
            r.writes.to_string(),
            r.seen.to_string(),
            p(|s| s.min),
            p(|s| s.p50),
            p(|s| s.p99),
            p(|s| s.max),
        ]);
    }
    let window = reports.first().map_or(0.0, |r| r.window_s);
    format!(
        "{}(periods between consecutive writes over {window:.1}s)\n{}",
        t.render(),
        notes(reports)
    )
}

/// `bw`: bandwidth and value size spread per slot.
pub fn bw(reports: &[RateReport]) -> String {
    let mut t = Table::new(&[
        ("NAME", Align::Left),
        ("BANDWIDTH", Align::Right),
        ("RATE", Align::Right),
        ("MIN", Align::Right),
        ("P50", Align::Right),
        ("P99", Align::Right),
        ("MAX", Align::Right),
    ]);
    for r in reports {
        let p = |f: fn(&super::rate::Spread) -> f64| {
            r.size_bytes
                .as_ref()
                .map_or("-".into(), |s| table::bytes(f(s)))
        };
        t.row(vec![
            r.name.clone(),
            r.bandwidth_bps
                .map_or("-".into(), |b| format!("{}/s", table::bytes(b))),
            table::hz(r.rate_hz),
            p(|s| s.min),
            p(|s| s.p50),
            p(|s| s.p99),
            p(|s| s.max),
        ]);
    }
    let window = reports.first().map_or(0.0, |r| r.window_s);
    format!(
        "{}(value sizes over {window:.1}s)\n{}",
        t.render(),
        notes(reports)
    )
}

/// `doctor`: one line per check, then the stale segments.
pub fn doctor(r: &DoctorReport) -> String {
    let mut t = Table::new(&[
        ("", Align::Left),
        ("CHECK", Align::Left),
        ("DETAIL", Align::Left),
    ]);
    for c in &r.checks {
        let mark = match c.status {
            Status::Ok => "ok",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
            Status::Skip => "skip",
        };
        t.row(vec![mark.into(), c.check.clone(), c.detail.clone()]);
    }
    let mut out = format!("domain '{}'\n{}", r.domain, t.render());
    for s in &r.stale {
        out.push_str(&format!("stale: {} ({})\n", s.path.display(), s.reason));
    }
    out
}
