"""Attacks 18. Round four: one rule for completed, traces, leaks after kill -9.

Mixed into `attacks.Attacks`; each `attack_*` method raises `Failed` or
returns a note. See attacks.py for how they run.
"""

# pylint: disable=wildcard-import,unused-wildcard-import
from attacklib import *


class RuntimeAttacks:
  """one rule for completed, traces, leaks after kill -9 (issue 34)."""

  # 18a-f. Traces: one reader, naming the file, the line and the field.

  def _trace(self, name, edit=None, raw=None) -> str:
    """A copy of the base run whose first timed commit row is edited (or whose metrics.jsonl is `raw`)."""
    trace = self.copy(name)
    path = os.path.join(trace, "metrics.jsonl")
    if raw is not None:
      with open(path, "wb") as f:
        f.write(raw)
      return trace
    with open(path) as f:
      rows = [json.loads(line) for line in f if line.strip()]
    first = next(r for r in rows if r.get("event") == "commit" and
                 r.get("window_end") is not None)
    edit(first)
    with open(path, "w") as f:
      for r in rows:
        f.write(json.dumps(r) + "\n")  # json writes Infinity as asked.
    return trace

  def _bad_trace(self, name, *names, **trace):
    run_dir = self._trace(name, **trace)
    workdir = self.path(name + "_run")
    started = time.monotonic()
    line = expect_exit_2_naming(
        cli("train", "--dataset=digits", "--num_workers=2", "--epochs=1",
            "--backend=simulated", "--cluster=paper",
            f"--speed_model=trace:{run_dir}", f"--workdir={workdir}",
            deadline=30), "train", "metrics.jsonl", "line", *names)
    if os.path.lexists(workdir):
      raise Failed(f"left {workdir} behind")
    return f"{time.monotonic() - started:.1f} s: {line[:150]}"

  def attack_18a(self):
    """a trace row with "window_end": Infinity: exit 2 naming the line"""
    return self._bad_trace("trace_inf", "Infinity",
                           edit=lambda r: r.update(window_end=float("inf")))

  def attack_18b(self):
    """a trace row with "worker": 1000000000: exit 2 at once, no empty workdir"""
    return self._bad_trace("trace_big_worker", "worker",
                           edit=lambda r: r.update(worker=1000000000))

  def attack_18c(self):
    """a trace row with "worker": null: exit 2 naming the field"""
    return self._bad_trace("trace_null_worker", "worker",
                           edit=lambda r: r.update(worker=None))

  def attack_18d(self):
    """a trace row with "worker": -5: exit 2 naming the field"""
    return self._bad_trace("trace_negative_worker", "worker",
                           edit=lambda r: r.update(worker=-5))

  def attack_18e(self):
    """a trace row with "time": "abc": exit 2 naming the field"""
    return self._bad_trace("trace_bad_time", "time",
                           edit=lambda r: r.update(time="abc"))

  def attack_18f(self):
    """a binary file as a trace: exit 2 naming the file and line"""
    return self._bad_trace("trace_binary", "UTF-8",
                           raw=bytes(range(256)) * 16)

  # 18g-i. One rule of "completed" on every backend.

  def _diverging(self, name, backend):
    workdir = self.path(name)
    result = cli("train", "--dataset=digits", "--num_workers=2", "--epochs=1",
                 f"--backend={backend}", "--noplots",
                 "--server_optimizer=delayed_nesterov",
                 "--server_learning_rate=1e30", f"--workdir={workdir}")
    self.workdirs.append(workdir)
    line = expect_one_line_error(result, "train")
    summary = expect_outcome(workdir, "failed")
    return f"{summary.get('failure', '')[:120]}"

  def attack_18g(self):
    """--server_learning_rate=1e30 on the simulator: failed, not completed"""
    return self._diverging("diverge_simulated", "simulated")

  def attack_18h(self):
    """the same run on processes: failed too"""
    return self._diverging("diverge_processes", "processes")

  def attack_18i(self):
    """--max_seconds=0.001: fails without calling it divergence"""
    workdir = self.path("tiny_budget")
    line = expect_one_line_error(
        cli("train", *SMALL, "--max_seconds=0.001", f"--workdir={workdir}"),
        "train")
    self.workdirs.append(workdir)
    if "diverg" in line or "non-finite" in line:
      raise Failed(f"calls it divergence: {line}")
    return line

  # 18j. kill -9 of a whole run, then --resume: nothing left in /dev/shm.

  def attack_18j(self):
    """kill -9 of the process group after a checkpoint; --resume leaves no segment or semaphore"""
    workdir = self.path("killed9")
    proc = start("train", "--dataset=digits", "--num_workers=2",
                 "--epochs=6", "--checkpoint_every_seconds=1", "--noplots",
                 f"--workdir={workdir}")
    self.workdirs.append(workdir)
    pids_file = os.path.join(workdir, "pids.json")
    checkpoints = os.path.join(workdir, "checkpoints")
    wait_until(proc, lambda: os.path.exists(pids_file) and os.path.isdir(
        checkpoints) and any(n.isdigit() for n in os.listdir(checkpoints)))
    kill_group(proc)
    finish(proc)
    names = read_json(pids_file)
    left = ["/dev/shm/" + n for n in names.get("shm_segments", [])] + [
        "/dev/shm/sem." + n.lstrip("/") for n in names.get("semaphores", [])]
    before = [p for p in left if os.path.exists(p)]
    expect_success(cli("train", "--resume", f"--workdir={workdir}",
                       "--noplots"), "the resume")
    after = [p for p in left if os.path.exists(p)]
    if after:
      raise Failed(f"still in /dev/shm after the resume: {after}")
    return f"{len(before)} names left by the kill, none after the resume"

  # 18k. --cluster=this_host measures this machine and runs.

  def attack_18k(self):
    """--backend=simulated --cluster=this_host completes"""
    workdir = self.path("this_host")
    result = cli("train", "--dataset=digits", "--num_workers=2", "--epochs=1",
                 "--backend=simulated", "--cluster=this_host", "--noplots",
                 f"--workdir={workdir}", deadline=600)
    self.workdirs.append(workdir)
    expect_success(result, "--cluster=this_host")
    return expect_outcome(workdir, "completed").get("simulated_seconds")

  # 18l-m. Strict JSON.

  def attack_18l(self):
    """a diverged run's summary.json and metrics.jsonl parse as strict JSON"""
    workdir = self.path("diverge_processes")
    if not os.path.isdir(workdir):
      self._diverging("diverge_processes", "processes")

    def strict(text):
      return json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(
          Failed(f"{c} in {workdir}")))

    with open(os.path.join(workdir, "summary.json")) as f:
      summary = strict(f.read())
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
      rows = [strict(line) for line in f if line.strip()]
    return (f"{len(rows)} rows; final_test_loss "
            f"{summary.get('final_test_loss')!r}")

  def attack_18m(self):
    """--speed_model=speeds:1e308,1e-308,1,1: refused, exit 2"""
    workdir = self.path("extreme_speeds")
    line = expect_exit_2_naming(
        cli("train", "--dataset=digits", "--num_workers=4",
            "--backend=simulated", "--speed_model=speeds:1e308,1e-308,1,1",
            f"--workdir={workdir}"), "train", "--speed_model")
    if os.path.lexists(workdir):
      raise Failed(f"left {workdir} behind")
    return line

  def attack_18n(self):
    """Ctrl-C at every moment of a simulated run's first seconds: exit 130 and one line, never a segmentation fault"""
    seen = []
    for delay in (1.0, 2.5, 4.0, 5.0, 5.5, 6.0, 6.5, 7.0, 7.5, 8.0, 9.0, 10.5):
      workdir = self.path(f"interrupt_{delay:g}")
      proc = start("train", "--dataset=digits", "--backend=simulated",
                   "--num_workers=4", "--communication_window=2",
                   "--epochs=12", "--noplots", f"--workdir={workdir}")
      time.sleep(delay)
      proc.send_signal(signal.SIGINT)
      result = finish(proc)
      if result.rc == 0:  # It ended before the interrupt came.
        continue
      if result.rc != 130 or "Fatal Python error" in result.stderr:
        raise Failed(f"Ctrl-C after {delay:g} s: exit {result.rc}; "
                     f"{lines_of(result.stderr)[-3:]}")
      seen.append(expect_one_line_error(result, "train"))
    if not seen:
      raise Failed("every run ended before its interrupt")
    return f"{len(seen)} interrupts, each exit 130: {seen[-1]}"
