"""The tenant side of the evaluation harness's protocol (bench/eval/README.md, "Tenant protocol").

A tenant is any command that the harness (harness.py) starts with these variables set:

  EVAL_NAME      the tenant's name in the scenario (also its ready file's name)
  EVAL_OUT       where to write its one JSON result (written atomically, at the end)
  EVAL_BARRIER   a directory; the tenant touches EVAL_BARRIER/<name>.ready once warm
  EVAL_PEERS     how many ready files to wait for (itself included) before measuring
  EVAL_SECONDS   the measured window, seconds (wall clock, after the barrier)
  EVAL_BARRIER_TIMEOUT  seconds to wait at the barrier before giving up (default 240)
  EVAL_SEED      optional integer seed (default 0)

Without EVAL_BARRIER the barrier is a no-op (a tenant can be run by hand). This module needs only
the standard library, so the harness tests run it in CI with stub tenants; torch helpers are in
tenants/common.py.
"""
import hashlib
import json
import math
import os
import random
import sys
import time


class TenantError(RuntimeError):
    """A protocol failure (barrier timeout, bad environment): the tenant exits non-zero."""


def _env_float(name, default):
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError as e:
        raise TenantError(f"{name}={raw!r} is not a number") from e


class Tenant:
    """One tenant's view of the protocol: `ready()` after warm-up, `measuring()` in the window,
    `write(doc)` at the end."""

    def __init__(self, default_name="tenant"):
        self.name = os.environ.get("EVAL_NAME") or default_name
        self.out = os.environ.get("EVAL_OUT")
        self.barrier = os.environ.get("EVAL_BARRIER")
        self.peers = int(_env_float("EVAL_PEERS", 1))
        self.seconds = _env_float("EVAL_SECONDS", 10.0)
        self.barrier_timeout = _env_float("EVAL_BARRIER_TIMEOUT", 240.0)
        self.seed = int(_env_float("EVAL_SEED", 0))
        if self.peers < 1:
            raise TenantError(f"EVAL_PEERS must be >= 1, got {self.peers}")
        if not (self.seconds > 0 and math.isfinite(self.seconds)):
            raise TenantError(f"EVAL_SECONDS must be a positive number, got {self.seconds}")
        self.t_spawn = time.time()
        self.t_ready = None
        self.t_start = None
        self.t0 = None
        self.waited_s = 0.0

    def ready(self):
        """Announces warm-up done, then waits until EVAL_PEERS tenants are ready. Starts the window."""
        self.t_ready = time.time()
        if self.barrier:
            if not os.path.isdir(self.barrier):
                raise TenantError(f"barrier directory {self.barrier} does not exist")
            path = os.path.join(self.barrier, self.name + ".ready")
            with open(path + ".tmp", "w") as f:
                f.write(f"{os.getpid()} {self.t_ready:.6f}\n")
            os.replace(path + ".tmp", path)
            deadline = time.monotonic() + self.barrier_timeout
            while True:
                n = len([f for f in os.listdir(self.barrier) if f.endswith(".ready")])
                if n >= self.peers:
                    break
                if time.monotonic() > deadline:
                    raise TenantError(
                        f"barrier: {n} of {self.peers} tenants ready after {self.barrier_timeout:.0f} s")
                time.sleep(0.002)
        self.t_start = time.time()
        self.waited_s = self.t_start - self.t_ready
        self.t0 = time.perf_counter()

    def elapsed(self):
        """Seconds since the window started (0 before `ready()`)."""
        return 0.0 if self.t0 is None else time.perf_counter() - self.t0

    def measuring(self):
        """True while the measured window lasts."""
        if self.t0 is None:
            raise TenantError("measuring() before ready()")
        return self.elapsed() < self.seconds

    def write(self, doc):
        """Writes the result (common fields added) to EVAL_OUT atomically; prints it to stdout."""
        full = {
            "tenant": self.name,
            "pid": os.getpid(),
            "window_s": self.seconds,
            "spawn_to_ready_s": None if self.t_ready is None else self.t_ready - self.t_spawn,
            "barrier_wait_s": self.waited_s,
            "t_start": self.t_start,
            "t_end": time.time(),
            "argv": sys.argv,
        }
        full.update(doc)
        text = json.dumps(full, sort_keys=True)
        if self.out:
            with open(self.out + ".tmp", "w") as f:
                f.write(text)
            os.replace(self.out + ".tmp", self.out)
        print(text)
        return full


def percentile(values, q):
    """The q-th percentile (0..100) with linear interpolation between order statistics; None if empty."""
    v = sorted(values)
    if not v:
        return None
    if len(v) == 1:
        return v[0]
    pos = (len(v) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def poisson_arrivals(rate, seconds, seed):
    """Arrival offsets (s) of a Poisson process of `rate` per second over [0, seconds), seeded."""
    if not (rate > 0 and math.isfinite(rate)):
        raise TenantError(f"rate must be a positive number, got {rate}")
    rng = random.Random(seed)
    t, out = 0.0, []
    while True:
        t += rng.expovariate(rate)
        if t >= seconds:
            return out
        out.append(t)


def sha256_hex(chunks):
    """SHA-256 over byte strings, in order."""
    h = hashlib.sha256()
    for c in chunks:
        h.update(c)
    return h.hexdigest()
