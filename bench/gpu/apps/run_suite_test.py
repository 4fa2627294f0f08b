"""Test of run_suite.sh's daemon pass without a GPU: the script and summary.py copied beside a stub
program, with fake `vitamin`, `nvidia-cuda-mps-control` and `nvidia-smi` that log their calls. Checks
that a daemon pass starts an MPS control daemon on its own pipe directory and a vitamin daemon on a
socket, runs every program with VITAMIN_DAEMON set to that socket (its own policy Throughput, for the
case the daemon goes away), then stops both; and that a daemon that does not start is a problem of
the suite, with no daemon runs."""
import json
import os
import shutil
import stat
import subprocess
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))

PROGRAM = """import json, os
open(os.environ["APP_OUT"], "w").write(json.dumps({"digests": {"a": "1"}, "env": {
    k: os.environ.get(k) for k in ("VITAMIN_DAEMON", "VITAMIN_POLICY", "CUDA_MPS_PIPE_DIRECTORY")}}))
"""


def executable(path, body):
    with open(path, "w") as f:
        f.write("#!/bin/bash\n" + body)
    os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)


class RunSuiteDaemonTest(unittest.TestCase):
    def run_suite(self, vitamin_rc, program=PROGRAM, mps_quit="", extra_env=None):
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d)
        for f in ("run_suite.sh", "summary.py"):
            shutil.copy(os.path.join(HERE, f), d)
        with open(os.path.join(d, "stub.py"), "w") as f:
            f.write(program)
        bin_, shim, calls = os.path.join(d, "bin"), os.path.join(d, "shim"), os.path.join(d, "calls.txt")
        os.makedirs(bin_)
        os.makedirs(shim)
        executable(os.path.join(bin_, "nvidia-cuda-mps-control"),
                   f'echo "mps $* pipe=$CUDA_MPS_PIPE_DIRECTORY" >> {calls}\n'
                   f'if [ -z "$1" ]; then cat > /dev/null; {mps_quit} fi\n')
        executable(os.path.join(bin_, "nvidia-smi"), "echo fake\n")
        # `vitamin daemon ...` logs; the start fails with vitamin_rc
        executable(os.path.join(shim, "vitamin"),
                   f'echo "vitamin $*" >> {calls}\n[ "$2" = --socket ] && exit {vitamin_rc}\nexit 0\n')
        # an empty file: LD_PRELOAD reports it and goes on, the stub needs no shim
        open(os.path.join(shim, "libvitamin_cuda.so"), "w").close()
        out = os.path.join(d, "out")
        env = dict(os.environ, PATH=bin_ + os.pathsep + os.environ["PATH"], SHIM=os.path.join(shim, "libvitamin_cuda.so"),
                   OUT=out, CHAOS="0", THROUGHPUT="0", DAEMON="1", JOBS="2", **(extra_env or {}))
        r = subprocess.run(["bash", os.path.join(d, "run_suite.sh"), "stub"], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout.decode(errors="replace")[-2000:])
        with open(calls) as f:
            lines = f.read().splitlines()
        with open(os.path.join(out, "summary.json")) as f:
            return lines, json.load(f), out

    def test_daemon_pass(self):
        lines, s, out = self.run_suite(0)
        start = [x for x in lines if x.startswith("vitamin daemon --socket")]
        self.assertEqual(len(start), 1, lines)
        sock = start[0].split()[3]
        self.assertIn("--policy chaos", start[0])
        mps = [x for x in lines if x.startswith("mps")]
        self.assertEqual(mps[0].split()[1], "-d")
        pipe = mps[0].split("pipe=")[1]
        self.assertEqual(os.path.dirname(pipe), os.path.dirname(sock))
        # started before the run, stopped after it: status, then stop, then MPS quit
        self.assertEqual(lines[-3:], [f"vitamin daemon status --socket {sock}", f"vitamin daemon stop --socket {sock}",
                                      f"mps  pipe={pipe}"])
        with open(os.path.join(out, "runs", "stub.daemon.1.json")) as f:
            env = json.load(f)["env"]
        self.assertEqual(env, {"VITAMIN_DAEMON": sock, "VITAMIN_POLICY": "throughput", "CUDA_MPS_PIPE_DIRECTORY": pipe})
        with open(os.path.join(out, "runs", "stub.native.1.json")) as f:
            self.assertEqual(json.load(f)["env"]["VITAMIN_DAEMON"], None)
        self.assertEqual(s["kinds"], ["daemon"])
        self.assertEqual(s["suite_problems"], [])
        # the stub ran without the shim: no census, which the summary reports
        self.assertIn("stub.daemon.1: no census", s["programs"][0]["problems"])

    def test_a_daemon_that_does_not_start(self):
        lines, s, _ = self.run_suite(1)
        self.assertFalse(any("daemon stop" in x for x in lines), lines)
        self.assertTrue(lines[-1].startswith("mps  pipe="), lines)  # MPS still quit
        self.assertEqual(s["kinds"], [])
        self.assertEqual(len(s["suite_problems"]), 1)
        self.assertIn("did not start", s["suite_problems"][0])

    def test_what_a_program_leaves_behind_is_killed_and_reported(self):
        # the program ends, its child (a marked sleep) goes on, as torch.multiprocessing's spawned
        # child does when its parent aborts; each run's leftovers are listed and killed. The
        # child's own exited child (sleep 0, which nothing reaps) is a zombie: not listed.
        mark = f"{os.getpid()}{id(self)}"
        program = PROGRAM + f"import subprocess\nsubprocess.Popen(['sh', '-c', 'sleep 0 & exec sleep {mark}'])\n"
        lines, s, out = self.run_suite(0, program=program)
        self.assertEqual(subprocess.run(["pgrep", "-f", f"sleep {mark}"]).returncode, 1, "a leftover sleep runs")
        for kind in ("native.1", "native.2", "daemon.1"):
            with open(os.path.join(out, "runs", f"stub.{kind}.left")) as f:
                left = f.read()
            self.assertIn(f"sleep {mark}", left)
            self.assertEqual(len(left.splitlines()), 1, left)
        self.assertTrue(any("left 1 process(es) behind" in p and f"sleep {mark}" in p
                            for p in s["programs"][0]["problems"]), s["programs"][0]["problems"])

    def test_an_mps_that_does_not_quit_is_killed(self):
        lines, s, out = self.run_suite(0, mps_quit="sleep 30;", extra_env={"MPS_QUIT_S": "1"})
        self.assertIn("MPS control daemon did not quit within 1 s: its processes killed", s["notes"])
        self.assertFalse(os.path.exists(os.path.join(out, "runs", "stub.native.1.left")))

    def test_an_mps_fault_is_a_problem_of_the_suite(self):
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d)
        os.makedirs(os.path.join(d, "daemon"))
        with open(os.path.join(d, "programs.txt"), "w") as f:
            f.write("")
        with open(os.path.join(d, "daemon", "status.txt"), "w") as f:
            f.write("vitamin daemon pid 1\nconcurrency: MPS server FAULT: work of every client it served may have failed\n")
        r = subprocess.run(["python3", os.path.join(HERE, "summary.py"), d], stdout=subprocess.PIPE, timeout=60)
        with open(os.path.join(d, "summary.json")) as f:
            problems = json.load(f)["suite_problems"]
        self.assertEqual(len(problems), 1, r.stdout)
        self.assertTrue(problems[0].startswith("concurrency: MPS server FAULT"))


if __name__ == "__main__":
    unittest.main()
