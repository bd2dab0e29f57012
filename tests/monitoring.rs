//! The monitoring the package ships, against the real thing (Debian's `prometheus` and
//! its `promtool`, which scripts/test installs):
//! - `promtool check rules` and `promtool test rules` on config/prometheus/ (the unit
//!   tests, tests/prometheus/slurm-supervisor.rules.test.yml, show each alert firing and
//!   staying quiet on synthetic series);
//! - a Prometheus of the test's own scraping two daemons in cluster mode (a private
//!   MariaDB, tests/mariadb/mod.rs) on the fake Slurm (tests/fake-slurm), every second,
//!   with the shipped rules file loaded as it is. After a scenario (a node failure that
//!   opens the breaker and quarantines the node, ambiguous failures, two of the same
//!   failure resolved by an agent and completed, which makes a rule proposal, a failure
//!   a config rule decides, squeue down for a moment, a notification command that fails),
//!   Prometheus's HTTP API shows the series, every recording rule's series, no rule in
//!   error, the breaker's and the notifications' alerts pending on the active node only,
//!   and the rules' alerts quiet. The alerts' `for:` are minutes and the test waits for no minute: pending shows
//!   that the rule matched the real series, and the unit tests show `for:` at work;
//! - every expression of the Grafana dashboard (config/grafana/slurm-supervisor.json), its
//!   variables substituted, is accepted by that Prometheus and answers with data (a
//!   metric name that does not exist answers nothing and fails the test), and every
//!   metric name the rules and the dashboard use is one the daemons serve.
//!
//! With `SSV_DASHBOARD_DATA=FILE` the test also writes every panel's data over the
//! scenario to FILE, which scripts/dashboard-picture draws (docs/metrics.md's picture).

mod common;
mod mariadb;

use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const RULES: &str = "config/prometheus/slurm-supervisor.rules.yml";
const RULE_TESTS: &str = "tests/prometheus/slurm-supervisor.rules.test.yml";
const DASHBOARD: &str = "config/grafana/slurm-supervisor.json";
/// The job the rules' `up` alert and docs/metrics.md's scrape config name.
const JOB: &str = "slurm-supervisor";
const PASSWORD: &str = "monitoring-test-pw";

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// A program of Debian's prometheus package; the test fails naming the package when it is
/// missing (a test that skipped would pass having tested nothing).
fn program(name: &str) -> PathBuf {
    ["/usr/bin", "/usr/local/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "{name} is missing: this test runs a real Prometheus; install Debian's \
                 prometheus package (`apt-get install prometheus`, which scripts/test does; \
                 its service need not run) and run it again"
            )
        })
}

#[test]
fn the_rules_pass_promtool_check_and_their_unit_tests() {
    let check = Command::new(program("promtool"))
        .args(["check", "rules"])
        .arg(repo(RULES))
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "promtool check rules: {}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    // The unit tests name the rules file relative to themselves.
    let test = Command::new(program("promtool"))
        .args(["test", "rules"])
        .arg(repo(RULE_TESTS))
        .output()
        .unwrap();
    assert!(
        test.status.success(),
        "promtool test rules: {}{}",
        String::from_utf8_lossy(&test.stdout),
        String::from_utf8_lossy(&test.stderr)
    );
    // Every alert of the file has a unit test that makes it fire.
    let tests = std::fs::read_to_string(repo(RULE_TESTS)).unwrap();
    let rules = std::fs::read_to_string(repo(RULES)).unwrap();
    for line in rules.lines() {
        if let Some(name) = line.trim().strip_prefix("- alert: ") {
            assert!(
                tests.contains(&format!(
                    "alertname: {name}\n        exp_alerts:\n          - exp_labels:"
                )),
                "{RULE_TESTS} has no test in which {name} fires"
            );
        }
    }
}

/// `s` with every byte but the unreserved ones (RFC 3986) percent-encoded.
fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// One HTTP/1.0 GET (the answer is never chunked, and the connection closes after it):
/// the status code and the body.
fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let raw = String::from_utf8_lossy(&raw);
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((code, body.to_string()))
}

/// A Prometheus of the test's own, in a temporary folder, stopped when dropped.
struct Prometheus {
    child: Child,
    dir: tempfile::TempDir,
    port: u16,
}

impl Prometheus {
    /// Starts Prometheus with `config` (prometheus.yml's text) and waits until it is ready.
    fn start(config: &str) -> Prometheus {
        let dir = tempfile::Builder::new()
            .prefix("ssv-prometheus-")
            .tempdir_in(common::scratch_root())
            .unwrap();
        std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
        // The port is free when asked for and may be taken before Prometheus binds it:
        // then it stops at once saying so, and another is tried.
        for _ in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            if let Some(child) = Self::spawn(dir.path(), port) {
                return Prometheus { child, dir, port };
            }
        }
        panic!("prometheus found no free port in five tries");
    }

    fn spawn(dir: &Path, port: u16) -> Option<Child> {
        let log = dir.join("prometheus.log");
        let mut cmd = Command::new(program("prometheus"));
        cmd.arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
        // Killed with the test, should the test be killed before its `Drop` runs.
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start prometheus: {e}"));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                if text.contains("address already in use") {
                    return None;
                }
                panic!("prometheus stopped at start ({status}); its log:\n{text}");
            }
            if http_get(port, "/-/ready").is_ok_and(|(code, _)| code == 200) {
                return Some(child);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "prometheus was not ready within 60 s; its log:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// An API call's `data`, or the error Prometheus gave.
    fn api(&self, path: &str) -> Result<Value, String> {
        let (code, body) = http_get(self.port, path).map_err(|e| e.to_string())?;
        let v: Value = serde_json::from_str(&body)
            .map_err(|e| format!("{path}: HTTP {code}, not JSON ({e}): {body}"))?;
        if v["status"] != "success" {
            return Err(format!(
                "HTTP {code}: {} {}",
                v["errorType"].as_str().unwrap_or(""),
                v["error"].as_str().unwrap_or(&body)
            ));
        }
        Ok(v["data"].clone())
    }

    /// An instant query's result (a vector's samples, or a scalar as one sample).
    fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let data = self.api(&format!("/api/v1/query?query={}", url_encode(expr)))?;
        Ok(match data["resultType"].as_str() {
            Some("scalar") | Some("string") => vec![json!({"metric": {}, "value": data["result"]})],
            _ => data["result"].as_array().cloned().unwrap_or_default(),
        })
    }

    /// Waits until `expr` answers with at least one sample.
    fn wait_for(&self, expr: &str) {
        common::wait_for_every(
            &format!("Prometheus to answer {expr}"),
            Duration::from_secs(60),
            Duration::from_millis(200),
            || self.query(expr).is_ok_and(|r| !r.is_empty()),
        );
    }

    /// The loaded rules (every group's, flattened).
    fn rules(&self) -> Vec<Value> {
        let data = self.api("/api/v1/rules").unwrap();
        data["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .collect()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.child.try_wait().ok().flatten().is_none() {
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A sample's value, as Prometheus writes it (a string; NaN and ±Inf included).
fn value(sample: &Value) -> f64 {
    sample["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

fn label<'a>(sample: &'a Value, name: &str) -> &'a str {
    sample["metric"][name].as_str().unwrap_or("")
}

/// A free port for a daemon's metrics listener.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A dashboard expression with Grafana's variables given values: the test's job, every
/// instance, and windows that hold the whole scenario.
fn substitute(expr: &str, rate_interval: &str, range: &str) -> String {
    expr.replace("$__rate_interval", rate_interval)
        .replace("$__range", range)
        .replace("$job", JOB)
        .replace("$instance", ".*")
}

/// Every panel of the dashboard, those inside rows included (rows themselves left out).
fn panels(dashboard: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    for p in dashboard["panels"]
        .as_array()
        .expect("the dashboard has panels")
    {
        if p["type"] == "row" {
            out.extend(p["panels"].as_array().cloned().unwrap_or_default());
        } else {
            out.push(p.clone());
        }
    }
    out
}

/// The names of the daemons' metrics an expression uses (histogram series' suffixes
/// included; recording rules' names, with colons, are not metrics).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let re = regex::Regex::new(r"\bslurm_supervisor_[a-z0-9_]+\b").unwrap();
    let records = regex::Regex::new(r"[a-z_]+:slurm_supervisor_[a-z0-9_]+:[a-z0-9_]+").unwrap();
    let expr = records.replace_all(expr, "");
    re.find_iter(&expr)
        .map(|m| m.as_str().to_string())
        .collect()
}

/// The dashboard as Grafana needs it to import on any site: the data source is a
/// variable every panel and query uses, the job and daemon are variables, and the panels
/// fit the grid without sharing an id.
fn check_dashboard_shape(dashboard: &Value) {
    assert!(
        dashboard["schemaVersion"].as_u64().is_some_and(|v| v >= 39),
        "schemaVersion {} is not a current Grafana's",
        dashboard["schemaVersion"]
    );
    let vars = dashboard["templating"]["list"].as_array().unwrap();
    let var = |name: &str| {
        vars.iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("the dashboard has no ${name} variable"))
    };
    assert_eq!(var("datasource")["type"], "datasource");
    assert_eq!(var("datasource")["query"], "prometheus");
    let ds = json!({"type": "prometheus", "uid": "${datasource}"});
    for v in ["job", "instance"] {
        assert_eq!(var(v)["datasource"], ds, "${v}'s data source");
    }
    let mut ids = BTreeSet::new();
    for p in dashboard["panels"].as_array().unwrap() {
        assert!(
            ids.insert(p["id"].as_u64().unwrap()),
            "panel id {} twice",
            p["id"]
        );
        let g = &p["gridPos"];
        assert!(
            g["x"].as_u64().unwrap() + g["w"].as_u64().unwrap() <= 24,
            "{} is wider than the grid",
            p["title"]
        );
    }
    for p in panels(dashboard) {
        assert_eq!(p["datasource"], ds, "{}'s data source", p["title"]);
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{} has no query", p["title"]);
        for t in targets {
            assert_eq!(t["datasource"], ds, "a query of {}", p["title"]);
        }
    }
}

/// Two login nodes' daemons on one database, each with its own fake Slurm and metrics
/// port.
fn cluster_config(db: &mariadb::MariaDb, password_file: &Path, node: &str, port: u16) -> String {
    format!(
        "\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n\
         [breaker]\nthreshold = 1\nmin_users = 1\n\
         [quarantine]\nthreshold = 1\n\
         [notify]\nmail = false\ncommand = [\"/bin/false\"]\n\
         [store]\nurl = \"mysql://ssv@127.0.0.1:{}/supervisor\"\npassword_file = {:?}\n\
         node = \"{node}\"\nlease = \"12s\"\nmargin = \"1s\"\ntimeout = \"2s\"\n\
         [learn]\nagreeing = 2\n\
         [[rules]]\nname = \"missing-dataset\"\nkind = \"permanent\"\nstderr = \"dataset .* not found\"\n",
        db.port(),
        password_file.display().to_string()
    )
}

#[test]
fn a_real_prometheus_scrapes_the_daemons_runs_the_rules_and_answers_the_dashboard() {
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(repo(DASHBOARD)).unwrap()).unwrap();
    check_dashboard_shape(&dashboard);
    program("prometheus");

    let db = mariadb::MariaDb::start();
    db.supervisor_database("supervisor", "ssv", PASSWORD);
    let password_file = db.dir().join("db-password");
    std::fs::write(&password_file, format!("{PASSWORD}\n")).unwrap();
    std::fs::set_permissions(&password_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (p1, p2) = (free_port(), free_port());
    let (d1, fake) = common::fake::start(&cluster_config(&db, &password_file, "login1", p1), &[]);
    common::wait_for("login1 to act", Duration::from_secs(60), || {
        d1.log().contains("this daemon is the active one now")
    });
    let (d2, _fake2) = common::fake::start(&cluster_config(&db, &password_file, "login2", p2), &[]);
    let (i1, i2) = (format!("127.0.0.1:{p1}"), format!("127.0.0.1:{p2}"));

    let prom = Prometheus::start(&format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
         rule_files:\n  - {:?}\n\
         scrape_configs:\n  - job_name: {JOB}\n    static_configs:\n      - targets: [{i1:?}, {i2:?}]\n",
        repo(RULES).display().to_string()
    ));
    prom.wait_for(&format!(
        "up{{job=\"{JOB}\"}} == 1 and on () count(up{{job=\"{JOB}\"}} == 1) == 2"
    ));
    let started = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();

    // The scenario, on the active node. A node failure opens the breaker (threshold 1)
    // and quarantines its node; three ambiguous failures wait for an agent, two of them
    // the same failure; one completes; the config's rule fails a job by itself.
    d1.write_script("job.sh", "echo hi");
    let [nodefail, odd, odd2, waits, done, ruled] = [0; 6].map(|_| d1.submit(&["job.sh"]));
    fake.ctl(&["run", &nodefail, "c3"]);
    fake.ctl(&["finish", &nodefail, "NODE_FAIL", "0:0"]);
    fake.ctl(&[
        "finish",
        &odd,
        "FAILED",
        "1:0",
        "RuntimeError: shard 7 checksum mismatch\n",
    ]);
    fake.ctl(&[
        "finish",
        &odd2,
        "FAILED",
        "1:0",
        "RuntimeError: shard 7 checksum mismatch\n",
    ]);
    fake.ctl(&[
        "finish",
        &waits,
        "FAILED",
        "1:0",
        "ValueError: bad input row 12\n",
    ]);
    fake.ctl(&["finish", &done, "COMPLETED", "0:0"]);
    fake.ctl(&[
        "finish",
        &ruled,
        "FAILED",
        "2:0",
        "IOError: dataset era5 not found\n",
    ]);
    d1.wait_state(&odd, "pending_failed", Duration::from_secs(30));
    d1.wait_state(&odd2, "pending_failed", Duration::from_secs(30));
    d1.wait_state(&ruled, "failed", Duration::from_secs(30));
    d1.wait_state(&waits, "pending_failed", Duration::from_secs(30));
    d1.wait_state(&done, "completed", Duration::from_secs(30));
    common::wait_for(
        "the node failure's judgement",
        Duration::from_secs(30),
        || d1.status(&nodefail)[0]["last_classification"] == "node_fail",
    );
    // squeue does not answer for a moment: a poll cycle fails.
    fake.ctl(&["mode", "squeue", "down"]);
    prom.wait_for(&format!(
        "slurm_supervisor_poll_cycle_failures_total{{instance=\"{i1}\"}} > 0"
    ));
    fake.ctl(&["mode", "squeue", "ok"]);
    // An agent resolves the two of the same failure, and their retries complete: two
    // agreeing resolutions whose retries worked propose a rule (`[learn] agreeing = 2`).
    for job in [&odd, &odd2] {
        let sbatches = fake.sbatch_calls().len();
        let out = d1.ctl(&[
            "classify",
            job,
            "--action",
            "retry",
            "--reason",
            "the shard was re-downloaded",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        common::wait_for("the agent's retry", Duration::from_secs(30), || {
            fake.sbatch_calls().len() > sbatches
        });
        let retry = fake
            .jobs()
            .keys()
            .filter_map(|k| k.parse::<u64>().ok())
            .max()
            .unwrap()
            .to_string();
        fake.ctl(&["finish", &retry, "COMPLETED", "0:0"]);
        d1.wait_state(job, "completed", Duration::from_secs(30));
    }

    // What Prometheus has of it, from both nodes (the standby's replica follows).
    for expr in [
        format!("slurm_supervisor_breaker_open{{instance=\"{i1}\"}} == 1"),
        format!("slurm_supervisor_breaker_open{{instance=\"{i2}\"}} == 1"),
        format!("slurm_supervisor_quarantined_node{{instance=\"{i1}\", node=\"c3\"}} == 1"),
        format!("slurm_supervisor_endings_total{{instance=\"{i1}\", classification=\"node_fail\"}} == 1"),
        format!("slurm_supervisor_decisions_by_actor_total{{instance=\"{i2}\", actor=\"user\"}} == 2"),
        format!("slurm_supervisor_resolution_resubmitted_chains{{instance=\"{i2}\", state=\"completed\"}} == 2"),
        format!("slurm_supervisor_chains{{instance=\"{i2}\", state=\"completed\"}} == 3"),
        // Rules that learn: the proposal, the config's rule and its decision, counted
        // apart from the agent's resolutions.
        format!("slurm_supervisor_rule_proposals{{instance=\"{i1}\"}} == 1"),
        format!("slurm_supervisor_rule_proposals{{instance=\"{i2}\"}} == 1"),
        format!("slurm_supervisor_rules{{instance=\"{i1}\", source=\"config\"}} == 1"),
        format!("slurm_supervisor_rules{{instance=\"{i1}\", source=\"rules_d\"}} == 0"),
        format!("slurm_supervisor_rules_not_working{{instance=\"{i1}\"}} == 0"),
        format!("slurm_supervisor_rule_decisions_total{{instance=\"{i2}\", action=\"fail\"}} == 1"),
        format!("slurm_supervisor_rule_decisions_total{{instance=\"{i2}\", action=\"resubmit\"}} == 0"),
        format!("slurm_supervisor_resolutions_total{{instance=\"{i2}\", action=\"resubmit\"}} == 2"),
        format!("slurm_supervisor_pending_failed_oldest_seconds{{instance=\"{i1}\"}} >= 1"),
        format!("slurm_supervisor_notification_failures_total{{instance=\"{i1}\", channel=\"command\"}} > 0"),
        format!("slurm_supervisor_cluster_epoch{{instance=\"{i1}\"}} > 0"),
        format!("slurm_supervisor_cluster_active{{instance=\"{i2}\"}} == 0"),
        // The recording rules made of them.
        "job:slurm_supervisor_cluster_active:sum == 1".to_string(),
        format!("instance:slurm_supervisor_poll_cycle_failures:ratio_rate10m{{instance=\"{i1}\"}} > 0"),
        format!("instance_channel:slurm_supervisor_notification_failures:ratio_rate30m{{instance=\"{i1}\", channel=\"command\"}} == 1"),
    ] {
        prom.wait_for(&expr);
    }
    // Every rule evaluated again since all of the above was true (evaluations are every
    // second): its alerts are those of the series above.
    let evaluated = |rules: &[Value]| -> Vec<Value> {
        rules.iter().map(|r| r["lastEvaluation"].clone()).collect()
    };
    let before = evaluated(&prom.rules());
    common::wait_for_every(
        "every rule to be evaluated again",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || {
            evaluated(&prom.rules())
                .iter()
                .zip(&before)
                .all(|(now, then)| now != then)
        },
    );
    let rules = prom.rules();
    assert!(
        rules.len() >= 21,
        "{} rules loaded: {rules:#?}\n{}",
        rules.len(),
        prom.log()
    );
    for r in &rules {
        assert_eq!(r["health"], "ok", "a rule in error: {r:#}");
        if r["type"] == "recording" {
            let name = r["name"].as_str().unwrap();
            let result = prom.query(name).unwrap();
            assert!(
                !result.is_empty(),
                "the recording rule {name} made no series: {r:#}"
            );
        }
    }
    // The breaker's and the notifications' alerts are pending (or firing), on the active
    // node only: the standby shows the same breaker from its replica, and sent nothing.
    let alerts = |rule: &str| -> Vec<Value> {
        rules
            .iter()
            .find(|r| r["name"] == rule)
            .unwrap_or_else(|| panic!("no rule {rule}"))["alerts"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    for rule in [
        "SlurmSupervisorBreakerOpen",
        "SlurmSupervisorNotificationsFailing",
    ] {
        let a = alerts(rule);
        let on: Vec<(&str, &str)> = a
            .iter()
            .map(|a| {
                (
                    a["labels"]["instance"].as_str().unwrap(),
                    a["state"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(on.len(), 1, "{rule}: {a:#?}");
        assert_eq!(on[0].0, i1, "{rule}: {a:#?}");
        assert!(matches!(on[0].1, "pending" | "firing"), "{rule}: {a:#?}");
        assert_eq!(a[0]["labels"]["severity"], "warning", "{rule}: {a:#?}");
        let summary = a[0]["annotations"]["summary"].as_str().unwrap();
        assert!(summary.contains(&i1), "{rule}: {summary}");
    }
    assert_eq!(
        alerts("SlurmSupervisorBreakerOpen")[0]["value"]
            .as_str()
            .and_then(|v| v.parse::<f64>().ok()),
        Some(1.0),
        "the breaker's alert tells the failures counted"
    );
    // Quiet: the rule in force has made no retry, and the proposal is seconds old (the
    // unit tests show these two firing).
    for rule in [
        "SlurmSupervisorNoActiveDaemon",
        "SlurmSupervisorTwoActiveDaemons",
        "SlurmSupervisorDown",
        "SlurmSupervisorRuleNotWorking",
        "SlurmSupervisorRuleProposalsWaiting",
    ] {
        assert!(alerts(rule).is_empty(), "{rule}: {:#?}", alerts(rule));
    }

    // Every metric name the rules and the dashboard use is one the daemons serve.
    let served: BTreeSet<String> = prom
        .api("/api/v1/label/__name__/values")
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let mut used = BTreeSet::new();
    for r in &rules {
        used.extend(metric_names(r["query"].as_str().unwrap()));
    }
    let exprs: Vec<(String, String)> = panels(&dashboard)
        .iter()
        .flat_map(|p| {
            p["targets"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| {
                    (
                        p["title"].as_str().unwrap().to_string(),
                        t["expr"].as_str().unwrap().to_string(),
                    )
                })
                .collect::<Vec<_>>()
        })
        .collect();
    for (_, e) in &exprs {
        used.extend(metric_names(e));
    }
    let unknown: Vec<&String> = used.difference(&served).collect();
    assert!(unknown.is_empty(), "not served by the daemons: {unknown:?}");

    // Every expression of the dashboard, its variables given values: Prometheus accepts
    // it and answers with data, at least one number among it.
    for (title, e) in &exprs {
        let expr = substitute(e, "5m", "1h");
        let result = prom
            .query(&expr)
            .unwrap_or_else(|err| panic!("{title}: Prometheus refused {expr}: {err}"));
        assert!(!result.is_empty(), "{title}: no data for {expr}");
        assert!(
            result.iter().any(|s| value(s).is_finite()),
            "{title}: no number in the answer to {expr}: {result:#?}"
        );
    }
    // The variables' queries (Grafana's label_values(SELECTOR, LABEL)) find the job and
    // both daemons.
    for v in dashboard["templating"]["list"].as_array().unwrap() {
        let Some(q) = v["query"]
            .as_str()
            .and_then(|q| q.strip_prefix("label_values("))
        else {
            continue;
        };
        let (selector, label_name) = q.trim_end_matches(')').rsplit_once(',').unwrap();
        let result = prom.query(&substitute(selector, "5m", "1h")).unwrap();
        let values: BTreeSet<&str> = result.iter().map(|s| label(s, label_name.trim())).collect();
        let want: BTreeSet<&str> = if label_name.trim() == "job" {
            [JOB].into()
        } else {
            [i1.as_str(), i2.as_str()].into()
        };
        assert_eq!(values, want, "${}: {q}", v["name"]);
    }

    if let Some(path) = std::env::var_os("SSV_DASHBOARD_DATA") {
        let names = json!({ i1.as_str(): "login1", i2.as_str(): "login2" });
        dump_dashboard_data(&prom, &dashboard, started, &names, Path::new(&path));
    }
    drop((d1, d2));
}

/// Every panel's data over the scenario, for scripts/dashboard-picture: each target's
/// range (a point a second) or, for an instant query, its answer now. Windows are short
/// (10 s) so the scenario's seconds show their changes. `names` are the instances' node
/// names, for the legends.
fn dump_dashboard_data(
    prom: &Prometheus,
    dashboard: &Value,
    started: Duration,
    names: &Value,
    path: &Path,
) {
    let end = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let start = started.as_secs_f64();
    let range = format!("{}s", (end - start).ceil() as u64);
    let mut out = Vec::new();
    for p in dashboard["panels"].as_array().unwrap() {
        if p["type"] == "row" {
            out.push(json!({"type": "row", "title": p["title"], "gridPos": p["gridPos"]}));
            continue;
        }
        let mut targets = Vec::new();
        for t in p["targets"].as_array().unwrap() {
            let expr = substitute(t["expr"].as_str().unwrap(), "10s", &range);
            let instant = t["instant"] == true;
            let data = if instant {
                prom.api(&format!("/api/v1/query?query={}", url_encode(&expr)))
            } else {
                prom.api(&format!(
                    "/api/v1/query_range?query={}&start={start}&end={end}&step=1",
                    url_encode(&expr)
                ))
            }
            .unwrap();
            targets.push(json!({"legend": t["legendFormat"], "instant": instant, "data": data}));
        }
        out.push(json!({
            "type": p["type"], "title": p["title"], "gridPos": p["gridPos"],
            "unit": p["fieldConfig"]["defaults"]["unit"], "targets": targets,
        }));
    }
    let doc = json!({
        "title": dashboard["title"], "start": start, "end": end, "instances": names, "panels": out,
    });
    std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
}
