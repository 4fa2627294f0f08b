"""The serving tenants' scheduling, without torch (tested by tenants_test.py in CI).

- `load_trace`: requests from the Azure conversation trace (runtime/data/azure-llm-2023-conv.csv):
  arrival offsets (time-compressed by `speed`), prompt and output lengths (clamped).
- `open_loop`: batch-1 requests at given arrival offsets, served one at a time in arrival order
  (the latency-critical decoder); latency = completion - arrival, queueing included.
- `ContinuousBatcher`: continuous batching over slots: each iteration admits arrived requests into
  free slots (prefill, which yields the first token), then runs one decode step over every active
  request; a request leaves its slot when its last token is out.
- `serving_metrics`: TTFT, TPOT per request and the SLO violation rates.

The model is abstract: callables that do the work (prefill(req, slot), decode(list of (req, slot))),
and a clock; the tenants pass the torch model and time.perf_counter.
"""
import csv
from datetime import datetime

from tenant import percentile


class Request:
    __slots__ = ("rid", "arrival", "prompt", "gen", "t_first", "t_done", "tokens", "slot")

    def __init__(self, rid, arrival, prompt, gen):
        if prompt < 1 or gen < 1:
            raise ValueError(f"request {rid}: prompt and output lengths must be >= 1 ({prompt}, {gen})")
        self.rid, self.arrival, self.prompt, self.gen = rid, arrival, prompt, gen
        self.t_first = self.t_done = None
        self.tokens = 0
        self.slot = None


def load_trace(path, start_row=0, count=None, seconds=None, speed=1.0, max_prompt=512, max_gen=64):
    """Requests of the trace from `start_row`, arrivals relative to the first one divided by `speed`,
    up to `count` requests or arrivals before `seconds`."""
    if speed <= 0:
        raise ValueError("speed must be > 0")
    out, t0 = [], None
    with open(path, newline="") as f:
        rows = csv.DictReader(f)
        for i, row in enumerate(rows):
            if i < start_row:
                continue
            ts = datetime.strptime(row["TIMESTAMP"][:26], "%Y-%m-%d %H:%M:%S.%f").timestamp()
            t0 = ts if t0 is None else t0
            at = (ts - t0) / speed
            if seconds is not None and at >= seconds:
                break
            p = max(1, min(int(row["ContextTokens"]), max_prompt))
            g = max(1, min(int(row["GeneratedTokens"]), max_gen))
            out.append(Request(len(out), at, p, g))
            if count is not None and len(out) >= count:
                break
    return out


def open_loop(arrivals, serve, clock, sleep, stop_at):
    """Serves batch-1 requests at `arrivals` (offsets from clock() at entry) one after another.
    Returns (latencies of completed requests, number not started by stop_at)."""
    t0 = clock()
    lat, pending = [], list(arrivals)
    while pending:
        now = clock() - t0
        if now >= stop_at:
            break
        a = pending[0]
        if a > now:
            sleep(min(a - now, stop_at - now))
            continue
        pending.pop(0)
        serve()
        lat.append(clock() - t0 - a)
    return lat, len(pending)


class ContinuousBatcher:
    def __init__(self, slots, prefill, decode, clock, sleep, prefills_per_step=1):
        if slots < 1 or prefills_per_step < 1:
            raise ValueError("slots and prefills_per_step must be >= 1")
        self.free = list(range(slots))
        self.prefill, self.decode, self.clock, self.sleep = prefill, decode, clock, sleep
        self.prefills_per_step = prefills_per_step
        self.steps = 0

    def run(self, requests, stop_at):
        """Serves `requests` (arrivals relative to clock() at entry) until all are done or stop_at.
        Returns the time base (clock() at entry); requests carry their times relative to it."""
        t0 = self.clock()
        queue = sorted(requests, key=lambda r: r.arrival)
        qi, active = 0, []
        while True:
            now = self.clock() - t0
            if now >= stop_at or (qi >= len(queue) and not active):
                return t0
            admitted = 0
            while (qi < len(queue) and self.free and queue[qi].arrival <= now
                   and admitted < self.prefills_per_step):
                r = queue[qi]
                qi += 1
                r.slot = self.free.pop(0)
                self.prefill(r, r.slot)
                r.tokens = 1
                r.t_first = self.clock() - t0
                admitted += 1
                if r.tokens >= r.gen:
                    r.t_done = r.t_first
                    self.free.append(r.slot)
                else:
                    active.append(r)
            if active:
                self.decode([(r, r.slot) for r in active])
                self.steps += 1
                t = self.clock() - t0
                still = []
                for r in active:
                    r.tokens += 1
                    if r.tokens >= r.gen:
                        r.t_done = t
                        self.free.append(r.slot)
                    else:
                        still.append(r)
                active = still
            elif not admitted:
                nxt = queue[qi].arrival if qi < len(queue) else stop_at
                self.sleep(max(0.0, min(nxt, stop_at) - (self.clock() - t0)))


def serving_metrics(requests, tpot_slo_ms, ttft_slo_ms, window_s):
    """TTFT/TPOT percentiles and SLO violation rates over the requests that finished; requests that
    arrived but did not finish are counted apart (`unfinished`)."""
    done = [r for r in requests if r.t_done is not None]
    ttft = [(r.t_first - r.arrival) * 1000 for r in done]
    tpot = [(r.t_done - r.t_first) * 1000 / (r.gen - 1) for r in done if r.gen > 1]
    out_tokens = sum(r.tokens for r in requests)
    return {
        "requests": len(requests),
        "completed": len(done),
        "unfinished": len(requests) - len(done),
        "ttft_p50_ms": percentile(ttft, 50), "ttft_p99_ms": percentile(ttft, 99),
        "tpot_p50_ms": percentile(tpot, 50), "tpot_p90_ms": percentile(tpot, 90),
        "tpot_p99_ms": percentile(tpot, 99),
        "tpot_violation_pct": 100.0 * sum(x > tpot_slo_ms for x in tpot) / len(tpot) if tpot else None,
        "ttft_violation_pct": 100.0 * sum(x > ttft_slo_ms for x in ttft) / len(ttft) if ttft else None,
        "tpot_slo_ms": tpot_slo_ms, "ttft_slo_ms": ttft_slo_ms,
        "output_tokens": out_tokens,
        # per finished request, in arrival order: the violations can be recomputed at any SLO
        "ttft_ms": [round(x, 3) for x in ttft], "tpot_ms": [round(x, 3) for x in tpot],
        "throughput": out_tokens / window_s, "unit": "tokens/s",
    }
