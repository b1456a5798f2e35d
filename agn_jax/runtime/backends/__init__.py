"""What differs between the backends; the loops and the supervisor they share are one level up.

  processes.py       the default: spawn, watch and stop processes on this host
  ray.py             the same loops as Ray actors (`ray_head.py`: a private head)
  simulated.py       drives the simulator (`agn_jax.sim`) round by round
  calibration.py     `--cluster=this_host`: the simulator's clock measured here
  inprocess.py       the parts as threads, for tests

`agn_jax.runtime.backend.BACKENDS` names each by module path, imported when
chosen.
"""
