#!/usr/bin/env python3
"""A fake Slurm for end-to-end tests: sbatch, squeue, sacct, scancel and sinfo in one
script, chosen by the name it is called by (tests symlink it into a bin directory).

State lives in state.json beside the links, under an flock. Tests drive it with
`fake_slurm.py ctl <command>`:
  ctl finish JOB STATE EXIT [STDERR_TEXT]   end a job (e.g. FAILED 1:0)
  ctl run JOB NODE                          mark a job RUNNING on NODE
  ctl lose JOB                              slurmctld forgets a running job (sacct still RUNNING)
  ctl mode CMD MODE                         make CMD misbehave: ok | down | garbage | huge | hang | reject | lost-reply
  ctl dump                                  print the state
Every sbatch call is appended to sbatch.log (one JSON line), so tests can count them.
"""
import fcntl, json, os, sys, time

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


def misbehave(s, cmd):
    mode = s["modes"].get(cmd, "ok")
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


def sbatch(args):
    with Locked() as s:
        with open(os.path.join(HERE, "sbatch.log"), "a") as log:
            log.write(json.dumps({"argv": args, "cwd": os.getcwd()}) + "\n")
        mode = misbehave(s, "sbatch")
        if mode == "reject":
            sys.stderr.write("sbatch: error: invalid partition specified: nope\n")
            sys.exit(1)
        jid = s["next_id"]
        s["next_id"] += 1
        array = opt(args, "array")
        job = {
            "comment": opt(args, "comment") or "",
            "mem": opt(args, "mem") or "100M",
            "time": opt(args, "time") or "00:10:00",
            "exclude": opt(args, "exclude") or "",
            "partition": opt(args, "partition") or "debug",
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
    with Locked() as s:
        misbehave(s, "squeue")
        for k, j in selected(s, args):
            if j["state"] in ("PENDING", "RUNNING") and not j.get("lost"):
                print(f"{k}|{j['raw']}|{j['state']}|None|{j['node']}|{j['comment']}")


def mem_field(m):
    return m if m[-1].isalpha() else m + "M"


def sacct(args):
    with Locked() as s:
        misbehave(s, "sacct")
        for k, j in selected(s, args):
            rss = "262144K" if j["state"] != "PENDING" else ""
            print(f"{k}|{j['raw']}|{j['state']}|{j['exit']}|{j['node'] or 'None assigned'}||{mem_field(j['mem'])}|{j['time']}|00:00:05|{j['partition']}|{j['comment']}")
            if j["state"] not in ("PENDING", "RUNNING"):
                print(f"{k}.batch|{j['raw']}.batch|{j['state'] if j['state'] != 'TIMEOUT' else 'CANCELLED'}|{j['exit']}|{j['node']}|{rss}|||||")


def scancel(args):
    with Locked() as s:
        misbehave(s, "scancel")
        for a in args:
            if a in s["jobs"]:
                s["jobs"][a]["state"] = "CANCELLED by 0"


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
        elif cmd == "mode":
            s["modes"][args[1]] = args[2]
        elif cmd == "dump":
            print(json.dumps(s))


def main():
    name = os.path.basename(sys.argv[0])
    args = sys.argv[1:]
    if name == "fake_slurm.py":
        return ctl(args[1:]) if args and args[0] == "ctl" else sys.exit("usage: fake_slurm.py ctl ...")
    {"sbatch": sbatch, "squeue": squeue, "sacct": sacct, "scancel": scancel, "sinfo": sinfo}[name](args)


if __name__ == "__main__":
    main()
