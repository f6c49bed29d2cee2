//! `ydb-coord`: coordination nodes, semaphores and locked commands from the shell.

mod admin;
mod child;
mod duration;
mod fail;
mod fleet;
mod guard;
mod lock;
mod output;
mod ratelimit;
mod signals;
mod space;
mod top;

use std::ffi::OsString;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::error::{ContextKind, ContextValue, ErrorKind as ClapErrorKind};
use clap::{Args, Parser, Subcommand, ValueEnum};
use ydb_coordination::emulator::Emulator;
use ydb_coordination::{
    Client, Session, SessionManager, SessionOptions, auth::Credentials, config::ConsistencyMode,
    config::MAX_DESCRIPTION_LEN, config::NodeConfig, config::RateLimiterCountersMode,
};

use self::admin::{Budget, NodeOp, SemaphoreOp};
use self::fail::Failure;
use self::lock::{Kind, Request, Wait};
use self::output::Out;
use self::signals::Signals;

const MAIN_HELP: &str = "\
Examples:
  export YDB_CONNECTION_STRING=grpc://localhost:2136/local
  ydb-coord node create /local/app
  ydb-coord lock /local/app nightly-report -- ./report.sh --full
  ydb-coord lock /local/app migrations --no-wait -- ./migrate.sh
  ydb-coord elect /local/app scheduler --data \"$(hostname)\" -- ./scheduler
  ydb-coord semaphore describe /local/app nightly-report --owners --waiters
  ydb-coord --json watch /local/app pool
  ydb-coord top /local/app
  ydb-coord group join /local/app web --data \"$(hostname):8080\"
  ydb-coord publish /local/app config 'replicas=3'
  ydb-coord ratelimit create /local/app payments --rate 20
  ydb-coord ratelimit run /local/app payments --wait 10s -- ./charge.sh 42
  ydb-coord space init --directory /local/dir --space billing --node n1 --node n2
  ydb-coord space reshard --directory /local/dir --space billing --add n3
  ydb-coord space finish --directory /local/dir --space billing --wait 5m

Credentials come from the environment, as in the YDB SDKs; the first that is set wins:
  YDB_SERVICE_ACCOUNT_KEY_FILE_CREDENTIALS=PATH  a service account's authorized key file
  YDB_SERVICE_ACCOUNT_KEY_CREDENTIALS=JSON       the same key, given inline
  YDB_ANONYMOUS_CREDENTIALS=1                    no credentials
  YDB_METADATA_CREDENTIALS=1                     the cloud VM's metadata service
  YDB_ACCESS_TOKEN_CREDENTIALS=TOKEN             a fixed token
  YDB_STATIC_CREDENTIALS_USER, YDB_STATIC_CREDENTIALS_PASSWORD   login with user and password
  YDB_OAUTH2_KEY_FILE=PATH                       OAuth 2.0 token exchange, the SDKs' config file
None set: anonymous. YDB_IAM_ENDPOINT and YDB_METADATA_ENDPOINT override the token endpoints.

Exit codes:
  0    success (lock, elect, ratelimit run: the command's own exit code is passed through)
  1    error (connection, missing node or semaphore, server error)
  2    bad command line; lock: the name is a lock of the other mode (with or without
       --lock-delay), which the command line must match
  3    subscribe --once: nothing was ever published under the name
  75   lock, leadership or rate-limiter units not obtained in time (--wait elapsed, or
       --no-wait and it is held or the units are not available now); space reshard or
       finish refused while a member of the space lags (at once, or after --wait) or
       another operator's step holds the directory. An unreachable endpoint is 1.
  76   the lease may have been lost while the command ran; the command was stopped
  126  the command could not be executed;  127  the command was not found
  128+N  the command was killed by signal N (or ydb-coord was interrupted while waiting)";

const LOCK_HELP: &str = "\
Examples:
  # One instance of the job across the fleet; wait as long as it takes:
  ydb-coord lock /local/app nightly-report -- ./report.sh --full
  # Give up at once if another machine holds it (exit code 75):
  ydb-coord lock /local/app migrations --no-wait -- ./migrate.sh
  # At most 3 concurrent runs (persistent semaphore \"pool\" with limit 3, created if missing):
  ydb-coord lock /local/app pool --limit 3 --wait 5m -- ./crawl.sh
  # Readers share, a plain `lock` (writer) excludes them all:
  ydb-coord lock /local/app config --shared -- ./read-config.sh
  # After a holder that crashed or was cut off, the next one starts 30s after its grant:
  ydb-coord lock /local/app billing-export --lock-delay 30s -- ./export.sh

The command runs in the process group of a small guard process, with YDB_COORD_FENCING_TOKEN (increases with
each new holder: pass it to the resource you protect), YDB_COORD_FENCE_TOKEN (the same with the
node's incarnation, 64 hex digits, as the ydb-coordination-fence crate stores it) and
YDB_COORD_SESSION_ID in its environment. SIGINT, SIGTERM and SIGHUP sent to ydb-coord are forwarded to it. If the lease
may have been lost while it runs (the session expired or could not be confirmed in time), it
gets SIGTERM, then SIGKILL after --kill-grace, and ydb-coord exits with 76. Not obtained in
time: 75. Otherwise ydb-coord exits with the command's exit code.

--lock-delay D takes the same lock as the library's Mutex::lock_delay(D) on the name (a
persistent semaphore of limit 1 whose data records a clean release): after a holder lost the
lock without releasing it, the next holder's command starts D after its grant; after a clean
release at once. A plain lock and a --lock-delay lock cannot share a name: the second is
refused with exit code 2, naming the other.

If ydb-coord dies, even by SIGKILL, the guard sends the group SIGTERM, then SIGKILL after
--kill-grace (at once once the command itself has exited). A command that leaves the group
(setsid, setpgid; `timeout` does unless given --foreground) is still signalled while
ydb-coord runs, but not by the guard, and a stopped command may still have writes in flight:
the fencing token is what keeps those from the resource.";

const ELECT_HELP: &str = "\
Examples:
  # Campaign; run the scheduler while leader (stopped with SIGTERM if leadership is lost):
  ydb-coord elect /local/app scheduler --data \"$(hostname):8080\" -- ./scheduler
  # Follow who leads:
  ydb-coord elect /local/app scheduler --observe
  ydb-coord --json elect /local/app scheduler --observe

The election is a persistent semaphore with limit 1 (created if missing); the leader's value
is its owner data. Exit codes as for `lock`: 75 not elected in time, 76 leadership lost.";

const NODE_HELP: &str = "\
Examples:
  ydb-coord node create /local/app
  ydb-coord node create app --session-grace-period 30s --read-consistency strict
  ydb-coord node alter /local/app --self-check-period 2s
  ydb-coord --json node describe /local/app
  ydb-coord node drop /local/app

Relative paths are taken inside the database of the connection string.";

const SEMAPHORE_HELP: &str = "\
Examples:
  ydb-coord semaphore create /local/app pool --limit 5 --data 'crawler pool'
  ydb-coord semaphore update /local/app pool --data 'crawler pool, v2'
  ydb-coord semaphore describe /local/app pool --owners --waiters
  ydb-coord --json semaphore describe /local/app pool --owners
  ydb-coord semaphore delete /local/app pool --force          # asks, saying who holds it
  ydb-coord semaphore delete /local/app pool --force --yes    # in a script";

const WATCH_HELP: &str = "\
Examples:
  ydb-coord watch /local/app pool
  ydb-coord --json watch /local/app pool --waiters | jq .count

Prints the description, then one line per change of data or owners, until interrupted
(exit 0) or the semaphore is deleted (a last `deleted` line, exit 0). An ephemeral lock
is deleted when its last holder and waiter leave.";

const EMULATOR_HELP: &str = "\
Examples:
  ydb-coord emulator --listen 127.0.0.1:2136 --database /local --node app
  ydb-coord emulator --listen 127.0.0.1:2136 --listen 127.0.0.1:2137 --tls-cert cert.pem --tls-key key.pem
  export YDB_CONNECTION_STRING=$(ydb-coord emulator --listen 127.0.0.1:0 --node app | head -1)
  ydb-coord emulator --node app --token t0ken --user root:secret

With --token or --user, try the same credentials a real YDB would take:
  YDB_ACCESS_TOKEN_CREDENTIALS=t0ken ydb-coord node describe /local/app
  YDB_STATIC_CREDENTIALS_USER=root YDB_STATIC_CREDENTIALS_PASSWORD=secret ydb-coord node describe /local/app
A password on the command line is visible to other users of the machine (ps): use it for
local trials only.";

/// Work with YDB coordination nodes from the command line: nodes, semaphores, locked
/// commands, leader election, rate limits and lock spaces.
#[derive(Debug, Parser)]
#[command(name = "ydb-coord", version, after_help = MAIN_HELP)]
struct Cli {
    #[command(flatten)]
    conn: ConnArgs,
    /// Print one JSON object per line instead of text.
    #[arg(long, global = true)]
    json: bool,
    /// On error, print the chain of causes too (still on one line).
    #[arg(short, long, global = true)]
    verbose: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Args)]
struct ConnArgs {
    /// Connection string, e.g. grpc://localhost:2136/local or grpcs://host:2135/Root/db.
    #[arg(
        short = 'c',
        long,
        env = "YDB_CONNECTION_STRING",
        hide_env_values = true,
        global = true,
        value_name = "URL"
    )]
    connection_string: Option<String>,
    /// Time limit for connecting and the admin call after it, together.
    #[arg(long, global = true, value_name = "DURATION", default_value = "10s",
          value_parser = duration::parse)]
    timeout: Duration,
    /// Use only the endpoint of the connection string (skip endpoint discovery).
    #[arg(long, global = true)]
    no_discovery: bool,
    /// PEM file of CA certificates to trust for grpcs://, besides the system roots.
    #[arg(
        long,
        global = true,
        env = "YDB_SSL_ROOT_CERTIFICATES_FILE",
        value_name = "FILE"
    )]
    ca_file: Option<std::path::PathBuf>,
    /// Session timeout for lock, elect and watch: how long the server keeps the session
    /// (and its locks) after losing contact.
    #[arg(long, global = true, value_name = "DURATION", default_value = "10s",
          value_parser = duration::parse)]
    session_timeout: Duration,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create, alter, describe or drop a coordination node.
    #[command(after_help = NODE_HELP)]
    Node {
        #[command(subcommand)]
        action: NodeAction,
    },
    /// Create, update, describe or delete a semaphore.
    #[command(after_help = SEMAPHORE_HELP)]
    Semaphore {
        #[command(subcommand)]
        action: SemaphoreAction,
    },
    /// Rate-limiter resources: create, alter, list, describe and drop them; take units
    /// before a command.
    #[command(after_help = ratelimit::RATELIMIT_HELP)]
    Ratelimit {
        #[command(subcommand)]
        action: ratelimit::Action,
    },
    /// Lock spaces: show a space's layout and members, publish its first layout, reshard
    /// it.
    #[command(after_help = space::SPACE_HELP)]
    Space {
        #[command(subcommand)]
        action: space::Action,
    },
    /// A live view of a node or a lock space: semaphores in use, owners, queues, sessions,
    /// rate-limiter resources.
    #[command(after_help = top::TOP_HELP)]
    Top(top::TopArgs),
    /// Run a command while holding a lock; release it when the command exits.
    #[command(after_help = LOCK_HELP)]
    Lock(LockArgs),
    /// Campaign for leadership and run a command while leader, or observe the leader.
    #[command(after_help = ELECT_HELP)]
    Elect(ElectArgs),
    /// Print a semaphore's description, then a line for each change.
    #[command(after_help = WATCH_HELP)]
    Watch {
        /// Coordination node path.
        path: String,
        /// Semaphore name.
        name: String,
        /// Include the waiters' queue in every description.
        #[arg(long)]
        waiters: bool,
    },
    /// Join a group, list its members or watch them change.
    #[command(after_help = fleet::GROUP_HELP)]
    Group {
        #[command(subcommand)]
        action: GroupAction,
    },
    /// Publish a small value under a name (replacing the last one).
    #[command(after_help = fleet::PUBLISH_HELP)]
    Publish {
        /// Coordination node path.
        path: String,
        /// The value's name.
        name: String,
        /// The value.
        value: String,
    },
    /// Print a published value, then each new one.
    #[command(after_help = fleet::PUBLISH_HELP)]
    Subscribe {
        /// Coordination node path.
        path: String,
        /// The value's name.
        name: String,
        /// Print the value now and exit.
        #[arg(long)]
        once: bool,
    },
    /// Stops a command's process group if the ydb-coord that started it dies (internal).
    #[command(name = guard::SUBCOMMAND, hide = true)]
    Guard {
        /// How long the group has between SIGTERM and SIGKILL.
        #[arg(value_parser = duration::parse)]
        grace: Duration,
    },
    /// Run an in-process YDB coordination-service emulator.
    ///
    /// Prints the connection string on one line of stdout when ready and serves until
    /// interrupted (SIGINT or SIGTERM).
    #[command(after_help = EMULATOR_HELP)]
    Emulator {
        /// Address to listen on (repeatable: one cluster node each, all advertised by
        /// discovery; the connection string names the first).
        #[arg(long, default_value = "127.0.0.1:2136")]
        listen: Vec<SocketAddr>,
        /// Serve gRPC over TLS with this PEM certificate chain (with --tls-key).
        #[arg(long, value_name = "FILE", requires = "tls_key")]
        tls_cert: Option<std::path::PathBuf>,
        /// The PEM private key of --tls-cert.
        #[arg(long, value_name = "FILE", requires = "tls_cert")]
        tls_key: Option<std::path::PathBuf>,
        /// Database path served.
        #[arg(long, default_value = "/local")]
        database: String,
        /// Coordination nodes to create at start (repeatable; relative to the database).
        #[arg(long = "node")]
        nodes: Vec<String>,
        /// Accept this token in `x-ydb-auth-ticket` (repeatable). With any --token or --user,
        /// every coordination call must carry an accepted token, as on a YDB that enforces
        /// authentication; discovery stays open.
        #[arg(long = "token", value_name = "TOKEN")]
        tokens: Vec<String>,
        /// A user who can log in with this password and get a token (repeatable; the password
        /// may be empty, `root:`, and may contain `:`). Turns checking on like --token.
        #[arg(long = "user", value_name = "NAME:PASSWORD", value_parser = parse_user)]
        users: Vec<(String, String)>,
    },
}

/// `NAME:PASSWORD` of `emulator --user`: split at the first `:`, the name not empty.
fn parse_user(value: &str) -> Result<(String, String), String> {
    match value.split_once(':') {
        Some((name, password)) if !name.is_empty() => Ok((name.to_string(), password.to_string())),
        Some(_) => Err("the user name before ':' is empty".to_string()),
        None => Err("expected NAME:PASSWORD (an empty password is NAME:)".to_string()),
    }
}

#[derive(Debug, Subcommand)]
enum GroupAction {
    /// Be a member until interrupted (joining again after a session loss).
    #[command(after_help = fleet::GROUP_HELP)]
    Join {
        /// Coordination node path.
        path: String,
        /// Group (semaphore) name.
        name: String,
        /// This member's data, seen by the others (e.g. host:port).
        #[arg(long, default_value = "")]
        data: String,
    },
    /// List the members.
    #[command(after_help = fleet::GROUP_HELP)]
    Members {
        /// Coordination node path.
        path: String,
        /// Group (semaphore) name.
        name: String,
    },
    /// Print the members, then the whole set after each change.
    #[command(after_help = fleet::GROUP_HELP)]
    Watch {
        /// Coordination node path.
        path: String,
        /// Group (semaphore) name.
        name: String,
    },
}

#[derive(Debug, Subcommand)]
enum NodeAction {
    /// Create a coordination node.
    #[command(after_help = NODE_HELP)]
    Create {
        /// Coordination node path.
        path: String,
        #[command(flatten)]
        config: NodeConfigArgs,
    },
    /// Change a coordination node's settings (only those given).
    #[command(after_help = NODE_HELP)]
    Alter {
        /// Coordination node path.
        path: String,
        #[command(flatten)]
        config: NodeConfigArgs,
    },
    /// Print a coordination node's settings.
    #[command(after_help = NODE_HELP)]
    Describe {
        /// Coordination node path.
        path: String,
    },
    /// Drop a coordination node with all its semaphores.
    #[command(after_help = NODE_HELP)]
    Drop {
        /// Coordination node path.
        path: String,
    },
}

#[derive(Debug, Args)]
struct NodeConfigArgs {
    /// How often the node checks its sessions.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    self_check_period: Option<Duration>,
    /// How long sessions survive a leader change of the node.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    session_grace_period: Option<Duration>,
    /// Consistency of reads (describe).
    #[arg(long, value_name = "MODE")]
    read_consistency: Option<Consistency>,
    /// Consistency of session attach.
    #[arg(long, value_name = "MODE")]
    attach_consistency: Option<Consistency>,
    /// Rate limiter counters mode.
    #[arg(long, value_name = "MODE")]
    rate_limiter_counters: Option<Counters>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Consistency {
    Strict,
    Relaxed,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Counters {
    Aggregated,
    Detailed,
}

impl NodeConfigArgs {
    fn config(&self) -> NodeConfig {
        let mode = |c: Consistency| match c {
            Consistency::Strict => ConsistencyMode::Strict,
            Consistency::Relaxed => ConsistencyMode::Relaxed,
        };
        let mut config = NodeConfig::new();
        if let Some(d) = self.self_check_period {
            config = config.self_check_period(d);
        }
        if let Some(d) = self.session_grace_period {
            config = config.session_grace_period(d);
        }
        if let Some(c) = self.read_consistency {
            config = config.read_consistency_mode(mode(c));
        }
        if let Some(c) = self.attach_consistency {
            config = config.attach_consistency_mode(mode(c));
        }
        if let Some(c) = self.rate_limiter_counters {
            config = config.rate_limiter_counters_mode(match c {
                Counters::Aggregated => RateLimiterCountersMode::Aggregated,
                Counters::Detailed => RateLimiterCountersMode::Detailed,
            });
        }
        config
    }
}

#[derive(Debug, Subcommand)]
enum SemaphoreAction {
    /// Create a persistent semaphore.
    #[command(after_help = SEMAPHORE_HELP)]
    Create {
        /// Coordination node path.
        path: String,
        /// Semaphore name.
        name: String,
        /// Number of tokens.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        limit: u64,
        /// The semaphore's data.
        #[arg(long, default_value = "")]
        data: String,
    },
    /// Replace a semaphore's data.
    #[command(after_help = SEMAPHORE_HELP)]
    Update {
        /// Coordination node path.
        path: String,
        /// Semaphore name.
        name: String,
        /// The new data.
        #[arg(long)]
        data: String,
    },
    /// Print a semaphore: limit, count, data, and optionally owners and waiters.
    #[command(after_help = SEMAPHORE_HELP)]
    Describe {
        /// Coordination node path.
        path: String,
        /// Semaphore name.
        name: String,
        /// List the owners.
        #[arg(long)]
        owners: bool,
        /// List the waiters in queue order.
        #[arg(long)]
        waiters: bool,
    },
    /// Delete a persistent semaphore.
    #[command(after_help = SEMAPHORE_HELP)]
    Delete {
        /// Coordination node path.
        path: String,
        /// Semaphore name.
        name: String,
        /// Delete even if it has owners or waiters (waiters fail; owners are not told). Asks
        /// first on a terminal, saying who holds it; refused without a terminal unless
        /// --yes.
        #[arg(long)]
        force: bool,
        /// With --force: do not ask (for scripts).
        #[arg(long, requires = "force")]
        yes: bool,
    },
}

#[derive(Debug, Args)]
struct WaitArgs {
    /// Give up after waiting this long (exit code 75). Default: wait as long as it takes.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse,
          conflicts_with = "no_wait")]
    wait: Option<Duration>,
    /// Give up at once if it is held or someone is queued (exit code 75).
    #[arg(long)]
    no_wait: bool,
    /// After SIGTERM on lease loss, how long the command has before SIGKILL.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration::parse)]
    kill_grace: Duration,
}

impl WaitArgs {
    fn wait(&self) -> Wait {
        match (self.no_wait, self.wait) {
            (true, _) => Wait::AtOnce,
            (false, Some(d)) => Wait::For(d),
            (false, None) => Wait::Forever,
        }
    }
}

#[derive(Debug, Args)]
struct LockArgs {
    /// Coordination node path.
    path: String,
    /// Lock (semaphore) name.
    name: String,
    /// Take N units of a persistent counted semaphore (with --limit: created if missing).
    #[arg(long, value_name = "N", conflicts_with = "shared",
          value_parser = clap::value_parser!(u64).range(1..))]
    count: Option<u64>,
    /// Take a shared lock: any number of --shared holders, excluded by a plain lock.
    #[arg(long)]
    shared: bool,
    /// Use a persistent semaphore with N units, created if missing (takes 1 unless --count).
    #[arg(long, value_name = "N", conflicts_with = "shared",
          value_parser = clap::value_parser!(u64).range(1..))]
    limit: Option<u64>,
    /// After a holder lost the lock without releasing it (crashed, killed, its session
    /// expired), the next holder starts only this long after its grant: the library's
    /// `Mutex::lock_delay`, on the same name alike. Every user of the name must set one.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse,
          conflicts_with_all = ["shared", "count", "limit"])]
    lock_delay: Option<Duration>,
    /// Owner data shown to describe and watch (e.g. the host name).
    #[arg(long, default_value = "")]
    data: String,
    #[command(flatten)]
    wait: WaitArgs,
    /// The command to run under the lock, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<OsString>,
}

#[derive(Debug, Args)]
struct ElectArgs {
    /// Coordination node path.
    path: String,
    /// Election (semaphore) name.
    name: String,
    /// The value published while leader (e.g. host:port).
    #[arg(long, required_unless_present = "observe")]
    data: Option<String>,
    /// Print the leader now and after each change instead of campaigning.
    #[arg(long, conflicts_with_all = ["data", "command", "wait", "no_wait"])]
    observe: bool,
    #[command(flatten)]
    wait: WaitArgs,
    /// The command to run while leader, after `--`.
    #[arg(last = true, required_unless_present = "observe", value_name = "CMD")]
    command: Vec<OsString>,
}

/// The connection settings, shared by the commands.
#[derive(Debug)]
struct Conn {
    args: ConnArgs,
    /// `--timeout` from the command's start: connecting and the work of a command that does
    /// not wait share it.
    budget: Budget,
}

impl Conn {
    async fn client(&self) -> Result<Client, Failure> {
        let Some(cs) = self.args.connection_string.as_deref() else {
            return Err(Failure::with_code(
                fail::USAGE,
                "no connection string: pass -c/--connection-string or set YDB_CONNECTION_STRING",
            ));
        };
        let credentials = Credentials::from_env().map_err(|e| Failure::new(fail::describe(&e)))?;
        let mut builder = Client::builder(cs);
        if let Some(file) = &self.args.ca_file {
            let pem = read_file(file, "CA certificates")?;
            builder = builder.ca_certificate(pem);
        }
        let what = format!("connect to {cs}");
        // Discovery fails quietly (the given endpoint is used): it gets half of what is left,
        // so that the call after it has time to say why an endpoint cannot be reached.
        let discovery = !self.args.no_discovery;
        let calls = if discovery {
            (self.budget.total / 2).min(self.budget.left())
        } else {
            self.budget.left()
        };
        let build = builder
            .credentials(credentials)
            .discovery(discovery)
            .connect_timeout(self.budget.left())
            .request_timeout(calls)
            .build();
        let build = async { build.await.map_err(|e| Failure::lib(&what, cs, &e)) };
        self.budget.bound(&what, build).await
    }

    /// The node's full path, as the server names it.
    fn node(client: &Client, path: &str) -> String {
        if path.starts_with('/') {
            path.to_string()
        } else {
            format!("{}/{path}", client.database().trim_end_matches('/'))
        }
    }

    /// The options of the tool's sessions: they announce what they use, for `top`.
    fn options(&self, description: String) -> SessionOptions {
        SessionOptions::new()
            .timeout(self.args.session_timeout)
            .connect_timeout(self.args.timeout)
            .description(session_description(description))
            .announce(true)
    }

    /// A session manager on `path`, its first session open (or the node's error).
    async fn manager(
        &self,
        signals: &mut Signals,
        path: &str,
        description: String,
    ) -> Result<(SessionManager, String), Failure> {
        let client = signals.interruptible(self.client()).await?;
        let node = Self::node(&client, path);
        let manager = client.session_manager(&node, self.options(description));
        let first = fleet::first_session(&manager, &node, self.budget);
        signals.interruptible(first).await?;
        Ok((manager, node))
    }

    async fn session(
        &self,
        client: &Client,
        node: &str,
        description: String,
    ) -> Result<Session, Failure> {
        let options = self
            .options(description)
            .connect_timeout(self.budget.left());
        let start = async {
            client
                .session(node, options)
                .await
                .map_err(|e| fail::session_error(node, self.budget.total, &e))
        };
        self.budget
            .bound(&format!("open a session on {node}"), start)
            .await
    }
}

/// A session description the server takes: `description` (which names the lock, group or
/// value, up to a name's 1024 bytes) cut to [`MAX_DESCRIPTION_LEN`] bytes at a character
/// boundary, `...` marking the cut.
fn session_description(mut description: String) -> String {
    const CUT: &str = "...";
    if description.len() <= MAX_DESCRIPTION_LEN {
        return description;
    }
    let mut end = MAX_DESCRIPTION_LEN - CUT.len();
    while !description.is_char_boundary(end) {
        end -= 1;
    }
    description.truncate(end);
    description.push_str(CUT);
    description
}

/// The subcommand words of the command line (`ydb-coord lock`, `ydb-coord node create`).
fn subcommand_of(args: &[OsString]) -> String {
    const TOP: [&str; 11] = [
        "node",
        "ratelimit",
        "space",
        "semaphore",
        "lock",
        "elect",
        "watch",
        "emulator",
        "group",
        "publish",
        "subscribe",
    ];
    const ACTIONS: [&str; 17] = [
        "create", "alter", "describe", "drop", "update", "delete", "help", "join", "members",
        "watch", "list", "acquire", "run", "show", "init", "reshard", "finish",
    ];
    let words: Vec<&str> = args.iter().skip(1).filter_map(|a| a.to_str()).collect();
    let mut out = vec!["ydb-coord"];
    if let Some(i) = words.iter().position(|w| TOP.contains(w)) {
        out.push(words[i]);
        if ["node", "semaphore", "group", "ratelimit", "space"].contains(&words[i])
            && let Some(action) = words.get(i + 1).filter(|w| ACTIONS.contains(w))
        {
            out.push(action);
        }
    }
    out.join(" ")
}

/// One line for a command-line error, in the words of clap, with a hint where it helps.
fn usage_error(err: &clap::Error, args: &[OsString]) -> String {
    let rendered = err.render().to_string();
    let mut first = String::new();
    let mut tip = None;
    let mut lines = rendered.lines();
    for line in lines.by_ref() {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            break;
        }
        if !first.is_empty() && !first.ends_with(':') {
            first.push(',');
        }
        if !first.is_empty() {
            first.push(' ');
        }
        first.push_str(trimmed);
    }
    for line in lines {
        if let Some(t) = line.trim().strip_prefix("tip: ") {
            tip = Some(t.to_string());
        }
    }
    if first.is_empty() {
        first = "error: invalid command line".to_string();
    }
    let subcommand = subcommand_of(args);
    let takes_command = matches!(
        subcommand.as_str(),
        "ydb-coord lock" | "ydb-coord elect" | "ydb-coord ratelimit run"
    );
    let has_separator = args.iter().any(|a| a == "--");
    let invalid: Vec<String> = match err.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(s)) => vec![s.clone()],
        Some(ContextValue::Strings(v)) => v.clone(),
        _ => Vec::new(),
    };
    if takes_command && !has_separator {
        let usage = format!("usage: {subcommand} PATH NAME [OPTIONS] -- CMD [ARGS]...");
        match err.kind() {
            ClapErrorKind::UnknownArgument
                if invalid.first().is_some_and(|a| !a.starts_with('-')) =>
            {
                let cmd = invalid.first().map(String::as_str).unwrap_or_default();
                return format!("error: missing `--` before the command {cmd:?} ({usage})");
            }
            ClapErrorKind::MissingRequiredArgument if invalid.iter().any(|a| a.contains("CMD")) => {
                return format!("error: missing the command to run after `--` ({usage})");
            }
            _ => {}
        }
    }
    match tip {
        Some(tip) => format!("{first} ({tip}; see {subcommand} --help)"),
        None => format!("{first} (see {subcommand} --help)"),
    }
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(err) => match err.kind() {
            ClapErrorKind::DisplayHelp
            | ClapErrorKind::DisplayVersion
            | ClapErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => err.exit(),
            _ => {
                eprintln!("{}", usage_error(&err, &args));
                return ExitCode::from(fail::USAGE);
            }
        },
    };
    if let Command::Guard { grace } = cli.command {
        return ExitCode::from(guard::watch(grace));
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(fail::ERROR);
        }
    };
    let code = match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(failure) => {
            if !failure.message.is_empty() {
                eprintln!("{failure}");
            }
            failure.code
        }
    };
    // Background tasks (session drivers) must not keep the process alive.
    runtime.shutdown_timeout(Duration::from_millis(100));
    ExitCode::from(code)
}

async fn run(cli: Cli) -> Result<u8, Failure> {
    fail::set_verbose(cli.verbose);
    let out = Out { json: cli.json };
    let conn = Conn {
        budget: Budget::start(cli.conn.timeout),
        args: cli.conn,
    };
    match cli.command {
        Command::Emulator {
            listen,
            tls_cert,
            tls_key,
            database,
            nodes,
            tokens,
            users,
        } => {
            let tls = match (tls_cert, tls_key) {
                (Some(cert), Some(key)) => Some((
                    read_file(&cert, "TLS certificate")?,
                    read_file(&key, "TLS key")?,
                )),
                _ => None,
            };
            let auth = Auth { tokens, users };
            emulator(listen, tls, database, nodes, auth).await
        }
        // `main` runs the guard before any runtime starts (its signal mask is per thread).
        Command::Guard { .. } => Err(Failure::new(
            "the guard runs only as its own process, started by ydb-coord",
        )),
        Command::Ratelimit { action } => ratelimit::run(&conn, action, out).await,
        Command::Space { action } => space::run(&conn, action, out).await,
        Command::Top(args) => top::run(&conn, args, out).await,
        Command::Node { action } => {
            let client = conn.client().await?;
            let (path, op) = match action {
                NodeAction::Create { path, config } => (path, NodeOp::Create(config.config())),
                NodeAction::Alter { path, config } => (path, NodeOp::Alter(config.config())),
                NodeAction::Describe { path } => (path, NodeOp::Describe),
                NodeAction::Drop { path } => (path, NodeOp::Drop),
            };
            let node = Conn::node(&client, &path);
            let call = admin::node(&client, &node, op, out);
            conn.budget.bound("node", call).await?;
            Ok(0)
        }
        Command::Semaphore { action } => {
            let (path, name, op) = match action {
                SemaphoreAction::Create {
                    path,
                    name,
                    limit,
                    data,
                } => (
                    path,
                    name,
                    SemaphoreOp::Create {
                        limit,
                        data: data.into_bytes(),
                    },
                ),
                SemaphoreAction::Update { path, name, data } => (
                    path,
                    name,
                    SemaphoreOp::Update {
                        data: data.into_bytes(),
                    },
                ),
                SemaphoreAction::Describe {
                    path,
                    name,
                    owners,
                    waiters,
                } => (path, name, SemaphoreOp::Describe { owners, waiters }),
                SemaphoreAction::Delete {
                    path,
                    name,
                    force,
                    yes,
                } => (path, name, SemaphoreOp::Delete { force, ask: !yes }),
            };
            let client = conn.client().await?;
            let node = Conn::node(&client, &path);
            let session = conn
                .session(&client, &node, "ydb-coord semaphore".to_string())
                .await?;
            let mut budget = conn.budget;
            if let SemaphoreOp::Delete {
                force: true,
                ask: true,
            } = op
            {
                if let Err(refused) = admin::confirm_delete(&session, &name, &budget).await {
                    session.close().await;
                    return Err(refused);
                }
                // The question took the person's time, not the server's.
                budget = admin::Budget::start(conn.args.timeout);
            }
            let call = admin::semaphore(&session, &name, op, out);
            let result = budget.bound("semaphore", call).await;
            session.close().await;
            result.map(|()| 0)
        }
        Command::Watch {
            path,
            name,
            waiters,
        } => {
            let mut signals = Signals::install()?;
            let client = signals.interruptible(conn.client()).await?;
            let node = Conn::node(&client, &path);
            let description = format!("ydb-coord watch {name}");
            let session = signals
                .interruptible(conn.session(&client, &node, description))
                .await?;
            let result = admin::watch(&session, &name, waiters, out, &mut signals).await;
            session.close().await;
            result.map(|()| 0)
        }
        Command::Group {
            action: GroupAction::Members { path, name },
        } => {
            let client = conn.client().await?;
            let node = Conn::node(&client, &path);
            let session = conn
                .session(&client, &node, "ydb-coord group members".to_string())
                .await?;
            let call = fleet::members(&session, &name, out);
            let result = conn.budget.bound("group members", call).await;
            session.close().await;
            result.map(|()| 0)
        }
        Command::Group {
            action: GroupAction::Join { path, name, data },
        } => {
            let mut signals = Signals::install()?;
            let description = format!("ydb-coord group join {name}");
            let (manager, node) = conn.manager(&mut signals, &path, description).await?;
            let result =
                fleet::join(&manager, &node, &name, data.as_bytes(), out, &mut signals).await;
            manager.shutdown().await;
            result.map(|()| 0)
        }
        Command::Group {
            action: GroupAction::Watch { path, name },
        } => {
            let mut signals = Signals::install()?;
            let description = format!("ydb-coord group watch {name}");
            let (manager, node) = conn.manager(&mut signals, &path, description).await?;
            let result = fleet::watch(&manager, &node, &name, out, &mut signals).await;
            manager.shutdown().await;
            result.map(|()| 0)
        }
        Command::Publish { path, name, value } => {
            let client = conn.client().await?;
            let node = Conn::node(&client, &path);
            let session = conn
                .session(&client, &node, "ydb-coord publish".to_string())
                .await?;
            let call = fleet::publish(&session, &name, value.as_bytes(), out);
            let result = conn.budget.bound("publish", call).await;
            session.close().await;
            result.map(|()| 0)
        }
        Command::Subscribe { path, name, once } => {
            let mut signals = Signals::install()?;
            let description = format!("ydb-coord subscribe {name}");
            let (manager, node) = conn.manager(&mut signals, &path, description).await?;
            // `--once` is one read: bounded by --timeout, as a publish is.
            let bound = once.then_some(conn.budget);
            let result = fleet::subscribe(&manager, &node, &name, bound, out, &mut signals).await;
            manager.shutdown().await;
            result.map(|()| 0)
        }
        Command::Lock(args) => {
            if let (Some(count), Some(limit)) = (args.count, args.limit)
                && count > limit
            {
                return Err(Failure::with_code(
                    fail::USAGE,
                    format!("--count {count} exceeds --limit {limit}"),
                ));
            }
            let kind = match (args.shared, args.count, args.limit) {
                (true, _, _) => Kind::Shared,
                (false, None, None) => Kind::Exclusive {
                    lock_delay: args.lock_delay.filter(|d| !d.is_zero()),
                },
                (false, count, limit) => Kind::Counted {
                    count: count.unwrap_or(1),
                    limit,
                },
            };
            let request = Request {
                node: String::new(),
                name: args.name,
                kind,
                data: args.data.into_bytes(),
                wait: args.wait.wait(),
                kill_grace: args.wait.kill_grace,
                command: args.command,
                what: "lock",
            };
            locked(&conn, &args.path, request, out).await
        }
        Command::Elect(args) if args.observe => {
            let mut signals = Signals::install()?;
            let client = signals.interruptible(conn.client()).await?;
            let node = Conn::node(&client, &args.path);
            let description = format!("ydb-coord elect --observe {}", args.name);
            let session = signals
                .interruptible(conn.session(&client, &node, description))
                .await?;
            let result = admin::observe(&session, &args.name, out, &mut signals).await;
            session.close().await;
            result.map(|()| 0)
        }
        Command::Elect(args) => {
            let request = Request {
                node: String::new(),
                name: args.name,
                kind: Kind::Leadership,
                data: args.data.unwrap_or_default().into_bytes(),
                wait: args.wait.wait(),
                kill_grace: args.wait.kill_grace,
                command: args.command,
                what: "leadership",
            };
            locked(&conn, &args.path, request, out).await
        }
    }
}

/// `lock` and `elect` with a command.
async fn locked(conn: &Conn, path: &str, mut request: Request, out: Out) -> Result<u8, Failure> {
    let mut signals = Signals::install()?;
    let client = signals.interruptible(conn.client()).await?;
    request.node = Conn::node(&client, path);
    let description = format!("ydb-coord pid {} {}", std::process::id(), request.name);
    let session = signals
        .interruptible(conn.session(&client, &request.node, description))
        .await?;
    // For the fence's token: a node created again restarts its order ids (lock.rs).
    let incarnation = client.node_incarnation(&request.node).await;
    lock::run(session, &request, incarnation, out, &mut signals).await
}

/// The tokens and users `ydb-coord emulator` accepts (none: no checking).
struct Auth {
    tokens: Vec<String>,
    users: Vec<(String, String)>,
}

async fn emulator(
    listen: Vec<SocketAddr>,
    tls: Option<(Vec<u8>, Vec<u8>)>,
    database: String,
    nodes: Vec<String>,
    auth: Auth,
) -> Result<u8, Failure> {
    let cannot = |addr: &SocketAddr, err: std::io::Error| match err.kind() {
        // A certificate or key that cannot be used says so itself.
        std::io::ErrorKind::InvalidInput => Failure::new(err.to_string()),
        _ => Failure::new(format!("cannot listen on {addr}: {err}")),
    };
    let Some((&first, more)) = listen.split_first() else {
        return Err(Failure::new("--listen needs at least one address"));
    };
    let mut builder = Emulator::builder().listen(first).database(database);
    if let Some((cert, key)) = tls {
        builder = builder.tls(cert, key);
    }
    for node in nodes {
        builder = builder.node(node);
    }
    for token in auth.tokens {
        builder = builder.token(token);
    }
    for (name, password) in auth.users {
        builder = builder.user(name, password);
    }
    let emulator = builder.start().await.map_err(|err| cannot(&first, err))?;
    for addr in more {
        emulator
            .add_listener(*addr)
            .await
            .map_err(|err| cannot(addr, err))?;
    }
    emulator.advertise(emulator.listeners());
    println!("{}", emulator.connection_string());
    wait_for_signal().await;
    emulator.shutdown().await;
    Ok(0)
}

/// A file's bytes, or a failure naming it.
fn read_file(path: &std::path::Path, what: &str) -> Result<Vec<u8>, Failure> {
    std::fs::read(path).map_err(|err| {
        Failure::new(format!(
            "cannot read the {what} file {}: {err}",
            path.display()
        ))
    })
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every environment variable the library reads credentials from is named in the help.
    #[test]
    fn the_help_names_every_credential_variable() {
        let source = include_str!("../../src/auth/mod.rs");
        let read: std::collections::BTreeSet<&str> = source
            .split('"')
            .filter(|w| {
                w.starts_with("YDB_")
                    && w.chars()
                        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            })
            .collect();
        assert!(read.len() >= 10, "{read:?}");
        for variable in read {
            assert!(
                MAIN_HELP.contains(variable),
                "{variable} is not in the help"
            );
        }
    }

    #[test]
    fn a_long_description_is_cut_at_a_char_boundary() {
        let short = "ydb-coord lock job".to_string();
        assert_eq!(session_description(short.clone()), short);
        for name in [
            "x".repeat(1024),
            "\u{e9}".repeat(512),
            "\u{1F512}".repeat(256),
        ] {
            let d = session_description(format!("ydb-coord pid 4194304 {name}"));
            assert!(d.len() <= MAX_DESCRIPTION_LEN, "{}", d.len());
            assert!(d.len() > MAX_DESCRIPTION_LEN - 4 - 3, "{}", d.len());
            assert!(d.ends_with("..."));
        }
    }
}
