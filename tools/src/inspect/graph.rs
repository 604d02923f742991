//! `graph`: processes, slots, connections and hosts of a domain, as Graphviz DOT (or JSON).
//!
//! Processes and their endpoints come from the registry's listing; slots also from shared memory
//! (so a slot without endpoints shows); hosts from the slots' origins (mirrors) and from the
//! registry's network statistics (peers). Every process is drawn inside this host's cluster,
//! a mirrored slot gets an edge from the host it mirrors.

use std::collections::BTreeMap;

use bus::protocol::EndpointKind;
use bus::Domain;
use serde::Serialize;

use super::Result;

#[derive(Debug, Serialize)]
pub struct Process {
    pub pid: u32,
    pub program: String,
}

#[derive(Debug, Serialize)]
pub struct SlotNode {
    pub name: String,
    #[serde(rename = "type")]
    pub type_name: String,
    /// Host whose publication it mirrors.
    pub origin: Option<String>,
}

/// An edge: `from` and `to` are node ids (`process:<pid>`, `slot:<name>`, `host:<name>`).
#[derive(Debug, Serialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct Edge {
    pub from: String,
    pub to: String,
    /// `publishes`, `subscribes` (dashed while waiting for a publication), `mirrors`, `peer`.
    pub kind: String,
    pub bound: bool,
}

#[derive(Debug, Serialize)]
pub struct Graph {
    pub domain: String,
    pub host: String,
    /// Other hosts: origins of mirrors and peers of the registry.
    pub remote_hosts: Vec<String>,
    pub processes: Vec<Process>,
    pub slots: Vec<SlotNode>,
    pub edges: Vec<Edge>,
    /// Why the registry's endpoints are missing, if they are.
    pub registry_error: Option<String>,
}

/// Builds the graph of `domain`.
pub fn build(domain: &Domain) -> Result<Graph> {
    let host = super::local_host(domain);
    let mut slots: BTreeMap<String, SlotNode> = BTreeMap::new();
    let mut processes: BTreeMap<u32, Process> = BTreeMap::new();
    let mut edges = Vec::new();
    let mut remote = std::collections::BTreeSet::new();
    let (summaries, _) = super::list(domain, None)?;
    for s in summaries {
        if s.mirrored {
            remote.insert(s.origin.clone());
            edges.push(Edge {
                from: format!("host:{}", s.origin),
                to: format!("slot:{}", s.name),
                kind: "mirrors".into(),
                bound: true,
            });
        }
        slots.insert(
            s.name.clone(),
            SlotNode {
                name: s.name,
                type_name: s.type_name,
                origin: s.mirrored.then_some(s.origin),
            },
        );
    }
    let registry_error = match super::registry::listing(domain) {
        Ok(listing) => {
            for l in listing {
                let name = l.name.to_string();
                slots.entry(name.clone()).or_insert_with(|| SlotNode {
                    name: name.clone(),
                    type_name: l.type_name.clone(),
                    origin: None,
                });
                for e in &l.endpoints {
                    processes.entry(e.pid).or_insert_with(|| Process {
                        pid: e.pid,
                        program: e.program.clone(),
                    });
                    let (p, s) = (format!("process:{}", e.pid), format!("slot:{name}"));
                    edges.push(match e.kind {
                        EndpointKind::Publication => Edge {
                            from: p,
                            to: s,
                            kind: "publishes".into(),
                            bound: e.bound,
                        },
                        EndpointKind::Subscription => Edge {
                            from: s,
                            to: p,
                            kind: "subscribes".into(),
                            bound: e.bound,
                        },
                    });
                }
            }
            None
        }
        Err(e) => Some(e.to_string()),
    };
    for stats in super::stats::read(domain).iter().filter(|s| !s.mirrored) {
        for p in stats.peers() {
            remote.insert(p.host.clone());
            edges.push(Edge {
                from: format!("host:{host}"),
                to: format!("host:{}", p.host),
                kind: "peer".into(),
                bound: true,
            });
        }
    }
    remote.remove(&host);
    edges.sort();
    edges.dedup();
    Ok(Graph {
        domain: domain.to_string(),
        host,
        remote_hosts: remote.into_iter().collect(),
        processes: processes.into_values().collect(),
        slots: slots.into_values().collect(),
        edges,
        registry_error,
    })
}

/// A DOT string literal (a newline becomes DOT's `\n` line break).
fn q(s: &str) -> String {
    let escaped = s
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n");
    format!("\"{escaped}\"")
}

/// The graph in Graphviz DOT: `bus-inspect graph | dot -Tsvg > bus.svg`.
pub fn dot(g: &Graph) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "digraph {} {{\n",
        q(&format!("baton {}", g.domain))
    ));
    out.push_str("  rankdir=LR;\n  node [fontname=\"monospace\", fontsize=10];\n");
    if let Some(e) = &g.registry_error {
        out.push_str(&format!(
            "  // registry endpoints missing: {}\n",
            e.replace('\n', " ")
        ));
    }
    out.push_str(&format!(
        "  subgraph {} {{\n    label={};\n    style=rounded;\n",
        q(&format!("cluster_{}", g.host)),
        q(&format!("host {}", g.host))
    ));
    out.push_str(&format!(
        "    {} [label={}, shape=house];\n",
        q(&format!("host:{}", g.host)),
        q(&format!("registry@{}", g.host))
    ));
    for p in &g.processes {
        out.push_str(&format!(
            "    {} [label={}, shape=box, style=rounded];\n",
            q(&format!("process:{}", p.pid)),
            q(&format!("{} ({})", p.program, p.pid))
        ));
    }
    for s in &g.slots {
        let short = super::table::short_type(&s.type_name, 32);
        let style = if s.origin.is_some() {
            ", style=dashed"
        } else {
            ""
        };
        out.push_str(&format!(
            "    {} [label={}, shape=note{style}];\n",
            q(&format!("slot:{}", s.name)),
            q(&format!("{}\n{short}", s.name))
        ));
    }
    out.push_str("  }\n");
    for h in &g.remote_hosts {
        out.push_str(&format!(
            "  subgraph {} {{\n    label={};\n    style=rounded;\n    {} [label={}, shape=house];\n  }}\n",
            q(&format!("cluster_{h}")),
            q(&format!("host {h}")),
            q(&format!("host:{h}")),
            q(&format!("registry@{h}"))
        ));
    }
    for e in &g.edges {
        let style = match (e.kind.as_str(), e.bound) {
            ("mirrors", _) => " [label=\"mirrors\", style=dashed]",
            ("peer", _) => " [dir=both, style=dotted]",
            (_, false) => " [label=\"waiting\", style=dashed]",
            _ => "",
        };
        out.push_str(&format!("  {} -> {}{style};\n", q(&e.from), q(&e.to)));
    }
    out.push_str("}\n");
    out
}
