#!/usr/bin/env python3
"""A discrete-event load model of Saheeli dispatching tasks on Kubernetes.

Kubernetes is a design on paper (docs/design/kubernetes.md): no API server can be
reached here, so this model predicts, from public defaults and figures, how
fast a foreman could start 1,000 or 10,000 concurrent tasks, one Job per
task, and which limit binds first. Every number it uses is a field of
`Params`, with where it comes from; docs/design/kubernetes.md cites each source.

What one task costs (the design in docs/design/kubernetes.md):

  foreman    claim (SQLite) -> POST Job -> POST Secret (ownerReference: the Job)
             ... DELETE Job (propagationPolicy Background) once the pod ended
  job ctrl   sync 1: POST Pod, PUT Job status; sync 2 (pod ready): PUT status;
             sync 3 (pod ended): PUT status, PATCH Pod (finalizer), PUT status
  scheduler  one scheduling cycle, then POST pods/binding
  kubelet    start the pod (image present), PATCH pod status when running
             and when ended
  gc         DELETE Pod, DELETE Secret after the Job is deleted
  servo      fetch prompt and workspace from the gateway, first LLM request:
             that moment is "dispatched"

Client-side limits are token buckets with client-go's semantics (qps,
burst; a wait reserves a token, FIFO). The API server is one instance with
API Priority and Fairness: each priority level has its nominal seats
(no borrowing) and a per-flow queue limit (handSize x queueLengthLimit);
a request over it gets 429 and is retried after 1 s through the client's
bucket again. Watches deliver every change after `watch_s`.

Usage:
  scripts/k8s-sim.py                 # the table in docs/design/kubernetes.md
  scripts/k8s-sim.py --tasks 1000 --mode steady --profile defaults
  scripts/k8s-sim.py --check         # internal consistency, in seconds

Python 3.11 standard library only; deterministic for a given --seed.
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import math
import random
import sys
from collections import deque
from dataclasses import dataclass, field

# z of the 99th percentile of a standard normal: p99 = median * exp(Z99 * sigma).
Z99 = 2.3263


@dataclass(frozen=True)
class Params:
    """Every assumption of the model: Kubernetes' own default where it has
    one, ours otherwise (docs/design/kubernetes.md gives the source of each)."""

    tasks: int = 1000
    mode: str = "burst"  # burst: all submitted at t=0; steady: Poisson arrivals
    seed: int = 1
    concurrency: int | None = None  # foreman `concurrency`; None: tasks (+25 % steady)
    # Task run time (first LLM request to exit, upload included): lognormal.
    run_median_s: float = 600.0
    run_sigma: float = 0.5
    warmup_runs: float = 2.0  # steady: measured after this many mean run times
    horizon_runs: float = 4.0  # steady: simulated time in mean run times
    # Foreman: SQLite claim, then its kube client (kube-rs has no default
    # limiter; client-go's defaults are QPS 5, burst 10).
    claim_s: float = 0.002
    launch_parallel: int = 32  # launches (POST Job + POST Secret) in flight
    foreman_qps: float = 5.0
    foreman_burst: int = 10
    # kube-controller-manager: --kube-api-qps 20, --kube-api-burst 30 (one
    # bucket per controller: our reading), --concurrent-job-syncs 5.
    kcm_qps: float = 20.0
    kcm_burst: int = 30
    job_workers: int = 5
    # kube-scheduler: clientConnection qps 50, burst 100; one pod per cycle,
    # a cycle at 10 ms = the 100 pods/s the upstream throughput test demands.
    sched_qps: float = 50.0
    sched_burst: int = 100
    sched_cycle_s: float = 0.010
    # kube-apiserver: --max-requests-inflight 400 + --max-mutating 200 seats.
    server_seats: int = 600
    api_median_s: float = 0.015  # one write; p99 0.15 s (SLO: p99 <= 1 s)
    api_sigma: float = 0.99
    watch_s: float = 0.05
    # Pod start once bound (image present): median 0.8 s, p99 3 s (SLO p99 5 s).
    pod_start_median_s: float = 0.8
    pod_start_p99_s: float = 3.0
    # Servo start to its first LLM request (inputs from the gateway).
    servo_median_s: float = 0.2
    servo_p99_s: float = 1.0
    pods_per_node: int = 110
    nodes: int | None = None  # None: enough for `concurrency` plus 10 %


# API Priority and Fairness defaults (flowcontrol bootstrap configuration):
# nominalConcurrencyShares, and queues x queueLengthLimit, handSize.
APF_SHARES = {
    "system": 30, "node-high": 40, "leader-election": 10, "workload-high": 40,
    "workload-low": 100, "global-default": 20, "catch-all": 5,
}
APF_HAND, APF_QUEUE_LEN = 6, 50

PROFILES = {
    # Every component at its default; the foreman copies client-go's 5/10.
    "defaults": {},
    # The foreman raises its own limit (its only knob): 50/100.
    "foreman-50": {"foreman_qps": 50.0, "foreman_burst": 100},
    # The operator also raises the control plane's client limits.
    "tuned": {"foreman_qps": 100.0, "foreman_burst": 200, "kcm_qps": 200.0,
              "kcm_burst": 300, "job_workers": 50, "sched_qps": 200.0,
              "sched_burst": 400},
}


class Sim:
    """The event loop: (time, sequence, callback) in a heap."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list = []
        self._seq = 0
        self.events = 0

    def at(self, t: float, fn, *args) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, fn, args))

    def after(self, dt: float, fn, *args) -> None:
        self.at(self.now + dt, fn, *args)

    def run(self, until: float = math.inf) -> None:
        while self._heap and self._heap[0][0] <= until:
            t, _, fn, args = heapq.heappop(self._heap)
            self.now = t
            self.events += 1
            fn(*args)


class Bucket:
    """client-go's token bucket: a request reserves a token and waits for it."""

    def __init__(self, sim: Sim, name: str, qps: float, burst: int) -> None:
        self.sim, self.name, self.qps, self.burst = sim, name, qps, burst
        self.tokens, self.last = float(burst), 0.0
        self.grants: list[float] = []  # when each token was granted
        self.waited = 0.0

    def acquire(self, fn) -> None:
        now = self.sim.now
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.qps)
        self.last = now
        self.tokens -= 1.0
        wait = 0.0 if self.tokens >= 0 else -self.tokens / self.qps
        self.grants.append(now + wait)
        self.waited += wait
        self.sim.after(wait, fn)


class Level:
    """One APF priority level: seats, a FIFO, a per-flow queue limit."""

    def __init__(self, sim: Sim, name: str, seats: int, rng, p: Params) -> None:
        self.sim, self.name, self.seats, self.rng, self.p = sim, name, seats, rng, p
        self.busy = 0
        self.max_busy = 0
        self.queue: deque = deque()
        self.queued_by_flow: dict[str, int] = {}
        self.rejected = 0
        self.waited = 0.0
        self.served = 0

    def submit(self, flow: str, fn, retry) -> bool:
        if self.busy < self.seats:
            self._start(fn, self.sim.now)
            return True
        if self.queued_by_flow.get(flow, 0) >= APF_HAND * APF_QUEUE_LEN:
            self.rejected += 1
            self.sim.after(1.0, retry)  # 429, Retry-After: 1
            return False
        self.queued_by_flow[flow] = self.queued_by_flow.get(flow, 0) + 1
        self.queue.append((flow, fn, self.sim.now))
        return True

    def _start(self, fn, since: float) -> None:
        self.busy += 1
        self.max_busy = max(self.max_busy, self.busy)
        self.waited += self.sim.now - since
        self.served += 1
        service = self.p.api_median_s * math.exp(self.rng.gauss(0, self.p.api_sigma))
        self.sim.after(service, self._done, fn)

    def _done(self, fn) -> None:
        self.busy -= 1
        if self.queue:
            flow, nxt, since = self.queue.popleft()
            self.queued_by_flow[flow] -= 1
            self._start(nxt, since)
        fn()


@dataclass
class Task:
    id: int
    submit: float
    times: dict = field(default_factory=dict)
    secret_at: float | None = None
    bound: bool = False
    started: bool = False


class Model:
    """The cluster, the control plane and the foreman, for one run."""

    def __init__(self, p: Params) -> None:
        self.p = p
        self.rng = random.Random(p.seed)
        self.sim = Sim()
        # Steady arrivals keep `tasks` in flight on average: the foreman's
        # `concurrency` gets 25 % headroom over that mean.
        self.conc = p.concurrency or (p.tasks if p.mode == "burst" else math.ceil(p.tasks * 1.25))
        nodes = p.nodes or math.ceil(self.conc * 1.1 / p.pods_per_node)
        self.free_slots = nodes * p.pods_per_node
        self.capacity = self.free_slots
        total = sum(APF_SHARES.values())
        self.levels = {
            name: Level(self.sim, name, math.ceil(p.server_seats * s / total), self.rng, p)
            for name, s in APF_SHARES.items()
        }
        s = self.sim
        self.foreman = Bucket(s, "foreman client", p.foreman_qps, p.foreman_burst)
        self.jobctl = Bucket(s, "job controller client", p.kcm_qps, p.kcm_burst)
        self.gc = Bucket(s, "garbage collector client", p.kcm_qps, p.kcm_burst)
        self.sched = Bucket(s, "scheduler client", p.sched_qps, p.sched_burst)
        self.tasks: list[Task] = []
        self.queued: deque = deque()
        self.running = 0  # foreman slots in use
        self.max_running = 0
        self.pods_bound = 0
        self.max_pods_bound = 0
        self.claim_busy = False
        self.launching = 0
        self.launch_queue: deque = deque()
        self.launch_waited = 0.0
        self.job_queue: deque = deque()
        self.job_idle = p.job_workers
        self.job_waited = 0.0
        self.sched_queue: deque = deque()
        self.sched_busy = False
        self.sched_waited = 0.0
        self.unschedulable: deque = deque()
        self.live = {"job": 0, "secret": 0, "pod": 0}
        self.made = {"job": 0, "secret": 0, "pod": 0}
        self.completed = 0

    # -- plumbing ---------------------------------------------------------
    def lognormal(self, median: float, p99: float) -> float:
        sigma = math.log(p99 / median) / Z99
        return median * math.exp(self.rng.gauss(0, sigma))

    def request(self, bucket: Bucket | None, level: str, flow: str, fn) -> None:
        """One API call: the client's bucket, then an APF seat, then `fn`."""
        def go() -> None:
            self.levels[level].submit(flow, fn, retry)

        def retry() -> None:
            self.request(bucket, level, flow, fn)

        if bucket is None:
            go()
        else:
            bucket.acquire(go)

    def mark(self, t: Task, what: str) -> None:
        assert what not in t.times, f"task {t.id}: `{what}` twice"
        t.times[what] = self.sim.now

    # -- the foreman --------------------------------------------------------
    def submit(self) -> None:
        t = Task(len(self.tasks), self.sim.now)
        self.tasks.append(t)
        self.queued.append(t)
        self.claim_next()

    def claim_next(self) -> None:
        if self.claim_busy or not self.queued or self.running >= self.conc:
            return
        self.claim_busy = True
        t = self.queued.popleft()
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        self.sim.after(self.p.claim_s, self.claimed, t)

    def claimed(self, t: Task) -> None:
        self.claim_busy = False
        self.mark(t, "claimed")
        self.launch_queue.append(t)
        self.launch_next()
        self.claim_next()

    def launch_next(self) -> None:
        """At most `launch_parallel` launches in flight, so that a task's
        Secret is not queued behind every other task's Job in the bucket."""
        while self.launching < self.p.launch_parallel and self.launch_queue:
            t = self.launch_queue.popleft()
            self.launching += 1
            self.launch_waited += self.sim.now - t.times["claimed"]
            self.request(self.foreman, "workload-low", "foreman",
                         lambda t=t: self.job_created(t))

    def job_created(self, t: Task) -> None:
        self.mark(t, "job")
        self.made["job"] += 1
        self.live["job"] += 1
        self.sim.after(self.p.watch_s, self.job_enqueue, t, ("POST pod", "PUT status"))
        self.request(self.foreman, "workload-low", "foreman", lambda: self.secret_created(t))

    def secret_created(self, t: Task) -> None:
        self.made["secret"] += 1
        self.live["secret"] += 1
        t.secret_at = self.sim.now
        self.launching -= 1
        self.launch_next()
        if t.bound and not t.started:
            self.kubelet_start(t)  # the pod waited for its Secret volume

    def pod_ended_seen(self, t: Task) -> None:
        """The foreman's watch sees the pod end: delete the Job, free the slot."""
        self.mark(t, "seen_end")
        self.running -= 1
        self.request(self.foreman, "workload-low", "foreman", lambda: self.job_deleted(t))
        self.claim_next()

    def job_deleted(self, t: Task) -> None:
        self.live["job"] -= 1
        self.sim.after(self.p.watch_s, self.gc_collect, t)

    def gc_collect(self, t: Task) -> None:
        def pod_gone() -> None:
            self.live["pod"] -= 1
            self.request(self.gc, "workload-high", "kcm", secret_gone)

        def secret_gone() -> None:
            self.live["secret"] -= 1
            self.mark(t, "collected")
            self.completed += 1

        self.request(self.gc, "workload-high", "kcm", pod_gone)

    # -- the Job controller ---------------------------------------------------
    def job_enqueue(self, t: Task, calls: tuple) -> None:
        self.job_queue.append((t, calls, self.sim.now))
        self.job_next()

    def job_next(self) -> None:
        while self.job_idle and self.job_queue:
            t, calls, since = self.job_queue.popleft()
            self.job_idle -= 1
            self.job_waited += self.sim.now - since
            self.job_call(t, list(calls))

    def job_call(self, t: Task, calls: list) -> None:
        if not calls:
            self.job_idle += 1
            self.job_next()
            return
        call = calls.pop(0)

        def done() -> None:
            if call == "POST pod":
                self.mark(t, "pod")
                self.made["pod"] += 1
                self.live["pod"] += 1
                self.sim.after(self.p.watch_s, self.sched_enqueue, t)
            self.job_call(t, calls)

        self.request(self.jobctl, "workload-high", "kcm", done)

    # -- the scheduler and the kubelet ------------------------------------------
    def sched_enqueue(self, t: Task) -> None:
        self.sched_queue.append((t, self.sim.now))
        self.sched_next()

    def sched_next(self) -> None:
        if self.sched_busy or not self.sched_queue:
            return
        if self.free_slots == 0:
            self.unschedulable.extend(self.sched_queue)
            self.sched_queue.clear()
            return
        t, since = self.sched_queue.popleft()
        self.sched_waited += self.sim.now - since
        self.sched_busy = True
        self.free_slots -= 1
        self.sim.after(self.p.sched_cycle_s, self.scheduled, t)

    def scheduled(self, t: Task) -> None:
        self.sched_busy = False
        self.request(self.sched, "workload-high", "scheduler", lambda: self.bound(t))
        self.sched_next()

    def bound(self, t: Task) -> None:
        self.mark(t, "bound")
        self.pods_bound += 1
        self.max_pods_bound = max(self.max_pods_bound, self.pods_bound)
        self.sim.after(self.p.watch_s, self.kubelet_sees, t)

    def kubelet_sees(self, t: Task) -> None:
        t.bound = True
        if t.secret_at is not None:
            self.kubelet_start(t)

    def kubelet_start(self, t: Task) -> None:
        t.started = True
        dt = self.lognormal(self.p.pod_start_median_s, self.p.pod_start_p99_s)
        self.sim.after(dt, self.containers_started, t)

    def containers_started(self, t: Task) -> None:
        self.mark(t, "started")
        self.request(None, "system", "kubelet", lambda: self.sim.after(
            self.p.watch_s, self.job_enqueue, t, ("PUT status",)))
        self.sim.after(self.lognormal(self.p.servo_median_s, self.p.servo_p99_s),
                       self.first_llm, t)

    def first_llm(self, t: Task) -> None:
        self.mark(t, "dispatched")
        run = self.p.run_median_s * math.exp(self.rng.gauss(0, self.p.run_sigma))
        self.sim.after(run, self.servo_exit, t)

    def servo_exit(self, t: Task) -> None:
        self.mark(t, "ended")
        self.pods_bound -= 1
        self.free_slots += 1
        if self.unschedulable:
            self.sched_queue.append(self.unschedulable.popleft())
            self.sched_next()

        def status() -> None:
            self.sim.after(self.p.watch_s, self.job_enqueue, t,
                           ("PUT status", "PATCH pod", "PUT status"))
            self.sim.after(self.p.watch_s, self.pod_ended_seen, t)

        self.request(None, "system", "kubelet", status)

    # -- a run ------------------------------------------------------------------
    def mean_run_s(self) -> float:
        return self.p.run_median_s * math.exp(self.p.run_sigma ** 2 / 2)

    def run(self) -> dict:
        p = self.p
        if p.mode == "burst":
            for _ in range(p.tasks):
                self.sim.at(0.0, self.submit)
            self.sim.run()
            return self.summary(0.0, self.sim.now)
        if p.mode != "steady":
            raise ValueError(f"--mode `{p.mode}`: expected `burst` or `steady`")
        rate = p.tasks / self.mean_run_s()  # Little's law: N in flight
        horizon = p.horizon_runs * self.mean_run_s()
        t = 0.0
        while True:
            t += self.rng.expovariate(rate)
            if t > horizon:
                break
            self.sim.at(t, self.submit)
        self.sim.run(until=horizon)
        self.sim.now = horizon
        return self.summary(p.warmup_runs * self.mean_run_s(), horizon)

    def summary(self, start: float, end: float) -> dict:
        window = [t for t in self.tasks if start <= t.submit <= end]
        picked = [t for t in self.tasks if start <= t.times.get("dispatched", -1) <= end]
        lat = sorted(t.times["dispatched"] - t.submit for t in picked)
        done = [t for t in self.tasks if start <= t.times.get("collected", -1) <= end]
        ended = [t for t in self.tasks if start <= t.times.get("ended", -1) <= end]
        # Where dispatched tasks spent their time, stage by stage.
        stages = {name: 0.0 for name, _, _ in STAGES}
        for t in picked:
            for name, a, b in STAGES:
                stages[name] += (t.times[b] - (t.submit if a == "submit" else t.times[a]))
        stages = {k: v / max(len(picked), 1) for k, v in stages.items()}
        causes = {k: v for k, v in stages.items() if k != "foreman queue"}
        dominant = max(causes, key=causes.get) if picked else "-"
        if dominant in ("kubelet", "servo"):
            dominant = "nothing (pod start)"
        if self.p.mode == "burst":
            last = max((t.times["dispatched"] for t in self.tasks), default=0.0)
            rate = len(lat) / last if last else 0.0
        else:
            rate = len(ended) / (end - start)
        return {
            "tasks": self.p.tasks, "mode": self.p.mode, "submitted": len(self.tasks),
            "in_window": len(window), "dispatched": len(lat),
            "p50": pct(lat, 0.50), "p99": pct(lat, 0.99),
            "rate": rate, "completed_in_window": len(done),
            "backlog": len(self.queued),
            "makespan": self.sim.now, "events": self.sim.events,
            "rejected": sum(lv.rejected for lv in self.levels.values()),
            "dominant": dominant, "stages": stages,
            "seats": {k: (lv.max_busy, lv.seats) for k, lv in self.levels.items()},
        }


# Stages of a dispatch: (name, from, to) over a task's timestamps.
STAGES = [
    ("foreman queue", "submit", "claimed"),      # SQLite queue, `concurrency`
    ("foreman client", "claimed", "job"),       # launch slot, bucket, POST Job
    ("job controller", "job", "pod"),           # watch, workqueue, bucket, POST Pod
    ("scheduler", "pod", "bound"),              # watch, cycle, bucket, binding
    ("kubelet", "bound", "started"),            # Secret present, pod start
    ("servo", "started", "dispatched"),         # inputs, first LLM request
]


def pct(xs: list, q: float) -> float:
    if not xs:
        return math.nan
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def check_invariants(m: Model, s: dict) -> list[str]:
    """What must hold whatever the parameters; a list of violations."""
    bad = []
    order = ["claimed", "job", "pod", "bound", "started", "dispatched", "ended",
             "seen_end", "collected"]
    in_flight = 0
    for t in m.tasks:
        seen = [t.times[k] for k in order if k in t.times]
        present = [k for k in order if k in t.times]
        if present != order[: len(present)]:
            bad.append(f"task {t.id}: steps {present} skip one")
        if any(b < a for a, b in zip([t.submit] + seen, seen)):
            bad.append(f"task {t.id}: times go backwards")
        if "collected" not in t.times and "claimed" in t.times:
            in_flight += 1
    # Conservation: every task is queued, in flight or collected, once.
    if len(m.queued) + in_flight + m.completed != len(m.tasks):
        bad.append(f"conservation: {len(m.queued)} queued + {in_flight} in flight + "
                   f"{m.completed} collected != {len(m.tasks)} submitted")
    if m.p.mode == "burst" and (m.completed != m.p.tasks or any(m.live.values())):
        bad.append(f"burst: {m.completed} of {m.p.tasks} collected, live {m.live}")
    for kind, live in m.live.items():
        if live < 0 or live > m.made[kind]:
            bad.append(f"{kind}: {live} live of {m.made[kind]} made")
    if m.max_running > m.conc:
        bad.append(f"{m.max_running} running over concurrency {m.conc}")
    if m.max_pods_bound > m.capacity:
        bad.append(f"{m.max_pods_bound} pods over node capacity {m.capacity}")
    for b in (m.foreman, m.jobctl, m.gc, m.sched):
        if over_rate(b.grants, b.qps, b.burst):
            bad.append(f"{b.name}: more grants in some interval than qps x time + burst")
    for lv in m.levels.values():
        if lv.max_busy > lv.seats:
            bad.append(f"APF {lv.name}: {lv.max_busy} busy over {lv.seats} seats")
    if s["dispatched"] and not (0 < s["p50"] <= s["p99"]):
        bad.append(f"latency p50 {s['p50']} p99 {s['p99']} out of order")
    return bad


def over_rate(grants: list[float], qps: float, burst: int) -> bool:
    """True when some interval [g_i, g_j] holds more than burst + qps x (g_j - g_i)
    grants: j - i + 1 - qps g_j + qps g_i > burst, kept as a running max over i."""
    best = -math.inf
    for j, g in enumerate(sorted(grants)):
        best = max(best, qps * g - j)
        if j + 1 - qps * g + best > burst + 1e-6:
            return True
    return False


def validate(p: Params) -> None:
    """Refuses parameters the model cannot run, naming the field."""
    if p.mode not in ("burst", "steady"):
        raise ValueError(f"`mode` is `{p.mode}`: expected `burst` or `steady`")
    for name in ("tasks", "foreman_burst", "kcm_burst", "sched_burst", "job_workers",
                 "launch_parallel", "pods_per_node", "server_seats"):
        if getattr(p, name) < 1:
            raise ValueError(f"`{name}` is {getattr(p, name)}: it must be at least 1")
    for name in ("foreman_qps", "kcm_qps", "sched_qps", "run_median_s", "api_median_s",
                 "pod_start_median_s", "servo_median_s", "sched_cycle_s"):
        if not getattr(p, name) > 0:
            raise ValueError(f"`{name}` is {getattr(p, name)}: it must be above 0")
    if p.pod_start_p99_s < p.pod_start_median_s or p.servo_p99_s < p.servo_median_s:
        raise ValueError("a p99 below its median: raise `pod_start_p99_s` or `servo_p99_s`")
    if p.horizon_runs <= p.warmup_runs:
        raise ValueError("`horizon_runs` must be above `warmup_runs`")
    for name in ("concurrency", "nodes"):
        if getattr(p, name) is not None and getattr(p, name) < 1:
            raise ValueError(f"`{name}` is {getattr(p, name)}: it must be at least 1")


def simulate(p: Params) -> tuple[Model, dict]:
    validate(p)
    m = Model(p)
    return m, m.run()


def table(rows: list[dict]) -> str:
    head = ("| tasks | arrivals | profile | throughput (tasks/s) | dispatch p50 | "
            "dispatch p99 | binds first | note |")
    out = [head, "|---:|---|---|---:|---:|---:|---|---|"]
    for r in rows:
        note = (f"last dispatched at {fmt(r['makespan_dispatch'])}" if r["mode"] == "burst"
                else f"backlog at end {r['backlog']}")
        used, seats = r["seats"]["workload-low"]
        note += f", foreman's APF seats {used}/{seats}"
        if r["rejected"]:
            note += f", {r['rejected']} x 429"
        out.append(f"| {r['tasks']:,} | {r['mode']} | {r['profile']} | {r['rate']:.1f} | "
                   f"{fmt(r['p50'])} | {fmt(r['p99'])} | {r['dominant']} | {note} |")
    return "\n".join(out)


def fmt(s: float) -> str:
    if math.isnan(s):
        return "-"
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def run_row(p: Params, profile: str) -> dict:
    m, s = simulate(p)
    bad = check_invariants(m, s)
    if bad:
        raise SystemExit("k8s-sim: internal inconsistency:\n  " + "\n  ".join(bad))
    s["profile"] = profile
    s["makespan_dispatch"] = max((t.times.get("dispatched", 0) for t in m.tasks), default=0)
    return s


def check() -> int:
    """Fast self-test: invariants on small runs, determinism, limits obeyed."""
    failures = []
    cases = [
        Params(tasks=300, mode="burst", run_median_s=30),
        Params(tasks=200, mode="steady", run_median_s=20, **PROFILES["tuned"]),
        Params(tasks=150, mode="burst", run_median_s=5, concurrency=40, nodes=1,
               pods_per_node=25),
    ]
    for p in cases:
        m, s = simulate(p)
        failures += [f"{p.mode} {p.tasks}: {b}" for b in check_invariants(m, s)]
        _, again = simulate(p)
        if again != s:
            failures.append(f"{p.mode} {p.tasks}: same seed, different result")
    # The foreman's bucket must bound the dispatch rate: 2 writes per task
    # at 5 QPS after a burst of 10 gives at most ~2.5 tasks/s.
    _, s = simulate(Params(tasks=300, mode="burst", run_median_s=30))
    if s["rate"] > 5.0 / 2 * 1.2:
        failures.append(f"dispatch rate {s['rate']:.2f}/s beats the foreman's 5 QPS")
    for f in failures:
        print(f"FAIL {f}", file=sys.stderr)
    print("check: ok" if not failures else f"check: {len(failures)} failure(s)")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="assert internal consistency, quickly")
    ap.add_argument("--tasks", type=int, action="append", help="concurrent tasks (repeatable)")
    ap.add_argument("--mode", choices=["burst", "steady"], action="append")
    ap.add_argument("--profile", choices=sorted(PROFILES), action="append")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="override one assumption, e.g. --set kcm_qps=100")
    ap.add_argument("--assumptions", action="store_true", help="print every assumption")
    ap.add_argument("--stages", action="store_true",
                    help="also print where a dispatch spends its time, per row")
    a = ap.parse_args(argv)
    if a.check:
        return check()
    over = {}
    fields = {f.name: f for f in dataclasses.fields(Params)}
    for kv in a.set:
        k, _, v = kv.partition("=")
        if k not in fields or not v:
            ap.error(f"--set `{kv}`: expected FIELD=VALUE with FIELD one of {sorted(fields)}")
        default = getattr(Params(), k)
        try:
            over[k] = type(default)(v) if default is not None else int(v)
        except ValueError:
            ap.error(f"--set `{kv}`: `{v}` is not a {type(default or 0).__name__}")
    if a.assumptions:
        for f in dataclasses.fields(Params):
            print(f"{f.name} = {over.get(f.name, f.default)}")
        return 0
    rows = []
    try:
        for n in a.tasks or [1000, 10000]:
            validate(Params(tasks=n, **over))
    except ValueError as e:
        ap.error(str(e))
    for n in a.tasks or [1000, 10000]:
        for mode in a.mode or ["burst", "steady"]:
            for prof in a.profile or ["defaults", "foreman-50", "tuned"]:
                p = Params(tasks=n, mode=mode, seed=a.seed, **{**PROFILES[prof], **over})
                rows.append(run_row(p, prof))
    print(table(rows))
    if a.stages:
        print()
        names = [name for name, _, _ in STAGES]
        print("| tasks | arrivals | profile | " + " | ".join(names) + " |")
        print("|---:|---|---|" + "---:|" * len(names))
        for r in rows:
            cells = " | ".join(fmt(r["stages"][n]) for n in names)
            print(f"| {r['tasks']:,} | {r['mode']} | {r['profile']} | {cells} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
