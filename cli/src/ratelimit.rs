//! `ratelimit`: the rate-limiter resources of a coordination node (create, alter, drop, list,
//! describe), and units taken from them, alone (`acquire`) or before a command (`run`).

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{Map, Value, json};
use ydb_coordination::{
    Error, ErrorKind, RateLimiter, rate_limiter::MAX_ACQUIRE_WAIT,
    rate_limiter::ResourceDescription, rate_limiter::ResourceSettings,
};

use super::fail::{self, Failure, resource_error};
use super::lock::Wait;
use super::output::Out;
use super::signals::Signals;
use super::{Conn, child, duration};

pub(crate) const RATELIMIT_HELP: &str = "\
Examples:
  # A root resource: 20 units a second shared by everyone who takes from it:
  ydb-coord ratelimit create /local/app payments --rate 20
  # A child sharing its parent's rate, capped at 5 a second:
  ydb-coord ratelimit create /local/app payments/tenant-a --rate 5
  # Wait for one unit (as long as it takes), then run the command:
  ydb-coord ratelimit run /local/app payments -- ./charge.sh 42
  # Give up after 10s (exit code 75):
  ydb-coord ratelimit run /local/app payments --units 3 --wait 10s -- ./batch.sh
  # Work measured after the fact: report it, never wait:
  ydb-coord ratelimit acquire /local/app bytes --used --units \"$(stat -c %s dump.gz)\"
  # In a shell loop:
  while ydb-coord ratelimit acquire /local/app payments --wait 1m; do ./charge-next.sh; done
  ydb-coord ratelimit alter /local/app payments --rate 50 --keep
  ydb-coord --json ratelimit describe /local/app payments
  ydb-coord ratelimit list /local/app --recursive
  ydb-coord ratelimit drop /local/app payments/tenant-a

A resource is a path in a tree (`api`, `api/tenant-a`): a root needs --rate, a child without
a setting takes its parent's. `alter` replaces all the settings (a flag not given is unset);
with --keep it reads the current settings first and changes only the flags given.
`run` runs the command in its own process group with YDB_COORD_RESOURCE and YDB_COORD_UNITS in
its environment, forwards SIGINT, SIGTERM and SIGHUP to it and exits with its exit code.
Units not available within --wait (or now, with --no-wait): exit code 75, nothing taken.
An interrupted wait may still take the units on the server.";

/// `ratelimit create|alter|drop|list|describe|acquire|run`.
#[derive(Debug, Subcommand)]
pub(crate) enum Action {
    /// Create a resource.
    #[command(after_help = RATELIMIT_HELP)]
    Create {
        #[command(flatten)]
        at: ResourceArgs,
        #[command(flatten)]
        settings: SettingsArgs,
    },
    /// Replace a resource's settings (all of them; with --keep only the flags given).
    #[command(after_help = RATELIMIT_HELP)]
    Alter {
        #[command(flatten)]
        at: ResourceArgs,
        #[command(flatten)]
        settings: SettingsArgs,
        /// Read the current settings first and change only the flags given (not atomic: an
        /// alter in between is overwritten; a setting cannot be unset this way).
        #[arg(long)]
        keep: bool,
    },
    /// Drop a resource (one without children).
    #[command(after_help = RATELIMIT_HELP)]
    Drop {
        #[command(flatten)]
        at: ResourceArgs,
    },
    /// List resource paths: the roots, or RESOURCE; with --recursive all below them too.
    #[command(after_help = RATELIMIT_HELP)]
    List {
        /// Coordination node path.
        node: String,
        /// List this resource (if it exists) instead of the roots.
        resource: Option<String>,
        /// Also every resource below the roots or RESOURCE.
        #[arg(long)]
        recursive: bool,
    },
    /// Print a resource's settings (as set on it; unset ones come from its parent).
    #[command(after_help = RATELIMIT_HELP)]
    Describe {
        #[command(flatten)]
        at: ResourceArgs,
    },
    /// Take units of a resource: exit code 0 when granted, 75 when not in time.
    #[command(after_help = RATELIMIT_HELP)]
    Acquire {
        #[command(flatten)]
        at: ResourceArgs,
        #[command(flatten)]
        take: TakeArgs,
    },
    /// Take units of a resource, then run a command.
    #[command(after_help = RATELIMIT_HELP)]
    Run {
        #[command(flatten)]
        at: ResourceArgs,
        #[command(flatten)]
        take: TakeArgs,
        /// The command to run once the units are taken, after `--`.
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<OsString>,
    },
}

/// The resource a command is about.
#[derive(Debug, Args)]
pub(crate) struct ResourceArgs {
    /// Coordination node path.
    node: String,
    /// Resource path (`api`, `api/tenant-a`).
    resource: String,
}

/// A resource's settings on the command line; each one not given is unset.
#[derive(Debug, Args)]
pub(crate) struct SettingsArgs {
    /// Units a second (a root needs it; a child without it takes its parent's, and is capped
    /// at it).
    #[arg(long, value_name = "UNITS_PER_S", value_parser = positive, allow_negative_numbers = true)]
    rate: Option<f64>,
    /// The burst, as a multiple of the rate (YDB stores it; its quoter does not act on it).
    #[arg(long, value_name = "K", value_parser = finite)]
    burst: Option<f64>,
    /// How many seconds' worth of the rate each YDB node takes ahead (YDB's default 0.2;
    /// negative: none).
    #[arg(long, value_name = "K", value_parser = finite, allow_negative_numbers = true)]
    prefetch: Option<f64>,
    /// The share of a node's local bucket below which it takes more (0 to 1; YDB's default
    /// 0.75).
    #[arg(long, value_name = "W", value_parser = fraction, allow_negative_numbers = true)]
    watermark: Option<f64>,
    /// In a replicated bucket, the floor it is refilled to after reports of consumption.
    #[arg(long, value_name = "N", value_parser = finite, allow_negative_numbers = true)]
    fill_up_to: Option<f64>,
    /// Make it a replicated bucket: nodes consume locally and report (experimental in YDB).
    #[arg(long)]
    replicated: bool,
    /// How often a replicated bucket's nodes report (YDB's default 5s).
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, requires = "replicated")]
    report_interval: Option<Duration>,
}

/// How units are taken.
#[derive(Debug, Args)]
pub(crate) struct TakeArgs {
    /// How many units.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(1..))]
    units: u64,
    /// Give up after waiting this long (exit code 75). Default: wait as long as it takes.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse,
          conflicts_with_all = ["no_wait", "used"])]
    wait: Option<Duration>,
    /// Give up at once if the units are not available now (exit code 75).
    #[arg(long, conflicts_with = "used")]
    no_wait: bool,
    /// Report the units as used already instead of waiting for them: never waits, and puts
    /// the resource into debt that later acquires wait off.
    #[arg(long)]
    used: bool,
}

/// A number of `--burst`, `--prefetch`, `--fill-up-to`.
fn finite(value: &str) -> Result<f64, String> {
    match value.trim().parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(format!("{value:?} is not a number")),
    }
}

/// `--rate`: above zero.
fn positive(value: &str) -> Result<f64, String> {
    match finite(value)? {
        v if v > 0.0 => Ok(v),
        _ => Err(format!("the rate must be above 0, not {value}")),
    }
}

/// `--watermark`: 0 to 1.
fn fraction(value: &str) -> Result<f64, String> {
    match finite(value)? {
        v if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!("the watermark is a share from 0 to 1, not {value}")),
    }
}

impl SettingsArgs {
    /// `base` with the settings given here set.
    fn apply(&self, base: ResourceSettings) -> ResourceSettings {
        type Setter = fn(ResourceSettings, f64) -> ResourceSettings;
        let set = |s: ResourceSettings, v: Option<f64>, f: Setter| match v {
            Some(v) => f(s, v),
            None => s,
        };
        let mut s = base;
        s = set(s, self.rate, ResourceSettings::max_units_per_second);
        s = set(s, self.burst, ResourceSettings::max_burst_size_coefficient);
        s = set(s, self.prefetch, ResourceSettings::prefetch_coefficient);
        s = set(s, self.watermark, ResourceSettings::prefetch_watermark);
        s = set(s, self.fill_up_to, ResourceSettings::immediately_fill_up_to);
        if self.replicated {
            s = s.replicated_bucket(self.report_interval);
        }
        s
    }
}

/// Refuses settings for a root (a path without `/`) without a rate, before asking the server.
fn check_root(resource: &str, settings: &ResourceSettings, hint: &str) -> Result<(), Failure> {
    if resource.contains('/') || settings.get_max_units_per_second().is_some() {
        return Ok(());
    }
    Err(Failure::with_code(
        fail::USAGE,
        format!("the root resource {resource:?} needs --rate{hint}"),
    ))
}

/// Runs a `ratelimit` command; returns the exit code.
pub(crate) async fn run(conn: &Conn, action: Action, out: Out) -> Result<u8, Failure> {
    match action {
        Action::Acquire { at, take } => {
            let mut signals = Signals::install()?;
            let limiter = limiter(conn, &at.node, &mut signals).await?;
            let units = taken(&limiter, &at.resource, &take, &mut signals).await?;
            if out.json {
                out.print(units, String::new);
            }
            Ok(0)
        }
        Action::Run { at, take, command } => {
            let mut signals = Signals::install()?;
            let limiter = limiter(conn, &at.node, &mut signals).await?;
            let units = taken(&limiter, &at.resource, &take, &mut signals).await?;
            out.event(units, String::new);
            let env = [
                ("YDB_COORD_RESOURCE", at.resource.clone()),
                ("YDB_COORD_UNITS", take.units.to_string()),
            ];
            let code = child::run_to_end(&command, &env, &mut signals).await?;
            out.event(json!({"event": "exited", "code": code}), String::new);
            Ok(code)
        }
        admin => {
            let client = conn.client().await?;
            let limiter = client.rate_limiter(&Conn::node(&client, node_of(&admin)));
            conn.budget
                .bound("ratelimit", manage(&limiter, admin, out))
                .await?;
            Ok(0)
        }
    }
}

fn node_of(action: &Action) -> &str {
    match action {
        Action::Create { at, .. }
        | Action::Alter { at, .. }
        | Action::Drop { at }
        | Action::Describe { at }
        | Action::Acquire { at, .. }
        | Action::Run { at, .. } => &at.node,
        Action::List { node, .. } => node,
    }
}

/// The rate limiter of `node`, connected (a signal ends the wait).
async fn limiter(conn: &Conn, node: &str, signals: &mut Signals) -> Result<RateLimiter, Failure> {
    let client = signals.interruptible(conn.client()).await?;
    Ok(client.rate_limiter(&Conn::node(&client, node)))
}

/// `create`, `alter`, `drop`, `list`, `describe`.
async fn manage(limiter: &RateLimiter, action: Action, out: Out) -> Result<(), Failure> {
    let node = limiter.node();
    let done = |action: &str, resource: &str| {
        out.print(
            json!({"ok": true, "action": action, "node": node, "resource": resource}),
            || format!("{action} rate-limiter resource {resource:?} on {node}"),
        )
    };
    match action {
        Action::Create { at, settings } => {
            let r = &at.resource;
            let settings = settings.apply(ResourceSettings::new());
            check_root(r, &settings, "")?;
            let result = limiter.create_resource(r, settings).await;
            result.map_err(|e| resource_error("create", r, node, &e))?;
            done("created", r);
        }
        Action::Alter { at, settings, keep } => {
            let r = &at.resource;
            let base = if keep {
                let d = limiter.describe_resource(r).await;
                d.map_err(|e| resource_error("describe", r, node, &e))?
                    .settings()
                    .clone()
            } else {
                ResourceSettings::new()
            };
            let settings = settings.apply(base);
            let hint = " (alter replaces all the settings; --keep changes only those given)";
            check_root(r, &settings, hint)?;
            let result = limiter.alter_resource(r, settings).await;
            result.map_err(|e| resource_error("alter", r, node, &e))?;
            done("altered", r);
        }
        Action::Drop { at } => {
            let r = &at.resource;
            let result = limiter.drop_resource(r).await;
            result.map_err(|e| resource_error("drop", r, node, &e))?;
            done("dropped", r);
        }
        Action::List {
            resource,
            recursive,
            ..
        } => {
            let under = resource.unwrap_or_default();
            let mut paths = limiter
                .list_resources(&under, recursive)
                .await
                .map_err(|e| resource_error("list", &under, node, &e))?;
            paths.sort();
            for path in paths {
                out.print(json!({"node": node, "resource": path}), || path.clone());
            }
        }
        Action::Describe { at } => {
            let r = &at.resource;
            let d = limiter
                .describe_resource(r)
                .await
                .map_err(|e| resource_error("describe", r, node, &e))?;
            out.print(Value::Object(resource_json(node, &d)), || {
                resource_text(node, &d)
            });
        }
        Action::Acquire { .. } | Action::Run { .. } => {}
    }
    Ok(())
}

/// Takes the units as `take` says; the `acquired` object, or the failure (exit code 75 when
/// not granted in time).
async fn taken(
    limiter: &RateLimiter,
    resource: &str,
    take: &TakeArgs,
    signals: &mut Signals,
) -> Result<Value, Failure> {
    let node = limiter.node();
    let units = take.units;
    let wait = match (take.no_wait, take.wait) {
        (true, _) => Wait::AtOnce,
        (false, Some(d)) => Wait::For(d),
        (false, None) => Wait::Forever,
    };
    let granted = signals
        .interruptible(async {
            let r = obtain(limiter, resource, units, take.used, wait).await;
            match r {
                Err(e) if e.kind() == ErrorKind::InvalidArgument => {
                    Err(refused(limiter, resource, &e).await)
                }
                r => r.map_err(|e| resource_error("acquire units of", resource, node, &e)),
            }
        })
        .await?;
    if !granted {
        let when = match wait {
            Wait::For(d) => format!("within {}", duration::format(d)),
            _ => "now (--no-wait)".to_string(),
        };
        return Err(Failure::with_code(
            fail::NOT_ACQUIRED,
            format!(
                "{} of rate-limiter resource {resource:?} on {node} not available {when}",
                units_text(units)
            ),
        ));
    }
    let mode = if take.used { "used" } else { "required" };
    Ok(json!({
        "event": "acquired",
        "node": node,
        "resource": resource,
        "units": units,
        "mode": mode,
    }))
}

/// `1 unit`, `5 units`.
fn units_text(units: u64) -> String {
    match units {
        1 => "1 unit".to_string(),
        n => format!("{n} units"),
    }
}

/// Reports `units` used, or acquires them within `wait`: whether they were granted.
async fn obtain(
    limiter: &RateLimiter,
    resource: &str,
    units: u64,
    used: bool,
    wait: Wait,
) -> Result<bool, Error> {
    if used {
        return limiter.report_used(resource, units).await.map(|()| true);
    }
    let mut left = match wait {
        Wait::AtOnce => return limiter.try_acquire(resource, units).await,
        Wait::For(d) => d,
        Wait::Forever => Duration::MAX,
    };
    // The server keeps an acquire for a day at the most: a longer wait asks again.
    loop {
        let this = left.min(MAX_ACQUIRE_WAIT);
        match limiter.acquire_timeout(resource, units, this).await {
            Ok(false) if left > this => left -= this,
            r => return r,
        }
    }
}

/// Why an acquire was refused as a bad request: YDB answers so for a resource that does not
/// exist, which a describe tells apart.
async fn refused(limiter: &RateLimiter, resource: &str, err: &Error) -> Failure {
    let node = limiter.node();
    match limiter.describe_resource(resource).await {
        Err(e) if e.kind() == ErrorKind::NotFound => resource_error("describe", resource, node, &e),
        _ => resource_error("acquire units of", resource, node, err),
    }
}

/// A resource's settings as a JSON object; unset ones are `null`.
fn resource_json(node: &str, d: &ResourceDescription) -> Map<String, Value> {
    let s = d.settings();
    let interval = s
        .get_replicated_bucket()
        .flatten()
        .map(|i| u64::try_from(i.as_millis()).unwrap_or(u64::MAX));
    let mut map = Map::new();
    map.insert("node".into(), json!(node));
    map.insert("resource".into(), json!(d.path()));
    for (key, value) in numbers(s) {
        map.insert(key.into(), json!(value));
    }
    map.insert(
        "replicated_bucket".into(),
        json!(s.get_replicated_bucket().is_some()),
    );
    map.insert("report_interval_ms".into(), json!(interval));
    map.insert("metering".into(), json!(s.get_metering().is_some()));
    map
}

/// The numeric settings by their YDB names.
fn numbers(s: &ResourceSettings) -> [(&'static str, Option<f64>); 5] {
    [
        ("max_units_per_second", s.get_max_units_per_second()),
        (
            "max_burst_size_coefficient",
            s.get_max_burst_size_coefficient(),
        ),
        ("prefetch_coefficient", s.get_prefetch_coefficient()),
        ("prefetch_watermark", s.get_prefetch_watermark()),
        ("immediately_fill_up_to", s.get_immediately_fill_up_to()),
    ]
}

/// A resource's settings as a small table, named as the flags that set them.
fn resource_text(node: &str, d: &ResourceDescription) -> String {
    let s = d.settings();
    let flags = ["rate", "burst", "prefetch", "watermark", "fill-up-to"];
    let mut rows = vec![
        ("node", node.to_string()),
        ("resource", d.path().to_string()),
    ];
    for (flag, (_, value)) in flags.into_iter().zip(numbers(s)) {
        let unit = if flag == "rate" { " units/s" } else { "" };
        rows.push((
            flag,
            value.map_or("unset".to_string(), |v| format!("{v}{unit}")),
        ));
    }
    let replicated = match s.get_replicated_bucket() {
        None => "no".to_string(),
        Some(None) => "yes".to_string(),
        Some(Some(i)) => format!("yes, reports every {}", duration::format(i)),
    };
    rows.push(("replicated", replicated));
    let metering = if s.get_metering().is_some() {
        "set"
    } else {
        "unset"
    };
    rows.push(("metering", metering.to_string()));
    rows.iter()
        .map(|(k, v)| format!("{k:<12} {v}"))
        .collect::<Vec<_>>()
        .join("\n")
}
