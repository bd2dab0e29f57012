//! docs/json-schemas.md against the real output: a daemon on the fake Slurm of
//! tests/fake-slurm holds chains in every state, and `status`, `history`, `pending` and
//! `stats --json` must print exactly the fields the document's tables list, with the
//! types they say. The tables are read from the document itself, so changing the output
//! or the document without the other fails here.

mod common;

use common::fake::start;
use common::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

const DOC: &str = include_str!("../docs/json-schemas.md");

/// One alternative of a documented type.
#[derive(Debug, Clone, PartialEq)]
enum Ty {
    Null,
    String,
    Integer,
    Boolean,
    /// Any object; its content is not documented field by field.
    Object,
    /// An object whose every value has this type (`by_state`).
    ObjectOf(Box<Ty>),
    /// A documented object, by its heading.
    Named(String),
    ArrayOf(Box<Ty>),
}

/// A type cell, e.g. "string or null", "array of `attempt` objects".
fn parse_type(cell: &str) -> Vec<Ty> {
    cell.split(" or ").map(|t| parse_one(t.trim())).collect()
}

fn parse_one(t: &str) -> Ty {
    let named = |s: &str| {
        s.strip_prefix('`')
            .and_then(|s| {
                s.strip_suffix("` object")
                    .or_else(|| s.strip_suffix("` objects"))
            })
            .map(|n| Ty::Named(n.to_string()))
    };
    match t {
        "null" => Ty::Null,
        "string" => Ty::String,
        "integer" => Ty::Integer,
        "boolean" => Ty::Boolean,
        "object" => Ty::Object,
        "object of integers" => Ty::ObjectOf(Box::new(Ty::Integer)),
        "array of strings" => Ty::ArrayOf(Box::new(Ty::String)),
        "array of integers" => Ty::ArrayOf(Box::new(Ty::Integer)),
        "array of objects" => Ty::ArrayOf(Box::new(Ty::Object)),
        _ => match t.strip_prefix("array of ").and_then(named).or_else(|| named(t)) {
            Some(ty) if t.starts_with("array of ") => Ty::ArrayOf(Box::new(ty)),
            Some(ty) => ty,
            None => panic!(
                "docs/json-schemas.md: type {t:?} is none of those the document's introduction lists"
            ),
        },
    }
}

/// The documented objects: each `###` heading's table, with the fields of the object an
/// "Every field of `X`" sentence names.
fn documented_objects(doc: &str) -> BTreeMap<String, BTreeMap<String, Vec<Ty>>> {
    let mut own: BTreeMap<String, BTreeMap<String, Vec<Ty>>> = BTreeMap::new();
    let mut base: BTreeMap<String, String> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in doc.lines() {
        if let Some(h) = line.strip_prefix("### ") {
            let name = h.trim().trim_matches('`').to_string();
            own.insert(name.clone(), BTreeMap::new());
            current = Some(name);
        } else if line.starts_with("## ") {
            current = None;
        } else if let Some(name) = &current {
            if let Some(rest) = line.split("Every field of `").nth(1) {
                let of = rest.split('`').next().unwrap_or_default();
                base.insert(name.clone(), of.to_string());
            } else if line.starts_with("| `") {
                let cells: Vec<&str> = line.split('|').map(str::trim).collect();
                let field = cells[1].trim_matches('`').to_string();
                own.get_mut(name)
                    .unwrap()
                    .insert(field, parse_type(cells[2]));
            }
        }
    }
    let names: Vec<String> = own.keys().cloned().collect();
    names
        .iter()
        .map(|n| (n.clone(), resolved(n, &own, &base)))
        .collect()
}

/// An object's fields: its base's, then its own (which win).
fn resolved(
    name: &str,
    own: &BTreeMap<String, BTreeMap<String, Vec<Ty>>>,
    base: &BTreeMap<String, String>,
) -> BTreeMap<String, Vec<Ty>> {
    let mut fields = match base.get(name) {
        Some(b) => {
            assert!(
                own.contains_key(b),
                "{name} takes the fields of {b}, which is not documented"
            );
            resolved(b, own, base)
        }
        None => BTreeMap::new(),
    };
    fields.extend(own[name].clone());
    fields
}

/// Checks values against the documented objects, collecting every mismatch.
struct Checker {
    objects: BTreeMap<String, BTreeMap<String, Vec<Ty>>>,
    errors: Vec<String>,
    /// Objects seen, and every (object, field, alternative) a real value matched: the
    /// scenario must exercise what the document says.
    seen: BTreeSet<String>,
    matched: BTreeSet<(String, String, String)>,
}

impl Checker {
    fn object(&mut self, v: &Value, name: &str, path: &str) {
        self.seen.insert(name.to_string());
        let Some(fields) = self.objects.get(name).cloned() else {
            self.errors
                .push(format!("{path}: object `{name}` is not documented"));
            return;
        };
        let Some(map) = v.as_object() else {
            self.errors
                .push(format!("{path}: `{name}` should be an object, got {v}"));
            return;
        };
        for (field, types) in &fields {
            match map.get(field) {
                None => self.errors.push(format!(
                    "{path}: documented field `{field}` of `{name}` is missing"
                )),
                Some(value) => {
                    let at = format!("{path}.{field}");
                    match types.iter().find(|t| self.fits(value, t, &at)) {
                        Some(t) => {
                            self.matched.insert((
                                name.to_string(),
                                field.clone(),
                                format!("{t:?}"),
                            ));
                        }
                        None => self.errors.push(format!(
                            "{at}: {value} is not {types:?}, as documented for `{name}`"
                        )),
                    }
                }
            }
        }
        for key in map.keys().filter(|k| !fields.contains_key(*k)) {
            self.errors.push(format!(
                "{path}: field `{key}` of `{name}` is not in docs/json-schemas.md"
            ));
        }
    }

    /// Whether `v` is of type `t`; a named object that is one is checked in depth.
    fn fits(&mut self, v: &Value, t: &Ty, path: &str) -> bool {
        match t {
            Ty::Null => v.is_null(),
            Ty::String => v.is_string(),
            Ty::Integer => v.is_i64() || v.is_u64(),
            Ty::Boolean => v.is_boolean(),
            Ty::Object => v.is_object(),
            Ty::ObjectOf(inner) => v.as_object().is_some_and(|m| {
                m.iter()
                    .all(|(k, x)| self.fits(x, inner, &format!("{path}.{k}")))
            }),
            Ty::Named(name) => {
                if !v.is_object() {
                    return false;
                }
                self.object(v, name, path);
                true
            }
            Ty::ArrayOf(inner) => v.as_array().is_some_and(|a| {
                a.iter()
                    .enumerate()
                    .all(|(i, x)| self.fits(x, inner, &format!("{path}[{i}]")))
            }),
        }
    }

    fn each(&mut self, v: &Value, name: &str, path: &str) {
        match v.as_array() {
            Some(a) => a
                .iter()
                .enumerate()
                .for_each(|(i, x)| self.object(x, name, &format!("{path}[{i}]"))),
            None => self
                .errors
                .push(format!("{path}: should be an array, got {v}")),
        }
    }
}

#[test]
fn the_document_is_read_as_intended() {
    let objects = documented_objects(DOC);
    for name in [
        "chain",
        "history",
        "attempt",
        "decision",
        "pending",
        "evidence",
        "usage",
        "submission",
        "stats",
        "chain stats",
        "stats total",
    ] {
        assert!(objects.contains_key(name), "no `{name}` in {objects:?}");
    }
    assert_eq!(objects["chain"].len(), 15, "{:?}", objects["chain"]);
    // `history` has the chain's fields, with `attempts` replaced by the list.
    assert_eq!(
        objects["history"]["attempts"],
        vec![Ty::ArrayOf(Box::new(Ty::Named("attempt".into())))]
    );
    assert_eq!(
        objects["history"]["slurm_state"],
        vec![Ty::String, Ty::Null]
    );
    assert!(objects["pending"].contains_key("evidence") && objects["pending"].contains_key("id"));
}

/// Waits until `job`'s chain is in `state`.
fn reach(d: &Daemon, job: &str, state: &str) {
    d.wait_state(job, state, Duration::from_secs(30));
}

#[test]
fn the_read_commands_print_what_the_document_says() {
    // A long backoff keeps an automatic retry in `ready`.
    let (d, fake) = start(
        "[retry]\nbackoff_initial = \"1h\"\nbackoff_max = \"2h\"\nbackoff_jitter = 0.0\n",
        &[],
    );
    d.write_script("job.sh", "echo hi");
    let completed = d.submit(&["--mem=200M", "job.sh"]);
    let ready = d.submit(&["job.sh"]);
    let pending = d.submit(&["job.sh"]);
    let held = d.submit(&["job.sh"]);
    let recovered = d.submit(&["job.sh"]);
    let cancelled = d.submit(&["job.sh"]);
    let array = d.submit(&["--array=0-1", "job.sh"]);
    fake.ctl(&["finish", &completed, "COMPLETED", "0:0"]);
    fake.ctl(&["finish", &ready, "FAILED", "1:0", "Connection refused\n"]);
    for job in [&pending, &held, &recovered] {
        fake.ctl(&["finish", job, "FAILED", "1:0", "the frobnicator stalled\n"]);
    }
    reach(&d, &completed, "completed");
    reach(&d, &ready, "ready");
    for job in [&pending, &held, &recovered] {
        reach(&d, job, "pending_failed");
    }
    let classify = |job: &str, action: &str| {
        let out = d.ctl(&[
            "classify",
            job,
            "--action",
            action,
            "--reason",
            "schema test",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    classify(&held, "hold");
    classify(&recovered, "retry");
    common::wait_for("the agent's retry", Duration::from_secs(30), || {
        d.status(&recovered)[0]["attempts"] == 2
    });
    let second = d.status(&recovered)[0]["slurm_job_id"]
        .as_str()
        .unwrap()
        .to_string();
    fake.ctl(&["finish", &second, "COMPLETED", "0:0"]);
    reach(&d, &recovered, "completed");
    assert!(d.ctl(&["cancel", &cancelled]).status.success());
    reach(&d, &cancelled, "cancelled");

    let mut check = Checker {
        objects: documented_objects(DOC),
        errors: Vec::new(),
        seen: BTreeSet::new(),
        matched: BTreeSet::new(),
    };
    let status = d.json(&["status", "--json"]);
    check.each(&status, "chain", "status");
    for job in [&completed, &ready, &pending, &held, &recovered, &cancelled] {
        check.object(&d.history(job), "history", &format!("history {job}"));
    }
    let tasks = d.history(&array);
    assert_eq!(tasks.as_array().map(Vec::len), Some(2), "{tasks:#}");
    check.each(&tasks, "history", &format!("history {array}"));
    let waiting = d.json(&["pending", "--json"]);
    assert_eq!(waiting.as_array().map(Vec::len), Some(2), "{waiting:#}");
    check.each(&waiting, "pending", "pending");
    check.object(&d.json(&["stats", "--json"]), "stats", "stats");

    assert!(check.errors.is_empty(), "{}", check.errors.join("\n"));
    // Every documented object was seen, and the scenario exercised the values that matter.
    // `notification` (the notify command's stdin) is checked by tests/notify.rs.
    let all: BTreeSet<String> = check
        .objects
        .keys()
        .filter(|k| *k != "notification")
        .cloned()
        .collect();
    assert_eq!(check.seen, all, "objects the scenario never showed");
    let states: BTreeSet<&str> = status
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["state"].as_str())
        .collect();
    for s in [
        "active",
        "ready",
        "pending_failed",
        "completed",
        "cancelled",
    ] {
        assert!(states.contains(s), "no {s} chain: {states:?}");
    }
    for (object, field, ty) in [
        ("chain", "next_retry_at", "Integer"),
        ("chain", "array_task", "Integer"),
        ("chain stats", "recovered_successfully", "Boolean"),
        ("pending", "held", "Boolean"),
        ("evidence", "usage", "Named(\"usage\")"),
        ("decision", "resolves", "Integer"),
        ("decision", "reason_code", "String"),
        ("attempt", "exit_code", "String"),
    ] {
        assert!(
            check
                .matched
                .contains(&(object.into(), field.into(), ty.into())),
            "the scenario never showed `{field}` of `{object}` as {ty}"
        );
    }
}
