"""The evaluation harness (bench/eval/README.md): runs one scenario group on the GPU machine.

  python3 harness.py GROUP.json --out DIR [--part P] [--rounds N] [--seconds S] [--configs a,b]
                     [--scenarios x,y] [--budget S] [--dry-run] [--vitamin PATH] [--vitamin-ref PATH]

A group names tenants (commands speaking tenant.py's protocol), scenarios (sets of tenants started
together) and system configurations. Each round runs every tenant of the group alone (natively, no
MPS: the normalization), then every configuration x scenario, the configurations' order rotated by
one per round. Every run starts its tenants together; each touches a ready file after warm-up and
waits for its peers, so the measured windows start together and warm-up is excluded. The harness owns
the MPS control daemon (its own pipe and log directories) and the vitamin daemon, and stops both on
every exit path, failures and signals included. Before running it estimates the group's time from the
tenants' declared start-up times and refuses a group that would not fit the budget of one device call;
while running it skips (and records) a run that would overrun what is left.

Tenant commands run in this folder (the staged bench/eval); `${VAR}` in their arguments is expanded
and a leading python3 is this interpreter. A group may name parts (subsets of its configurations,
`--part`) where all of them together would not fit one call; each part's records carry the
group name `GROUP:PART`, and the summary reads several parts' outputs together. Configurations named
`*_ref` run through a second build (--vitamin-ref: another staged vitamin with its
libvitamin_cuda.so beside it), so two builds are compared in the same call, interleaved.
vitamin_record writes each tenant's recorded profile (the `profile_out` key) under runs/;
*_profiled configurations size launches by the --profiles file (EVAL_PROFILES).

Outputs under --out: log.txt (a progress line per run), rounds/round-N.json (raw records, rewritten
after every run), results.json (meta + every run), runs/ (each tenant's result, stdout and stderr,
the daemon's and MPS's logs, the daemon's status snapshots and, for the group's `timeline_configs`,
its binding timeline with a digest of it).
"""
import argparse
import glob
import gzip
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import timeline_digest

HERE = os.path.dirname(os.path.abspath(__file__))

# name -> (MPS on, wrapper, daemon policy)
CONFIGS = {
    "alone": (False, "native", None),
    "alone_mps": (True, "native", None),
    "timeslice": (False, "native", None),
    "mps": (True, "native", None),
    "mps_pct": (True, "native", None),
    "vitamin_inproc": (True, "inproc", None),
    "vitamin_nomps": (False, "inproc", None),
    "vitamin_flat": (False, "inproc", None),
    "vitamin_ondemand": (False, "inproc", None),
    "vitamin_full_pool": (False, "inproc", None),
    "vitamin_static": (True, "daemon", "static"),
    "vitamin_exclusive": (True, "daemon", "exclusive"),
    "vitamin_throughput": (True, "daemon", "throughput"),
    "vitamin_tpot": (True, "daemon", "tpot"),
    "vitamin_chaos": (True, "daemon", "chaos"),
    # the same through a reference build (--vitamin-ref, EVAL_VITAMIN_REF): an A/B of two builds
    # side by side in one call
    "vitamin_throughput_ref": (True, "daemon", "throughput"),
    "vitamin_tpot_ref": (True, "daemon", "tpot"),
    # profiles (docs/config.md, `profile_out` and `profiles`): vitamin_record runs the scenario under
    # a Chaos daemon (launches spread over every node size) with each tenant writing the times it
    # observed; `vitamin profile --merge` makes one file of them, and vitamin_throughput_profiled
    # runs Throughput with that file (--profiles, EVAL_PROFILES) in the daemon and every tenant
    "vitamin_record": (True, "daemon", "chaos"),
    "vitamin_throughput_profiled": (True, "daemon", "throughput"),
}
REF_SUFFIX = "_ref"  # configurations run through the reference build
RECORD_CONFIG = "vitamin_record"  # each tenant writes <tag>-<tenant>.profile.<pid>.json in runs/
PROFILED_SUFFIX = "_profiled"  # configurations sized by the --profiles file
# in-process configurations with another pool layout (the `[advanced]` keys `pool` and
# `lane_streams`, `remainders`, docs/config.md); the others run the defaults (hierarchical, remainder
# nodes and lane streams created at first use)
POOL_LAYOUTS = {
    "vitamin_flat": {"pool": "flat"},
    "vitamin_ondemand": {"pool": "on-demand"},
    "vitamin_full_pool": {"pool": "hierarchical", "remainders": "start-up", "lane_streams": "start-up"},
}
MPS_SWITCH_S = 4.0  # estimate for starting or stopping the MPS control daemon
DAEMON_S = 3.0  # estimate for starting and stopping the vitamin daemon around one run
TEARDOWN_S = 3.0  # estimate for tenants' exit after the window
STATUS_EVERY_S = 3.0  # default period of the daemon status snapshots after the first (group key status_every_s)
STATUS_MAX = 40  # most periodic status snapshots per run (and most start-up ones)
STARTUP_STATUS_S = 10.0  # default period of the daemon status snapshots while a tenant is not yet ready (group key startup_status_s)
TIMELINE_ENV = "EVAL_TIMELINE_CONFIGS"  # comma-separated; replaces the group's timeline_configs when set
TIMELINE_SPANS = 600000  # the daemon's --timeline-spans for the timeline configurations
TIMELINE_WAIT_S = 5.0  # how long to wait for the timeline file after the daemon stopped
TIMELINE_GZ_MAX = 7 * 1000 * 1000  # a compressed timeline larger than this (bytes) is not kept (two fit one returned file)
TIMELINE_S = 10.0  # estimate for digesting and compressing one run's timeline


class GroupError(ValueError):
    """The group file is malformed."""


class Interrupted(Exception):
    """SIGTERM or SIGINT reached the harness."""


def _on_signal(signum, _frame):
    raise Interrupted(f"signal {signum}")


def load_group(path):
    try:
        with open(path) as f:
            g = json.load(f)
    except (OSError, ValueError) as e:
        raise GroupError(f"cannot read group {path}: {e}") from e
    if "tenant_defs" in g:  # shared tenant definitions, relative to the group file
        defs_path = os.path.join(os.path.dirname(os.path.abspath(path)), g["tenant_defs"])
        try:
            with open(defs_path) as f:
                defs = json.load(f)
        except (OSError, ValueError) as e:
            raise GroupError(f"cannot read tenant definitions {defs_path}: {e}") from e
        defs.update(g.get("tenants", {}))
        g["tenants"] = defs
    for key in ("name", "kind", "tenants", "scenarios", "configs"):
        if key not in g:
            raise GroupError(f"group {path}: missing key {key!r}")
    g.setdefault("rounds", 3)
    g.setdefault("seconds", 10)
    g.setdefault("budget_s", 540)
    g.setdefault("grace_s", 30)
    g.setdefault("alone", True)
    g.setdefault("alone_mps", False)
    g.setdefault("status_every_s", STATUS_EVERY_S)
    g.setdefault("startup_status_s", STARTUP_STATUS_S)
    g.setdefault("timeline_configs", [])
    for c in g["configs"]:
        if c not in CONFIGS or c.startswith("alone"):
            raise GroupError(f"group {g['name']}: unknown configuration {c!r} (known: {', '.join(CONFIGS)})")
    for key in ("status_every_s", "startup_status_s"):
        s = g[key]
        if isinstance(s, bool) or not isinstance(s, (int, float)) or s < 0:
            raise GroupError(f"group {g['name']}: {key} must be a number >= 0 (0: no such snapshots)")
    check_timeline_configs(g["timeline_configs"])
    g["tenants"] = {k: v for k, v in g["tenants"].items() if not k.startswith("_")}  # "_comment"
    for name, t in g["tenants"].items():
        if not isinstance(t, dict) or not isinstance(t.get("cmd"), list) or not t["cmd"]:
            raise GroupError(f"tenant {name}: 'cmd' must be a non-empty list")
        t.setdefault("startup_s", 15)
        t.setdefault("role", "train")
        t.setdefault("latency", False)
        for key in ("tpot_from_alone", "ttft_from_alone"):
            fa = t.get(key)
            if fa is not None and not (isinstance(fa, dict) and isinstance(fa.get("field"), str)
                                       and isinstance(fa.get("factor"), (int, float)) and fa["factor"] > 0):
                raise GroupError(f"tenant {name}: {key!r} must be {{\"field\": NAME, \"factor\": X > 0}}")
    for part, cs in g.get("parts", {}).items():
        for c in cs:
            if c not in g["configs"]:
                raise GroupError(f"group {g['name']}: part {part} names {c!r}, not among its configurations")
    seen = set()
    for s in g["scenarios"]:
        if s.get("name") in seen or not s.get("name"):
            raise GroupError(f"scenario names must be unique and non-empty: {s.get('name')!r}")
        seen.add(s["name"])
        if not s.get("tenants"):
            raise GroupError(f"scenario {s['name']}: no tenants")
        if len(set(s["tenants"])) != len(s["tenants"]):
            raise GroupError(f"scenario {s['name']}: a tenant appears twice (define a second tenant name)")
        for t in s["tenants"]:
            if t not in g["tenants"]:
                raise GroupError(f"scenario {s['name']}: unknown tenant {t!r}")
        for t, pct in s.get("mps_pct", {}).items():
            if t not in s["tenants"] or not (0 < pct <= 100):
                raise GroupError(f"scenario {s['name']}: bad mps_pct entry {t}={pct}")
    if int(g["rounds"]) < 1 or float(g["seconds"]) <= 0:
        raise GroupError("rounds must be >= 1 and seconds > 0")
    return g


def check_timeline_configs(configs):
    """Raises GroupError unless `configs` is a list of vitamin daemon configurations."""
    if not isinstance(configs, list):
        raise GroupError("timeline_configs must be a list of configuration names")
    for c in configs:
        if c not in CONFIGS or CONFIGS[c][2] is None:
            daemon = [k for k, v in CONFIGS.items() if v[2]]
            raise GroupError(f"timeline_configs: {c!r} is not a vitamin daemon configuration (those: {', '.join(daemon)})")


def plan(g):
    """Every run of the group in order: (round, config, scenario name, tenant names)."""
    used = []
    for s in g["scenarios"]:
        for t in s["tenants"]:
            if t not in used:
                used.append(t)
    configs = list(g["configs"])
    runs = []
    for r in range(1, int(g["rounds"]) + 1):
        if g["alone"]:
            for t in used:
                runs.append((r, "alone", "alone:" + t, [t]))
        if g["alone_mps"]:  # each tenant alone under MPS too: a second normalization
            for t in used:
                runs.append((r, "alone_mps", "alone_mps:" + t, [t]))
        k = (r - 1) % len(configs)
        for c in configs[k:] + configs[:k]:
            for s in g["scenarios"]:
                runs.append((r, c, s["name"], list(s["tenants"])))
    return runs


def run_estimate(g, config, tenants):
    """Seconds one run is expected to take (start-up of the slowest tenant, window, teardown)."""
    est = max(float(g["tenants"][t]["startup_s"]) for t in tenants) + float(g["seconds"]) + TEARDOWN_S
    if CONFIGS[config][1] == "daemon":
        est += DAEMON_S
    if config in g.get("timeline_configs", ()):
        est += TIMELINE_S
    return est


def run_timeout(g, tenants):
    return 1.5 * max(float(g["tenants"][t]["startup_s"]) for t in tenants) + float(g["seconds"]) + float(g["grace_s"])


def estimate(g, runs):
    total, mps = 0.0, False
    for _, c, _, ts in runs:
        if CONFIGS[c][0] != mps:
            total += MPS_SWITCH_S
            mps = CONFIGS[c][0]
        total += run_estimate(g, c, ts)
    return total + (MPS_SWITCH_S if mps else 0.0)


class Log:
    def __init__(self, path):
        self.f = open(path, "a")
        self.t0 = time.monotonic()

    def __call__(self, msg):
        line = f"[{time.strftime('%H:%M:%S')} +{time.monotonic() - self.t0:5.0f}s] {msg}"
        print(line, flush=True)
        self.f.write(line + "\n")
        self.f.flush()


def _kill_group(p, grace=3.0):
    """SIGTERM the process group of `p`, then SIGKILL after `grace` s; reaps `p`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(p.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            p.wait(timeout=grace)
            break
        except subprocess.TimeoutExpired:
            continue
    # children left in the group after the leader exited
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


class Systems:
    """Owns the MPS control daemon and the vitamin daemon; `close()` stops whatever runs."""

    def __init__(self, work, log, vitamin, mps_control="nvidia-cuda-mps-control", vitamin_ref=None, profiles=None):
        self.log = log
        self.vitamin = vitamin
        self.vitamin_ref = vitamin_ref
        self.profiles = profiles  # the profile file of *_profiled configurations (absolute)
        self.daemon_bin = vitamin  # the build that started the running daemon (stops it too)
        self.mps_control = mps_control
        self.pipe = os.path.join(work, "mps-pipe")
        self.mps_log = os.path.join(work, "mps-log")
        self.native_pipe = os.path.join(work, "no-mps")  # empty: clients find no MPS server there
        for d in (self.pipe, self.mps_log, self.native_pipe):
            os.makedirs(d, exist_ok=True)
        self.sock = os.path.join(work, "vitamin.sock")
        self.pid_file = os.path.join(work, "vitamin-daemon.pid")
        self.mps_on = False
        self.daemon = None  # (policy, log path)

    def binary(self, config):
        """The vitamin build a configuration runs: the reference build for `*_ref` ones."""
        return self.vitamin_ref if config.endswith(REF_SUFFIX) else self.vitamin

    def env(self, mps):
        e = dict(os.environ)
        e.pop("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", None)
        e["CUDA_MPS_PIPE_DIRECTORY"] = self.pipe if mps else self.native_pipe
        e["CUDA_MPS_LOG_DIRECTORY"] = self.mps_log
        e.pop("VITAMIN_DAEMON", None)
        return e

    def _control(self):
        return os.path.join(self.pipe, "control")

    def _mps_pids(self):
        """Pids of the MPS control daemon and servers that serve this harness's pipe directory."""
        want = f"CUDA_MPS_PIPE_DIRECTORY={self.pipe}".encode()
        pids = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/comm", "rb") as f:
                    if not f.read().startswith(b"nvidia-cuda-mps"):
                        continue
                with open(f"/proc/{d}/environ", "rb") as f:
                    if want in f.read().split(b"\0"):
                        pids.append(int(d))
            except OSError:
                continue
        return pids

    def set_mps(self, on):
        if on == self.mps_on:
            return True
        return self.start_mps() if on else self.stop_mps()

    def start_mps(self):
        try:
            subprocess.run([self.mps_control, "-d"], env=self.env(True), timeout=20, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        except (OSError, subprocess.SubprocessError) as e:
            self.log(f"MPS start FAILED: {e}")
            return False
        self.mps_on = True  # from here on close() stops it, whatever happens next
        deadline = time.monotonic() + 15
        while not os.path.exists(self._control()):
            if time.monotonic() > deadline:
                self.log(f"MPS start FAILED: no {self._control()} after 15 s")
                return False
            time.sleep(0.05)
        self.log("MPS control daemon on")
        return True

    def stop_mps(self):
        if not self.mps_on:
            return True
        try:
            subprocess.run([self.mps_control], input=b"quit\n", env=self.env(True), timeout=20,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError) as e:
            self.log(f"MPS quit failed: {e}")
        # The real control daemon leaves its named pipe behind when it quits (seen on the H200:
        # docs/results/eval.md), so "gone" is: the pipe removed, or no MPS process serving this
        # pipe directory left.
        def gone():
            return not os.path.exists(self._control()) or not self._mps_pids()
        deadline = time.monotonic() + 15
        while not gone() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not gone():
            for pid in self._mps_pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                    self.log(f"MPS process {pid} did not quit: killed")
                except OSError:
                    pass
            time.sleep(0.5)
        ok = gone()
        if ok and os.path.exists(self._control()):
            try:
                os.unlink(self._control())  # a stale pipe would satisfy the next start's check
            except OSError:
                pass
        if not ok:
            self.log("MPS control daemon did not quit")
        self.mps_on = False
        self.log("MPS control daemon off")
        return ok

    def start_daemon(self, policy, log_file, binary=None, timeline=None, profiles=None):
        """Starts the daemon; `timeline`: where it writes its binding timeline when it stops;
        `profiles`: the profile file its policy sizes launches by."""
        self.daemon_bin = binary or self.vitamin
        cmd = [self.daemon_bin, "daemon", "--socket", self.sock, "--policy", policy, "--mps", "check", "--detach",
               "--pid-file", self.pid_file, "--log-file", log_file]
        if timeline:
            cmd += ["--timeline", timeline, "--timeline-spans", str(TIMELINE_SPANS)]
        if profiles:
            cmd += ["--profiles", profiles]
        self.daemon = (policy, log_file)  # close() stops it even if the start half-failed
        env = self.env(self.mps_on)
        env.setdefault("VITAMIN_LOG", "info")
        try:
            r = subprocess.run(cmd, env=env, timeout=30, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        except (OSError, subprocess.SubprocessError) as e:
            self.log(f"vitamin daemon start FAILED: {e}")
            return False
        if r.returncode != 0:
            self.log(f"vitamin daemon start FAILED (exit {r.returncode}): {r.stdout.decode(errors='replace')[-400:]}")
            return False
        return True

    def daemon_status(self, path):
        try:
            with open(path, "wb") as f:
                subprocess.run([self.daemon_bin, "daemon", "status", "--socket", self.sock, "--json"], timeout=10,
                               stdout=f, stderr=subprocess.STDOUT, env=self.env(self.mps_on))
        except (OSError, subprocess.SubprocessError):
            pass

    def stop_daemon(self):
        if self.daemon is None:
            return
        try:
            subprocess.run([self.daemon_bin, "daemon", "stop", "--socket", self.sock], timeout=15,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=self.env(self.mps_on))
        except (OSError, subprocess.SubprocessError) as e:
            self.log(f"vitamin daemon stop failed: {e}")
        try:
            pid = int(open(self.pid_file).read().split()[0])
        except (OSError, ValueError, IndexError):
            pid = None
        if pid is not None:
            deadline = time.monotonic() + 5
            while _pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if _pid_alive(pid):
                self.log(f"vitamin daemon {pid} still alive after stop: killed")
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for p in (self.pid_file, self.sock):
            try:
                os.unlink(p)
            except OSError:
                pass
        self.daemon = None

    def close(self):
        self.stop_daemon()
        self.stop_mps()


def tenant_command(g, config, name, systems, tpot_ms=None, census=None):
    """The tenant's command line under `config`; `census`: where `vitamin run` writes the main
    process's census at exit (vitamin configurations only)."""
    t = g["tenants"][name]
    cmd = [os.path.expandvars(a) for a in t["cmd"]]
    if cmd[0] in ("python3", "python"):
        cmd[0] = sys.executable
    wrap = CONFIGS[config][1]
    extra = ["--census", census] if census and wrap != "native" else []
    vitamin = systems.binary(config)
    if wrap == "inproc":
        return [vitamin, "run", "--no-daemon"] + extra + ["--"] + cmd
    if wrap == "daemon":
        pre = [vitamin, "run", "--daemon", systems.sock] + extra
        if t["latency"]:
            pre += ["--class", "latency"]
            tpot = tpot_ms if tpot_ms is not None else t.get("tpot_ms")
            if tpot:
                pre += ["--tpot-ms", f"{tpot:g}"]
        return pre + ["--"] + cmd
    return cmd


def _tail(path, n=600):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - n))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def headline(res):
    if not res:
        return "no result"
    if "p99_ms" in res and res.get("role") == "latency":
        return f"p50 {res.get('p50_ms', 0):.1f} / p99 {res['p99_ms']:.1f} ms"
    if "tpot_violation_pct" in res:
        return f"TPOT viol. {res['tpot_violation_pct']:.1f}%, TTFT viol. {res.get('ttft_violation_pct', 0):.1f}%"
    if "digest" in res:
        return "digest " + str(res["digest"])[:12]
    if "throughput" in res:
        return f"{res['throughput']:.4g} {res.get('unit', '/s')}"
    return "result"


def pool_digest(census_path):
    """The pool figures of a vitamin run's census (None without one): realization time, nodes,
    the layout and, for an on-demand pool, the partitions created on the dispatch path. The census
    of the process that bound work is taken: `census_path` itself, else the one a child wrote
    beside it (`census_path.PID`, as when the tenant's main process is a wrapper that binds nothing)."""
    found = sorted(glob.glob(glob.escape(census_path) + ".*"))
    for path in [census_path] + [f for f in found if f.rsplit(".", 1)[-1].isdigit()]:
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            continue
        b = doc.get("bind") if isinstance(doc, dict) else None
        if not isinstance(b, dict) or "realize_ms" not in b:
            continue
        pool = (b.get("dispatcher") or {}).get("pool") or {}
        nodes = pool.get("nodes", b.get("nodes"))
        if isinstance(nodes, list):
            nodes = len(nodes)
        out = {"realize_ms": b.get("realize_ms"), "nodes": nodes, "layout": pool.get("layout"),
               "created": pool.get("created"), "on_demand": pool.get("on_demand")}
        daemon = (b.get("dispatcher") or {}).get("daemon")
        if isinstance(daemon, dict) and daemon.get("refused_bindings") is not None:
            # bindings the daemon gave that this process's partitions refused (the launch cannot
            # run unchanged there: a cluster shape the node does not place)
            out["refused_bindings"] = daemon.get("refused_bindings")
        return out
    return None


def standing_digest(rundir, tag, names=None):
    """The daemon's view of a run from its status snapshots, in the order they were taken (the
    `<tag>-status-times.txt` lines; start-up snapshots left out): per snapshot, the standing node
    of each latency-critical client as units and the first letter of its state (`124r`: reserved,
    `l` leased, `d` draining, `i` idle; `-`: none), joined by `/` where there are several; and,
    over the snapshots, the unit sets that refused each client's cluster launches, by tenant
    (`names`: pid -> tenant; else the client's name and id). None without periodic snapshots."""
    try:
        with open(os.path.join(rundir, tag + "-status-times.txt")) as f:
            keys = [ln.split()[0] for ln in f if ln.strip() and not ln.startswith("start-")]
    except OSError:
        return None
    seq, refused = [], {}
    for k in keys:
        path = os.path.join(rundir, f"{tag}-status.json" if k == "0" else f"{tag}-status-{k}.json")
        try:
            with open(path) as f:
                st = json.load(f)
        except (OSError, ValueError):
            continue
        here = []
        for c in st.get("clients") or []:
            if str(c.get("class", "")).startswith("latency"):
                m = re.match(r"#\d+ \((\d+) units\) (\w)", c.get("standing") or "")
                here.append(f"{m.group(1)}{m.group(2)}" if m else "-")
            for u in c.get("cluster_refused") or []:
                name = (names or {}).get(c.get("pid")) or f"{c.get('name', '?')} {c.get('id', '?')}"
                if u not in refused.setdefault(name, []):
                    refused[name].append(u)
        if here:
            seq.append("/".join(here))
    if not seq and not refused:
        return None
    return {"standing": seq, "cluster_refused": refused}


def write_layout_config(path, keys, top=None):
    """A configuration file that sets the top-level `top` and the `[advanced]` `keys` (read through
    VITAMIN_CONFIG)."""
    with open(path, "w") as f:
        f.write("".join(f'{k} = {json.dumps(v)}\n' for k, v in (top or {}).items())
                + "[advanced]\n" + "".join(f'{k} = "{v}"\n' for k, v in keys.items()))
    return path


def tenant_file_keys(config, tag, name, rundir, systems):
    """The top-level configuration keys tenant `name` gets under `config`: where to write its
    recorded profile (vitamin_record; with strict readiness, so that every launch finds its lane
    empty and is timed), or the profile file to size launches by (*_profiled)."""
    if config == RECORD_CONFIG:
        return {"profile_out": os.path.abspath(os.path.join(rundir, f"{tag}-{name}.profile.%p.json")),
                "lane_continuation": "0"}
    if config.endswith(PROFILED_SUFFIX):
        return {"profiles": systems.profiles}
    return {}


SLO_ENV = {"tpot": "EVAL_TPOT_SLO_MS", "ttft": "EVAL_TTFT_SLO_MS"}


def derived_slos(g, r, tenants, alone):
    """SLO targets taken from this round's alone runs: for each tenant with `tpot_from_alone` or
    `ttft_from_alone` ({"field": F, "factor": X}), X times field F of its alone result in round `r`
    (`alone` maps (round, tenant) to that result). Returns {kind: {tenant: {"ms", "source"}}} for
    kind tpot / ttft; a tenant whose alone run gave no such field keeps its fixed `tpot_ms` /
    `ttft_ms` (none for TTFT), and the record says so."""
    out = {}
    for kind in SLO_ENV:
        for name in tenants:
            fa = g["tenants"][name].get(kind + "_from_alone")
            if not fa:
                continue
            v = (alone.get((r, name)) or {}).get(fa["field"])
            if isinstance(v, (int, float)) and v > 0:
                d = {"ms": round(float(fa["factor"]) * v, 3),
                     "source": f"{fa['factor']:g} x alone {fa['field']} {v:.3f} (round {r})"}
            else:
                d = {"ms": g["tenants"][name].get(kind + "_ms"), "source": f"fixed: no alone {fa['field']} in round {r}"}
            out.setdefault(kind, {})[name] = d
    return out


def run_one(g, r, config, scenario, tenants, systems, rundir, log, hard_deadline=None, slos=None):
    """Runs one scenario under one configuration; returns its record. No tenant outlives
    `hard_deadline` (time.monotonic(); the end of the call's budget). `slos`: derived targets
    (derived_slos): a tenant's TPOT target is its `--tpot-ms` under vitamin and its
    `EVAL_TPOT_SLO_MS`; its TTFT target its `EVAL_TTFT_SLO_MS`."""
    slos = slos or {}
    tpot = slos.get("tpot", {})
    tag = f"r{r}-{config}-{scenario.replace(':', '_').replace('+', '_')}"
    scen = next((s for s in g["scenarios"] if s["name"] == scenario), {})
    rec = {"round": r, "config": config, "scenario": scenario, "tenants": {}, "ok": False}
    if slos:
        rec["slo_targets"] = slos
    t_begin = time.monotonic()
    mps, _, policy = CONFIGS[config]
    if not systems.set_mps(mps):
        rec["error"] = "MPS could not be switched " + ("on" if mps else "off")
        return rec
    timeline = None
    if policy and config in g.get("timeline_configs", ()):
        timeline = os.path.abspath(os.path.join(rundir, tag + "-timeline.json"))
    profiles = systems.profiles if config.endswith(PROFILED_SUFFIX) else None
    if policy and not systems.start_daemon(policy, os.path.join(rundir, tag + "-daemon.log"), systems.binary(config),
                                           timeline, profiles):
        systems.stop_daemon()
        rec["error"] = f"vitamin daemon ({policy}) did not start"
        return rec
    barrier = tempfile.mkdtemp(prefix="barrier-", dir=systems_dir(systems))
    procs = {}
    try:
        for name in tenants:
            env = systems.env(mps)
            env.update({
                "EVAL_NAME": name,
                "EVAL_OUT": os.path.join(rundir, f"{tag}-{name}.json"),
                "EVAL_BARRIER": barrier,
                "EVAL_PEERS": str(len(tenants)),
                "EVAL_SECONDS": str(g["seconds"]),
                "EVAL_BARRIER_TIMEOUT": str(run_timeout(g, tenants)),
                "EVAL_SEED": str(r),
                "EVAL_CONFIG": config,
                "PYTHONUNBUFFERED": "1",
            })
            for kind, var in SLO_ENV.items():
                ms = slos.get(kind, {}).get(name, {}).get("ms")
                if ms:
                    env[var] = f"{ms:g}"
            top = tenant_file_keys(config, tag, name, rundir, systems)
            if config in POOL_LAYOUTS or top:
                env["VITAMIN_CONFIG"] = write_layout_config(
                    os.path.join(rundir, f"{tag}-{name}-config.toml"), POOL_LAYOUTS.get(config, {}), top)
            if config == "mps_pct":
                share = scen.get("mps_pct", {}).get(name, max(1, 100 // len(tenants)))
                env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(share)
            out = open(os.path.join(rundir, f"{tag}-{name}.out"), "wb")
            err = open(os.path.join(rundir, f"{tag}-{name}.err"), "wb")
            try:
                census = os.path.join(rundir, f"{tag}-{name}.census.json")
                p = subprocess.Popen(tenant_command(g, config, name, systems, tpot.get(name, {}).get("ms"), census),
                                     env=env, cwd=HERE,
                                     stdout=out, stderr=err, start_new_session=True)
            except OSError as e:
                rec["tenants"][name] = {"rc": None, "error": f"cannot start: {e}"}
                continue
            finally:
                out.close()
                err.close()
            procs[name] = (p, time.monotonic())
        deadline = time.monotonic() + run_timeout(g, tenants)
        if hard_deadline is not None:
            deadline = min(deadline, hard_deadline)
        status_taken = policy is None
        # after the first status snapshot, one every `every` s on a grid from when all were ready
        # (points already passed are skipped), at most STATUS_MAX
        every = float(g.get("status_every_s", STATUS_EVERY_S))
        t_ready = next_status = None
        periodic = 0
        # before every tenant is ready, one every `startup_every` s (a start-up that hangs)
        t_spawn, starting = time.monotonic(), 0
        startup_every = float(g.get("startup_status_s", STARTUP_STATUS_S))
        abort = None
        while any(p.poll() is None for p, _ in procs.values()):
            failed = [n for n, (p, _) in procs.items() if p.poll() not in (None, 0)]
            if failed:  # its peers would wait at the barrier in vain: stop the run now
                abort = f"{failed[0]} exited {procs[failed[0]][0].returncode}"
                break
            if not status_taken and all(
                    os.path.exists(os.path.join(barrier, n + ".ready")) for n in procs):
                t_ready = time.monotonic()
                time.sleep(min(1.0, float(g["seconds"]) / 2))
                status_snapshot(systems, rundir, tag, 0, t_ready, fresh=starting == 0)
                status_taken = True
                next_status = _next_on_grid(t_ready, every)
            elif (not status_taken and startup_every > 0 and starting < STATUS_MAX
                  and time.monotonic() - t_spawn >= startup_every * (starting + 1)):
                starting += 1
                status_snapshot(systems, rundir, tag, f"start-{starting}", t_spawn, fresh=starting == 1)
            elif next_status is not None and periodic < STATUS_MAX and time.monotonic() >= next_status:
                periodic += 1
                status_snapshot(systems, rundir, tag, periodic, t_ready)
                next_status = _next_on_grid(t_ready, every)
            if time.monotonic() > deadline:
                break
            time.sleep(0.02)
        for name, (p, t_spawn) in procs.items():
            running = p.poll() is None
            timed_out = running and abort is None
            if running:
                _kill_group(p)
            else:
                _kill_group(p, grace=0.5)  # leftovers of the tenant's group, if any
            ready = os.path.join(barrier, name + ".ready")
            startup = None
            if os.path.exists(ready):
                startup = os.path.getmtime(ready) - (time.time() - (time.monotonic() - t_spawn))
            res_path = os.path.join(rundir, f"{tag}-{name}.json")
            try:
                with open(res_path) as f:
                    result = json.load(f)
            except (OSError, ValueError):
                result = None
            t = {"rc": p.returncode, "timed_out": timed_out, "startup_s": startup, "result": result}
            pool = pool_digest(os.path.join(rundir, f"{tag}-{name}.census.json"))
            if pool is not None:
                t["pool"] = pool
            if running and abort:
                t["killed"] = f"stopped because {abort}"
            if p.returncode != 0 or result is None:
                t["stderr_tail"] = _tail(os.path.join(rundir, f"{tag}-{name}.err"))
            rec["tenants"][name] = t
    finally:
        for p, _ in procs.values():
            if p.poll() is None:
                _kill_group(p)
        shutil.rmtree(barrier, ignore_errors=True)
        if policy:
            systems.stop_daemon()
    if policy:
        pids = {t["result"]["pid"]: n for n, t in rec["tenants"].items() if (t.get("result") or {}).get("pid")}
        view = standing_digest(rundir, tag, pids)
        if view:
            rec["daemon_view"] = view
    if timeline:
        name = finish_timeline(timeline, os.path.join(rundir, tag + "-timeline-digest.json"), log)
        if name:
            rec["timeline_digest"] = name
    rec["wall_s"] = time.monotonic() - t_begin
    rec["ok"] = len(rec["tenants"]) == len(tenants) and all(
        t.get("rc") == 0 and t.get("result") is not None for t in rec["tenants"].values())
    return rec


def _next_on_grid(t0, every):
    """The first point of the grid t0 + k * every (k >= 1) after now; None for every <= 0."""
    if every <= 0:
        return None
    return t0 + every * (int((time.monotonic() - t0) / every) + 1)


def status_snapshot(systems, rundir, tag, k, t_ready, fresh=False):
    """Snapshot `k` of the daemon's status: k 0 to `<tag>-status.json`, later ones to
    `<tag>-status-<k>.json` (k "start-<j>": before every tenant was ready); a line
    "<k> <s since t_ready> <epoch s>" to `<tag>-status-times.txt` (begun anew when `fresh`),
    taken as the request goes out; t_ready is when all tenants were ready, for the start-up
    snapshots when they were started."""
    since, epoch = time.monotonic() - t_ready, time.time()
    with open(os.path.join(rundir, tag + "-status-times.txt"), "w" if fresh else "a") as f:
        f.write(f"{k} {since:.3f} {epoch:.6f}\n")
    systems.daemon_status(os.path.join(rundir, f"{tag}-status.json" if k == 0 else f"{tag}-status-{k}.json"))


def finish_timeline(path, digest_path, log):
    """After the daemon stopped: waits up to TIMELINE_WAIT_S for its timeline `path`, writes its
    digest (timeline_digest.py) to `digest_path`, compresses it to `path`.gz and removes `path`;
    a compressed file over TIMELINE_GZ_MAX is removed too and its size noted in the digest
    (`timeline_gz_dropped`). Returns the digest's file name, or None without a timeline."""
    deadline = time.monotonic() + TIMELINE_WAIT_S
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            log(f"no binding timeline {os.path.basename(path)} after the daemon stopped")
            return None
        time.sleep(0.05)
    size = os.path.getsize(path)
    try:
        d = timeline_digest.digest(timeline_digest.load(path))
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
        d = {"error": f"{type(e).__name__}: {e}"}
    d["timeline_bytes"] = size
    gz = path + ".gz"
    try:
        with open(path, "rb") as src, gzip.open(gz, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.unlink(path)
        gz_size = os.path.getsize(gz)
        if gz_size > TIMELINE_GZ_MAX:
            os.unlink(gz)
            d["timeline_gz_dropped"] = gz_size
        else:
            d["timeline_gz"] = os.path.basename(gz)
    except OSError as e:
        d["gzip_error"] = str(e)
    with open(digest_path, "w") as f:
        json.dump(d, f, indent=1)
    kept = f"{os.path.basename(gz)} kept" if "timeline_gz" in d else "compressed timeline not kept"
    log(f"binding timeline: {d.get('spans', 0)} spans, {size / 1e6:.1f} MB; digest {os.path.basename(digest_path)}, {kept}")
    return os.path.basename(digest_path)


def systems_dir(systems):
    return os.path.dirname(systems.sock)


def _git_commit():
    for p in (os.path.join(HERE, "COMMIT"),):
        if os.path.exists(p):
            return open(p).read().strip()
    try:
        return subprocess.run(["git", "-C", HERE, "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _build_commit(binary):
    """The COMMIT file staged beside a vitamin build (stage.sh writes one), if any."""
    if not binary:
        return None
    p = os.path.join(os.path.dirname(binary), "COMMIT")
    try:
        return open(p).read().strip() or None
    except OSError:
        return None


def _profiles_meta(path):
    """The profile file of *_profiled runs as the record names it: path, SHA-256, configurations."""
    if not path:
        return None
    with open(path, "rb") as f:
        data = f.read()
    try:
        n = len(json.loads(data).get("entries", {}))
    except ValueError:
        n = None
    return {"path": path, "sha256": hashlib.sha256(data).hexdigest(), "configurations": n}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("group")
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--seconds", type=float)
    ap.add_argument("--part", help="one of the group's parts (a named list of configurations)")
    ap.add_argument("--configs", help="comma-separated subset/order of the group's configurations")
    ap.add_argument("--scenarios", help="comma-separated subset of the group's scenarios")
    ap.add_argument("--budget", type=float, help="seconds one call may take (default: the group's budget_s)")
    ap.add_argument("--alone-mps", type=int, choices=[0, 1],
                    help="1: each round also runs every tenant alone under MPS (a second normalization)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and the estimate, run nothing")
    ap.add_argument("--vitamin", default=os.environ.get("EVAL_VITAMIN", os.path.join(HERE, "vitamin")))
    ap.add_argument("--vitamin-ref", default=os.environ.get("EVAL_VITAMIN_REF"),
                    help="the reference build the *_ref configurations run (an A/B of two builds in one call)")
    ap.add_argument("--profiles", default=os.environ.get("EVAL_PROFILES"),
                    help="the profile file the *_profiled configurations size launches by (vitamin profile --merge "
                         "of a vitamin_record run's files)")
    ap.add_argument("--mps-control", default=os.environ.get("EVAL_MPS_CONTROL", "nvidia-cuda-mps-control"))
    a = ap.parse_args(argv)
    try:
        g = load_group(a.group)
        if a.rounds is not None:
            g["rounds"] = a.rounds
        if a.seconds is not None:
            g["seconds"] = a.seconds
        if a.part:
            parts = g.get("parts", {})
            if a.part not in parts:
                raise GroupError(f"group {g['name']} has no part {a.part!r} (parts: {', '.join(parts) or 'none'})")
            g["configs"] = list(parts[a.part])
            g["name"] = f"{g['name']}:{a.part}"
        if a.configs:
            g["configs"] = a.configs.split(",")
        if a.scenarios:
            want = a.scenarios.split(",")
            g["scenarios"] = [s for s in g["scenarios"] if s["name"] in want]
            if len(g["scenarios"]) != len(want):
                raise GroupError(f"unknown scenario among {want}")
        if a.alone_mps is not None:
            g["alone_mps"] = bool(a.alone_mps)
        if a.budget is not None:
            g["budget_s"] = a.budget
        if TIMELINE_ENV in os.environ:
            g["timeline_configs"] = [c.strip() for c in os.environ[TIMELINE_ENV].split(",") if c.strip()]
            check_timeline_configs(g["timeline_configs"])
        for c in g["configs"]:
            if c not in CONFIGS or c.startswith("alone"):
                raise GroupError(f"unknown configuration {c!r} (known: {', '.join(CONFIGS)})")
        if not g["configs"] or not g["scenarios"]:
            raise GroupError("nothing to run: no configuration or no scenario left")
        if int(g["rounds"]) < 3:
            print(f"note: {g['rounds']} round(s); the evaluation asks for at least 3", file=sys.stderr)
    except GroupError as e:
        print(f"harness: {e}", file=sys.stderr)
        return 2
    runs = plan(g)
    est = estimate(g, runs)
    budget = float(g["budget_s"])
    print(f"group {g['name']}: {len(runs)} runs ({g['rounds']} rounds x ({len(g['configs'])} configurations x "
          f"{len(g['scenarios'])} scenarios + alone runs)), window {g['seconds']} s; estimate {est:.0f} s, "
          f"budget {budget:.0f} s")
    timeline = [c for c in g["timeline_configs"] if c in g["configs"]]
    if timeline:
        print(f"binding timeline (--timeline, {TIMELINE_SPANS} spans) under {', '.join(timeline)}")
    if est > budget:
        print(f"harness: group {g['name']} would not fit one device call: estimate {est:.0f} s > budget "
              f"{budget:.0f} s. Cut rounds (--rounds), the window (--seconds), configurations (--configs) or "
              f"scenarios (--scenarios), or split the group"
              + (f"; its parts: {', '.join(g['parts'])} (--part)" if g.get("parts") and not a.part else "")
              + ".", file=sys.stderr)
        return 2
    if a.dry_run:
        for r, c, s, ts in runs:
            print(f"  r{r} {c:<20} {s:<28} ~{run_estimate(g, c, ts):.0f} s")
        return 0
    if any(CONFIGS[c][1] != "native" for c in g["configs"]) and not os.access(a.vitamin, os.X_OK):
        print(f"harness: vitamin binary {a.vitamin} not found or not executable (--vitamin, EVAL_VITAMIN)",
              file=sys.stderr)
        return 2
    if any(c.endswith(REF_SUFFIX) for c in g["configs"]) and not (a.vitamin_ref and os.access(a.vitamin_ref, os.X_OK)):
        print(f"harness: configurations {', '.join(c for c in g['configs'] if c.endswith(REF_SUFFIX))} need the "
              f"reference build (--vitamin-ref, EVAL_VITAMIN_REF): {a.vitamin_ref or 'not given'}", file=sys.stderr)
        return 2
    profiled = [c for c in g["configs"] if c.endswith(PROFILED_SUFFIX)]
    if profiled and not (a.profiles and os.path.isfile(a.profiles)):
        print(f"harness: configurations {', '.join(profiled)} need a profile file (--profiles, EVAL_PROFILES): "
              f"{a.profiles or 'not given'}", file=sys.stderr)
        return 2
    os.makedirs(os.path.join(a.out, "rounds"), exist_ok=True)
    rundir = os.path.join(a.out, "runs")
    os.makedirs(rundir, exist_ok=True)
    log = Log(os.path.join(a.out, "log.txt"))
    work = tempfile.mkdtemp(prefix="eval-")
    systems = Systems(work, log, os.path.abspath(a.vitamin) if os.path.exists(a.vitamin) else a.vitamin,
                      a.mps_control, os.path.abspath(a.vitamin_ref) if a.vitamin_ref else None,
                      os.path.abspath(a.profiles) if profiled else None)
    meta = {"group": g["name"], "kind": g["kind"], "rounds": g["rounds"], "seconds": g["seconds"],
            "alone_mps": g["alone_mps"], "status_every_s": g["status_every_s"],
            "timeline_configs": g["timeline_configs"],
            "configs": g["configs"], "scenarios": g["scenarios"],
            "tenants": {k: {"cmd": v["cmd"], "role": v["role"], "latency": v["latency"],
                            "tpot_ms": v.get("tpot_ms"), "tpot_from_alone": v.get("tpot_from_alone"),
                            "ttft_from_alone": v.get("ttft_from_alone")} for k, v in g["tenants"].items()},
            "estimate_s": est, "budget_s": budget, "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
            "commit": _git_commit(), "host": os.uname().nodename,
            "builds": {"vitamin": _build_commit(systems.vitamin), "vitamin_ref": _build_commit(systems.vitamin_ref)},
            "profiles": _profiles_meta(systems.profiles)}
    records = []
    alone = {}  # (round, tenant) -> its alone result: derived TPOT targets
    old = {s: signal.signal(s, _on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    t0 = time.monotonic()
    rc = 0
    try:
        for i, (r, c, s, ts) in enumerate(runs, 1):
            left = budget - (time.monotonic() - t0)
            need = run_estimate(g, c, ts) + (MPS_SWITCH_S if CONFIGS[c][0] != systems.mps_on else 0.0)
            if need > left:
                rec = {"round": r, "config": c, "scenario": s, "tenants": {}, "ok": False,
                       "skipped": f"budget: needs ~{need:.0f} s, {left:.0f} s left"}
                log(f"r{r} {i}/{len(runs)} {c} {s}: SKIPPED ({rec['skipped']})")
            else:
                slos = derived_slos(g, r, ts, alone) if not c.startswith("alone") else {}
                for kind, per in slos.items():
                    for n, v in per.items():
                        log(f"r{r} {c} {s}: {n} {kind.upper()} target {v['ms']} ms ({v['source']})")
                rec = run_one(g, r, c, s, ts, systems, rundir, log, hard_deadline=t0 + budget, slos=slos)
                if c == "alone":
                    for n, t in rec["tenants"].items():
                        alone[(r, n)] = t.get("result")
                parts = []
                for n, t in rec["tenants"].items():
                    st = f", start-up {t['startup_s']:.1f} s" if t.get("startup_s") is not None else ""
                    bad = "" if t.get("rc") == 0 else f" [exit {t.get('rc')}{', timed out' if t.get('timed_out') else ''}]"
                    parts.append(f"{n} {headline(t.get('result'))}{st}{bad}")
                status = "ok" if rec["ok"] else "FAILED " + rec.get("error", "")
                log(f"r{r} {i}/{len(runs)} {c} {s}: {'; '.join(parts)} -> {status} ({rec.get('wall_s', 0):.1f} s)")
            rec["order"] = i
            records.append(rec)
            with open(os.path.join(a.out, "rounds", f"round-{r}.json"), "w") as f:
                json.dump({"meta": meta, "runs": [x for x in records if x["round"] == r]}, f, indent=1)
    except Interrupted as e:
        log(f"interrupted ({e}): cleaning up")
        rc = 130
    finally:
        systems.close()
        for sig, h in old.items():
            signal.signal(sig, h)
        if os.listdir(systems.mps_log):
            shutil.copytree(systems.mps_log, os.path.join(rundir, "mps-log"), dirs_exist_ok=True)
        shutil.rmtree(work, ignore_errors=True)
    meta["wall_s"] = time.monotonic() - t0
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump({"meta": meta, "runs": records}, f, indent=1)
    bad = [x for x in records if not x["ok"]]
    log(f"group {g['name']} done in {meta['wall_s']:.0f} s: {len(records) - len(bad)} of {len(records)} runs ok")
    return rc


if __name__ == "__main__":
    sys.exit(main())
