"""Attacks 22: scripts/fit_cluster.py's command line: bad outputs and numbers.

Mixed into `attacks.Attacks`; each `attack_*` method raises `Failed` or
returns a note. See attacks.py for how they run.
"""

# pylint: disable=wildcard-import,unused-wildcard-import
from attacklib import *

FIT = os.path.join(REPO, "scripts", "fit_cluster.py")


def fit_cluster(*args: str, deadline: float = 30.0) -> Result:
  """`python scripts/fit_cluster.py ARGS` in a session of its own."""
  return finish(subprocess.Popen(
      [sys.executable, FIT, *args], cwd=REPO, env=child_env(), text=True,
      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      start_new_session=True), deadline)


class FitAttacks:
  """scripts/fit_cluster.py refuses what it cannot do, in one line, before it fits."""

  def attack_22a(self):
    """fit_cluster.py --output=/proc/x: one line naming --output, exit 2, nothing written"""
    line = expect_exit_2_naming(fit_cluster("--output=/proc/x.json"),
                                "fit_cluster.py", "--output=/proc/x.json")
    for bad in ("/proc/x.json", "/proc/x.png"):
      if os.path.lexists(bad):
        raise Failed(f"wrote {bad}")
    # A name that is not .json, and a directory where the JSON would go.
    expect_exit_2_naming(fit_cluster("--output=/proc/x"), "fit_cluster.py",
                         "--output=/proc/x", ".json")
    directory = self.path("fit_out.json")
    os.makedirs(directory)
    expect_exit_2_naming(fit_cluster(f"--output={directory}"),
                         "fit_cluster.py", "is a directory")
    return line

  def attack_22b(self):
    """fit_cluster.py's numbers out of range (--sigma_step=1e-7, --seeds, --sigma_max, --rounds): one line each, exit 2, at once"""
    lines = []
    for flag, value in (("--sigma_step", "1e-7"), ("--sigma_step", "0"),
                        ("--sigma_step", "nan"), ("--sigma_max", "inf"),
                        ("--sigma_max", "-1"), ("--seeds", "0"),
                        ("--seeds", "1000000"), ("--rounds", "0"),
                        ("--seeds", "two")):
      out = self.path("fit_bad.json")
      started = time.monotonic()
      line = expect_exit_2_naming(
          fit_cluster(f"{flag}={value}", f"--output={out}"),
          "fit_cluster.py", flag)
      if time.monotonic() - started > 20:
        raise Failed(f"{flag}={value} took {time.monotonic() - started:.0f} s "
                     "to be refused")
      if os.path.lexists(out):
        raise Failed(f"{flag}={value} wrote {out}")
      lines.append(line)
    return lines[0]
