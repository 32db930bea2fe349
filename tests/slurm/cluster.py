"""A single-node Slurm of its own (munged, slurmctld, slurmd) in a temporary folder, stopped by the process ids it
started, whatever happens in between."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

CPUS = 8  # two tasks of the documented array (4 CPUs each) side by side, whatever the machine has
MEMORY_MB = 32768  # two tasks of 16G each; declared, not the machine's: config_overrides lets the node claim it
START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 20


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def slurm_conf(home: Path, node: str) -> str:
    """A node that is its own controller, everything it keeps under `home`. Memory is enforced by the accounting
    poller (OverMemoryKill) rather than cgroups, so the test leaves no control group behind and a task that
    exceeds its --mem ends as a cluster's would: killed, its dependants held."""
    return f"""\
ClusterName=paperleet
SlurmctldHost={node}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={home}/munge/socket
StateSaveLocation={home}/state
SlurmdSpoolDir={home}/spool
SlurmctldPidFile={home}/slurmctld.pid
SlurmdPidFile={home}/slurmd.pid
SlurmctldLogFile={home}/slurmctld.log
SlurmdLogFile={home}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
JobAcctGatherParams=OverMemoryKill
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
SwitchType=switch/none
MinJobAge=3600
NodeName={node} NodeAddr=127.0.0.1 CPUs={CPUS} RealMemory={MEMORY_MB} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


@dataclass
class Cluster:
    """A running cluster: `env` points Slurm's commands at it."""

    home: Path
    env: dict[str, str]
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def run(self, *args: str, cwd: Path | None = None) -> str:
        done = subprocess.run(args, env=self.env, cwd=cwd, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def jobs(self) -> list[dict[str, str]]:
        """Every job the controller remembers (MinJobAge keeps finished ones), one dict of fields per array task."""
        text = self.run("scontrol", "show", "job", "--oneliner")
        if "No jobs in the system" in text:
            return []
        return [dict(re.findall(r"(\w+)=(\S*)", line)) for line in text.splitlines() if line.strip()]

    def job(self, job_id: str) -> dict[str, str]:
        """One job, or one array task given as `<array>_<task>`."""
        return dict(re.findall(r"(\w+)=(\S*)", self.run("scontrol", "show", "job", "--oneliner", job_id)))

    def wait(self, predicate, what: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not within {timeout_s:.0f} s\n{self.run('squeue')}")
            time.sleep(1)

    def log(self, name: str) -> str:
        path = self.home / name
        return path.read_text(errors="replace") if path.exists() else ""


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL: a daemon that will not stop must not outlive the test."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _start(stack: ExitStack, cluster: Cluster, *argv: str) -> None:
    out = open(cluster.home / f"{Path(argv[0]).name}.out", "wb")  # noqa: SIM115 closed by the stack
    stack.callback(out.close)
    process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=cluster.env)
    cluster.started.append(process)
    stack.callback(_stop, process)  # stopped in reverse order: slurmd, slurmctld, munged


def _drain(cluster: Cluster) -> None:
    """Cancel every job of this cluster and wait until none runs, so no task's processes outlive the daemons."""
    subprocess.run(["scancel", "--full", "--user", "root"], env=cluster.env, capture_output=True, timeout=60)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline:
        done = subprocess.run(["squeue", "-h", "-t", "RUNNING,COMPLETING"], env=cluster.env, capture_output=True)
        if done.returncode != 0 or not done.stdout.strip():
            return
        time.sleep(0.5)


def _node_idle(cluster: Cluster) -> bool:
    for process in cluster.started:
        if process.poll() is not None:
            name = Path(str(process.args[0])).name  # type: ignore[index]
            raise RuntimeError(f"{name} exited {process.returncode}:\n{cluster.log(name + '.out')[-3000:]}")
    done = subprocess.run(["sinfo", "-h", "-o", "%T"], env=cluster.env, capture_output=True, text=True)
    return done.returncode == 0 and done.stdout.strip() == "idle"


@contextmanager
def slurm_cluster(home: Path) -> Iterator[Cluster]:
    """Start munged, slurmctld and slurmd (in the foreground, so their pids are ours), wait for an idle node,
    yield; stop all three afterwards, by those pids, even when starting or the test failed."""
    node = socket.gethostname().split(".")[0]
    for folder in ("munge", "state", "spool"):
        (home / folder).mkdir(parents=True)
    home.chmod(0o755)  # munged wants every folder above its socket searchable
    key = home / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    (home / "slurm.conf").write_text(slurm_conf(home, node))
    env = {**os.environ, "SLURM_CONF": str(home / "slurm.conf")}
    cluster = Cluster(home, env)
    with ExitStack() as stack:
        munge = home / "munge"
        _start(
            stack,
            cluster,
            "munged",
            "--foreground",
            "--force",
            f"--key-file={key}",
            f"--socket={munge / 'socket'}",
            f"--pid-file={munge / 'munged.pid'}",
            f"--log-file={munge / 'munged.log'}",
            f"--seed-file={munge / 'munged.seed'}",
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (munge / "socket").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        _start(stack, cluster, "slurmctld", "-D", "-f", str(home / "slurm.conf"))
        _start(stack, cluster, "slurmd", "-D", "-f", str(home / "slurm.conf"))
        stack.callback(_drain, cluster)  # first of all: no job of ours may outlive its slurmd
        cluster.wait(lambda: _node_idle(cluster), "the node to come up idle", START_TIMEOUT_S)
        yield cluster
