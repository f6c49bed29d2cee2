//! Deterministic simulation: client session cores against the emulator's node cores, in one
//! thread and in virtual time, every message, delay and fault chosen by a seeded RNG.
//!
//! Both sides are pure state machines, so a run needs no runtime, no sockets and no clock:
//! the world keeps a queue of timed events (a message arrives, a core's timer is due, a
//! worker acts, a fault starts or ends) and steps whichever comes first. What the async
//! shells do in production is done here by small stand-ins: the server's ping cadence and
//! ping timeout, the client driver's dial and attach, the session manager's replacement of
//! a lost session. Workers on each client cycle a mutex, a counted semaphore and a
//! reader-writer lock and write to a fenced register under their leases.
//!
//! A world may have several coordination nodes, each client a session on each, and a lock
//! space over them ([`SpaceConfig`]): space workers take names in every place of their
//! process's layout, and an operator reshards the space onto one more node in the middle of
//! the run, A -> A+B -> B, through a directory the processes follow and report to, each a
//! member while its session on the directory's node lives (and takes locks only then). The
//! checker then also judges each name across the nodes: one holder at a time (the
//! semaphore's limit), and fencing tokens that grow across the move.
//!
//! With [`Config::lock_delay`] the mutex is taken as `Mutex::lock_delay` takes it (the
//! marker in a persistent semaphore's data, the delay after an unclean end) and judged
//! without fencing: a paused holder holds until it runs again and sees its token fired, so
//! the next holder's guard must wait for it; a variant that skips the delay is caught. With
//! [`SpaceConfig::lock_delay`] the lock space's mutexes are taken and judged the same way
//! across their places and the reshard (see `world::space`).
//!
//! Faults: stream cuts (in-flight messages lost), stalls shorter and longer than the session
//! timeout, refused reconnects, tablet restarts, forced session expiry, clock-rate skew
//! (each client's clock runs at its own rate against the server's) and process pauses (a
//! client not stepped for a while), each on one client's session on one node (a restart on
//! one node, a pause on a whole process). [`check`] judges every history.
//!
//! `SIM_SEED=<n>` replays one seed (in every configuration); `SIM_SOAK=<seeds>` runs a
//! longer soak with random seeds; `SIM_SEEDS`, `SIM_SPACE_SEEDS`, `SIM_DELAY_SEEDS` and
//! `SIM_SPACE_DELAY_SEEDS` set the budgets.

mod check;
mod world;

#[cfg(test)]
mod space_tests;
#[cfg(test)]
mod tests;

pub(crate) use self::world::{Config, Report, SpaceConfig, SpaceStats, World};

/// A small, fast, seedable RNG (splitmix64): the whole run follows from the seed.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi)` (`lo` when the range is empty).
    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.next() % (hi - lo)
    }

    /// Uniform in `[0, 1)`.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `true` with probability `p`.
    pub(crate) fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
}
