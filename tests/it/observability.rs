//! Observability against the emulator: the documented metrics (through a recording `metrics`
//! recorder), the tracing events and the `coordination_session` span (through a capturing
//! subscriber), and `Session::snapshot()`.
//!
//! The driver runs in spawned tasks, so every test builds its own current-thread runtime with
//! a paused clock and runs it inside a thread-local recorder and subscriber: everything the
//! test starts is polled on that thread, and tests running in parallel do not see each
//! other's metrics or events.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Env, wait_state, within};
use futures::StreamExt;
use metrics_util::MetricKind;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use tokio::time::Instant;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use ydb_coordination::{AcquireOptions, ErrorKind, SessionOptions, session::SessionState};

const ACQUISITIONS: &str = "ydb_coordination_acquisitions_total";
const ACQUIRE_WAIT: &str = "ydb_coordination_acquire_wait_seconds";
const LEASE_HOLD: &str = "ydb_coordination_lease_hold_seconds";
const ACTIVE_LEASES: &str = "ydb_coordination_active_leases";
const QUEUED_ACQUIRES: &str = "ydb_coordination_queued_acquires";
const SESSIONS: &str = "ydb_coordination_sessions";
const REATTACHES: &str = "ydb_coordination_reattaches_total";
const LEASES_LOST: &str = "ydb_coordination_leases_lost_total";
const REQUEST_DURATION: &str = "ydb_coordination_request_duration_seconds";

/// The span every session driver runs in.
const SESSION_SPAN: &str = "coordination_session";

fn lock() -> AcquireOptions {
    AcquireOptions::exclusive().ephemeral(true)
}

// ---- metrics ---------------------------------------------------------------------------

/// A series: metric name and its labels, sorted.
type Series = (String, Vec<(String, String)>);

/// What the test's recorder saw so far, accumulated over snapshots (a snapshot of the
/// debugging recorder resets counters and gauges, and drains histograms; the library only
/// increments and decrements, so sums are the values).
#[derive(Default)]
struct Seen {
    counters: BTreeMap<Series, u64>,
    gauges: BTreeMap<Series, f64>,
    histograms: BTreeMap<Series, Vec<f64>>,
}

struct Recorded {
    snapshotter: Snapshotter,
    seen: Mutex<Seen>,
}

impl Recorded {
    fn update(&self) -> std::sync::MutexGuard<'_, Seen> {
        let mut seen = self.seen.lock().unwrap();
        for (key, _, _, value) in self.snapshotter.snapshot().into_vec() {
            let (kind, key) = key.into_parts();
            let mut labels: Vec<(String, String)> = key
                .labels()
                .map(|l| (l.key().to_string(), l.value().to_string()))
                .collect();
            labels.sort();
            let series = (key.name().to_string(), labels);
            match (kind, value) {
                (MetricKind::Counter, DebugValue::Counter(n)) => {
                    *seen.counters.entry(series).or_default() += n;
                }
                (MetricKind::Gauge, DebugValue::Gauge(v)) => {
                    *seen.gauges.entry(series).or_default() += v.into_inner();
                }
                (MetricKind::Histogram, DebugValue::Histogram(vs)) => {
                    seen.histograms
                        .entry(series)
                        .or_default()
                        .extend(vs.into_iter().map(|v| v.into_inner()));
                }
                (kind, value) => panic!("{kind:?} with {value:?}"),
            }
        }
        seen
    }

    /// A counter's value with exactly these labels (0 when never touched).
    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.update()
            .counters
            .get(&series(name, labels))
            .copied()
            .unwrap_or(0)
    }

    /// A gauge's value with exactly these labels (0 when never touched).
    fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.update()
            .gauges
            .get(&series(name, labels))
            .copied()
            .unwrap_or(0.0)
    }

    /// A histogram's samples with exactly these labels.
    fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        self.update()
            .histograms
            .get(&series(name, labels))
            .cloned()
            .unwrap_or_default()
    }

    /// Every series recorded so far, of any kind.
    fn series(&self) -> Vec<Series> {
        let seen = self.update();
        let mut all: Vec<Series> = seen
            .counters
            .keys()
            .chain(seen.gauges.keys())
            .chain(seen.histograms.keys())
            .cloned()
            .collect();
        all.sort();
        all.dedup();
        all
    }

    /// The label sets a metric was recorded with.
    fn label_sets(&self, name: &str) -> Vec<Vec<(String, String)>> {
        self.series()
            .into_iter()
            .filter(|(n, _)| n == name)
            .map(|(_, labels)| labels)
            .collect()
    }
}

fn series(name: &str, labels: &[(&str, &str)]) -> Series {
    let mut labels: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    labels.sort();
    (name.to_string(), labels)
}

// ---- tracing ---------------------------------------------------------------------------

/// Field values as strings (strings unquoted, everything else as `Debug`).
#[derive(Debug, Clone, Default)]
struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0
            .insert(field.name().to_string(), format!("{value:?}"));
    }
}

/// A captured event: level, target, message, other fields, and the spans it was in (root
/// first) with their fields.
#[derive(Debug, Clone)]
struct Captured {
    level: Level,
    target: String,
    message: String,
    fields: BTreeMap<String, String>,
    spans: Vec<(String, BTreeMap<String, String>)>,
}

impl Captured {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }

    /// The fields of the enclosing span named `name`.
    fn span(&self, name: &str) -> Option<&BTreeMap<String, String>> {
        self.spans.iter().find(|(n, _)| n == name).map(|(_, f)| f)
    }

    fn is_ours(&self) -> bool {
        self.target.starts_with("ydb_coordination")
    }
}

/// Records this crate's events at every level and other crates' at `info` and above.
struct Capture {
    events: Arc<Mutex<Vec<Captured>>>,
}

impl<S> tracing_subscriber::Layer<S> for Capture
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(fields);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            let mut ext = span.extensions_mut();
            if let Some(fields) = ext.get_mut::<Fields>() {
                values.record(fields);
            }
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let meta = event.metadata();
        if !meta.target().starts_with("ydb_coordination") && *meta.level() > Level::INFO {
            return;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        let message = fields.0.remove("message").unwrap_or_default();
        let spans = ctx
            .event_scope(event)
            .map(|scope| {
                scope
                    .from_root()
                    .map(|span| {
                        let fields = span
                            .extensions()
                            .get::<Fields>()
                            .map(|f| f.0.clone())
                            .unwrap_or_default();
                        (span.name().to_string(), fields)
                    })
                    .collect()
            })
            .unwrap_or_default();
        self.events.lock().unwrap().push(Captured {
            level: *meta.level(),
            target: meta.target().to_string(),
            message,
            fields: fields.0,
            spans,
        });
    }
}

/// Everything a test observes.
struct Obs {
    metrics: Recorded,
    events: Arc<Mutex<Vec<Captured>>>,
}

impl Obs {
    fn events(&self) -> Vec<Captured> {
        self.events.lock().unwrap().clone()
    }

    /// Events named `message` (the documented event names).
    fn named(&self, message: &str) -> Vec<Captured> {
        self.events()
            .into_iter()
            .filter(|e| e.message == message)
            .collect()
    }
}

/// Runs `test` on its own paused current-thread runtime, with its own recorder and
/// subscriber.
fn observe<F, Fut>(test: F)
where
    F: FnOnce(Arc<Obs>) -> Fut,
    Fut: Future<Output = ()>,
{
    let recorder = DebuggingRecorder::new();
    let events = Arc::new(Mutex::new(Vec::new()));
    let obs = Arc::new(Obs {
        metrics: Recorded {
            snapshotter: recorder.snapshotter(),
            seen: Mutex::new(Seen::default()),
        },
        events: events.clone(),
    });
    let subscriber = tracing_subscriber::registry().with(Capture { events });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    tracing::subscriber::with_default(subscriber, || {
        metrics::with_local_recorder(&recorder, || rt.block_on(test(obs)))
    });
}

// ---- (1) a contended acquire -----------------------------------------------------------

#[test]
fn contended_acquire_records_results_waits_holds_and_gauges() {
    observe(|obs| async move {
        let m = &obs.metrics;
        let env = Env::new().await;
        let a = env.session().await;
        let b = env.session().await;
        let held = within(a.acquire("job", lock())).await.unwrap();
        assert_eq!(m.gauge(ACTIVE_LEASES, &[]), 1.0);
        assert_eq!(m.gauge(QUEUED_ACQUIRES, &[]), 0.0);

        let mut waiting = b.acquire("job", lock());
        assert!(within(waiting.queued()).await);
        assert_eq!(m.gauge(QUEUED_ACQUIRES, &[]), 1.0);
        let waiting = tokio::spawn(waiting);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(within(held.release()).await.unwrap());
        let lease = within(waiting).await.unwrap().unwrap();
        assert_eq!(m.gauge(QUEUED_ACQUIRES, &[]), 0.0);
        assert_eq!(m.gauge(ACTIVE_LEASES, &[]), 1.0);

        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(within(lease.release()).await.unwrap());
        assert_eq!(m.gauge(ACTIVE_LEASES, &[]), 0.0);
        assert_eq!(m.counter(ACQUISITIONS, &[("result", "acquired")]), 2);
        assert_eq!(m.counter(ACQUISITIONS, &[("result", "timed_out")]), 0);
        assert_eq!(m.counter(ACQUISITIONS, &[("result", "error")]), 0);

        let waits = m.histogram(ACQUIRE_WAIT, &[]);
        assert_eq!(waits.len(), 2, "{waits:?}");
        assert!(
            waits.iter().any(|w| *w >= 2.0),
            "the queued acquire waited at least 2 s: {waits:?}"
        );
        assert!(
            waits.iter().any(|w| *w < 2.0),
            "the first acquire did not wait: {waits:?}"
        );
        let holds = m.histogram(LEASE_HOLD, &[]);
        assert_eq!(holds.len(), 2, "{holds:?}");
        assert!(holds.iter().any(|h| *h >= 2.0), "{holds:?}");
        assert!(holds.iter().all(|h| *h >= 1.0), "{holds:?}");

        let acquires = m.histogram(REQUEST_DURATION, &[("op", "acquire")]);
        assert!(acquires.len() >= 2, "{acquires:?}");
        assert!(acquires.iter().all(|d| *d >= 0.0));
        assert!(
            acquires.iter().any(|d| *d >= 2.0),
            "the queued acquire's request took until the grant: {acquires:?}"
        );
        assert!(
            !m.histogram(REQUEST_DURATION, &[("op", "release")])
                .is_empty()
        );
        assert_eq!(m.gauge(SESSIONS, &[("state", "attached")]), 2.0);

        a.close().await;
        b.close().await;
        assert_eq!(m.gauge(SESSIONS, &[("state", "attached")]), 0.0);
    });
}

#[test]
fn timed_out_failed_and_dropped_acquires_are_counted_by_result() {
    observe(|obs| async move {
        let m = &obs.metrics;
        let env = Env::new().await;
        let a = env.session().await;
        let b = env.session().await;
        let _held = within(a.acquire("job", lock())).await.unwrap();

        let err = within(b.acquire("job", lock().timeout(Duration::from_secs(1))))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotAcquired);
        assert_eq!(m.counter(ACQUISITIONS, &[("result", "timed_out")]), 1);
        assert_eq!(m.gauge(QUEUED_ACQUIRES, &[]), 0.0);

        // A persistent semaphore that does not exist: the server answers with an error.
        let err = within(b.acquire("missing", AcquireOptions::exclusive()))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound);
        assert_eq!(m.counter(ACQUISITIONS, &[("result", "error")]), 1);

        // A queued acquire dropped by its caller.
        let mut dropped = b.acquire("job", lock());
        assert!(within(dropped.queued()).await);
        assert_eq!(m.gauge(QUEUED_ACQUIRES, &[]), 1.0);
        drop(dropped);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(m.counter(ACQUISITIONS, &[("result", "cancelled")]), 1);
        assert_eq!(m.gauge(QUEUED_ACQUIRES, &[]), 0.0);

        assert_eq!(m.counter(ACQUISITIONS, &[("result", "acquired")]), 1);
        assert_eq!(m.gauge(ACTIVE_LEASES, &[]), 1.0);
    });
}

// ---- (2) a reattach --------------------------------------------------------------------

#[test]
fn reattach_is_counted_and_told_at_info_inside_the_session_span() {
    observe(|obs| async move {
        let m = &obs.metrics;
        let env = Env::new().await;
        if !env.emulated() {
            return;
        }
        let (proxy, behind) = env.behind_proxy().await;
        let s = within(behind.session(&env.node, SessionOptions::new()))
            .await
            .unwrap();
        let other = env.session().await;
        let lease = within(s.acquire("job", lock())).await.unwrap();
        assert_eq!(m.gauge(SESSIONS, &[("state", "attached")]), 2.0);

        proxy.net().cut();
        wait_state(&s, |st| matches!(st, SessionState::Reattaching { .. })).await;
        assert_eq!(m.gauge(SESSIONS, &[("state", "attached")]), 1.0);
        assert_eq!(m.gauge(SESSIONS, &[("state", "reattaching")]), 1.0);
        wait_state(&s, |st| matches!(st, SessionState::Attached { .. })).await;
        assert!(!lease.is_lost());

        assert_eq!(m.counter(REATTACHES, &[]), 1);
        assert_eq!(m.gauge(SESSIONS, &[("state", "attached")]), 2.0);
        assert_eq!(m.gauge(SESSIONS, &[("state", "reattaching")]), 0.0);
        assert_eq!(m.counter(LEASES_LOST, &[("cause", "session_expired")]), 0);
        assert_eq!(m.counter(LEASES_LOST, &[("cause", "deadline")]), 0);
        assert_eq!(m.gauge(ACTIVE_LEASES, &[]), 1.0);

        let id = s.id().to_string();
        let reattaching = obs.named("session stream lost; reattaching");
        assert_eq!(reattaching.len(), 1, "{reattaching:#?}");
        let ev = &reattaching[0];
        assert_eq!(ev.level, Level::INFO);
        assert!(ev.is_ours(), "{ev:?}");
        assert_eq!(ev.field("session_id"), Some(id.as_str()));
        assert!(ev.field("cause").is_some_and(|c| !c.is_empty()), "{ev:?}");
        let span = ev.span(SESSION_SPAN).expect("inside the session span");
        assert_eq!(span.get("session_id"), Some(&id));
        assert_eq!(
            span.get("node").map(String::as_str),
            Some(env.node.as_str())
        );

        let reattached = obs.named("session reattached");
        assert_eq!(reattached.len(), 1, "{reattached:#?}");
        let ev = &reattached[0];
        assert_eq!(ev.level, Level::INFO);
        assert_eq!(ev.field("session_id"), Some(id.as_str()));
        let seq_no: u64 = ev.field("seq_no").expect("seq_no").parse().unwrap();
        assert!(seq_no >= 2, "a reattach sends a greater seq_no: {seq_no}");
        assert!(ev.field("downtime").is_some(), "{ev:?}");
        assert_eq!(
            ev.span(SESSION_SPAN).and_then(|s| s.get("session_id")),
            Some(&id)
        );

        // Nothing is reported as lost, and the other session said nothing.
        assert!(obs.named("lease lost").is_empty());
        assert!(obs.named("session lost").is_empty());
        let other_id = other.id().to_string();
        assert!(
            obs.events()
                .iter()
                .filter(|e| e.level <= Level::INFO)
                .all(|e| e.span(SESSION_SPAN).and_then(|s| s.get("session_id")) != Some(&other_id)),
            "{:#?}",
            obs.events()
        );
    });
}

// ---- (3) lease loss --------------------------------------------------------------------

#[test]
fn lease_lost_to_server_expiry_is_counted_and_warned() {
    observe(|obs| async move {
        let m = &obs.metrics;
        let env = Env::new().await;
        if !env.emulated() {
            return;
        }
        let s = env.session().await;
        let lease = within(s.acquire("job", lock())).await.unwrap();
        let fence = lease.fencing_token().to_string();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(env.emulator.expire_session("app", s.id()));
        within(lease.cancelled()).await;
        wait_state(&s, |st| *st == SessionState::Expired).await;

        assert_eq!(m.counter(LEASES_LOST, &[("cause", "session_expired")]), 1);
        assert_eq!(m.counter(LEASES_LOST, &[("cause", "deadline")]), 0);
        assert_eq!(m.gauge(ACTIVE_LEASES, &[]), 0.0);
        let holds = m.histogram(LEASE_HOLD, &[]);
        assert_eq!(holds.len(), 1, "{holds:?}");
        assert!(holds[0] >= 1.0, "{holds:?}");
        assert_eq!(m.gauge(SESSIONS, &[("state", "attached")]), 0.0);
        assert_eq!(m.gauge(SESSIONS, &[("state", "reattaching")]), 0.0);

        let id = s.id().to_string();
        // One warning for the session's lost leases, each lease's own line at debug.
        let lost = obs.named("leases lost");
        assert_eq!(lost.len(), 1, "{lost:#?}");
        let ev = &lost[0];
        assert_eq!(ev.level, Level::WARN);
        assert_eq!(ev.field("leases"), Some("1"));
        assert!(
            ev.field("semaphores").is_some_and(|s| s.contains("job")),
            "{ev:?}"
        );
        assert_eq!(ev.field("why"), Some("session_expired"));
        assert_eq!(
            ev.span(SESSION_SPAN).and_then(|s| s.get("session_id")),
            Some(&id)
        );
        let each = obs.named("lease lost");
        assert_eq!(each.len(), 1, "{each:#?}");
        assert_eq!(each[0].level, Level::DEBUG);
        assert_eq!(each[0].field("semaphore"), Some("job"));
        assert_eq!(each[0].field("fencing_token"), Some(fence.as_str()));

        let session_lost = obs.named("session lost");
        assert_eq!(session_lost.len(), 1, "{session_lost:#?}");
        let ev = &session_lost[0];
        assert_eq!(ev.level, Level::WARN);
        assert_eq!(ev.field("session_id"), Some(id.as_str()));
        assert_eq!(ev.field("cause"), Some("session_expired"));
    });
}

/// A session that loses many leases says so once, not once a lease.
#[test]
fn a_lost_session_warns_once_for_all_its_leases() {
    observe(|obs| async move {
        let env = Env::new().await;
        if !env.emulated() {
            return;
        }
        let s = env.session().await;
        let mut leases = Vec::new();
        for name in ["a", "b", "c"] {
            leases.push(within(s.acquire(name, lock())).await.unwrap());
        }
        assert!(env.emulator.expire_session("app", s.id()));
        for lease in &leases {
            within(lease.cancelled()).await;
        }
        wait_state(&s, |st| *st == SessionState::Expired).await;
        let lost = obs.named("leases lost");
        assert_eq!(lost.len(), 1, "{lost:#?}");
        assert_eq!(lost[0].level, Level::WARN);
        assert_eq!(lost[0].field("leases"), Some("3"));
        let warned = obs.named("lease lost");
        assert!(
            warned.iter().all(|e| e.level == Level::DEBUG),
            "{warned:#?}"
        );
    });
}

#[test]
fn lease_lost_to_the_client_deadline_is_counted_as_deadline() {
    observe(|obs| async move {
        let m = &obs.metrics;
        let env = Env::new().await;
        if !env.emulated() {
            return;
        }
        let (proxy, behind) = env.behind_proxy().await;
        let holder = within(behind.session(&env.node, SessionOptions::new()))
            .await
            .unwrap();
        let lease = within(holder.acquire("job", lock())).await.unwrap();
        let fence = lease.fencing_token().to_string();
        // The holder's network stalls for good.
        proxy.net().stall();
        within(lease.cancelled()).await;
        wait_state(&holder, |st| *st == SessionState::Expired).await;
        assert_eq!(
            holder.error().map(|e| e.kind()),
            Some(ErrorKind::SessionExpired)
        );

        assert_eq!(m.counter(LEASES_LOST, &[("cause", "deadline")]), 1);
        assert_eq!(m.counter(LEASES_LOST, &[("cause", "session_expired")]), 0);
        assert_eq!(m.gauge(ACTIVE_LEASES, &[]), 0.0);
        assert_eq!(m.gauge(SESSIONS, &[("state", "attached")]), 0.0);
        assert_eq!(m.gauge(SESSIONS, &[("state", "reattaching")]), 0.0);
        assert_eq!(m.counter(REATTACHES, &[]), 0);

        let lost = obs.named("leases lost");
        assert_eq!(lost.len(), 1, "{lost:#?}");
        assert_eq!(lost[0].level, Level::WARN);
        assert_eq!(lost[0].field("leases"), Some("1"));
        assert_eq!(lost[0].field("why"), Some("deadline"));
        let each = obs.named("lease lost");
        assert_eq!(each.len(), 1, "{each:#?}");
        assert_eq!(each[0].field("semaphore"), Some("job"));
        assert_eq!(each[0].field("fencing_token"), Some(fence.as_str()));
        let session_lost = obs.named("session lost");
        assert_eq!(session_lost.len(), 1, "{session_lost:#?}");
        assert_eq!(session_lost[0].level, Level::WARN);
        assert_eq!(session_lost[0].field("cause"), Some("deadline"));
        // The stall was noticed (and told) before the deadline passed.
        let reattaching = obs.named("session stream lost; reattaching");
        assert_eq!(reattaching.len(), 1, "{reattaching:#?}");
    });
}

#[test]
fn held_mutex_reacquired_after_a_loss_is_told_at_info() {
    observe(|obs| async move {
        let env = Env::new().await;
        if !env.emulated() {
            return;
        }
        let manager = env.client.session_manager(&env.node, SessionOptions::new());
        let mut held = manager.mutex("job").hold();
        let first = within(held.next()).await.unwrap().unwrap();
        assert!(obs.named("held lock re-acquired").is_empty());
        env.emulator
            .expire_session("app", first.lease().unwrap().session_id());
        let second = within(held.next()).await.unwrap().unwrap();
        let again = obs.named("held lock re-acquired");
        assert_eq!(again.len(), 1, "{again:#?}");
        let ev = &again[0];
        assert_eq!(ev.level, Level::INFO);
        assert_eq!(ev.field("lock"), Some("mutex \"job\""));
        assert_eq!(
            ev.field("session_id"),
            Some(second.lease().unwrap().session_id().to_string().as_str())
        );
        assert_eq!(
            ev.field("fencing_token"),
            Some(second.fencing_token().to_string().as_str())
        );
        assert_eq!(
            obs.metrics
                .counter(LEASES_LOST, &[("cause", "session_expired")]),
            1
        );
        drop(second);
        drop(first);
        manager.shutdown().await;
    });
}

// ---- (4) semaphore labels --------------------------------------------------------------

#[test]
fn semaphore_label_only_when_opted_in() {
    observe(|obs| async move {
        let m = &obs.metrics;
        let env = Env::new().await;
        let plain = env.session().await;
        let labeled = env
            .session_with(SessionOptions::new().semaphore_labels(true))
            .await;
        let lease = within(plain.acquire("plain-job", lock())).await.unwrap();
        within(lease.release()).await.unwrap();
        let lease = within(labeled.acquire("labeled-job", lock()))
            .await
            .unwrap();
        within(lease.release()).await.unwrap();

        let sem = ("semaphore", "labeled-job");
        assert_eq!(m.counter(ACQUISITIONS, &[("result", "acquired"), sem]), 1);
        assert_eq!(m.counter(ACQUISITIONS, &[("result", "acquired")]), 1);
        assert_eq!(m.histogram(ACQUIRE_WAIT, &[sem]).len(), 1);
        assert_eq!(m.histogram(ACQUIRE_WAIT, &[]).len(), 1);
        assert_eq!(m.histogram(LEASE_HOLD, &[sem]).len(), 1);
        assert_eq!(m.histogram(LEASE_HOLD, &[]).len(), 1);
        assert!(
            m.label_sets(ACTIVE_LEASES)
                .contains(&vec![("semaphore".to_string(), "labeled-job".to_string())])
        );

        for (name, labels) in m.series() {
            assert!(
                !labels.iter().any(|(_, v)| v == "plain-job"),
                "the default session put its semaphore name on {name}: {labels:?}"
            );
            if [SESSIONS, REATTACHES, REQUEST_DURATION].contains(&name.as_str()) {
                assert!(
                    !labels.iter().any(|(k, _)| k == "semaphore"),
                    "{name} is per session, not per semaphore: {labels:?}"
                );
            }
        }
        for labels in m.label_sets(REQUEST_DURATION) {
            let keys: Vec<&str> = labels.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(keys, ["op"]);
        }
    });
}

// ---- (5) quiet steady state ------------------------------------------------------------

#[test]
fn steady_state_is_quiet_at_info_and_told_at_debug() {
    observe(|obs| async move {
        let env = Env::new().await;
        let s = env.session().await;
        let other = env.session().await;
        within(s.create_semaphore("sem", 2, b"")).await.unwrap();
        for round in 0..3 {
            let lease = within(s.acquire("job", lock())).await.unwrap();
            let mut queued = other.acquire("job", lock());
            assert!(within(queued.queued()).await);
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert!(within(lease.release()).await.unwrap(), "round {round}");
            let lease = within(queued).await.unwrap();
            assert!(within(lease.release()).await.unwrap());
            let counted = within(s.acquire("sem", AcquireOptions::shared()))
                .await
                .unwrap();
            within(s.describe_semaphore("sem", Default::default()))
                .await
                .unwrap();
            within(counted.release()).await.unwrap();
            // Several ping intervals pass.
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
        within(s.delete_semaphore("sem", false)).await.unwrap();
        s.close().await;
        other.close().await;

        // Starting a session is a state change, told once at info; after that, silence.
        let attached = obs.named("session attached");
        assert_eq!(attached.len(), 2, "{attached:#?}");
        let loud: Vec<Captured> = obs
            .events()
            .into_iter()
            .filter(|e| e.level <= Level::INFO && e.message != "session attached")
            .collect();
        assert!(
            loud.is_empty(),
            "info or louder in the steady state: {loud:#?}"
        );

        // At debug, each grant and release is told, with its fields, inside the span.
        let acquired = obs.named("acquired");
        assert_eq!(acquired.len(), 9, "{acquired:#?}");
        for ev in &acquired {
            assert_eq!(ev.level, Level::DEBUG);
            for field in ["semaphore", "count", "ephemeral", "fencing_token", "waited"] {
                assert!(ev.field(field).is_some(), "{field} missing: {ev:?}");
            }
            assert!(ev.span(SESSION_SPAN).is_some(), "{ev:?}");
        }
        let released = obs.named("released");
        assert_eq!(released.len(), 9, "{released:#?}");
        for ev in &released {
            assert_eq!(ev.level, Level::DEBUG);
            for field in ["semaphore", "fencing_token", "held_for"] {
                assert!(ev.field(field).is_some(), "{field} missing: {ev:?}");
            }
        }
        assert_eq!(
            obs.metrics.counter(ACQUISITIONS, &[("result", "acquired")]),
            9
        );
    });
}

// ---- (6) snapshot ----------------------------------------------------------------------

#[test]
fn snapshot_lists_leases_and_waiters_without_a_round_trip() {
    observe(|_obs| async move {
        let env = Env::new().await;
        if !env.emulated() {
            return;
        }
        let holder = env.session().await;
        let s = env.session().await;
        let job = within(holder.acquire("job", lock())).await.unwrap();

        let before = Instant::now();
        let other = within(s.acquire("other", lock().count(1))).await.unwrap();
        let granted = Instant::now();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let asked = Instant::now();
        let mut waiting = s.acquire("job", lock());
        assert!(within(waiting.queued()).await);
        let waiting = tokio::spawn(waiting);
        tokio::time::sleep(Duration::from_millis(10)).await;
        let asked_again = Instant::now();
        let behind = tokio::spawn({
            let s = s.clone();
            async move { s.acquire("job", lock()).await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;

        let snap = within(s.snapshot()).await;
        assert_eq!(snap.session_id, s.id());
        assert_eq!(snap.state, SessionState::Attached { session_id: s.id() });
        assert_eq!(snap.held.len(), 1, "{snap:#?}");
        let h = &snap.held[0];
        assert_eq!(h.name, "other");
        assert_eq!(h.count, 1);
        assert_eq!(h.fencing_token, other.fencing_token());
        assert!(before <= h.since && h.since <= granted, "{snap:#?}");
        assert_eq!(snap.waiting.len(), 2, "{snap:#?}");
        let (first, second) = (&snap.waiting[0], &snap.waiting[1]);
        assert_eq!(first.name, "job");
        // Exclusive is all tokens: `count = u64::MAX`.
        assert_eq!(first.count, u64::MAX);
        assert_eq!(first.since, asked);
        assert!(first.queued_on_server, "{snap:#?}");
        // The second acquire of the same name waits in this session, behind the first.
        assert_eq!(second.name, "job");
        assert_eq!(second.since, asked_again);
        assert!(!second.queued_on_server, "{snap:#?}");

        // The network stalls: the snapshot still answers, at once (the paused clock would
        // jump ahead if anything waited on the server).
        env.emulator.net().stall();
        let describe = tokio::spawn({
            let s = s.clone();
            async move { s.describe_semaphore("job", Default::default()).await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        let t = Instant::now();
        let stalled = tokio::time::timeout(Duration::from_millis(1), s.snapshot())
            .await
            .expect("the snapshot needs no server round trip");
        assert_eq!(Instant::now(), t);
        assert_eq!(stalled.held, snap.held);
        assert_eq!(stalled.waiting, snap.waiting);
        assert!(stalled.requests_in_flight >= 2, "{stalled:#?}");
        env.emulator.net().resume();
        within(describe).await.unwrap().unwrap();

        drop(job);
        drop(other);
        waiting.abort();
        behind.abort();
    });
}

// ---- the announcement is not a user's lease ---------------------------------------------

#[test]
fn an_announcing_session_counts_and_tells_only_the_users_leases() {
    observe(|obs| async move {
        let m = &obs.metrics;
        let env = Env::new().await;
        if !env.emulated() {
            return;
        }
        let s = env.session_with(SessionOptions::new().announce(true)).await;
        let lease = within(s.acquire("job", lock())).await.unwrap();
        // Once the announcement names "job", the session holds two leases on the server.
        let observer = env.session().await;
        within(async {
            loop {
                let d = observer
                    .describe_semaphore(
                        ydb_coordination::session::ANNOUNCE_SEMAPHORE,
                        ydb_coordination::config::DescribeOptions::new().owners(true),
                    )
                    .await;
                let names = d.ok().and_then(|d| {
                    let owner = d.owners.iter().find(|o| o.session_id == s.id())?;
                    ydb_coordination::session::Announcement::parse(&owner.data)
                });
                if names.is_some_and(|a| a.names.iter().map(|n| n.name.as_str()).eq(["job"])) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        assert_eq!(m.counter(ACQUISITIONS, &[("result", "acquired")]), 1);
        assert_eq!(m.gauge(ACTIVE_LEASES, &[]), 1.0);
        assert!(env.emulator.expire_session("app", s.id()));
        within(lease.cancelled()).await;
        wait_state(&s, |st| *st == SessionState::Expired).await;
        assert_eq!(m.counter(LEASES_LOST, &[("cause", "session_expired")]), 1);
        assert_eq!(m.gauge(ACTIVE_LEASES, &[]), 0.0);
        let lost = obs.named("lease lost");
        assert_eq!(lost.len(), 1, "{lost:#?}");
        assert_eq!(lost[0].field("semaphore"), Some("job"));
    });
}
