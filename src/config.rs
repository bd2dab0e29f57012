//! The TOML configuration: what an admin or user can tune, validated before use.
//!
//! Every key is documented in `docs/configuration.md` and shown in
//! `config/supervisor.toml`. Unknown keys are rejected so a typo never silently falls
//! back to a default; errors name the file, line and column.

use crate::domain::model::Classification;
use regex::Regex;
use serde::Deserialize;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A config problem, with where it is.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}:{column}: {message}")]
    Invalid {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{path}: {message}")]
    Semantic { path: PathBuf, message: String },
}

/// A duration written as `"30s"`, `"2m"`, `"1h"`, `"1d"`, `"500ms"` or a combination (`"1m30s"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dur(pub Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_duration(&s)
            .map(Dur)
            .map_err(serde::de::Error::custom)
    }
}

/// Parses `"30s"`, `"1m30s"`, `"500ms"`, `"2h"`, `"1d"`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || {
        format!("invalid duration {s:?}: write a number with a unit, e.g. \"30s\", \"5m\", \"1h\"")
    };
    let t = s.trim();
    if t.is_empty() {
        return Err(bad());
    }
    let mut total = Duration::ZERO;
    let mut rest = t;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        if digits == 0 {
            return Err(bad());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let part = match unit {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.checked_mul(60).ok_or_else(bad)?),
            "h" => Duration::from_secs(n.checked_mul(3600).ok_or_else(bad)?),
            "d" => Duration::from_secs(n.checked_mul(86400).ok_or_else(bad)?),
            _ => return Err(bad()),
        };
        total = total.checked_add(part).ok_or_else(bad)?;
    }
    Ok(total)
}

/// A memory size written as `"64G"`, `"512M"`, `"1T"` (1024-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemSize(pub u64);

impl MemSize {
    pub fn mib(self) -> u64 {
        self.0 / (1024 * 1024)
    }
}

impl<'de> Deserialize<'de> for MemSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_mem_size(&s)
            .map(MemSize)
            .map_err(serde::de::Error::custom)
    }
}

/// Parses `"100M"`, `"4G"`, `"1T"`, `"512K"`; a bare number is MiB, as for sbatch `--mem`.
pub fn parse_mem_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let bad =
        || format!("invalid memory size {s:?}: write a number with K, M, G or T, e.g. \"64G\"");
    let (num, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m: u64 = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => return Err(bad()),
            };
            (&t[..i], m)
        }
        _ => (t, 1 << 20),
    };
    let n: u64 = num.parse().map_err(|_| bad())?;
    n.checked_mul(mult).ok_or_else(bad)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    name: String,
    kind: toml::Spanned<String>,
    #[serde(default)]
    exit_codes: Vec<i32>,
    stderr: Option<toml::Spanned<String>>,
    /// The rule proposal it was accepted from (`supervisorctl rules accept` writes it).
    proposal: Option<toml::Spanned<String>>,
}

/// A failure rule: a FAILED attempt whose exit code is listed (if any are) and whose
/// stderr tail matches the regex (if one is given) gets the rule's classification:
/// `transient`, `permanent`, or another the classification table lets rules give
/// (`Row::by_rule`).
#[derive(Debug, Clone)]
pub struct Rule {
    pub name: String,
    pub kind: Classification,
    pub exit_codes: Vec<i32>,
    pub stderr: Option<Regex>,
    /// The drop-in file of `rules.d/` it came from (docs/rules.md), `None` for the
    /// config file's own.
    pub source: Option<PathBuf>,
    /// The rule proposal it was accepted from (docs/rules.md): its 12 hex digits. Every
    /// decision the rule makes names it.
    pub proposal: Option<String>,
    /// Whose own rule it is (`rules accept --mine`, or a user who is no admin): their uid,
    /// and it decides their endings only; `None` for the config's and `rules.d/`'s. Its
    /// retries are counted apart from any other rule of the same name (`learn::tally`).
    pub owner_uid: Option<u32>,
}

/// Whether `s` is a rule proposal's id: 12 lowercase hex digits (a signature's).
pub fn is_proposal_id(s: &str) -> bool {
    s.len() == 12
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Per-classification retry budgets the admin set (`[retry.budgets]`): how many automatic
/// resubmissions one chain may get for each kind of failure before it is escalated to an
/// agent. A kind not listed keeps the classification table's default
/// (`Classification::row`); only kinds retried automatically have one.
#[derive(Debug, Clone, Default)]
pub struct Budgets(
    std::collections::BTreeMap<Classification, u32>,
    /// `continuation`: how many times one chain is continued.
    Option<u32>,
);

impl Budgets {
    /// The admin's budget for `c`, if they set one.
    pub fn get(&self, c: Classification) -> Option<u32> {
        self.0.get(&c).copied()
    }

    /// How many continuations one chain gets (`continuation`, else the default).
    pub fn continuation(&self) -> u32 {
        self.1.unwrap_or(DEFAULT_CONTINUATION_BUDGET)
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawRetry {
    max_retries: u32,
    budgets: std::collections::BTreeMap<String, u32>,
    backoff_initial: Dur,
    backoff_multiplier: f64,
    backoff_max: Dur,
    backoff_jitter: f64,
    restartable: bool,
    in_place: bool,
}

impl Default for RawRetry {
    fn default() -> Self {
        RawRetry {
            max_retries: 5,
            budgets: Default::default(),
            backoff_initial: Dur(Duration::from_secs(10)),
            backoff_multiplier: 2.0,
            backoff_max: Dur(Duration::from_secs(600)),
            backoff_jitter: 0.2,
            restartable: false,
            in_place: false,
        }
    }
}

/// How resources grow after OOM and TIMEOUT.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawEscalation {
    mem_factor: f64,
    mem_headroom: f64,
    mem_max: MemSize,
    time_factor: f64,
    time_max: Dur,
    remind_after: Option<Dur>,
    expire_after: Option<Dur>,
    expire_action: ExpireAction,
}

impl Default for RawEscalation {
    fn default() -> Self {
        RawEscalation {
            mem_factor: 2.0,
            mem_headroom: 1.25,
            mem_max: MemSize(256 << 30),
            time_factor: 2.0,
            time_max: Dur(Duration::from_secs(7 * 86400)),
            remind_after: None,
            expire_after: None,
            expire_action: ExpireAction::Hold,
        }
    }
}

/// What becomes of a chain left in `pending_failed` for `escalation.expire_after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ExpireAction {
    /// It stays in `pending_failed`, held for a person: the agent stops looking at it.
    Hold,
    /// It fails for good.
    Fail,
}

impl ExpireAction {
    pub fn as_str(self) -> &'static str {
        match self {
            ExpireAction::Hold => "hold",
            ExpireAction::Fail => "fail",
        }
    }
}

/// Telling the submitter about their chains (see `daemon/notifications.rs`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NotifyConfig {
    /// Mail the submitter, and strip Slurm's own per-attempt FAIL/REQUEUE/END mails.
    /// `false` leaves the sbatch argv as the user gave it and mails nothing.
    pub mail: bool,
    /// The mail program (called as `PROG -s SUBJECT -- RECIPIENT`, the body on stdin);
    /// `None`: slurm.conf's `MailProg`, else `/usr/bin/mail`.
    pub mail_program: Option<PathBuf>,
    /// A program run with each notification as JSON on stdin (argv, no shell).
    pub command: Option<Vec<String>>,
    /// One run of the mail program or the command taking longer is killed.
    pub timeout: Dur,
    /// Deliveries tried before a notification is given up (and logged).
    pub max_attempts: u32,
}

impl Default for NotifyConfig {
    fn default() -> Self {
        NotifyConfig {
            mail: true,
            mail_program: None,
            command: None,
            timeout: Dur(Duration::from_secs(30)),
            max_attempts: 5,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawSlurm {
    bin_dir: Option<PathBuf>,
    command_timeout: Dur,
    sbatch_timeout: Dur,
    sacct_chunk: usize,
    stderr_tail_lines: usize,
    stderr_tail_bytes: u64,
    lost_job_after: Dur,
}

impl Default for RawSlurm {
    fn default() -> Self {
        RawSlurm {
            bin_dir: None,
            command_timeout: Dur(Duration::from_secs(30)),
            sbatch_timeout: Dur(Duration::from_secs(60)),
            sacct_chunk: 5000,
            stderr_tail_lines: 50,
            stderr_tail_bytes: 64 * 1024,
            lost_job_after: Dur(Duration::from_secs(1800)),
        }
    }
}

/// The global breaker: when this many infrastructure failures (node_fail, boot_fail,
/// transient) happen across all chains within `window`, automatic resubmission of such
/// failures pauses and they are escalated instead. `threshold = 0` disables it.
///
/// A breaker must trip on a sick cluster, not on one user's jobs (whose stderr may match a
/// transient rule as often as they like): in a daemon for several users (run as root),
/// each user's failures count at most `threshold / min_users` (rounded up), so at least
/// `min_users` users' jobs must fail to open it. A per-user daemon has one user: there
/// its failures count whole.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BreakerConfig {
    pub threshold: u32,
    pub window: Dur,
    pub min_users: u32,
}

impl BreakerConfig {
    /// `min_users` as this daemon applies it: a per-user daemon (not root) has one user,
    /// whose failures count whole.
    pub fn min_users_here(&self) -> u32 {
        if nix::unistd::geteuid().is_root() {
            self.min_users
        } else {
            1
        }
    }
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            threshold: 10,
            window: Dur(Duration::from_secs(600)),
            min_users: 2,
        }
    }
}

/// Rules that learn (docs/rules.md): when `agreeing` resolutions by people or agents of
/// one failure signature agree (same action, same kind of change), and of the retries
/// they caused that have ended at least `min_success` completed, the daemon proposes the
/// `[[rules]]` entry that would have decided them.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LearnConfig {
    pub agreeing: u32,
    pub min_success: f64,
    /// A rule whose automatic retries stopped working (at least `agreeing` ended, fewer
    /// than `min_success` of them completed) no longer decides an ending: it is judged
    /// as if the rule were not there. Off by default.
    pub stop_not_working: bool,
    /// A Unix group whose members accept and reject rule proposals for everyone, as root
    /// does (`supervisorctl rules accept|reject`). Unset by default.
    pub admin_group: Option<String>,
    /// `admin_group`'s gid, looked up on this node when the daemon loads the config
    /// ([`Config::parse`]; a client's view does not look it up).
    #[serde(skip)]
    pub admin_gid: Option<u32>,
}

impl Default for LearnConfig {
    fn default() -> Self {
        LearnConfig {
            agreeing: 3,
            min_success: 0.8,
            stop_not_working: false,
            admin_group: None,
            admin_gid: None,
        }
    }
}

/// Node quarantine: a node that failed `threshold` jobs within `window` is excluded from
/// every retry until `duration` after its latest failure. `threshold = 0` disables it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QuarantineConfig {
    pub threshold: u32,
    pub window: Dur,
    pub duration: Dur,
}

impl Default for QuarantineConfig {
    fn default() -> Self {
        QuarantineConfig {
            threshold: 2,
            window: Dur(Duration::from_secs(3600)),
            duration: Dur(Duration::from_secs(7200)),
        }
    }
}

/// Continuation of jobs that checkpoint (docs/continuation.md): the warning before a
/// continuing job's limit, how short an attempt may be and still count as progress, the
/// wait before a continuation, and how much wall time one chain may use in all. Their
/// number is `[retry.budgets] continuation`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ContinuationConfig {
    /// A continuing job without a `--signal` of its own gets `--signal=B:USR1@<this>`:
    /// its batch shell is sent SIGUSR1 this long before its time limit.
    pub signal_grace: Dur,
    /// An attempt that ran less than this is no evidence of progress by itself.
    pub min_attempt: Dur,
    /// The wait before a continuation is submitted (nothing failed: short).
    pub backoff: Dur,
    /// The wall time one chain's continued attempts may use in all.
    pub max_wall_time: Dur,
}

impl Default for ContinuationConfig {
    fn default() -> Self {
        ContinuationConfig {
            signal_grace: Dur(Duration::from_secs(90)),
            min_attempt: Dur(Duration::from_secs(60)),
            backoff: Dur(Duration::from_secs(0)),
            max_wall_time: Dur(Duration::from_secs(30 * 24 * 3600)),
        }
    }
}

/// The longest warning `--signal` takes (sbatch: at most 65535 seconds).
pub const MAX_SIGNAL_GRACE_SECS: u64 = 65535;

/// The continuations one chain gets by default (`[retry.budgets] continuation`).
pub const DEFAULT_CONTINUATION_BUDGET: u32 = 100;

/// The name `[retry.budgets]` gives the continuation budget.
pub const CONTINUATION_BUDGET_NAME: &str = "continuation";

/// Running an agent on waiting chains (off unless `command` is set).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentConfig {
    /// The agent's argv, e.g. `["claude", "--print"]`; it gets a prompt on stdin.
    pub command: Option<Vec<String>>,
    /// At most one run per interval, and only while unheld chains wait.
    pub interval: Dur,
    /// A run taking longer is killed.
    pub timeout: Dur,
    /// A resolution with a lower `confidence` is turned into `hold` for a person.
    pub min_confidence: f64,
    /// Variables of the daemon's own environment the agent gets besides `PATH`, `HOME`,
    /// `USER`, `LOGNAME`, `LANG`, `LC_ALL`, `TZ` and `SLURM_SUPERVISOR_CONFIG` (e.g. the
    /// name of its API key's variable); nothing else of the daemon's is passed on.
    pub env: Vec<String>,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            command: None,
            interval: Dur(Duration::from_secs(600)),
            timeout: Dur(Duration::from_secs(300)),
            min_confidence: 0.7,
            env: Vec::new(),
        }
    }
}

/// What one caller (a uid on the control socket) may take of a shared daemon. Each limit
/// is per user, so one user cannot starve or fill the daemon for the others.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Control connections one user may hold open at once.
    pub connections_per_user: usize,
    /// A connection must start its request within this, and finish it within this plus
    /// one second for each MiB that has arrived (the socket caps the whole at 60 s).
    pub request_timeout: Dur,
    /// The largest batch script a submission may carry (Slurm's own default is 4 MiB).
    pub max_script_size: MemSize,
    /// The most tasks one array submission may have.
    pub max_array_tasks: usize,
    /// The most unfinished chains (active, ready, pending_failed) one user may have.
    pub max_open_chains_per_user: usize,
    /// Submissions of one user whose sbatch is still running.
    pub submits_in_flight_per_user: usize,
    /// What one user's unfinished chains may keep in the store together: their
    /// submissions (scripts, arguments, environments, working directories) and their
    /// decision records (reasons and inputs).
    pub max_stored_bytes_per_user: MemSize,
    /// Requests that change something (submit, cancel, classify, recover, adopt, opt-in,
    /// opt-out) one user may make in a minute: a token bucket holding a minute's worth.
    /// Reads are not counted.
    pub write_requests_per_minute: u32,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            connections_per_user: 8,
            request_timeout: Dur(Duration::from_secs(5)),
            max_script_size: MemSize(4 << 20),
            max_array_tasks: 10_000,
            max_open_chains_per_user: 10_000,
            submits_in_flight_per_user: 4,
            max_stored_bytes_per_user: MemSize(1 << 30),
            write_requests_per_minute: 3000,
        }
    }
}

impl LimitsConfig {
    /// The largest request line accepted: a script travels in it as base64 (4 characters
    /// for 3 bytes; the older array of byte values takes up to 4 a byte), plus room for the
    /// command line and the environment.
    pub fn max_request_bytes(&self) -> u64 {
        self.max_script_size.0.saturating_mul(4) + (4 << 20)
    }
}

/// Plain `sbatch`, supervised (docs/plain-sbatch.md): the site's cli_filter leaves a note
/// in `spool` for each submission of an opted-in user, and the daemon adopts the job.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlainSbatchConfig {
    /// Read the filter's notes and adopt the jobs they name (off by default).
    pub enabled: bool,
    /// Where the filter leaves its notes and reads who opted in; must be the `SPOOL` of
    /// the installed `cli_filter.lua`. `None`: `<state_dir>/plain-sbatch`.
    pub spool: Option<PathBuf>,
    /// Every user is opted in unless they opt out (`supervisorctl opt-out`).
    pub everyone: bool,
    /// The members of these Unix groups are opted in unless they opt out.
    pub groups: Vec<String>,
    /// Also supervise the jobs the job_submit script marked (`admin_comment`,
    /// config/slurm/job_submit.lua): one squeue lists them every ten poll intervals, at
    /// most a minute apart.
    pub admin_comment: bool,
}

/// The Prometheus endpoint (off unless `listen` is set).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawMetrics {
    listen: Option<toml::Spanned<String>>,
}

/// Where `GET /metrics` is served; `None` (the default) serves nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetricsConfig {
    /// An IP address and a port, e.g. `127.0.0.1:9464`. The endpoint has no
    /// authentication: anyone who can reach the address can read the counts.
    pub listen: Option<std::net::SocketAddr>,
}

/// The network listener and what it trusts (off unless `listen` is set).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawServer {
    listen: Option<toml::Spanned<String>>,
    id: Option<String>,
    munge_socket: Option<PathBuf>,
    root_nodes: Vec<toml::Spanned<String>>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
}

/// How `supervisorctl` finds the cluster's daemon over the network.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawClient {
    servers: Vec<toml::Spanned<String>>,
    munge_socket: Option<PathBuf>,
    tls_ca: Option<PathBuf>,
}

/// The TCP listener for clients on other login nodes (docs/security.md, "Network
/// clients"). `listen` is `None` by default: nothing is served over the network.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerConfig {
    /// An IP address and a port, e.g. `0.0.0.0:6827`.
    pub listen: Option<std::net::SocketAddr>,
    /// The daemon's identity, bound into every credential sent to it: by default the
    /// host name and the listening port, `login1:6827`.
    pub id: Option<String>,
    /// munged's socket, when not libmunge's default.
    pub munge_socket: Option<PathBuf>,
    /// The origin addresses (as MUNGE states them) whose root is an administrator of this
    /// daemon over the network. Empty by default: root on another node is no one here.
    pub root_nodes: Vec<std::net::Ipv4Addr>,
    /// TLS: the certificate chain and the private key (PEM) the listener presents; when
    /// set, every network connection is TLS.
    pub tls: Option<TlsFiles>,
}

/// A TLS server's certificate chain and key, PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Where `supervisorctl` sends requests over the network; empty (the default) means the
/// Unix socket.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetClientConfig {
    /// `host:port` of each login node's daemon, tried in order.
    pub servers: Vec<String>,
    pub munge_socket: Option<PathBuf>,
    /// TLS: the CA certificates (PEM) the servers' certificates are checked against; when
    /// set, the client speaks TLS to every server.
    pub tls_ca: Option<PathBuf>,
}

/// The environment variable that replaces `[client] servers` (comma-separated).
pub const SERVERS_ENV: &str = "SLURM_SUPERVISOR_SERVERS";

/// Checks one `host:port` of a servers list.
pub fn check_server_address(s: &str) -> Result<(), String> {
    let bad =
        || format!("{s:?} is not a server address: write a host and a port, e.g. \"login1:6827\"");
    let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
    match port.parse::<u16>() {
        Ok(p) if p != 0 && !host.is_empty() && !host.contains(char::is_whitespace) => Ok(()),
        _ => Err(bad()),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    state_dir: Option<PathBuf>,
    socket: Option<PathBuf>,
    poll_interval: Option<Dur>,
    #[serde(default)]
    slurm: RawSlurm,
    #[serde(default)]
    retry: RawRetry,
    #[serde(default)]
    escalation: RawEscalation,
    #[serde(default)]
    breaker: BreakerConfig,
    #[serde(default)]
    quarantine: QuarantineConfig,
    #[serde(default)]
    continuation: ContinuationConfig,
    #[serde(default)]
    agent: AgentConfig,
    #[serde(default)]
    notify: NotifyConfig,
    #[serde(default)]
    limits: LimitsConfig,
    #[serde(default)]
    metrics: RawMetrics,
    #[serde(default)]
    server: RawServer,
    #[serde(default)]
    client: RawClient,
    #[serde(default)]
    plain_sbatch: PlainSbatchConfig,
    #[serde(default)]
    learn: LearnConfig,
    #[serde(default)]
    rules: Vec<RawRule>,
    store: Option<crate::plumbing::dbconfig::StoreConfig>,
}

/// Slurm command settings.
#[derive(Debug, Clone)]
pub struct SlurmConfig {
    /// Where sbatch, squeue, sacct, scancel and sinfo live; `None` means `$PATH`.
    pub bin_dir: Option<PathBuf>,
    pub command_timeout: Duration,
    pub sbatch_timeout: Duration,
    /// How many job ids go into one sacct call.
    pub sacct_chunk: usize,
    pub stderr_tail_lines: usize,
    pub stderr_tail_bytes: u64,
    /// A job gone from squeue whose sacct record never ends is escalated after this long.
    pub lost_job_after: Duration,
}

/// Retry budgets and backoff.
#[derive(Debug, Clone)]
pub struct RetryConfig {
    /// Default cap on automatic resubmissions per chain (`submit --max-retries` overrides).
    pub max_retries: u32,
    pub budgets: Budgets,
    pub backoff_initial: Duration,
    pub backoff_multiplier: f64,
    pub backoff_max: Duration,
    /// Fraction of the delay added or removed at random, so retries do not arrive together.
    pub backoff_jitter: f64,
    /// Every submission may be rerun after some of its srun steps completed (as if
    /// submitted with `--restartable`); false escalates such a partial execution.
    pub restartable: bool,
    /// A retry of a job (not an array task) requeues the ended job under its own id
    /// (`scontrol requeuehold`, `update`, `release`, as the owner) instead of a new sbatch,
    /// falling back to sbatch when Slurm refuses.
    pub in_place: bool,
}

/// Resource escalation factors and caps.
#[derive(Debug, Clone)]
pub struct EscalationConfig {
    pub mem_factor: f64,
    pub mem_headroom: f64,
    pub mem_max_bytes: u64,
    pub time_factor: f64,
    pub time_max: Duration,
    /// A chain in `pending_failed` this long gets one reminder; `None`: never.
    pub remind_after: Option<Duration>,
    /// A chain in `pending_failed` this long is resolved by `expire_action`; `None`: never.
    pub expire_after: Option<Duration>,
    pub expire_action: ExpireAction,
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub path: Option<PathBuf>,
    pub state_dir: PathBuf,
    pub socket: PathBuf,
    pub poll_interval: Duration,
    pub slurm: SlurmConfig,
    pub retry: RetryConfig,
    pub escalation: EscalationConfig,
    pub breaker: BreakerConfig,
    pub quarantine: QuarantineConfig,
    pub continuation: ContinuationConfig,
    pub agent: AgentConfig,
    pub notify: NotifyConfig,
    pub limits: LimitsConfig,
    pub metrics: MetricsConfig,
    pub server: ServerConfig,
    pub client: NetClientConfig,
    pub plain_sbatch: PlainSbatchConfig,
    /// When resolutions of one failure signature make a rule proposal (docs/rules.md).
    pub learn: LearnConfig,
    pub rules: Vec<Rule>,
    /// Cluster mode (`[store]`): the shared database and the lease; `None` runs on the
    /// SQLite store alone.
    pub cluster: Option<ClusterConfig>,
}

/// Cluster mode's settings (docs/cluster.md), from `[store]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    pub url: crate::plumbing::dbconfig::StoreUrl,
    pub password_file: PathBuf,
    /// The lease's length and the margin before its end (checked together).
    pub timing: crate::domain::election::Timing,
    /// The bound on every call to the database.
    pub timeout: Duration,
    /// This node's name, as the other nodes' users are told it.
    pub node: String,
    /// When the active daemon snapshots the store and prunes the journal.
    pub snapshot: crate::plumbing::dbconfig::SnapshotPolicy,
}

/// The lease's default length: a daemon that stops is replaced within it and a poll.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);
/// The default margin before a lease's end.
pub const DEFAULT_MARGIN: Duration = Duration::from_secs(5);
/// The default bound on a call to the shared database.
pub const DEFAULT_DB_TIMEOUT: Duration = Duration::from_secs(5);

/// What `supervisorctl` needs of the config: where the socket is and how big a script
/// may be. The file is checked as the daemon checks it (every key, type and bound), except
/// that the rules' stderr patterns are not compiled: the regex engine's Unicode tables
/// would be relocated at every start of every `supervisorctl` command, about a fifth of
/// its start-up (docs/benchmarks.md). `supervisorctl validate` runs
/// `slurm-supervisord --validate`, which compiles them.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    pub socket: PathBuf,
    pub max_script_size: u64,
    /// The daemons to reach over the network, in order; empty: the Unix socket.
    pub net: NetClientConfig,
}

impl ClientConfig {
    /// Reads and checks a config file (see the type for what is not checked).
    pub fn load(path: &Path) -> Result<ClientConfig, ConfigError> {
        ClientConfig::parse(&read(path)?, Some(path))
    }

    /// The built-in defaults.
    pub fn defaults() -> ClientConfig {
        ClientConfig::parse("", None).expect("the empty config is valid")
    }

    pub fn parse(text: &str, path: Option<&Path>) -> Result<ClientConfig, ConfigError> {
        let c = Config::parse_with(text, path, &|_| Ok(None))?;
        Ok(ClientConfig {
            socket: c.socket,
            max_script_size: c.limits.max_script_size.0,
            net: c.client,
        })
    }

    /// `SLURM_SUPERVISOR_SERVERS`, when set, replaces `[client] servers`: a comma-separated
    /// list of `host:port`, or empty for the Unix socket.
    pub fn with_servers_env(mut self, value: Option<&str>) -> Result<ClientConfig, String> {
        if let Some(v) = value {
            let servers: Vec<String> = v
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            for s in &servers {
                check_server_address(s).map_err(|e| format!("{SERVERS_ENV}: {e}"))?;
            }
            self.net.servers = servers;
        }
        Ok(self)
    }
}

/// A config file's text.
/// The folder beside the config file whose `*.toml` files add `[[rules]]` entries, after
/// the config's own (docs/rules.md).
pub const RULES_DIR: &str = "rules.d";

/// The `*.toml` files of `dir` in name order; none when it does not exist.
fn drop_ins(dir: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(ConfigError::Read {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| ConfigError::Read {
            path: dir.to_path_buf(),
            source,
        })?;
        let p = entry.path();
        if p.extension().is_some_and(|e| e == "toml") {
            files.push(p);
        }
    }
    files.sort();
    Ok(files)
}

/// A top-level key of a rules.d file that is not `rules`, if any.
fn first_key_other_than_rules(text: &str) -> Option<String> {
    let table: toml::Table = toml::from_str(text).ok()?;
    table.keys().find(|k| *k != "rules").cloned()
}

fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map(|i| i + 1).unwrap_or(0) + 1;
    (line, column)
}

/// The state directory used when the config gives none: `$XDG_STATE_HOME/slurm-supervisor`
/// or `~/.local/state/slurm-supervisor`.
pub fn default_state_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("slurm-supervisor");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    home.join(".local/state/slurm-supervisor")
}

impl Config {
    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let mut config = Config::parse(&read(path)?, Some(path))?;
        let dir = path.parent().unwrap_or(Path::new(".")).join(RULES_DIR);
        for file in drop_ins(&dir)? {
            let text = read(&file)?;
            // A drop-in is validated by the code that validates the config's own rules:
            // parsed as a config holding only `[[rules]]`.
            let more = Config::parse(&text, Some(&file))?;
            if let Some(key) = first_key_other_than_rules(&text) {
                return Err(ConfigError::Semantic {
                    path: file,
                    message: format!(
                        "a rules.d file holds [[rules]] entries only, not `{key}`: move it to the config file"
                    ),
                });
            }
            for mut rule in more.rules {
                if config.rules.iter().any(|r| r.name == rule.name) {
                    return Err(ConfigError::Semantic {
                        path: file,
                        message: format!(
                            "rule {:?} is already defined: give it another name or remove one of them",
                            rule.name
                        ),
                    });
                }
                rule.source = Some(file.clone());
                config.rules.push(rule);
            }
        }
        Ok(config)
    }

    /// The configuration with every default, for running without a file.
    pub fn defaults() -> Config {
        Config::parse("", None).expect("the empty config is valid")
    }

    /// Parses and validates config text; `path` is used in error messages. The daemon's
    /// view: `[learn] admin_group` is looked up on this node (a group it does not know is
    /// an error).
    pub fn parse(text: &str, path: Option<&Path>) -> Result<Config, ConfigError> {
        let mut c = Config::parse_with(text, path, &|pattern| {
            Regex::new(pattern).map(Some).map_err(|e| e.to_string())
        })?;
        if let Some(name) = &c.learn.admin_group {
            let found = nix::unistd::Group::from_name(name).map_err(|e| ConfigError::Semantic {
                path: path.map_or_else(|| PathBuf::from("<config>"), Path::to_path_buf),
                message: format!("learn.admin_group = {name:?}: cannot look the group up: {e}"),
            })?;
            let Some(g) = found else {
                return Err(ConfigError::Semantic {
                    path: path.map_or_else(|| PathBuf::from("<config>"), Path::to_path_buf),
                    message: format!(
                        "learn.admin_group = {name:?} is not a group on this node (`getent group {name}` finds none): \
                         create the group, name an existing one, or remove the key"
                    ),
                });
            };
            c.learn.admin_gid = Some(g.gid.as_raw());
        }
        Ok(c)
    }

    /// `parse`, with the rules' stderr patterns compiled by `compile`. Only `parse` passes
    /// the regex compiler, so a binary that never calls it (`supervisorctl`, through
    /// `ClientConfig`) links no regex engine.
    fn parse_with(
        text: &str,
        path: Option<&Path>,
        compile: &dyn Fn(&str) -> Result<Option<Regex>, String>,
    ) -> Result<Config, ConfigError> {
        let shown = path
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("<config>"));
        let invalid = |span: Option<Range<usize>>, message: String| {
            let (line, column) = span.map(|s| line_col(text, s.start)).unwrap_or((1, 1));
            ConfigError::Invalid {
                path: shown.clone(),
                line,
                column,
                message,
            }
        };
        let raw: RawConfig =
            toml::from_str(text).map_err(|e| invalid(e.span(), e.message().to_string()))?;
        // A socket address (`metrics.listen`, `server.listen`), and one a client can find
        // again: port 0 would pick a different port at every start.
        let listen_address = |v: &Option<toml::Spanned<String>>,
                              key: &str,
                              example: &str|
         -> Result<Option<std::net::SocketAddr>, ConfigError> {
            let Some(s) = v else { return Ok(None) };
            let addr: std::net::SocketAddr = s.get_ref().trim().parse().map_err(|_| {
                invalid(
                    Some(s.span()),
                    format!(
                        "{key} = {:?} is not a socket address: write an IP address and a port, e.g. \"{example}\"",
                        s.get_ref()
                    ),
                )
            })?;
            if addr.port() == 0 {
                return Err(invalid(
                    Some(s.span()),
                    format!("{key} must name a port between 1 and 65535, e.g. \"{example}\""),
                ));
            }
            Ok(Some(addr))
        };
        let semantic = |message: String| ConfigError::Semantic {
            path: shown.clone(),
            message,
        };

        let mut rules = Vec::with_capacity(raw.rules.len());
        for r in raw.rules {
            let stderr = match &r.stderr {
                Some(s) => compile(s.get_ref()).map_err(|e| {
                    invalid(
                        Some(s.span()),
                        format!("rule {:?}: invalid stderr regex: {e}", r.name),
                    )
                })?,
                None => None,
            };
            if r.exit_codes.is_empty() && r.stderr.is_none() {
                return Err(semantic(format!(
                    "rule {:?} matches everything: give it exit_codes, a stderr regex, or both",
                    r.name
                )));
            }
            if r.name.trim().is_empty() {
                return Err(semantic(
                    "a rule has an empty name: give every rule a name".into(),
                ));
            }
            let kind = match r.kind.get_ref().parse::<Classification>() {
                Ok(k) if k.row().by_rule => k,
                _ => {
                    let may: Vec<&str> = Classification::ALL
                        .iter()
                        .filter(|c| c.row().by_rule)
                        .map(|c| c.as_str())
                        .collect();
                    return Err(invalid(
                        Some(r.kind.span()),
                        format!(
                            "rule {:?}: kind = {:?} is not one a rule can give; write one of {}",
                            r.name,
                            r.kind.get_ref(),
                            may.join(", ")
                        ),
                    ));
                }
            };
            let proposal = match r.proposal {
                Some(p) if is_proposal_id(p.get_ref()) => Some(p.into_inner()),
                Some(p) => {
                    return Err(invalid(
                        Some(p.span()),
                        format!(
                            "rule {:?}: proposal = {:?} is not a rule proposal's id: write its 12 hex digits, as `supervisorctl rules` lists it, or remove the key",
                            r.name,
                            p.get_ref()
                        ),
                    ))
                }
                None => None,
            };
            rules.push(Rule {
                name: r.name,
                kind,
                exit_codes: r.exit_codes,
                stderr,
                source: None,
                proposal,
                owner_uid: None,
            });
        }

        let mut budgets = Budgets::default();
        for (name, &n) in &raw.retry.budgets {
            if name == CONTINUATION_BUDGET_NAME {
                budgets.1 = Some(n);
                continue;
            }
            match name.parse::<Classification>() {
                Ok(c) if c.is_retried() => {
                    budgets.0.insert(c, n);
                }
                _ => {
                    let retried: Vec<&str> = Classification::ALL
                        .iter()
                        .filter(|c| c.is_retried())
                        .map(|c| c.as_str())
                        .collect();
                    return Err(semantic(format!(
                        "retry.budgets.{name}: only kinds retried automatically have a budget; write one of {}, or {CONTINUATION_BUDGET_NAME}",
                        retried.join(", ")
                    )));
                }
            }
        }

        let poll_interval = raw
            .poll_interval
            .map(|d| d.0)
            .unwrap_or(Duration::from_secs(30));
        if poll_interval < Duration::from_secs(1) {
            return Err(semantic(format!(
                "poll_interval {poll_interval:?} is below the minimum of 1s: Slurm's controller would be polled too often"
            )));
        }
        let e = raw.escalation;
        for (name, v) in [
            ("escalation.mem_factor", e.mem_factor),
            ("escalation.mem_headroom", e.mem_headroom),
            ("escalation.time_factor", e.time_factor),
            ("retry.backoff_multiplier", raw.retry.backoff_multiplier),
        ] {
            if !(1.0..=100.0).contains(&v) {
                return Err(semantic(format!(
                    "{name} = {v} must be between 1.0 and 100.0"
                )));
            }
        }
        if !(0.0..=1.0).contains(&raw.retry.backoff_jitter) {
            return Err(semantic(format!(
                "retry.backoff_jitter = {} must be a fraction between 0.0 and 1.0",
                raw.retry.backoff_jitter
            )));
        }
        if !(0.0..=1.0).contains(&raw.learn.min_success) {
            return Err(semantic(format!(
                "learn.min_success = {} must be a fraction between 0.0 and 1.0",
                raw.learn.min_success
            )));
        }
        if raw.learn.agreeing < 2 {
            return Err(semantic(format!(
                "learn.agreeing = {} is too few: a rule needs at least 2 agreeing resolutions (the default is 3)",
                raw.learn.agreeing
            )));
        }
        if let Some(g) = &raw.learn.admin_group {
            if g.is_empty() || g.len() > 256 || g.contains(['\0', '\n', ':']) {
                return Err(semantic(format!(
                    "learn.admin_group = {g:?} is not a group name: write the name of a Unix group, e.g. \"slurm-admins\", or remove the key"
                )));
            }
        }
        if !(0.0..=1.0).contains(&raw.agent.min_confidence) {
            return Err(semantic(format!(
                "agent.min_confidence = {} must be between 0.0 and 1.0",
                raw.agent.min_confidence
            )));
        }
        if raw.agent.command.as_ref().is_some_and(|c| c.is_empty()) {
            return Err(semantic("agent.command is empty: give the program and its arguments, e.g. [\"claude\", \"--print\"]".into()));
        }
        if raw.slurm.command_timeout.0.is_zero() || raw.slurm.sbatch_timeout.0.is_zero() {
            return Err(semantic("slurm command timeouts must be above zero".into()));
        }
        // Every duration and size has a bound, so no value can overflow a clock or a
        // buffer later (a daemon that validated a config must never panic on it).
        const DAY: u64 = 86_400;
        if raw.notify.command.as_ref().is_some_and(|c| c.is_empty()) {
            return Err(semantic("notify.command is empty: give the program and its arguments, e.g. [\"/usr/local/bin/notify-chat\"]".into()));
        }
        if raw
            .notify
            .mail_program
            .as_ref()
            .is_some_and(|p| !p.is_absolute())
        {
            return Err(semantic(
                "notify.mail_program must be an absolute path, e.g. \"/usr/bin/mail\"".into(),
            ));
        }
        if !(1..=100).contains(&raw.notify.max_attempts) {
            return Err(semantic(format!(
                "notify.max_attempts = {} must be between 1 and 100",
                raw.notify.max_attempts
            )));
        }
        if raw.notify.timeout.0 < Duration::from_secs(1) {
            return Err(semantic("notify.timeout must be at least 1s".into()));
        }
        if let (Some(r), Some(x)) = (&e.remind_after, &e.expire_after) {
            if r.0 >= x.0 {
                return Err(semantic(format!(
                    "escalation.remind_after = {:?} must be shorter than escalation.expire_after = {:?}: the reminder would never come",
                    r.0, x.0
                )));
            }
        }
        for (name, d) in [
            ("escalation.remind_after", &e.remind_after),
            ("escalation.expire_after", &e.expire_after),
        ] {
            if d.as_ref().is_some_and(|d| d.0 < Duration::from_secs(1)) {
                return Err(semantic(format!("{name} must be at least 1s")));
            }
        }
        let durations = [
            ("poll_interval", poll_interval, 3600),
            (
                "escalation.remind_after",
                e.remind_after.map_or(Duration::ZERO, |d| d.0),
                3650 * DAY,
            ),
            (
                "escalation.expire_after",
                e.expire_after.map_or(Duration::ZERO, |d| d.0),
                3650 * DAY,
            ),
            ("notify.timeout", raw.notify.timeout.0, 3600),
            ("slurm.command_timeout", raw.slurm.command_timeout.0, DAY),
            ("slurm.sbatch_timeout", raw.slurm.sbatch_timeout.0, DAY),
            (
                "slurm.lost_job_after",
                raw.slurm.lost_job_after.0,
                365 * DAY,
            ),
            (
                "retry.backoff_initial",
                raw.retry.backoff_initial.0,
                30 * DAY,
            ),
            ("retry.backoff_max", raw.retry.backoff_max.0, 30 * DAY),
            ("escalation.time_max", e.time_max.0, 3650 * DAY),
            ("breaker.window", raw.breaker.window.0, 365 * DAY),
            ("quarantine.window", raw.quarantine.window.0, 365 * DAY),
            ("quarantine.duration", raw.quarantine.duration.0, 365 * DAY),
            (
                "continuation.signal_grace",
                raw.continuation.signal_grace.0,
                MAX_SIGNAL_GRACE_SECS,
            ),
            (
                "continuation.min_attempt",
                raw.continuation.min_attempt.0,
                365 * DAY,
            ),
            ("continuation.backoff", raw.continuation.backoff.0, 30 * DAY),
            (
                "continuation.max_wall_time",
                raw.continuation.max_wall_time.0,
                3650 * DAY,
            ),
            ("agent.interval", raw.agent.interval.0, 365 * DAY),
            ("agent.timeout", raw.agent.timeout.0, DAY),
            ("limits.request_timeout", raw.limits.request_timeout.0, 3600),
        ];
        for (name, value, max_secs) in durations {
            if value > Duration::from_secs(max_secs) {
                return Err(semantic(format!(
                    "{name} = {value:?} is longer than the most it may be ({max_secs}s)"
                )));
            }
        }
        if raw.limits.request_timeout.0 < Duration::from_millis(100) {
            return Err(semantic(
                "limits.request_timeout must be at least 100ms".into(),
            ));
        }
        const GIB: u64 = 1 << 30;
        let counts = [
            (
                "slurm.sacct_chunk",
                raw.slurm.sacct_chunk as u64,
                1,
                100_000,
            ),
            (
                "slurm.stderr_tail_lines",
                raw.slurm.stderr_tail_lines as u64,
                0,
                100_000,
            ),
            (
                "slurm.stderr_tail_bytes",
                raw.slurm.stderr_tail_bytes,
                0,
                16 << 20,
            ),
            ("escalation.mem_max", e.mem_max.0, 1 << 20, 1 << 50),
            ("breaker.min_users", raw.breaker.min_users as u64, 1, 1000),
            (
                "limits.connections_per_user",
                raw.limits.connections_per_user as u64,
                1,
                4096,
            ),
            (
                "limits.max_script_size",
                raw.limits.max_script_size.0,
                1024,
                GIB,
            ),
            (
                "limits.max_stored_bytes_per_user",
                raw.limits.max_stored_bytes_per_user.0,
                1 << 20,
                1 << 40,
            ),
            (
                "limits.max_array_tasks",
                raw.limits.max_array_tasks as u64,
                1,
                1_000_000,
            ),
            (
                "limits.max_open_chains_per_user",
                raw.limits.max_open_chains_per_user as u64,
                1,
                10_000_000,
            ),
            (
                "limits.submits_in_flight_per_user",
                raw.limits.submits_in_flight_per_user as u64,
                1,
                1024,
            ),
            (
                "limits.write_requests_per_minute",
                u64::from(raw.limits.write_requests_per_minute),
                1,
                1_000_000,
            ),
            ("retry.max_retries", raw.retry.max_retries as u64, 0, 10_000),
        ];
        for (name, value, min, max) in counts {
            if !(min..=max).contains(&value) {
                return Err(semantic(format!(
                    "{name} = {value} must be between {min} and {max}"
                )));
            }
        }

        let metrics_listen =
            listen_address(&raw.metrics.listen, "metrics.listen", "127.0.0.1:9464")?;

        let cluster = match raw.store {
            None => None,
            Some(st) => {
                let dur = |key: &str, v: &Option<String>, default: Duration| match v {
                    None => Ok(default),
                    Some(text) => {
                        parse_duration(text).map_err(|e| semantic(format!("store.{key}: {e}")))
                    }
                };
                let lease = dur("lease", &st.lease, DEFAULT_LEASE)?;
                let margin = dur("margin", &st.margin, DEFAULT_MARGIN)?;
                let timeout = dur("timeout", &st.timeout, DEFAULT_DB_TIMEOUT)?;
                let timing = crate::domain::election::Timing::new(lease, margin)
                    .map_err(|e| semantic(format!("store.lease and store.margin: {e}")))?;
                // A command that changes Slurm starts only if its timeout ends before the
                // lease's local deadline, which a renewal moves every third of the usable
                // time: two thirds of it must hold the longest such command.
                let room = timing.usable(lease) * 2 / 3;
                if room <= raw.slurm.command_timeout.0 {
                    return Err(semantic(format!(
                        "store.lease = {lease:?} leaves {room:?} for a Slurm command, and slurm.command_timeout is {:?}: make the lease at least {:?}, or the timeout shorter",
                        raw.slurm.command_timeout.0,
                        (raw.slurm.command_timeout.0 * 3 / 2 + margin) * 11 / 10
                    )));
                }
                if timeout.is_zero() || timeout.saturating_mul(3) > lease {
                    return Err(semantic(format!(
                        "store.timeout = {timeout:?} must be above zero and at most a third of store.lease ({lease:?}): a renewal that times out must leave time for two more"
                    )));
                }
                let node = match st.node {
                    Some(n) => n,
                    None => nix::unistd::gethostname()
                        .ok()
                        .and_then(|h| h.into_string().ok())
                        .unwrap_or_else(|| "localhost".into()),
                };
                if node.is_empty()
                    || node.len() > 200
                    || !node
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-._:".contains(&b))
                {
                    return Err(semantic(format!(
                        "store.node = {node:?}: write this node's host name (letters, digits, '-', '.', '_', ':', at most 200)"
                    )));
                }
                let defaults = crate::plumbing::dbconfig::SnapshotPolicy::default();
                let snapshot = crate::plumbing::dbconfig::SnapshotPolicy {
                    entries: st.snapshot_entries.unwrap_or(defaults.entries),
                    bytes: st
                        .snapshot_mib
                        .unwrap_or(crate::plumbing::dbconfig::DEFAULT_SNAPSHOT_MIB)
                        .checked_mul(1 << 20)
                        .ok_or_else(|| {
                            semantic(
                                "store.snapshot_mib is too large: write a number of MiB, e.g. 256"
                                    .into(),
                            )
                        })?,
                    interval: dur(
                        "snapshot_interval",
                        &st.snapshot_interval,
                        defaults.interval,
                    )?,
                };
                Some(ClusterConfig {
                    url: st.url,
                    password_file: st.password_file,
                    timing,
                    timeout,
                    node,
                    snapshot,
                })
            }
        };
        let server_listen = listen_address(&raw.server.listen, "server.listen", "0.0.0.0:6827")?;
        if raw
            .server
            .id
            .as_ref()
            .is_some_and(|i| i.trim().is_empty() || i.len() > 255)
        {
            return Err(semantic(
                "server.id must be a name of 1 to 255 bytes, e.g. \"login1\"".into(),
            ));
        }
        let mut root_nodes = Vec::new();
        for n in &raw.server.root_nodes {
            root_nodes.push(n.get_ref().trim().parse::<std::net::Ipv4Addr>().map_err(|_| {
                invalid(
                    Some(n.span()),
                    format!(
                        "server.root_nodes: {:?} is not an IPv4 address: write the address MUNGE states for that node (`unmunge` prints it as ENCODE_HOST)",
                        n.get_ref()
                    ),
                )
            })?);
        }
        let tls = match (raw.server.tls_cert, raw.server.tls_key) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
            _ => return Err(semantic(
                "server.tls_cert and server.tls_key go together: give both (PEM files) or neither"
                    .into(),
            )),
        };
        let mut servers = Vec::new();
        for s in &raw.client.servers {
            check_server_address(s.get_ref().trim())
                .map_err(|e| invalid(Some(s.span()), format!("client.servers: {e}")))?;
            servers.push(s.get_ref().trim().to_string());
        }

        let state_dir = raw.state_dir.unwrap_or_else(default_state_dir);
        let mut plain_sbatch = raw.plain_sbatch;
        if let Some(s) = &plain_sbatch.spool {
            if !s.is_absolute() {
                return Err(semantic(format!(
                    "plain_sbatch.spool = {:?} is not an absolute path",
                    s.display()
                )));
            }
        }
        plain_sbatch
            .spool
            .get_or_insert_with(|| state_dir.join("plain-sbatch"));
        if plain_sbatch.groups.len() > 1000
            || plain_sbatch
                .groups
                .iter()
                .any(|g| g.is_empty() || g.len() > 256)
        {
            return Err(semantic(
                "plain_sbatch.groups: at most 1000 group names, each 1 to 256 bytes".into(),
            ));
        }
        let socket = raw
            .socket
            .unwrap_or_else(|| state_dir.join("supervisor.sock"));
        Ok(Config {
            path: path.map(Path::to_path_buf),
            state_dir,
            socket,
            poll_interval,
            slurm: SlurmConfig {
                bin_dir: raw.slurm.bin_dir,
                command_timeout: raw.slurm.command_timeout.0,
                sbatch_timeout: raw.slurm.sbatch_timeout.0,
                sacct_chunk: raw.slurm.sacct_chunk,
                stderr_tail_lines: raw.slurm.stderr_tail_lines,
                stderr_tail_bytes: raw.slurm.stderr_tail_bytes,
                lost_job_after: raw.slurm.lost_job_after.0,
            },
            retry: RetryConfig {
                max_retries: raw.retry.max_retries,
                budgets,
                backoff_initial: raw.retry.backoff_initial.0,
                backoff_multiplier: raw.retry.backoff_multiplier,
                backoff_max: raw.retry.backoff_max.0,
                backoff_jitter: raw.retry.backoff_jitter,
                restartable: raw.retry.restartable,
                in_place: raw.retry.in_place,
            },
            escalation: EscalationConfig {
                mem_factor: e.mem_factor,
                mem_headroom: e.mem_headroom,
                mem_max_bytes: e.mem_max.0,
                time_factor: e.time_factor,
                time_max: e.time_max.0,
                remind_after: e.remind_after.map(|d| d.0),
                expire_after: e.expire_after.map(|d| d.0),
                expire_action: e.expire_action,
            },
            breaker: raw.breaker,
            quarantine: raw.quarantine,
            continuation: raw.continuation,
            agent: raw.agent,
            notify: raw.notify,
            limits: raw.limits,
            metrics: MetricsConfig {
                listen: metrics_listen,
            },
            server: ServerConfig {
                listen: server_listen,
                id: raw.server.id,
                munge_socket: raw.server.munge_socket,
                root_nodes,
                tls,
            },
            client: NetClientConfig {
                servers,
                munge_socket: raw.client.munge_socket,
                tls_ca: raw.client.tls_ca,
            },
            plain_sbatch,
            learn: raw.learn,
            rules,
            cluster,
        })
    }

    /// Where the plain-sbatch filter's notes and the opt-in list are (set when parsed).
    pub fn plain_spool(&self) -> PathBuf {
        self.plain_sbatch
            .spool
            .clone()
            .unwrap_or_else(|| self.state_dir.join("plain-sbatch"))
    }

    /// The SQLite file: in cluster mode, this node's replica of the shared journal (never
    /// the file of the single-node store, which stays as it was).
    pub fn db_path(&self) -> PathBuf {
        if self.cluster.is_some() {
            self.state_dir.join("replica.db")
        } else {
            self.state_dir.join("supervisor.db")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_admin_group_is_looked_up_by_the_daemon_and_an_unknown_one_is_refused() {
        let c = Config::parse("[learn]\nadmin_group = \"root\"\n", None).unwrap();
        assert_eq!(c.learn.admin_gid, Some(0));
        assert_eq!(Config::defaults().learn.admin_gid, None);
        let unknown = "[learn]\nadmin_group = \"no-such-group-ssv\"\n";
        let e = Config::parse(unknown, None).unwrap_err().to_string();
        assert!(
            e.contains("learn.admin_group = \"no-such-group-ssv\" is not a group on this node"),
            "{e}"
        );
        let e = Config::parse("[learn]\nadmin_group = \"\"\n", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not a group name"), "{e}");
        // supervisorctl's view does not look it up: a client elsewhere may not know it.
        assert!(ClientConfig::parse(unknown, None).is_ok());
    }

    #[test]
    fn rules_d_files_add_rules_after_the_configs_checked_as_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("supervisor.toml");
        std::fs::write(
            &config,
            "[[rules]]\nname = \"mine\"\nkind = \"permanent\"\nexit_codes = [2]\n",
        )
        .unwrap();
        // No rules.d: the config's rules alone.
        assert_eq!(Config::load(&config).unwrap().rules.len(), 1);
        let d = dir.path().join(RULES_DIR);
        std::fs::create_dir(&d).unwrap();
        std::fs::write(
            d.join("b.toml"),
            "[[rules]]\nname = \"learnt-b\"\nkind = \"transient\"\nexit_codes = [1]\nstderr = \"shard [0-9]+\"\n",
        )
        .unwrap();
        std::fs::write(
            d.join("a.toml"),
            "[[rules]]\nname = \"learnt-a\"\nkind = \"transient\"\nexit_codes = [1]\n",
        )
        .unwrap();
        std::fs::write(d.join("notes.txt"), "not a rules file").unwrap();
        let c = Config::load(&config).unwrap();
        let names: Vec<&str> = c.rules.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["mine", "learnt-a", "learnt-b"]);
        assert_eq!(c.rules[0].source, None);
        assert_eq!(
            c.rules[2].source.as_deref(),
            Some(d.join("b.toml").as_path())
        );
        // Checked as the config's own rules are, naming the drop-in's line.
        std::fs::write(
            d.join("c.toml"),
            "[[rules]]\nname = \"bad\"\nkind = \"oom\"\nexit_codes = [1]\n",
        )
        .unwrap();
        let e = Config::load(&config).unwrap_err().to_string();
        assert!(
            e.contains("c.toml:3:") && e.contains("not one a rule can give"),
            "{e}"
        );
        // Only rules, and no name twice.
        std::fs::write(d.join("c.toml"), "poll_interval = \"1s\"\n").unwrap();
        let e = Config::load(&config).unwrap_err().to_string();
        assert!(
            e.contains("[[rules]] entries only, not `poll_interval`"),
            "{e}"
        );
        std::fs::write(
            d.join("c.toml"),
            "[[rules]]\nname = \"mine\"\nkind = \"transient\"\nexit_codes = [3]\n",
        )
        .unwrap();
        let e = Config::load(&config).unwrap_err().to_string();
        assert!(e.contains("\"mine\" is already defined"), "{e}");
    }

    #[test]
    fn example_config_is_valid() {
        let text = include_str!("../config/supervisor.toml");
        let c = Config::parse(text, Some(Path::new("supervisor.toml"))).unwrap();
        assert!(c.rules.iter().any(|r| r.kind == Classification::Permanent));
        assert!(c.rules.iter().any(|r| r.kind == Classification::Transient));
    }

    #[test]
    fn the_store_section_turns_cluster_mode_on_with_checked_timings() {
        let c = Config::parse("", None).unwrap();
        assert!(c.cluster.is_none());
        assert!(c.db_path().ends_with("supervisor.db"));
        let c = Config::parse(
            "[store]\nurl = \"mysql://ssv@db1:3306/supervisor\"\nnode = \"login1\"\n",
            None,
        )
        .unwrap();
        let cc = c.cluster.as_ref().unwrap();
        assert_eq!(cc.timing.lease(), DEFAULT_LEASE);
        assert_eq!(cc.timing.margin(), DEFAULT_MARGIN);
        assert_eq!(cc.timeout, DEFAULT_DB_TIMEOUT);
        assert_eq!(cc.node, "login1");
        assert_eq!(cc.url.host, "db1");
        // Its own file: the single node's store is never taken for a replica.
        assert!(c.db_path().ends_with("replica.db"));
        let refused = |text: &str| Config::parse(text, None).unwrap_err().to_string();
        let url = "[store]\nurl = \"mysql://ssv@db1/supervisor\"\n";
        let e = refused(&format!("{url}lease = \"20s\"\n"));
        assert!(e.contains("slurm.command_timeout is 30s"), "{e}");
        assert!(Config::parse(
            &format!("[slurm]\ncommand_timeout = \"5s\"\n{url}lease = \"20s\"\n"),
            None
        )
        .is_ok());
        let e = refused(&format!("{url}margin = \"40s\"\n"));
        assert!(e.contains("store.lease and store.margin"), "{e}");
        let e = refused(&format!("{url}timeout = \"30s\"\n"));
        assert!(e.contains("at most a third of store.lease"), "{e}");
        let e = refused(&format!("{url}node = \"a b\"\n"));
        assert!(e.contains("store.node"), "{e}");
        let e = refused(&format!("{url}lease = \"soon\"\n"));
        assert!(e.contains("store.lease: invalid duration"), "{e}");
        let e = refused("[store]\nurl = \"mysql://ssv:pw@db1/supervisor\"\n");
        assert!(e.contains("it holds a password"), "{e}");
    }

    /// Snapshots: every 10,000 entries, 256 MiB or a day by default; each settable, and a
    /// zero turns it off.
    #[test]
    fn the_snapshot_policy_has_defaults_and_each_key_is_read() {
        let url = "[store]\nurl = \"mysql://ssv@db1/supervisor\"\n";
        let policy = |text: &str| {
            Config::parse(&format!("{url}{text}"), None)
                .unwrap()
                .cluster
                .unwrap()
                .snapshot
        };
        let d = policy("");
        assert_eq!(
            (d.entries, d.bytes, d.interval),
            (10_000, 256 << 20, Duration::from_secs(86_400))
        );
        let p = policy("snapshot_entries = 500\nsnapshot_mib = 0\nsnapshot_interval = \"1h\"\n");
        assert_eq!(
            (p.entries, p.bytes, p.interval),
            (500, 0, Duration::from_secs(3600))
        );
        let e = Config::parse(&format!("{url}snapshot_interval = \"often\"\n"), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("store.snapshot_interval"), "{e}");
        // Due by whichever comes first; never with no entry since the last one.
        let hour = Some(Duration::from_secs(3600));
        let minute = Some(Duration::from_secs(60));
        assert_eq!(p.due(499, 1 << 40, minute), None, "size is off");
        assert_eq!(p.due(500, 0, minute), Some("entries"));
        assert_eq!(p.due(1, 1 << 40, hour), Some("interval"));
        assert_eq!(p.due(1, 0, Some(Duration::from_secs(10))), None);
        assert_eq!(p.due(0, 0, None), None);
        assert_eq!(d.due(1, 256 << 20, Some(Duration::ZERO)), Some("size"));
        assert_eq!(d.due(1, 0, None), Some("interval"), "no snapshot yet");
    }

    #[test]
    fn typo_is_rejected_with_its_line() {
        let text = "state_dir = \"/tmp/x\"\n\npol_interval = \"2s\"\n";
        let err = Config::parse(text, Some(Path::new("c.toml")))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("c.toml:3:1: unknown field `pol_interval`"),
            "{err}"
        );
    }

    #[test]
    fn the_network_is_off_by_default_and_its_keys_are_checked() {
        let c = Config::defaults();
        assert_eq!(c.server, ServerConfig::default());
        assert!(c.client.servers.is_empty());
        let c = Config::parse(
            "[server]\nlisten = \"0.0.0.0:6827\"\nid = \"login1\"\nroot_nodes = [\"10.1.0.2\"]\n\
             [client]\nservers = [\"login1:6827\", \"10.1.0.3:6827\"]\n",
            None,
        )
        .unwrap();
        assert_eq!(c.server.listen, Some("0.0.0.0:6827".parse().unwrap()));
        assert_eq!(
            c.server.root_nodes,
            vec![std::net::Ipv4Addr::new(10, 1, 0, 2)]
        );
        assert_eq!(c.client.servers, ["login1:6827", "10.1.0.3:6827"]);
        let table = [
            (
                "[server]\nlisten = \"login1\"\n",
                "c.toml:2:",
                "not a socket address",
            ),
            ("[server]\nlisten = \"0.0.0.0:0\"\n", "c.toml:2:", "port"),
            (
                "[server]\nroot_nodes = [\"login2\"]\n",
                "c.toml:2:",
                "not an IPv4 address",
            ),
            (
                "[client]\nservers = [\"login1\"]\n",
                "c.toml:2:",
                "not a server address",
            ),
            (
                "[client]\nservers = [\"login1:0\"]\n",
                "c.toml:2:",
                "not a server address",
            ),
            (
                "[server]\nlistne = \"0.0.0.0:1\"\n",
                "c.toml:2:",
                "unknown field",
            ),
            ("[server]\nid = \"\"\n", "c.toml", "server.id"),
            ("[server]\ntls_cert = \"/c.pem\"\n", "c.toml", "go together"),
        ];
        for (text, at, says) in table {
            let err = Config::parse(text, Some(Path::new("c.toml")))
                .unwrap_err()
                .to_string();
            assert!(err.starts_with(at) && err.contains(says), "{text}: {err}");
        }
    }

    #[test]
    fn the_servers_variable_replaces_the_configs_list() {
        let c = ClientConfig::parse("[client]\nservers = [\"a:1\"]\n", None).unwrap();
        let same = c.clone().with_servers_env(None).unwrap();
        assert_eq!(same.net.servers, ["a:1"]);
        let other = c.clone().with_servers_env(Some(" b:2 , c:3,")).unwrap();
        assert_eq!(other.net.servers, ["b:2", "c:3"]);
        let none = c.clone().with_servers_env(Some("")).unwrap();
        assert!(none.net.servers.is_empty());
        let err = c.with_servers_env(Some("b")).unwrap_err();
        assert!(err.starts_with("SLURM_SUPERVISOR_SERVERS: "), "{err}");
    }

    #[test]
    fn bad_regex_points_at_its_line() {
        let text = "[[rules]]\nname = \"x\"\nkind = \"transient\"\nstderr = \"(unclosed\"\n";
        let err = Config::parse(text, Some(Path::new("c.toml")))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("c.toml:4:"), "{err}");
        assert!(err.contains("invalid stderr regex"), "{err}");
    }

    #[test]
    fn the_clients_config_is_checked_like_the_daemons_but_for_the_patterns() {
        let path = Some(Path::new("c.toml"));
        // What the client does not compile: the daemon's check names it.
        let pattern = "[[rules]]\nname = \"x\"\nkind = \"transient\"\nstderr = \"(unclosed\"\n";
        assert!(ClientConfig::parse(pattern, path).is_ok());
        assert!(Config::parse(pattern, path).is_err());
        // Everything else is refused by both, with the same words.
        for text in [
            "poll_intervall = \"10s\"\n",
            "poll_interval = \"10ms\"\n",
            "[limits]\nmax_script_size = \"lots\"\n",
            "[[rules]]\nname = \"everything\"\nkind = \"permanent\"\n",
        ] {
            let daemon = Config::parse(text, path).unwrap_err().to_string();
            let client = ClientConfig::parse(text, path).unwrap_err().to_string();
            assert_eq!(client, daemon, "{text}");
        }
        let text = "state_dir = \"/srv/ssv\"\n[limits]\nmax_script_size = \"2M\"\n";
        let c = ClientConfig::parse(text, path).unwrap();
        let full = Config::parse(text, path).unwrap();
        assert_eq!(c.socket, full.socket);
        assert_eq!(c.max_script_size, full.limits.max_script_size.0);
        assert_eq!(c.max_script_size, 2 << 20);
    }

    #[test]
    fn bad_values_are_refused() {
        for (text, want) in [
            ("poll_interval = \"500ms\"", "below the minimum"),
            ("poll_interval = \"soon\"", "invalid duration"),
            ("[escalation]\nmem_factor = 0.5", "mem_factor"),
            ("[escalation]\nmem_max = \"lots\"", "invalid memory size"),
            (
                "[[rules]]\nname = \"all\"\nkind = \"permanent\"",
                "matches everything",
            ),
            (
                "[[rules]]\nname = \"x\"\nkind = \"maybe\"\nexit_codes = [1]",
                "kind = \"maybe\" is not one a rule can give; write one of transient, permanent",
            ),
            ("[retry.budgets]\noom = -1", "invalid value"),
            (
                "[retry.budgets]\noom_killer = 3",
                "write one of preempted, node_fail, boot_fail, oom, timeout, transient",
            ),
            (
                "[retry.budgets]\npermanent = 3",
                "only kinds retried automatically have a budget",
            ),
            (
                "[[rules]]\nname = \"x\"\nkind = \"oom\"\nexit_codes = [1]",
                "write one of transient, permanent",
            ),
            ("poll_interval = \"10000000000000000000s\"", "poll_interval"),
            (
                "[slurm]\nlost_job_after = \"100000000d\"",
                "slurm.lost_job_after",
            ),
            ("[agent]\ntimeout = \"9999999999s\"", "agent.timeout"),
            ("[notify]\nmial = true", "unknown field"),
            ("[notify]\ncommand = []", "notify.command is empty"),
            ("[notify]\nmail_program = \"mail\"", "absolute path"),
            ("[notify]\nmax_attempts = 0", "notify.max_attempts"),
            ("[escalation]\nexpire_action = \"retry\"", "unknown variant"),
            (
                "[escalation]\nremind_after = \"2d\"\nexpire_after = \"1d\"",
                "must be shorter",
            ),
            ("[escalation]\nexpire_after = \"0s\"", "at least 1s"),
            (
                "[slurm]\nstderr_tail_bytes = 99999999999",
                "slurm.stderr_tail_bytes",
            ),
            (
                "[limits]\nmax_script_size = \"8T\"",
                "limits.max_script_size",
            ),
            (
                "[limits]\nconnections_per_user = 0",
                "limits.connections_per_user",
            ),
            (
                "[limits]\nrequest_timeout = \"0s\"",
                "limits.request_timeout",
            ),
            ("[escalation]\nmem_max = \"99999T\"", "escalation.mem_max"),
            ("[metrics]\nlisten = \"localhost\"", "metrics.listen"),
            ("[metrics]\nlisten = \"127.0.0.1:0\"", "metrics.listen"),
            ("[metrics]\nlisten = 9464", "invalid type"),
            ("[metrics]\nlistn = \"127.0.0.1:9464\"", "unknown field"),
        ] {
            let err = Config::parse(text, None).unwrap_err().to_string();
            assert!(err.contains(want), "{text}: {err}");
        }
    }

    #[test]
    fn metrics_are_off_unless_an_address_is_given() {
        assert_eq!(Config::defaults().metrics.listen, None);
        let c = Config::parse("[metrics]\nlisten = \"[::1]:9464\"\n", None).unwrap();
        assert_eq!(c.metrics.listen, Some("[::1]:9464".parse().unwrap()));
        let err = Config::parse(
            "poll_interval = \"2s\"\n[metrics]\nlisten = \"localhost:9464\"\n",
            Some(Path::new("c.toml")),
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("c.toml:3:10: metrics.listen"), "{err}");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn mem_sizes() {
        assert_eq!(parse_mem_size("64G").unwrap(), 64 << 30);
        assert_eq!(parse_mem_size("100").unwrap(), 100 << 20);
        assert!(parse_mem_size("12Q").is_err());
    }
}
