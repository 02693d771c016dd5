"""A real Slurm cluster on this host, for tests/test_slurm_real.py and `make test-slurm`.

    python tests/slurm_cluster.py install      # Debian's slurm-wlm + munge through apt (root); skipped when present
    python tests/slurm_cluster.py up DIR       # munged, slurmctld and three slurmd; prints `export SLURM_CONF=...`
    python tests/slurm_cluster.py down DIR     # stops what `up DIR` started

One controller, two partitions: `one` (one node named after this host) and `two` (nodes n1 and n2: two slurmd on
this host, Port 17001/17002 style). Every node has NodeAddr=127.0.0.1 and the names n1/n2 need not resolve: the
batch scripts must find the rendezvous address from Slurm, not from /etc/hosts. Everything (config, state, spool,
logs, pid files) lives under DIR; only munged is system-wide (its key and socket are where the clients look).
What made Slurm 22.05 run here is in ../shared/NOTES.md ("A real Slurm cluster on one host").
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

PACKAGES = ("slurm-wlm", "munge", "slurm-client")
TOOLS = ("slurmctld", "slurmd", "sbatch", "srun", "scontrol", "sinfo", "squeue", "scancel", "munged", "munge")
# How long a requeued job waits before it may start again (Reason=BeginTime). Slurm's default is 120 s; the
# slurm.conf man page (22.05): AuthInfo=cred_expire "also controls how long a requeued job must wait".
CRED_EXPIRE = 10
TWO_MAX_TIME = "02:00:00"  # partition `two`'s time limit: submit must refuse a longer --time


def missing_tools() -> list[str]:
    return [t for t in TOOLS if not (shutil.which(t) or Path("/usr/sbin", t).exists())]


def install() -> None:
    """apt-get install slurm-wlm munge slurm-client, unless every tool is already there."""
    missing = missing_tools()
    if not missing:
        print("slurm-wlm and munge already installed: " + ", ".join(_versions()))
        return
    if os.geteuid() != 0:
        raise SystemExit(
            f"missing {', '.join(missing)}; installing them needs root (apt-get install {' '.join(PACKAGES)})"
        )
    if not shutil.which("apt-get"):
        raise SystemExit(f"missing {', '.join(missing)} and no apt-get here: install {' '.join(PACKAGES)} yourself")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES], check=True, env=env)
    still = missing_tools()
    if still:
        raise SystemExit(f"apt-get installed {' '.join(PACKAGES)} but {', '.join(still)} are still missing")
    print("installed: " + ", ".join(_versions()))


def _versions() -> list[str]:
    out = []
    for tool in ("slurmctld", "munged"):
        proc = subprocess.run([_path(tool), "-V"], capture_output=True, text=True)
        out.append((proc.stdout or proc.stderr).strip().splitlines()[0] if proc.returncode == 0 else tool)
    return out


def _path(tool: str) -> str:
    return shutil.which(tool) or str(Path("/usr/sbin", tool))


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def start_munge() -> int | None:
    """munged as the munge user, with the key Debian's package made (or a fresh 1024-byte one); its pid, or None
    when one was running already (then it is left alone)."""
    if subprocess.run(["munge", "-n"], capture_output=True).returncode == 0:
        return None
    user = pwd.getpwnam("munge")
    for folder in ("/run/munge", "/var/log/munge", "/var/lib/munge", "/etc/munge"):
        Path(folder).mkdir(parents=True, exist_ok=True)
        os.chown(folder, user.pw_uid, user.pw_gid)
    key = Path("/etc/munge/munge.key")
    if not key.exists():
        key.write_bytes(os.urandom(1024))
        os.chown(key, user.pw_uid, user.pw_gid)
        key.chmod(0o400)
    subprocess.run(["runuser", "-u", "munge", "--", _path("munged")], check=True)
    _wait(lambda: subprocess.run(["munge", "-n"], capture_output=True).returncode == 0, 30, "munged")
    pid_file = Path("/run/munge/munged.pid")
    text = pid_file.read_text().strip() if pid_file.exists() else ""
    return int(text) if text.isdigit() else None


def _wait(ready, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.5)
    raise RuntimeError(f"{what} not ready after {timeout:.0f} s")


def _memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    return 4096


class Cluster:
    """slurmctld + slurmd for node `local` (this host's name) in partition `one`, and n1 + n2 in partition `two`."""

    def __init__(self, root: Path, cpus: int = 2):
        self.root = Path(root).resolve()
        self.host = socket.gethostname().split(".")[0]
        self.cpus = cpus
        self.memory = max(1024, min(8000, _memory_mb() // 3))  # what each node offers (config_overrides)
        self.conf = self.root / "etc" / "slurm.conf"
        self.nodes = {self.host: "one", "n1": "two", "n2": "two"}

    @property
    def env(self) -> dict[str, str]:
        """What clients (sbatch, squeue, ... and the jobs they submit) need to find this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def write_config(self) -> None:
        for sub in ("etc", "state", "spool", "log", "run"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        ctld_port, *node_ports = _free_ports(1 + len(self.nodes))
        r = self.root
        lines = [
            "ClusterName=timealign-test",
            f"SlurmctldHost={self.host}(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            "SlurmUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=cred_expire={CRED_EXPIRE}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "SlurmdParameters=config_overrides",
            "DefMemPerCPU=1024",
            "JobRequeue=1",
            "ReturnToService=2",
            "MpiDefault=none",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=sched_interval=2",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={r}/log/jobcomp.log",
            f"StateSaveLocation={r}/state",
            f"SlurmdSpoolDir={r}/spool/slurmd-%n",
            f"SlurmctldLogFile={r}/log/slurmctld.log",
            f"SlurmdLogFile={r}/log/slurmd-%n.log",
            f"SlurmctldPidFile={r}/run/slurmctld.pid",
            f"SlurmdPidFile={r}/run/slurmd-%n.pid",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "MinJobAge=600",
            "KillWait=10",
        ]
        for (name, _), port in zip(self.nodes.items(), node_ports):
            lines.append(
                f"NodeName={name} NodeHostname={self.host} NodeAddr=127.0.0.1 Port={port} "
                f"CPUs={self.cpus} RealMemory={self.memory} State=UNKNOWN"
            )
        lines.append(f"PartitionName=one Nodes={self.host} Default=YES MaxTime=INFINITE State=UP")
        lines.append(f"PartitionName=two Nodes=n1,n2 MaxTime={TWO_MAX_TIME} State=UP")
        self.conf.write_text("\n".join(lines) + "\n")
        (self.conf.parent / "cgroup.conf").write_text("")

    def _run(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(list(cmd), capture_output=True, text=True, check=check, env={**os.environ, **self.env})

    def start(self) -> None:
        if os.geteuid() != 0:
            raise RuntimeError("starting slurmctld/slurmd needs root")
        self.write_config()
        munged = start_munge()
        if munged:  # ours: stopped with the rest
            (self.root / "run" / "munged.pid").write_text(f"{munged}\n")
        self._run(_path("slurmctld"), "-i", "-f", str(self.conf))
        _wait(lambda: self._run("scontrol", "ping", check=False).stdout.count("UP") > 0, 60, "slurmctld")
        for name in self.nodes:
            self._run(_path("slurmd"), "-f", str(self.conf), "-N", name)
        _wait(self._all_idle, 90, "the nodes (sinfo: idle)")

    def _all_idle(self) -> bool:
        out = self._run("sinfo", "--noheader", "--Node", "--format=%N %t", check=False).stdout.split()
        states = dict(zip(out[::2], out[1::2]))
        return set(states) == set(self.nodes) and all(s == "idle" for s in states.values())

    def _pids(self) -> list[int]:
        pids = []
        for pid_file in sorted((self.root / "run").glob("*.pid")):
            text = pid_file.read_text().strip()
            if text.isdigit():
                pids.append(int(text))
        return pids

    def stop(self) -> None:
        """Cancel every job and wait (up to a minute) until Slurm has ended them, then SIGTERM the daemons this
        cluster started (by their pid files), slurmd first. Without the wait, a job still running when a test fails
        outlives its slurmd: its slurmstepd and trainers go on using the CPUs after the cluster is gone."""
        if self.conf.exists():
            self._run("scancel", "--full", "--user=root", check=False)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and self._run("squeue", "--noheader", check=False).stdout.strip():
                time.sleep(1)
        pids = self._pids()
        for pid in sorted(pids, key=lambda p: p == self._ctld_pid()):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.2)
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)

    def _ctld_pid(self) -> int | None:
        path = self.root / "run" / "slurmctld.pid"
        text = path.read_text().strip() if path.exists() else ""
        return int(text) if text.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie of ours still "exists": read its state
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ", 1)[1].startswith("Z"))


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("install", "up", "down") or (argv[0] != "install" and len(argv) != 2):
        print(__doc__)
        return 2
    if argv[0] == "install":
        install()
        return 0
    cluster = Cluster(Path(argv[1]))
    if argv[0] == "up":
        cluster.start()
        print(f"export SLURM_CONF={cluster.conf}")
    else:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
