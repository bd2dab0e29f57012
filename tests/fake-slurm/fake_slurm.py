#!/usr/bin/env python3
"""A fake Slurm for end-to-end tests: sbatch, squeue, sacct, scancel and sinfo in one
script, chosen by the name it is called by (tests symlink it into a bin directory).

State lives in state.json beside the links, under an flock. Tests drive it with
`fake_slurm.py ctl <command>`:
  ctl finish JOB STATE EXIT [STDERR_TEXT]   end a job (e.g. FAILED 1:0)
  ctl run JOB NODE                          mark a job RUNNING on NODE
  ctl lose JOB                              slurmctld forgets a running job (sacct still RUNNING)
  ctl comment JOB TEXT                      the owner sets the job's comment (any text, newlines too)
  ctl owner JOB UID                         Slurm shows the job owned by UID
  ctl linger JOB                            squeue keeps listing the job once it ended (MinJobAge)
  ctl mode CMD MODE                         make CMD misbehave: ok | down | garbage | huge | hang | reject | lost-reply
                                            | stop (CMD@USER: only when run as USER, e.g. sbatch@bob)
                                            stop: the call stops itself (SIGSTOP) once logged, before
                                            taking the state lock, as a user may stop their own process
  ctl dump                                  print the state
Every sbatch call is appended to sbatch.log (one JSON line), so tests can count them: its
argv and cwd (as text, and byte-exact as hex), who ran it (uid, gid, user), the
environment values whose names start with SSV_ (hex), and the batch script it was given
(every argument that names a regular file, and stdin unless it is /dev/null): size,
sha256 and the first 64 KiB (hex). Every call of every command is appended to calls.log
(its name, uid, pid and time).
An sbatch whose environment has SSV_FAKE_SBATCH_SLEEP=<seconds> sleeps that long after
logging the call, outside the state lock (a slow sbatch for one user only). One with
SSV_FAKE_SBATCH_GATE=<path> waits there until that path exists (a test opens the gate once
it has looked at what a running sbatch leaves; it fails after 300 s of waiting).
"""
import fcntl, hashlib, json, os, pwd, signal, stat, sys, time

# Tests run the fake as several users (a root daemon runs sbatch as each job's owner):
# everything it creates is shared. The umask it was started with is logged (sbatch passes
# it to the job as SLURM_UMASK unless that is set).
STARTED_UMASK = os.umask(0)

HERE = os.path.dirname(os.path.abspath(sys.argv[0]))
STATE = os.path.join(HERE, "state.json")
LOCK = os.path.join(HERE, "state.lock")


def load():
    try:
        with open(STATE) as f:
            return json.load(f)
    except FileNotFoundError:
        return {"next_id": 100, "jobs": {}, "modes": {}}


def save(s):
    tmp = STATE + ".tmp"
    with open(tmp, "w") as f:
        json.dump(s, f)
    os.replace(tmp, STATE)


class Locked:
    def __enter__(self):
        self.f = open(LOCK, "w")
        fcntl.flock(self.f, fcntl.LOCK_EX)
        self.s = load()
        return self.s

    def __exit__(self, *a):
        save(self.s)
        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()


def user():
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def misbehave(s, cmd):
    mode = s["modes"].get(f"{cmd}@{user()}", s["modes"].get(cmd, "ok"))
    if mode == "down":
        if cmd == "sacct":
            sys.stderr.write("sacct: error: Problem talking to the database: Connection refused\n")
        else:
            sys.stderr.write(f"{cmd}: error: Unable to contact slurm controller (connect failure)\n")
        sys.exit(1)
    if mode == "hang":
        time.sleep(3600)
    if mode == "huge":
        line = "x" * 1023 + "\n"
        for _ in range(70 * 1024):
            sys.stdout.write(line)
        sys.exit(0)
    if mode == "garbage":
        sys.stdout.write("\x00\xff garbage |||| FROBNICATED|||\n" * 3)
        sys.exit(0)
    return mode


def opt(args, name):
    val = None
    for i, a in enumerate(args):
        if a.startswith(f"--{name}="):
            val = a.split("=", 1)[1]
        elif a == f"--{name}" and i + 1 < len(args):
            val = args[i + 1]
    return val


def expand_array(spec):
    spec = spec.split("%")[0]
    out = []
    for part in spec.split(","):
        if "-" in part:
            a, b = part.split("-")
            out += list(range(int(a), int(b) + 1))
        else:
            out.append(int(part))
    return out


def hexb(b):
    return b.hex()


def text(b):
    return b.decode("utf-8", "replace")


def file_record(f, where):
    h = hashlib.sha256()
    head = b""
    size = 0
    while True:
        chunk = f.read(1 << 20)
        if not chunk:
            break
        if len(head) < 65536:
            head += chunk[: 65536 - len(head)]
        h.update(chunk)
        size += len(chunk)
    return {"where": where, "size": size, "sha256": h.hexdigest(), "head_hex": hexb(head)}


def scripts_given(args):
    out = []
    for i, a in enumerate(args):
        try:
            # Never block on, or read, anything but a regular file.
            fd = os.open(a, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        except OSError:
            continue
        with os.fdopen(fd, "rb") as f:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                out.append(file_record(f, f"argv[{i}]"))
    try:
        mode = os.fstat(0).st_mode
    except OSError:
        mode = None
    if mode is not None and (stat.S_ISREG(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        out.append(file_record(sys.stdin.buffer, "stdin"))
    return out


def proc_status():
    """Its credentials and capabilities as the kernel sees them (/proc/self/status)."""
    keep = ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapAmb", "NoNewPrivs")
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in keep:
                out[k] = v.strip()
    return out


def log_sbatch(args):
    bargs = [os.fsencode(a) for a in args]
    cwd = os.getcwdb()
    env = {text(k): hexb(v) for k, v in os.environb.items() if k.startswith(b"SSV_")}
    rec = {
        "argv": [text(a) for a in bargs],
        "argv_hex": [hexb(a) for a in bargs],
        "cwd": text(cwd),
        "cwd_hex": hexb(cwd),
        "uid": os.getuid(),
        "euid": os.geteuid(),
        "gid": os.getgid(),
        "user": user(),
        "env_hex": env,
        "umask": STARTED_UMASK,
        "slurm_umask": os.environ.get("SLURM_UMASK"),
        "status": proc_status(),
        "scripts": scripts_given(args),
        "pid": os.getpid(),
        "at": time.time(),
    }
    with open(LOCK, "a") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        with open(os.path.join(HERE, "sbatch.log"), "a") as log:
            log.write(json.dumps(rec) + "\n")


def sbatch(args):
    log_sbatch(args)
    wait = os.environ.get("SSV_FAKE_SBATCH_SLEEP")
    if wait:
        time.sleep(float(wait))
    gate = os.environ.get("SSV_FAKE_SBATCH_GATE")
    if gate:
        deadline = time.monotonic() + 300
        while not os.path.exists(gate):
            if time.monotonic() > deadline:
                sys.stderr.write(f"sbatch: error: the fake's gate {gate} stayed shut for 300 s\n")
                sys.exit(1)
            time.sleep(0.05)
    with Locked() as s:
        mode = misbehave(s, "sbatch")
        if mode == "reject":
            sys.stderr.write("sbatch: error: invalid partition specified: nope\n")
            sys.exit(1)
        jid = s["next_id"]
        s["next_id"] += 1
        array = opt(args, "array")
        if array and len(expand_array(array)) > 100000:
            # As MaxArraySize would: the fake does not build a million jobs.
            sys.stderr.write("sbatch: error: Batch job submission failed: Invalid job array specification\n")
            sys.exit(1)
        job = {
            "name": opt(args, "job-name") or "",
            "user": user(),
            "uid": os.getuid(),
            "submit": int(time.time()),
            "comment": opt(args, "comment") or "",
            "mem": opt(args, "mem") or "100M",
            "time": opt(args, "time") or "00:10:00",
            "exclude": opt(args, "exclude") or "",
            "partition": opt(args, "partition") or "debug",
            "dependency": opt(args, "dependency") or "",
            "state": "PENDING",
            "exit": "0:0",
            "node": "",
            "stderr": "",
            "cwd": os.getcwd(),
        }
        if array:
            for t in expand_array(array):
                s["jobs"][f"{jid}_{t}"] = dict(job, raw=str(s["next_id"]))
                s["next_id"] += 1
        else:
            s["jobs"][str(jid)] = dict(job, raw=str(jid))
    if mode == "lost-reply":
        sys.stderr.write("sbatch: error: Batch job submission failed: Socket timed out on send/recv operation\n")
        sys.exit(1)
    print(jid)


def selected(s, args):
    ids = opt(args, "jobs")
    if ids is None:
        return list(s["jobs"].items())
    want = ids.split(",")
    return [(k, v) for k, v in s["jobs"].items() if k in want or k.split("_")[0] in want]


def squeue(args):
    if "--only-job-state" in args:
        # As 22.05's squeue (the option came with 23.11.5): the daemon falls back to the
        # full listing. The in-process fake and the 24.11 dev cluster have it.
        sys.stderr.write("squeue: unrecognized option '--only-job-state'\nTry \"squeue --help\" for more information\n")
        sys.exit(1)
    with Locked() as s:
        misbehave(s, "squeue")
        if opt(args, "states") == "PENDING":
            # Pending jobs and what they wait on (%i|%A|%u|%E), of the users asked for.
            users = (opt(args, "user") or "").split(",")
            for k, j in s["jobs"].items():
                if j["state"] == "PENDING" and j["user"] in users:
                    print(f"{k}|{j['raw']}|{j['user']}|{j.get('dependency') or '(null)'}")
            return
        tags = "%k" in (opt(args, "format") or "")
        # The poll that also reads pending jobs (%i|%A|%T|%r|%N|%U|%u|%E).
        with_pending = "%E" in (opt(args, "format") or "")
        for k, j in selected(s, args):
            # An ended job stays listed while slurmctld keeps it (MinJobAge): `ctl linger`.
            if (j["state"] in ("PENDING", "RUNNING") or j.get("linger")) and not j.get("lost"):
                if tags:
                    # A tag lookup (%i|%A|%k): the comment as given, newlines and all.
                    print(f"{k}|{j['raw']}|{j['comment'] or '(null)'}")
                elif with_pending:
                    print(f"{k}|{j['raw']}|{j['state']}|None|{j['node']}|{j.get('uid', 0)}|{j['user']}|{j.get('dependency') or '(null)'}")
                else:
                    # The poll (%i|%A|%T|%r|%N|%U): nothing a user wrote.
                    print(f"{k}|{j['raw']}|{j['state']}|None|{j['node']}|{j.get('uid', 0)}")


def mem_field(m):
    return m if m[-1].isalpha() else m + "M"


def sacct(args):
    with Locked() as s:
        misbehave(s, "sacct")
        tags = "Comment" in (opt(args, "format") or "")
        for k, j in selected(s, args):
            if tags:
                # A tag lookup (JobID,JobIDRaw,Comment), job rows only (--allocations).
                print(f"{k}|{j['raw']}|{j['comment']}")
                continue
            # The poll: Slurm's own fields, UID and Submit (SLURM_TIME_FORMAT=%s) last.
            if os.environ.get("SLURM_TIME_FORMAT") != "%s":
                sys.stderr.write("fake sacct: the poll's sacct must run with SLURM_TIME_FORMAT=%s\n")
                sys.exit(1)
            submit = j.get("submit", 0)
            rss = "262144K" if j["state"] != "PENDING" else ""
            print(f"{k}|{j['raw']}|{j['state']}|{j['exit']}|{j['node'] or 'None assigned'}||{mem_field(j['mem'])}|{j['time']}|00:00:05|{j['partition']}|{j.get('uid', 0)}|{submit}")
            if j["state"] not in ("PENDING", "RUNNING"):
                print(f"{k}.batch|{j['raw']}.batch|{j['state'] if j['state'] != 'TIMEOUT' else 'CANCELLED'}|{j['exit']}|{j['node']}|{rss}||||||{submit}")


def scancel(args):
    with Locked() as s:
        mode = misbehave(s, "scancel")
        for a in args:
            if a in s["jobs"]:
                s["jobs"][a]["state"] = "CANCELLED by 0"
    if mode == "lost-reply":
        # The jobs are cancelled, but the caller hears only a timeout.
        sys.stderr.write("scancel: error: Socket timed out on send/recv operation\n")
        sys.exit(1)


def scontrol(args):
    # `update JobId=X Dependency=D` and `release X[,Y]`: what pipelines use.
    with Locked() as s:
        misbehave(s, "scontrol")
        if args[:1] == ["update"]:
            kv = dict(a.split("=", 1) for a in args[1:] if "=" in a)
            j = next((v for k, v in s["jobs"].items() if kv.get("JobId") in (k, v["raw"])), None)
            if j is None or j["state"] != "PENDING":
                sys.stderr.write("scontrol: error: Invalid job id specified\n")
                sys.exit(1)
            j["dependency"] = kv.get("Dependency", "")
        elif args[:2] == ["show", "config"]:
            # What cluster mode reads: the Slurm cluster's name.
            print("ClusterName             = fakecluster")
        elif args[:1] == ["release"]:
            for k in args[1].split(","):
                if k in s["jobs"]:
                    s["jobs"][k]["held"] = False
        elif args[:2] == ["show", "config"]:
            # What cluster mode asks: slurm.conf's ClusterName.
            print("ClusterName             = fake")
            print("SlurmUser               = slurm(64030)")
        else:
            sys.stderr.write(f"scontrol: error: the fake does not do {args[:1]}\n")
            sys.exit(1)


def sinfo(args):
    print("debug|30:00")
    print("urgent|infinite")


def ctl(args):
    cmd = args[0]
    with Locked() as s:
        if cmd == "finish":
            j = s["jobs"][args[1]]
            j["state"], j["exit"] = args[2], args[3]
            if not j["node"]:
                j["node"] = "n1"
            if len(args) > 4:
                # Where sbatch's default --output (slurm-%j.out / slurm-%A_%a.out) goes.
                with open(os.path.join(j["cwd"], f"slurm-{args[1]}.out"), "w") as f:
                    f.write(args[4])
        elif cmd == "run":
            j = s["jobs"][args[1]]
            j["state"], j["node"] = "RUNNING", args[2]
        elif cmd == "lose":
            # slurmctld forgets the job; accounting still says it runs.
            j = s["jobs"][args[1]]
            j["state"], j["node"], j["lost"] = "RUNNING", "n1", True
        elif cmd == "comment":
            # As `scontrol update jobid=J comment=TEXT` by the job's owner: any text.
            s["jobs"][args[1]]["comment"] = args[2]
        elif cmd == "linger":
            # squeue --states=all keeps listing the job after it ends, as slurmctld does
            # for MinJobAge.
            s["jobs"][args[1]]["linger"] = True
        elif cmd == "owner":
            # Slurm shows the job owned by this uid (someone else's job under this id).
            s["jobs"][args[1]]["uid"] = int(args[2])
        elif cmd == "mode":
            s["modes"][args[1]] = args[2]
        elif cmd == "dump":
            print(json.dumps(s))


def main():
    name = os.path.basename(sys.argv[0])
    args = sys.argv[1:]
    with open(os.path.join(HERE, "calls.log"), "a") as log:
        log.write(json.dumps({"cmd": name, "uid": os.getuid(), "pid": os.getpid(), "at": time.time()}) + "\n")
    if name == "fake_slurm.py":
        return ctl(args[1:]) if args and args[0] == "ctl" else sys.exit("usage: fake_slurm.py ctl ...")
    # The state file is replaced whole (os.replace), so it can be read without the lock.
    if load()["modes"].get(f"{name}@{user()}") == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    {"sbatch": sbatch, "squeue": squeue, "sacct": sacct, "scancel": scancel, "sinfo": sinfo, "scontrol": scontrol}[name](args)


if __name__ == "__main__":
    main()
