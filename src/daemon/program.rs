//! Running a program of the admin's beside the loop (a notification's mail program or
//! command, the agent): fed its input, its output read up to a bound, its whole process
//! group killed when it fails or overruns its timeout, never a fd of the daemon's but
//! 0-2 (it is started by `slurm::spawn`, like Slurm's commands).

use crate::slurm::spawn;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How a run went: the program's exit status and the first bytes of its output.
pub struct Ran {
    pub status: std::process::ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// Starts `cmd` (set up by the caller: arguments, environment, credentials; made a
/// process group leader here), writes `input` to it, reads at most `max_output` bytes of
/// each of its outputs, and waits for it, all within `timeout` from now, the start
/// included. A program that overruns is killed with everything it started (its process
/// group); so is what a program that failed left behind. `name` is for messages.
pub async fn run(
    mut cmd: spawn::Command,
    name: &str,
    input: &[u8],
    timeout: Duration,
    max_output: u64,
) -> Result<Ran, String> {
    cmd.current_dir("/").stdin_piped().process_group();
    let deadline = tokio::time::Instant::now() + timeout;
    let late = || {
        format!(
            "{name} did not finish within {}s and was killed",
            timeout.as_secs()
        )
    };
    // Dropped before it was waited for, the child is killed and reaped.
    let mut child = tokio::time::timeout_at(deadline, cmd.spawn())
        .await
        .map_err(|_| late())?
        .map_err(|e| format!("cannot start {name}: {e}"))?;
    let (mut stdin, mut out, mut err) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take());
    let work = async {
        let feed = async {
            if let Some(mut s) = stdin.take() {
                // A program that exits without reading its stdin is judged by its status.
                let _ = s.write_all(input).await;
            }
        };
        let read = |p: Option<tokio::net::unix::pipe::Receiver>| async move {
            let mut buf = Vec::new();
            if let Some(p) = p {
                let _ = p.take(max_output).read_to_end(&mut buf).await;
            }
            buf
        };
        let ((), stdout, stderr) = tokio::join!(feed, read(out.take()), read(err.take()));
        // Not reaped yet: its process group can still be killed (`kill_group`) without
        // the risk of hitting a group that took its number since.
        let status = child.exited().await;
        (status, stdout, stderr)
    };
    match tokio::time::timeout_at(deadline, work).await {
        Err(_) => {
            child.kill_group();
            Err(late())
        }
        Ok((Err(e), _, _)) => Err(format!("{name}: {e}")),
        Ok((Ok(status), stdout, stderr)) => {
            if !status.success() {
                child.kill_group();
            }
            let _ = child.wait().await;
            Ok(Ran {
                status,
                stdout,
                stderr,
            })
        }
    }
}
