//! Reading the journal entries of revision 1 (`journal::FORMAT`), written by the versions
//! before every operation carried the values its rows get: what such an operation lacks
//! is derived once, as its writer derived it when it applied it, and the entry is then
//! applied as any other.

use super::*;

/// Gives an operation of revision 1 the values its writer derived when it applied it,
/// derived the same way once, here: a submission's dependency rows from its argv and
/// script, the request ids kept, what a note keeps and which refusals it removes; a
/// launch's answer may make a second live attempt on its job
/// ([`journal::Op::LegacyLaunchSubmitted`]). Only a journal written before revision 2
/// holds such entries; the rows they make are those the version that wrote them made, as
/// far as this version's parser agrees with that version's.
///
/// A submission's rows are read by the store's `reader` (given from above): without one
/// the entry is refused with what to do ([`StoreError::NoDependencyReader`]), never
/// applied without its rows.
pub(super) fn upgrade(op: &mut serde_json::Value, reader: Option<DependencyReader>) -> Result<()> {
    let corrupt = |e: serde_json::Error| StoreError::Corrupt(e.to_string());
    let Some(fields) = op.as_object_mut() else {
        return Err(StoreError::Corrupt("an operation is not an object".into()));
    };
    upgrade_fields(fields, reader).map_err(|e| match e {
        Upgrade::Json(e) => corrupt(e),
        Upgrade::Store(e) => e,
    })
}

/// Why an operation of revision 1 cannot be upgraded.
enum Upgrade {
    Json(serde_json::Error),
    Store(StoreError),
}

impl From<serde_json::Error> for Upgrade {
    fn from(e: serde_json::Error) -> Upgrade {
        Upgrade::Json(e)
    }
}

fn upgrade_fields(
    fields: &mut serde_json::Map<String, serde_json::Value>,
    reader: Option<DependencyReader>,
) -> std::result::Result<(), Upgrade> {
    use serde::de::Error;
    use serde_json::{json, Value};
    match fields.get("op").and_then(Value::as_str) {
        Some("create_submission") => {
            let new: NewSubmission = serde_json::from_value(
                fields
                    .get("new")
                    .cloned()
                    .ok_or_else(|| serde_json::Error::missing_field("new"))?,
            )?;
            let rows = dependency_rows(reader, &new.argv, new.script.as_deref(), || {
                "it was written by a version before revision 2, and reading it".into()
            })
            .map_err(Upgrade::Store)?;
            fields.insert("dependencies".into(), json!(rows));
        }
        Some("launch_submitted") => {
            fields.insert("op".into(), json!("legacy_launch_submitted"));
        }
        Some("note_submit_request") => {
            fields.insert("keep".into(), json!(SUBMIT_REQUESTS_KEPT));
        }
        Some("note_not_recovered") => {
            let items: Vec<String> = serde_json::from_value(
                fields
                    .get("items")
                    .cloned()
                    .ok_or_else(|| serde_json::Error::missing_field("items"))?,
            )?;
            fields.insert("items".into(), json!(opt_in::kept_items(&items)));
        }
        Some("note_plain_refused") => {
            let reason: String = serde_json::from_value(
                fields
                    .get("reason")
                    .cloned()
                    .ok_or_else(|| serde_json::Error::missing_field("reason"))?,
            )?;
            let now: i64 = serde_json::from_value(
                fields
                    .get("now")
                    .cloned()
                    .ok_or_else(|| serde_json::Error::missing_field("now"))?,
            )?;
            fields.insert("reason".into(), json!(opt_in::kept_reason(&reason)));
            fields.insert(
                "forget_before".into(),
                json!(opt_in::forget_refusals_before(now)),
            );
        }
        _ => {}
    }
    Ok(())
}
