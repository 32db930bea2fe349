"""The trusted side of confinement: starting a worker in its box and talking to it.

- `intake`: the one reader of a submission: a regular file of its folder, read once without following a link,
  whose bytes are hashed and go into the box; anything else is refused.
- `sandbox`: the three isolation levels, what each binds and hides, and the one that is in force.
- `sandbox_init`: the init run inside the box (by path, standard library only): drops privileges, installs
  the filter, runs the worker and ends every process it left.
- `seccomp`: the allow-list of system calls, as a BPF program.
- `cgroups`: one memory and process budget for all of a worker's processes.
- `zygote`: a process that has imported torch once and forks confined workers.
- `session`: `WorkerProcess`, the judge's handle on one worker process: frames in and out, ending it for good.
- `launch`: starts the first worker before the judge imports torch, so the two overlap.
"""
