//! sbatch's options, as Slurm 22.05.8 behaves: every option below was probed against the
//! real `sbatch` binary (`--opt --version` shows whether the option swallows the next
//! token, `--opt=x --version` whether it accepts a value at all).

/// How an option takes a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Arg {
    None,
    Required,
    /// Only when attached: `--opt=value`, `-ovalue`.
    Optional,
}

pub(super) struct Spec {
    pub(super) long: &'static str,
    pub(super) short: Option<char>,
    pub(super) arg: Arg,
}

const fn req(long: &'static str, short: Option<char>) -> Spec {
    Spec {
        long,
        short,
        arg: Arg::Required,
    }
}
const fn flag(long: &'static str, short: Option<char>) -> Spec {
    Spec {
        long,
        short,
        arg: Arg::None,
    }
}
const fn opt(long: &'static str, short: Option<char>) -> Spec {
    Spec {
        long,
        short,
        arg: Arg::Optional,
    }
}

/// sbatch's options in Slurm 22.05.8, probed against the binary (see the module docs).
pub(super) const OPTIONS: &[Spec] = &[
    req("account", Some('A')),
    req("acctg-freq", None),
    req("array", Some('a')),
    req("batch", None),
    req("bb", None),
    req("bbf", None),
    req("begin", Some('b')),
    req("chdir", Some('D')),
    req("cluster-constraint", None),
    req("clusters", Some('M')),
    req("comment", None),
    req("constraint", Some('C')),
    req("container", None),
    flag("contiguous", None),
    req("core-spec", Some('S')),
    req("cores-per-socket", None),
    req("cpu-freq", None),
    req("cpus-per-gpu", None),
    req("cpus-per-task", Some('c')),
    req("deadline", None),
    req("delay-boot", None),
    req("dependency", Some('d')),
    req("distribution", Some('m')),
    req("error", Some('e')),
    req("exclude", Some('x')),
    opt("exclusive", None),
    req("export", None),
    req("export-file", None),
    req("extra-node-info", Some('B')),
    opt("get-user-env", None),
    req("gid", None),
    req("gpu-bind", None),
    req("gpu-freq", None),
    req("gpus", Some('G')),
    req("gpus-per-node", None),
    req("gpus-per-socket", None),
    req("gpus-per-task", None),
    req("gres", None),
    req("gres-flags", None),
    flag("help", Some('h')),
    req("hint", None),
    flag("hold", Some('H')),
    flag("ignore-pbs", None),
    req("input", Some('i')),
    req("job-name", Some('J')),
    req("kill-on-invalid-dep", None),
    req("licenses", Some('L')),
    req("mail-type", None),
    req("mail-user", None),
    req("mcs-label", None),
    req("mem", None),
    req("mem-bind", None),
    req("mem-per-cpu", None),
    req("mem-per-gpu", None),
    req("mincpus", None),
    req("network", None),
    opt("nice", None),
    opt("no-kill", Some('k')),
    flag("no-requeue", None),
    req("nodefile", Some('F')),
    req("nodelist", Some('w')),
    req("nodes", Some('N')),
    req("ntasks", Some('n')),
    req("ntasks-per-core", None),
    req("ntasks-per-gpu", None),
    req("ntasks-per-node", None),
    req("ntasks-per-socket", None),
    req("open-mode", None),
    req("output", Some('o')),
    flag("overcommit", Some('O')),
    flag("oversubscribe", Some('s')),
    flag("parsable", None),
    req("partition", Some('p')),
    req("power", None),
    req("prefer", None),
    req("priority", None),
    req("profile", None),
    opt("propagate", None),
    req("qos", Some('q')),
    flag("quiet", Some('Q')),
    flag("reboot", None),
    flag("requeue", None),
    req("reservation", None),
    req("signal", None),
    req("sockets-per-node", None),
    flag("spread-job", None),
    req("switches", None),
    flag("test-only", None),
    req("thread-spec", None),
    req("threads-per-core", None),
    req("time", Some('t')),
    req("time-min", None),
    req("tmp", None),
    req("uid", None),
    flag("usage", None),
    flag("use-min-nodes", None),
    flag("verbose", Some('v')),
    flag("version", Some('V')),
    flag("wait", Some('W')),
    req("wait-all-nodes", None),
    req("wckey", None),
    req("wrap", None),
];

/// The memory options of which sbatch allows only one (see the module docs).
pub const MEM_OPTIONS: [&str; 3] = ["mem", "mem-per-cpu", "mem-per-gpu"];
