//! # Lease owners
//!
//! A client's lease owner id says where it runs: `host:pid:random`. A client that meets a lease
//! held by a process of its own host whose pid is gone (killed, crashed) takes the submission
//! over at once instead of waiting for the lease to run out; a holder that is alive, or on
//! another host, is waited for ([`Error::is_busy`](crate::Error::is_busy) says which).
//!
//! A pid reused by an unrelated process only makes the holder look alive: the client then waits
//! for the lease, as it would without the check. "This host" is the host name and, on Linux, the
//! pid namespace (`/proc/self/ns/pid`): two containers with one host name (host networking) see
//! each other's pids as missing, and would take over each other's live leases if the name alone
//! told them apart. A container restarted in a new namespace therefore waits for its old lease
//! (the safe side). A process is alive while `kill(pid, 0)` finds it, even one of another user
//! hidden from `/proc` (`hidepid=2`).

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

/// Where this process runs, as owner ids say it: the host name, and on Linux `/` and the pid
/// namespace's inode (`myhost/4026531836`).
pub(crate) fn place() -> &'static str {
    static PLACE: OnceLock<String> = OnceLock::new();
    PLACE.get_or_init(|| {
        // "pid:[4026531836]"
        let ns = std::fs::read_link("/proc/self/ns/pid")
            .ok()
            .and_then(|link| {
                let link = link.to_string_lossy().into_owned();
                let digits: String = link.chars().filter(char::is_ascii_digit).collect();
                (!digits.is_empty()).then_some(digits)
            });
        match ns {
            Some(ns) => format!("{}/{ns}", host()),
            None => host().to_owned(),
        }
    })
}

/// A new owner id for this process: `place:pid:random` (see [`place`]).
pub(crate) fn new_id(random: u32) -> String {
    format!("{}:{}:{random:08x}", place(), std::process::id())
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
    if host != place() {
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

/// Whether no process has the id `pid` (a zombie still has one until it is reaped): signal 0
/// finds no such process. One that exists but is another user's answers "not permitted".
#[cfg(target_os = "linux")]
fn is_gone(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill with signal 0 sends nothing; it only checks that the process exists.
    let found = unsafe { libc::kill(pid, 0) } == 0;
    !found && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// Elsewhere a holder is never known to be dead: its lease is waited for.
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
        let dead = format!("{}:{pid}:0000abcd", place());
        if cfg!(target_os = "linux") {
            assert_eq!(holder(&dead), Holder::DeadHere(pid));
            // The same host name in another pid namespace (a container with host networking):
            // its pids are not ours to look up, so it is elsewhere, and waited for.
            let other = format!("{}/1:{pid}:0000abcd", host());
            assert!(
                matches!(holder(&other), Holder::Elsewhere { .. }),
                "{other}"
            );
            assert!(place().starts_with(&format!("{}/", host())), "{}", place());
            // Init (pid 1) is alive, though not ours to signal.
            assert_eq!(
                holder(&format!("{}:1:0000abcd", place())),
                Holder::LiveHere(1)
            );
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
