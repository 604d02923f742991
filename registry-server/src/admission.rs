//! Who may use the bus. The registry's socket is abstract, so it has no file permissions: a
//! connecting process's credentials are checked against the rule the segments' mode, owner and
//! group enforce (root, the registry's own user, members of the bus's group). A refused
//! process is told why and what to do about it; its refusals are logged at most once a minute
//! per user.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::unistd::Gid;

/// A refused user's connections are logged once per this interval (a client retrying would
/// otherwise fill the journal).
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(60);

/// A connection `Admission::check` refused: who, and whether its groups could be read.
pub(crate) struct Denied {
    uid: u32,
    pid: u32,
    groups_unread: Option<std::io::Error>,
}

/// The bus's access rule and the log of its refusals.
pub(crate) struct Admission {
    /// The group the segments belong to; its members may use the bus.
    group: Gid,
    /// Whether `group` was chosen with `--group` (else it is the registry's own).
    group_given: bool,
    /// Per refused uid: when its refusal was last logged, and refusals since (not logged).
    refusals: Mutex<HashMap<u32, (Instant, u64)>>,
}

impl Admission {
    /// The rule for segments of `group` (`None`: the registry's own group).
    pub(crate) fn new(group: Option<Gid>) -> Admission {
        Admission {
            group: group.unwrap_or_else(nix::unistd::getegid),
            group_given: group.is_some(),
            refusals: Mutex::new(HashMap::new()),
        }
    }

    /// Whether process `pid` of user `uid` and group `gid` may use the bus. Cheap (no name
    /// lookups): called as connections are accepted.
    pub(crate) fn check(&self, uid: u32, gid: u32, pid: u32) -> Result<(), Denied> {
        let groups_unread = match may_connect(uid, gid, pid, self.group) {
            Ok(true) => return Ok(()),
            Ok(false) => None,
            Err(e) => Some(e),
        };
        Err(Denied {
            uid,
            pid,
            groups_unread,
        })
    }

    /// What a process `check` refused is to be told; the refusal is logged. Looks names up
    /// (users, groups: a directory service, maybe): not on the accepting thread.
    pub(crate) fn refusal(&self, denied: &Denied) -> String {
        let Denied {
            uid,
            pid,
            groups_unread,
        } = denied;
        let rule = refusal(*uid, self.group, self.group_given);
        let message = match groups_unread {
            None => rule,
            Some(_) if *pid == 0 => format!(
                "{rule}; the registry cannot see this process (it runs in another pid \
                 namespace), so its supplementary groups were not checked: give it the bus's \
                 group as its primary group, or run it in the registry's pid namespace"
            ),
            Some(e) => format!(
                "{rule}; its groups could not be read, so membership was not checked \
                 (/proc/{pid}/status: {e}; with /proc mounted hidepid, run the registry as root \
                 or in the hidepid gid)"
            ),
        };
        self.log_refusal(*uid, *pid, &message);
        message
    }

    /// Logs a refused connection: once per user and `REFUSAL_LOG_EVERY`, with how many were not
    /// logged since.
    fn log_refusal(&self, uid: u32, pid: u32, message: &str) {
        let now = Instant::now();
        let mut refusals = self.refusals.lock().unwrap_or_else(|p| p.into_inner());
        let unlogged = match refusals.get_mut(&uid) {
            Some((logged, unlogged)) if now.duration_since(*logged) < REFUSAL_LOG_EVERY => {
                *unlogged += 1;
                None
            }
            Some((_, unlogged)) => Some(*unlogged),
            None => Some(0),
        };
        if unlogged.is_some() {
            refusals.insert(uid, (now, 0));
        }
        drop(refusals);
        match unlogged {
            Some(0) => tracing::warn!("refusing a connection of pid {pid}: {message}"),
            Some(n) => tracing::warn!(
                "refusing a connection of pid {pid}: {message} ({n} more of uid {uid} refused \
                 since the last such message)"
            ),
            None => tracing::debug!("refusing a connection of pid {pid}: {message}"),
        }
    }
}

/// What a refused process is told: who may use the bus, by name where there is one, and what to
/// do about it.
fn refusal(uid: u32, group: Gid, group_given: bool) -> String {
    use bus::process::{group_name, user_name};
    let who = |uid: u32| match user_name(uid) {
        Some(name) => format!("uid {uid} ({name})"),
        None => format!("uid {uid}"),
    };
    let group_name = group_name(group.as_raw());
    let members = match &group_name {
        Some(name) => format!("group {name} (gid {group})"),
        None => format!("gid {group}"),
    };
    let advice = if group_given {
        let user = user_name(uid).unwrap_or_else(|| "USER".into());
        let group = group_name.unwrap_or_else(|| group.to_string());
        format!(
            "add the user to that group (usermod -aG {group} {user}) and start the process \
             again (a running process keeps the groups it started with)"
        )
    } else {
        "add the user to that group, or start registry-server with --group naming a group \
         of the bus's users (the shipped systemd units use --group baton)"
            .to_owned()
    };
    let registry_uid = nix::unistd::geteuid().as_raw();
    let registry_user = match user_name(registry_uid) {
        Some(name) => format!("{name} (uid {registry_uid})"),
        None => format!("uid {registry_uid}"),
    };
    format!(
        "{} may not use this bus: only root, the registry's user {registry_user} and members of \
         {members} may; {advice}",
        who(uid),
    )
}

/// Whether a process of user `uid` and group `gid` may register and list: root, the registry's
/// own user, or a member (primary or supplementary) of the group the segments belong to.
/// An error: the process's supplementary groups could not be read.
fn may_connect(uid: u32, gid: u32, pid: u32, group: Gid) -> std::io::Result<bool> {
    if uid == 0 || uid == nix::unistd::geteuid().as_raw() || gid == group.as_raw() {
        return Ok(true);
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    Ok(status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .is_some_and(|groups| {
            groups
                .split_whitespace()
                .any(|g| g.parse() == Ok(group.as_raw()))
        }))
}
