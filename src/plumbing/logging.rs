//! Where the daemon's log goes, and in what form.
//!
//! Under systemd (`JOURNAL_STREAM` names the daemon's stderr) every line goes to the
//! journal through its native protocol: the fields of the spans it happened in (a poll
//! cycle, a control request, a judged attempt: `chain`, `job`, `tag`, `uid`, ...) and of
//! the line itself become journal fields (`CHAIN=c7`, `JOB=1234`), so an admin can ask
//! `journalctl CHAIN=c7` or read everything with `-o verbose`; the level is the entry's
//! `PRIORITY`. Where the journal's socket cannot be reached, the lines go to stderr (the
//! journal's stream) as text, without colours or a timestamp of their own. Anywhere else
//! they go to stderr as text. Text lines are never coloured, and every control character
//! in them is escaped (`EscapedLines`): one event is one line, whatever a user wrote.
//!
//! Lines say what happened; which chain, job, launch, cycle or request it was about comes
//! from the span they are logged in (`engine::attempt_span`, `chain_span`, `launch_span`,
//! `requests::span`, the `cycle` span in `daemon/mod.rs`), never from fields repeated in
//! each line. A span is entered only around code that does not await (or the future is
//! `instrument`ed).

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
    /// Plain text on stderr, with timestamps; no colours even on a terminal (see `init`).
    Stderr,
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
            .with_writer(|| EscapedLines(std::io::stderr()))
            .with_ansi(false)
            .without_time()
            .init();
        return Sink::JournalStream;
    }
    // No colours even on a terminal: their escape sequences would be escaped like a
    // user's (below), and telling the two apart is not worth a way to drive a terminal.
    tracing_subscriber::fmt()
        .with_env_filter(filter())
        .with_writer(|| EscapedLines(std::io::stderr()))
        .with_ansi(false)
        .init();
    Sink::Stderr
}

/// A text log where one event is one line, whatever its text holds. Much of what the
/// daemon logs is a user's text (a job's stderr in a decision's reason, an sbatch's error
/// output, a path, a job name): a newline there would start a line that looks like the
/// daemon's own, a carriage return would hide what came before on a terminal, an escape
/// sequence would drive one. Every control character of an event's text, but the newline
/// that ends it, is written escaped (`\n`, `\r`, `\x1b`), and a backslash as `\\`.
/// (The journal's native protocol carries each field whole, with no such confusion.)
struct EscapedLines<W: std::io::Write>(W);

impl<W: std::io::Write> std::io::Write for EscapedLines<W> {
    /// Takes the whole buffer: tracing-subscriber writes one formatted event at a time.
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write_all(&escape_line(buf))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// `event` with its control characters escaped, but a last newline: the ASCII ones and
/// DEL as `\n`, `\r`, `\t`, `\x1b`; the others a terminal or a log viewer may act on (C1
/// controls such as U+009B, an 8-bit CSI; line and paragraph separators; bidirectional
/// overrides) as `\u{9b}`. An event that is not UTF-8 has its bytes of 0x80 and above
/// left as they are.
pub fn escape_line(event: &[u8]) -> Vec<u8> {
    let (body, end): (&[u8], &[u8]) = match event.strip_suffix(b"\n") {
        Some(body) => (body, b"\n"),
        None => (event, b""),
    };
    let mut out = Vec::with_capacity(event.len() + 8);
    match std::str::from_utf8(body) {
        Ok(text) => {
            for c in text.chars() {
                match c {
                    '\n' => out.extend_from_slice(b"\\n"),
                    '\r' => out.extend_from_slice(b"\\r"),
                    '\t' => out.extend_from_slice(b"\\t"),
                    c if (c as u32) < 0x20 || c == '\u{7f}' => {
                        out.extend_from_slice(format!("\\x{:02x}", c as u32).as_bytes())
                    }
                    c if c.is_control() || is_invisible_format(c) => {
                        out.extend_from_slice(format!("\\u{{{:x}}}", c as u32).as_bytes())
                    }
                    c => {
                        let mut buf = [0u8; 4];
                        out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                    }
                }
            }
        }
        Err(_) => {
            for &b in body {
                match b {
                    b'\n' => out.extend_from_slice(b"\\n"),
                    b'\r' => out.extend_from_slice(b"\\r"),
                    b'\t' => out.extend_from_slice(b"\\t"),
                    b if b < 0x20 || b == 0x7f => {
                        out.extend_from_slice(format!("\\x{b:02x}").as_bytes())
                    }
                    b => out.push(b),
                }
            }
        }
    }
    out.extend_from_slice(end);
    out
}

/// Line and paragraph separators and bidirectional controls: not `char::is_control`, but
/// a viewer may break a line or reorder text at them.
fn is_invisible_format(c: char) -> bool {
    matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_users_text_cannot_make_a_line_of_its_own() {
        let forged = b"decision: stderr says x\n2026-11-25T00:00:00Z  INFO forged: classify ALL\r\x1b[2J\t\n";
        let out = escape_line(forged);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "decision: stderr says x\\n2026-11-25T00:00:00Z  INFO forged: classify ALL\\r\\x1b[2J\\t\n"
        );
        assert_eq!(escape_line(b"plain\n"), b"plain\n");
        assert_eq!(escape_line(b"no end"), b"no end");
        // Text past ASCII is left as it is, but for the controls a viewer acts on.
        assert_eq!(escape_line("é\n".as_bytes()), "é\n".as_bytes());
        assert_eq!(
            String::from_utf8(escape_line(
                "a\u{9b}2Jb\u{2028}c\u{202e}d\u{85}\n".as_bytes()
            ))
            .unwrap(),
            "a\\u{9b}2Jb\\u{2028}c\\u{202e}d\\u{85}\n"
        );
        // Bytes that are not UTF-8 are kept, their ASCII controls escaped.
        assert_eq!(escape_line(b"\xff\x1b\n"), b"\xff\\x1b\n");
    }

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
