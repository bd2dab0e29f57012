//! Where the daemon's log goes, and in what form.
//!
//! Under systemd (`JOURNAL_STREAM` names the daemon's stderr) every line goes to the
//! journal through its native protocol: the fields of the spans it happened in (a poll
//! cycle, a control request, a judged attempt: `chain`, `job`, `tag`, `uid`, ...) and of
//! the line itself become journal fields (`CHAIN=c7`, `JOB=1234`), so an admin can ask
//! `journalctl CHAIN=c7` or read everything with `-o verbose`; the level is the entry's
//! `PRIORITY`. Where the journal's socket cannot be reached, the lines go to stderr (the
//! journal's stream) as text, without colours or a timestamp of their own. Anywhere else
//! they go to stderr as text, coloured only on a terminal.

use std::io::IsTerminal;
use std::os::unix::fs::MetadataExt;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

/// The environment variable that sets the log filter (`info` by default).
pub const FILTER_VAR: &str = "SLURM_SUPERVISOR_LOG";

/// How the log is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sink {
    /// The journal's native protocol.
    Journal,
    /// Plain text on stderr, which the journal reads (no colours, no timestamp).
    JournalStream,
    /// Text on stderr; `ansi` colours it.
    Stderr { ansi: bool },
}

/// Whether `journal_stream` (the value of `JOURNAL_STREAM`, `DEVICE:INODE`) names the
/// file stderr is: systemd sets it for a service whose stderr is the journal, and a child
/// whose stderr was redirected elsewhere must not take it as its own.
pub fn is_journal_stream(journal_stream: &str, stderr: &std::fs::Metadata) -> bool {
    let Some((dev, ino)) = journal_stream.split_once(':') else {
        return false;
    };
    dev.parse::<u64>().is_ok_and(|d| d == stderr.dev())
        && ino.parse::<u64>().is_ok_and(|i| i == stderr.ino())
}

/// The metadata of the file behind this process's stderr.
fn stderr_metadata() -> Option<std::fs::Metadata> {
    std::fs::metadata("/proc/self/fd/2").ok()
}

/// Sets up the global subscriber; returns where the log goes.
pub fn init() -> Sink {
    let filter = || EnvFilter::try_from_env(FILTER_VAR).unwrap_or_else(|_| EnvFilter::new("info"));
    let under_journal = std::env::var("JOURNAL_STREAM")
        .ok()
        .zip(stderr_metadata())
        .is_some_and(|(v, m)| is_journal_stream(&v, &m));
    if under_journal {
        // Span and line fields keep their own names (CHAIN, JOB, ...): none of this
        // daemon's fields is one of the journal's own (MESSAGE, PRIORITY, CODE_*, ...).
        if let Ok(journal) = tracing_journald::layer() {
            tracing_subscriber::registry()
                .with(filter())
                .with(journal.with_field_prefix(None))
                .init();
            return Sink::Journal;
        }
        tracing_subscriber::fmt()
            .with_env_filter(filter())
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .without_time()
            .init();
        return Sink::JournalStream;
    }
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    tracing_subscriber::fmt()
        .with_env_filter(filter())
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .init();
    Sink::Stderr { ansi }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_stream_must_name_stderr_itself() {
        let f = tempfile::NamedTempFile::new().unwrap();
        let m = f.as_file().metadata().unwrap();
        let mine = format!("{}:{}", m.dev(), m.ino());
        assert!(is_journal_stream(&mine, &m));
        assert!(!is_journal_stream(
            &format!("{}:{}", m.dev(), m.ino() + 1),
            &m
        ));
        assert!(!is_journal_stream("", &m));
        assert!(!is_journal_stream("8:x", &m));
        assert!(!is_journal_stream(&m.ino().to_string(), &m));
    }
}
