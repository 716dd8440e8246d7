"""Tests of scripts/k8s-sim.py, the Kubernetes load model (docs/design/kubernetes.md).

Run: python3 -m unittest discover -s scripts -p 'test_*.py' (scripts/test.sh does).
The model is deterministic for a seed, so nothing here depends on timing.
"""

import importlib.util
import io
import math
import pathlib
import sys
import unittest
from contextlib import redirect_stderr, redirect_stdout

_PATH = pathlib.Path(__file__).with_name("k8s-sim.py")
_SPEC = importlib.util.spec_from_file_location("k8s_sim", _PATH)
sim = importlib.util.module_from_spec(_SPEC)
sys.modules["k8s_sim"] = sim  # dataclasses look their module up by name
_SPEC.loader.exec_module(sim)


def small(**kw):
    base = dict(tasks=120, mode="burst", run_median_s=20.0)
    base.update(kw)
    return sim.Params(**base)


class Consistency(unittest.TestCase):
    def test_check_mode_passes(self):
        out = io.StringIO()
        with redirect_stdout(out), redirect_stderr(io.StringIO()):
            self.assertEqual(sim.main(["--check"]), 0)
        self.assertIn("check: ok", out.getvalue())

    def test_every_task_is_collected_once_in_a_burst(self):
        m, s = sim.simulate(small())
        self.assertEqual(sim.check_invariants(m, s), [])
        self.assertEqual(m.completed, 120)
        self.assertEqual(m.made, {"job": 120, "secret": 120, "pod": 120})
        self.assertEqual(m.live, {"job": 0, "secret": 0, "pod": 0})

    def test_a_lost_task_breaks_conservation(self):
        m, s = sim.simulate(small())
        m.completed -= 1  # as if one task vanished without a trace
        bad = sim.check_invariants(m, s)
        self.assertTrue(any("conservation" in b for b in bad), bad)

    def test_a_leaked_secret_is_caught(self):
        m, s = sim.simulate(small())
        m.live["secret"] += 1
        self.assertTrue(any("live" in b for b in sim.check_invariants(m, s)))

    def test_time_going_backwards_is_caught(self):
        m, s = sim.simulate(small())
        t = m.tasks[7]
        t.times["bound"] = t.times["pod"] - 1.0
        bad = sim.check_invariants(m, s)
        self.assertTrue(any("backwards" in b for b in bad), bad)

    def test_a_skipped_step_is_caught(self):
        m, s = sim.simulate(small())
        del m.tasks[3].times["job"]
        bad = sim.check_invariants(m, s)
        self.assertTrue(any("skip" in b for b in bad), bad)

    def test_node_capacity_and_concurrency_hold(self):
        p = small(tasks=150, concurrency=40, nodes=1, pods_per_node=25)
        m, s = sim.simulate(p)
        self.assertEqual(sim.check_invariants(m, s), [])
        self.assertLessEqual(m.max_running, 40)
        self.assertEqual(m.max_pods_bound, 25)  # the node filled, never more
        m.max_pods_bound = 26
        self.assertTrue(any("capacity" in b for b in sim.check_invariants(m, s)))

    def test_steady_state_keeps_up_with_arrivals(self):
        p = sim.Params(tasks=200, mode="steady", run_median_s=20.0, **sim.PROFILES["tuned"])
        m, s = sim.simulate(p)
        self.assertEqual(sim.check_invariants(m, s), [])
        arrivals = p.tasks / m.mean_run_s()
        self.assertAlmostEqual(s["rate"], arrivals, delta=0.15 * arrivals)
        self.assertEqual(s["backlog"], 0)


class Determinism(unittest.TestCase):
    def test_same_seed_same_result(self):
        self.assertEqual(sim.simulate(small(seed=5))[1], sim.simulate(small(seed=5))[1])

    def test_another_seed_another_result(self):
        a = sim.simulate(small(seed=5))[1]
        b = sim.simulate(small(seed=6))[1]
        self.assertNotEqual(a["p50"], b["p50"])


class Limits(unittest.TestCase):
    def test_bucket_grants_at_its_rate_after_the_burst(self):
        s = sim.Sim()
        b = sim.Bucket(s, "t", qps=5.0, burst=10)
        for _ in range(60):
            b.acquire(lambda: None)
        s.run()
        self.assertAlmostEqual(max(b.grants), (60 - 10) / 5.0)
        self.assertFalse(sim.over_rate(b.grants, 5.0, 10))

    def test_over_rate_sees_too_many_grants(self):
        self.assertTrue(sim.over_rate([0.0] * 11, 5.0, 10))
        self.assertFalse(sim.over_rate([0.0] * 10, 5.0, 10))
        self.assertTrue(sim.over_rate([0.0] * 10 + [0.1], 5.0, 10))

    def test_apf_rejects_a_flow_past_its_queues_then_serves_it(self):
        s = sim.Sim()
        import random
        lv = sim.Level(s, "x", 1, random.Random(1), sim.Params())
        done = []

        def send(i):
            lv.submit("one", lambda: done.append(i), lambda: send(i))

        for i in range(400):
            send(i)
        self.assertEqual(lv.rejected, 400 - 1 - sim.APF_HAND * sim.APF_QUEUE_LEN)
        s.run()
        self.assertEqual(sorted(done), list(range(400)))
        self.assertEqual(lv.max_busy, 1)

    def test_foreman_qps_bounds_dispatch(self):
        # Two writes per launch at client-go's 5 QPS: at most ~2.5 tasks/s.
        _, s = sim.simulate(small(tasks=300, run_median_s=30.0))
        self.assertLessEqual(s["rate"], 2.5 * 1.1)
        self.assertEqual(s["dominant"], "foreman client")

    def test_raising_the_foreman_moves_the_limit_to_the_job_controller(self):
        _, s = sim.simulate(small(tasks=600, run_median_s=60.0, **sim.PROFILES["foreman-50"]))
        self.assertEqual(s["dominant"], "job controller")
        self.assertGreater(s["rate"], 2.5 * 2)


class CommandLine(unittest.TestCase):
    def test_unknown_assumption_is_refused(self):
        with redirect_stderr(io.StringIO()) as err, self.assertRaises(SystemExit) as e:
            sim.main(["--set", "nope=1"])
        self.assertEqual(e.exception.code, 2)
        self.assertIn("nope=1", err.getvalue())

    def test_bad_values_are_refused_naming_the_field(self):
        for argv, needle in [(["--tasks", "0"], "`tasks`"),
                             (["--set", "kcm_qps=0"], "`kcm_qps`"),
                             (["--set", "kcm_qps=fast"], "kcm_qps=fast")]:
            with redirect_stderr(io.StringIO()) as err, self.assertRaises(SystemExit) as e:
                sim.main(argv)
            self.assertEqual(e.exception.code, 2, argv)
            self.assertIn(needle, err.getvalue())

    def test_table_for_one_row(self):
        out = io.StringIO()
        with redirect_stdout(out):
            sim.main(["--tasks", "200", "--mode", "burst", "--profile", "tuned",
                      "--set", "run_median_s=30"])
        lines = out.getvalue().splitlines()
        self.assertEqual(len(lines), 3)
        self.assertIn("| 200 | burst | tuned |", lines[2])
        self.assertFalse(math.isnan(float(lines[2].split("|")[4])))


if __name__ == "__main__":
    unittest.main()
