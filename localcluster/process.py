"""Child processes in their own process group, stopped by PID, never by name."""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO


class ManagedProcess:
    """One long-running child process with its output in a log file.

    The child is started with ``start_new_session=True``, so it leads its own process group
    (pgid == its pid). :meth:`stop` signals that group: SIGTERM, then SIGKILL after a grace
    period, and reaps the child.
    """

    def __init__(
        self,
        name: str,
        args: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.args = [str(a) for a in args]
        self.log_path = log_path
        self._env = dict(env) if env is not None else None
        self._cwd = cwd
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> ManagedProcess:
        """Start the process (stdout and stderr to :attr:`log_path`).

        Raises:
            OSError: the executable cannot be run.
            RuntimeError: already started.
        """
        if self._proc is not None:
            raise RuntimeError(f"{self.name} already started")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        self._log.write(f"$ {' '.join(self.args)}\n".encode())
        self._log.flush()
        self._proc = subprocess.Popen(
            self.args,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=self._env,
            cwd=self._cwd,
            start_new_session=True,
        )
        return self

    @property
    def pid(self) -> int | None:
        """PID of the child (also its process-group id), or None before :meth:`start`."""
        return self._proc.pid if self._proc else None

    def exited(self) -> bool:
        """True once the child has exited (it is not reaped here, so its pid stays reserved)."""
        if self._proc is None:
            return False
        if self._proc.returncode is not None:
            return True
        try:
            info = os.waitid(os.P_PID, self._proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None

    @property
    def returncode(self) -> int | None:
        """Exit status once reaped by :meth:`stop`, else None."""
        return self._proc.returncode if self._proc else None

    def _signal_group(self, sig: signal.Signals) -> None:
        assert self._proc is not None
        try:
            os.killpg(self._proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self, grace_s: float = 10.0) -> int | None:
        """Stop the process group: SIGTERM, wait up to ``grace_s`` seconds, then SIGKILL.

        Safe to call more than once. Returns the exit status (negative: killed by that signal),
        or None when never started.
        """
        proc = self._proc
        if proc is None:
            return None
        if proc.returncode is None:
            if not self.exited():
                self._signal_group(signal.SIGTERM)
                deadline = time.monotonic() + grace_s
                while not self.exited() and time.monotonic() < deadline:
                    time.sleep(0.05)
            # The leader's pid is still reserved (not reaped): the group id cannot be reused yet,
            # so killing what is left of the group is safe.
            self._signal_group(signal.SIGKILL)
            proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        return proc.returncode

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the log file ('' if there is none)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "".join(text.splitlines(keepends=True)[-lines:])

    def __repr__(self) -> str:
        return f"ManagedProcess({self.name!r}, pid={self.pid}, log={str(self.log_path)!r})"


class ChildProcess:
    """What a harness wrapper around one :class:`ManagedProcess` shares (a gputopo component
    the tests start, crash and stop): its PID, a crash, a stop and its log. Subclasses start
    it, set ``process`` and register :meth:`stop` with ``atexit``."""

    process: ManagedProcess | None = None
    starts: int = 0

    @property
    def pid(self) -> int | None:
        """PID while started (None before)."""
        return self.process.pid if self.process is not None else None

    def kill(self) -> None:
        """SIGKILL it by PID (a crash: no shutdown code runs) and reap it."""
        if self.process is None or self.process.pid is None:
            return
        try:
            os.kill(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.stop(grace_s=0)

    def stop(self) -> None:
        """Stop it by PID (SIGTERM to its process group, then SIGKILL). Idempotent."""
        atexit.unregister(self.stop)
        if self.process is not None:
            self.process.stop(grace_s=10)

    def log_tail(self, lines: int = 40) -> str:
        """The end of its log."""
        return self.process.log_tail(lines) if self.process is not None else ""
