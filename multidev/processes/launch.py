"""What ``--processes N [--nnodes M --node-rank R --master HOST:PORT]`` asks for."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from multidev.errors import MultidevError

DEFAULT_MASTER = "127.0.0.1:29500"


def parse_master(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise MultidevError(f"--master {text!r}: write HOST:PORT, e.g. 127.0.0.1:29500")
    return host, int(port)


def ephemeral_ports() -> tuple[int, int]:
    """The ports this kernel hands out to outgoing connections (Linux's range, else IANA's)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 49152, 65535


@dataclass(frozen=True)
class Launch:
    """What ``--processes N [--nnodes M --node-rank R --master HOST:PORT]`` asks for."""

    processes: int = 1           # worker processes on this machine
    nnodes: int = 1              # machines in the job
    node_rank: int = 0           # this machine's place among them
    master: str = DEFAULT_MASTER  # where the workers meet (node 0 listens there)
    timeout: float = 60.0        # seconds to wait for every machine to arrive (and, done, for the others to end)
    max_restarts: int = 0        # times the job starts again after a worker dies (--max-restarts)
    checkpoint: Optional[str] = None  # what a restarted job resumes from (rank 0 writes it)

    def __post_init__(self) -> None:
        if self.processes < 1 or self.nnodes < 1:
            raise MultidevError(f"--processes and --nnodes must be at least 1, got {self.processes} and {self.nnodes}")
        if not 0 <= self.node_rank < self.nnodes:
            raise MultidevError(f"--node-rank {self.node_rank} with --nnodes {self.nnodes}: "
                                f"number the machines 0 to {self.nnodes - 1}")
        parse_master(self.master)

    @property
    def size(self) -> int:
        return self.processes * self.nnodes

    def port_risk(self) -> Optional[str]:
        """Why ``master``'s ports may be lost while machines wait for machine 0, or None.

        A process that keeps connecting to a port nobody listens on yet is, now
        and then, given that very port for its own end when it lies in the
        ephemeral range: it connects to itself and holds the port (measured
        here: once in ~14,000 tries), and machine 0 then cannot listen there.
        Machines that wait for machine 0 (or a restart) try for longest; the
        workers of one machine, started with their rendezvous, for a moment.
        """
        if self.size == 1:
            return None  # one process meets nobody
        low, high = ephemeral_ports()
        port = parse_master(self.master)[1]
        if port + self.max_restarts < low or port > high:
            return None
        return (f"--master port {port} (to {port + self.max_restarts} with restarts) lies in this machine's ephemeral "
                f"range {low}-{high}: a process waiting for machine 0 can take it by connecting to itself; choose a "
                f"port below {low}, such as 29500")
