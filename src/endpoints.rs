//! The endpoint table: which endpoint a call or a stream goes to.
//!
//! Pure: it holds the connection string's endpoint (the seed) and the ones discovery
//! returned, each with its connection (generic, so the rules are tested without a network)
//! and whether it failed since it last worked. The order of preference:
//!
//! 1. discovered endpoints that have not failed, round robin;
//! 2. the seed, when every discovered endpoint failed (or discovery is off or found none);
//! 3. when the seed failed too, the endpoint whose failure is the oldest: a failing endpoint
//!    is preferred last, never dropped, since any of them may come back.
//!
//! A failure is counted once per connection (its generation): the caller that reports it
//! replaces the connection, and reports made on the replaced one are ignored.

use tokio::time::Instant;

/// One endpoint and its current connection.
#[derive(Debug)]
struct EndpointSlot<C> {
    id: u64,
    uri: String,
    tls: bool,
    conn: C,
    generation: u64,
    /// When it last failed, if it has not worked since.
    failed_at: Option<Instant>,
}

/// What a caller got from [`EndpointTable::pick`]: the connection to use, and its mark.
#[derive(Debug, Clone)]
pub(crate) struct Picked<C> {
    pub(crate) conn: C,
    pub(crate) mark: Mark,
}

/// Names the endpoint and connection a caller used, when reporting how it went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mark {
    id: u64,
    generation: u64,
}

/// The seed endpoint and the discovered ones.
#[derive(Debug)]
pub(crate) struct EndpointTable<C> {
    seed: EndpointSlot<C>,
    discovered: Vec<EndpointSlot<C>>,
    next_id: u64,
    turn: usize,
}

impl<C: Clone> EndpointTable<C> {
    /// A table with only the seed endpoint.
    pub(crate) fn new(uri: String, tls: bool, conn: C) -> Self {
        Self {
            seed: EndpointSlot {
                id: 0,
                uri,
                tls,
                conn,
                generation: 0,
                failed_at: None,
            },
            discovered: Vec::new(),
            next_id: 1,
            turn: 0,
        }
    }

    /// The endpoint to use now (see the module docs for the order).
    pub(crate) fn pick(&mut self) -> Picked<C> {
        let healthy: Vec<usize> = (0..self.discovered.len())
            .filter(|&i| {
                self.discovered
                    .get(i)
                    .is_some_and(|s| s.failed_at.is_none())
            })
            .collect();
        let slot = if !healthy.is_empty() {
            let i = healthy.get(self.turn % healthy.len()).copied().unwrap_or(0);
            self.turn = self.turn.wrapping_add(1);
            self.discovered.get(i).unwrap_or(&self.seed)
        } else if self.seed.failed_at.is_none() {
            &self.seed
        } else {
            // Everything failed: the one that failed longest ago.
            std::iter::once(&self.seed)
                .chain(&self.discovered)
                .min_by_key(|s| s.failed_at)
                .unwrap_or(&self.seed)
        };
        Picked {
            conn: slot.conn.clone(),
            mark: Mark {
                id: slot.id,
                generation: slot.generation,
            },
        }
    }

    /// The connection `picked` came from failed at `now`: the endpoint is pessimized and its
    /// connection replaced by `remake(uri, tls)` (kept when that gives `None`). Returns
    /// whether the cluster's endpoints should be asked for again: at least half of the
    /// discovered ones have failed. Reports on a connection already replaced are ignored
    /// (and return `false`).
    pub(crate) fn failed(
        &mut self,
        picked: Mark,
        now: Instant,
        remake: impl FnOnce(&str, bool) -> Option<C>,
    ) -> bool {
        let Some(slot) = self.slot_mut(picked.id) else {
            return false;
        };
        if slot.generation != picked.generation {
            return false;
        }
        slot.failed_at = Some(now);
        slot.generation += 1;
        if let Some(conn) = remake(&slot.uri, slot.tls) {
            slot.conn = conn;
        }
        let failed = self
            .discovered
            .iter()
            .filter(|s| s.failed_at.is_some())
            .count();
        !self.discovered.is_empty() && failed * 2 >= self.discovered.len()
    }

    /// The endpoint `picked` came from answered: it is no longer pessimized.
    pub(crate) fn succeeded(&mut self, picked: Mark) {
        if let Some(slot) = self.slot_mut(picked.id) {
            slot.failed_at = None;
        }
    }

    /// Replaces the discovered endpoints with `endpoints` (uri, tls), in that order. An
    /// endpoint already known keeps its connection and, unless `forget_failures`, its
    /// failure: a discovery run because endpoints failed must not send callers straight
    /// back to them, while the periodic one gives every listed endpoint another chance. An
    /// empty list changes nothing (the previous endpoints, or the seed, stay in use).
    pub(crate) fn replace(
        &mut self,
        endpoints: Vec<(String, bool)>,
        forget_failures: bool,
        mut make: impl FnMut(&str, bool) -> Option<C>,
    ) {
        let mut old = std::mem::take(&mut self.discovered);
        let mut fresh = Vec::new();
        for (uri, tls) in endpoints {
            if fresh.iter().any(|s: &EndpointSlot<C>| s.uri == uri) {
                continue;
            }
            if let Some(at) = old.iter().position(|s| s.uri == uri && s.tls == tls) {
                let mut slot = old.swap_remove(at);
                if forget_failures {
                    slot.failed_at = None;
                }
                fresh.push(slot);
            } else if let Some(conn) = make(&uri, tls) {
                fresh.push(EndpointSlot {
                    id: self.next_id,
                    uri,
                    tls,
                    conn,
                    generation: 0,
                    failed_at: None,
                });
                self.next_id += 1;
            }
        }
        self.discovered = if fresh.is_empty() { old } else { fresh };
    }

    /// The discovered endpoints' URIs, in order.
    #[cfg(test)]
    pub(crate) fn discovered(&self) -> Vec<&str> {
        self.discovered.iter().map(|s| s.uri.as_str()).collect()
    }

    fn slot_mut(&mut self, id: u64) -> Option<&mut EndpointSlot<C>> {
        std::iter::once(&mut self.seed)
            .chain(&mut self.discovered)
            .find(|s| s.id == id)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A table whose connections are their URIs, with the seed `seed` and discovered `a`,
    /// `b`, `c`.
    fn table() -> EndpointTable<String> {
        let mut t = EndpointTable::new("seed".into(), false, "seed".into());
        t.replace(list(&["a", "b", "c"]), true, make);
        t
    }

    fn list(uris: &[&str]) -> Vec<(String, bool)> {
        uris.iter().map(|u| (u.to_string(), false)).collect()
    }

    fn make(uri: &str, _tls: bool) -> Option<String> {
        Some(uri.to_string())
    }

    fn picks(t: &mut EndpointTable<String>, n: usize) -> Vec<String> {
        (0..n).map(|_| t.pick().conn).collect()
    }

    /// Picks until it gets `uri`.
    fn pick_of(t: &mut EndpointTable<String>, uri: &str) -> Picked<String> {
        for _ in 0..10 {
            let p = t.pick();
            if p.conn == uri {
                return p;
            }
        }
        panic!("{uri} is never picked");
    }

    #[test]
    fn discovered_endpoints_take_turns_and_the_seed_waits() {
        let mut t = table();
        assert_eq!(picks(&mut t, 4), ["a", "b", "c", "a"]);
        let mut seed_only = EndpointTable::new("seed".into(), false, "seed".to_string());
        assert_eq!(picks(&mut seed_only, 2), ["seed", "seed"]);
    }

    #[test]
    fn a_failed_endpoint_is_skipped_until_it_works_again() {
        let mut t = table();
        let now = Instant::now();
        let b = pick_of(&mut t, "b");
        assert!(
            !t.failed(b.mark, now, make),
            "one of three failed: no rediscovery yet"
        );
        let got = picks(&mut t, 4);
        assert!(!got.contains(&"b".to_string()), "{got:?}");
        t.succeeded(b.mark);
        assert!(picks(&mut t, 3).contains(&"b".to_string()));
    }

    #[test]
    fn when_every_discovered_endpoint_failed_the_seed_is_used_then_the_oldest_failure() {
        let mut t = table();
        let start = Instant::now();
        for (i, uri) in ["b", "a", "c"].into_iter().enumerate() {
            let p = pick_of(&mut t, uri);
            let half = t.failed(p.mark, start + Duration::from_secs(i as u64), make);
            assert_eq!(half, i >= 1, "after {uri}");
        }
        assert_eq!(picks(&mut t, 2), ["seed", "seed"]);
        let seed = t.pick();
        t.failed(seed.mark, start + Duration::from_secs(10), make);
        assert_eq!(t.pick().conn, "b", "b failed first");
    }

    #[test]
    fn a_failure_is_counted_once_per_connection() {
        let mut t = table();
        let now = Instant::now();
        let a = pick_of(&mut t, "a");
        let mut remade = 0;
        t.failed(a.mark, now, |u, _| {
            remade += 1;
            Some(format!("{u}2"))
        });
        // A second report on the connection already replaced changes nothing.
        t.failed(a.mark, now, |_, _| {
            remade += 1;
            None
        });
        assert_eq!(remade, 1);
        t.succeeded(a.mark);
        assert!(picks(&mut t, 3).contains(&"a2".to_string()));
    }

    #[test]
    fn a_rediscovery_after_failures_keeps_them() {
        let mut t = table();
        let a = pick_of(&mut t, "a");
        t.failed(a.mark, Instant::now(), make);
        t.replace(list(&["a", "b", "d"]), false, make);
        let got = picks(&mut t, 4);
        assert!(!got.contains(&"a".to_string()), "{got:?}");
        assert!(got.contains(&"d".to_string()), "{got:?}");
    }

    #[test]
    fn the_periodic_rediscovery_keeps_known_connections_and_forgets_failures() {
        let mut t = table();
        let now = Instant::now();
        let a = pick_of(&mut t, "a");
        t.failed(a.mark, now, |u, _| Some(format!("{u}2")));
        let mut made = Vec::new();
        t.replace(list(&["a", "d", "d"]), true, |u, _| {
            made.push(u.to_string());
            Some(u.to_string())
        });
        assert_eq!(made, ["d"], "a keeps its connection, d is made once");
        assert_eq!(t.discovered(), ["a", "d"]);
        // Both are in turn again: the failure was forgotten.
        let mut two = picks(&mut t, 2);
        two.sort();
        assert_eq!(two, ["a2", "d"]);
        let got = picks(&mut t, 4);
        assert!(got.contains(&"a2".to_string()), "{got:?}");
        assert!(!got.contains(&"b".to_string()), "{got:?}");
    }

    #[test]
    fn an_empty_discovery_keeps_the_endpoints_in_use() {
        let mut t = table();
        t.replace(Vec::new(), true, make);
        assert_eq!(t.discovered(), ["a", "b", "c"]);
        t.replace(list(&["x"]), true, |_, _| None);
        assert_eq!(
            t.discovered(),
            ["a", "b", "c"],
            "no connection could be made"
        );
    }
}
