//! # Lease owners
//!
//! A client's lease owner id says where it runs: `host:pid:random`. A client that meets a lease
//! held by a process of its own host whose pid is gone (killed, crashed) takes the submission
//! over at once instead of waiting for the lease to run out; a holder that is alive, or on
//! another host, is waited for ([`Error::is_busy`](crate::Error::is_busy) says which).
//!
//! A pid reused by an unrelated process only makes the holder look alive: the client then waits
//! for the lease, as it would without the check. Hosts are told apart by their host name, so
//! clients sharing a store from several containers must not share one.

use std::sync::OnceLock;

/// Who holds a lease, as seen from this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Holder {
    /// A process of this host whose pid is gone: its lease can be taken over at once.
    DeadHere(u32),
    /// A live process of this host.
    LiveHere(u32),
    /// A process on another host (it may be alive: wait for its lease).
    Elsewhere { host: String, pid: u32 },
    /// An owner id in another form (an older oncekey, another store user).
    Unknown,
}

/// This host's name.
pub(crate) fn host() -> &'static str {
    static HOST: OnceLock<String> = OnceLock::new();
    HOST.get_or_init(|| {
        let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .or_else(|_| std::fs::read_to_string("/etc/hostname"))
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_default();
        let name: String = name
            .trim()
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
            .collect();
        if name.is_empty() {
            "localhost".to_owned()
        } else {
            name
        }
    })
}

/// A new owner id for this process: `host:pid:random`.
pub(crate) fn new_id(random: u32) -> String {
    format!("{}:{}:{random:08x}", host(), std::process::id())
}

/// Who `owner` is, from this process's point of view.
pub(crate) fn holder(owner: &str) -> Holder {
    let mut parts = owner.rsplitn(3, ':');
    let (Some(_random), Some(pid), Some(host)) = (parts.next(), parts.next(), parts.next()) else {
        return Holder::Unknown;
    };
    let Ok(pid) = pid.parse::<u32>() else {
        return Holder::Unknown;
    };
    if host != self::host() {
        return Holder::Elsewhere {
            host: host.to_owned(),
            pid,
        };
    }
    if pid != std::process::id() && is_gone(pid) {
        Holder::DeadHere(pid)
    } else {
        Holder::LiveHere(pid)
    }
}

/// Whether no process has the id `pid` (a zombie still has one until it is reaped).
#[cfg(target_os = "linux")]
fn is_gone(pid: u32) -> bool {
    !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Without `/proc` a holder is never known to be dead: its lease is waited for.
#[cfg(not(target_os = "linux"))]
fn is_gone(_pid: u32) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_tell_dead_live_and_elsewhere() {
        let me = new_id(7);
        assert_eq!(holder(&me), Holder::LiveHere(std::process::id()));
        // A child that has exited and been reaped: its pid is gone.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let dead = format!("{}:{pid}:0000abcd", host());
        if cfg!(target_os = "linux") {
            assert_eq!(holder(&dead), Holder::DeadHere(pid));
        }
        assert_eq!(
            holder("db-7.example:42:0000abcd"),
            Holder::Elsewhere {
                host: "db-7.example".into(),
                pid: 42
            }
        );
        assert_eq!(holder("pid42-0000abcd"), Holder::Unknown);
        assert_eq!(holder("a"), Holder::Unknown);
        assert_eq!(holder("h:x:y"), Holder::Unknown);
    }
}
