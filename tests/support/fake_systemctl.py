"""A stand-in for systemd's `systemctl` and `shutdown`, enough to run the fleet's boot script off EC2.

`systemctl enable --now UNIT` starts a supervisor that runs the unit's ExecStart with its
EnvironmentFile and WorkingDirectory, records the main pid, and runs ExecStopPost when it exits,
with SERVICE_RESULT and EXIT_STATUS set as systemd sets them. Unlike systemd, the service also
inherits the caller's environment (so a test can shorten poll intervals and point AWS clients at
moto). `shutdown ARGS` is recorded in STATE/shutdown.log, never carried out.
"""

import os
import shlex
import subprocess
import sys
from pathlib import Path

STATE = Path(os.environ["FAKE_SYSTEMD_STATE"])
UNITS = Path(os.environ.get("TRAINCAST_UNIT_DIR", "/etc/systemd/system"))


def parse(unit: Path) -> dict[str, str]:
    """Key=value lines of a unit file (the last of a key wins, as good as we need)."""
    out = {}
    for line in unit.read_text().splitlines():
        if "=" in line and not line.lstrip().startswith(("#", "[")):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def command(line: str) -> list[str]:
    """An Exec line as argv; systemd turns $$ into a literal $."""
    return shlex.split(line.replace("$$", "$"))


def publish(path: Path, text: str) -> None:
    """Write a file the test polls all at once: it never sees the file there and still empty."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def supervise(unit_name: str) -> int:
    """Run the service to its end, then its ExecStopPost."""
    unit = parse(UNITS / unit_name)
    env = dict(os.environ)
    for line in Path(unit["EnvironmentFile"]).read_text().splitlines():
        if "=" in line:
            key, _, value = line.partition("=")
            env[key] = value
    with open(STATE / f"{unit_name}.log", "ab") as log:
        proc = subprocess.Popen(command(unit["ExecStart"]), cwd=unit.get("WorkingDirectory"), env=env,
                                stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        publish(STATE / f"{unit_name}.pid", str(proc.pid))
        code = proc.wait()
        publish(STATE / f"{unit_name}.exit", str(code))
        result = "success" if code == 0 else ("signal" if code < 0 else "exit-code")
        post = unit.get("ExecStopPost")
        if post:
            subprocess.run(command(post), env={**env, "SERVICE_RESULT": result, "EXIT_STATUS": str(abs(code))})
    return 0


def main(argv: list[str]) -> int:
    """systemctl daemon-reload | enable [--now] [--no-block] UNIT | supervise UNIT; shutdown ARGS."""
    STATE.mkdir(parents=True, exist_ok=True)
    if Path(argv[0]).name == "shutdown":
        with open(STATE / "shutdown.log", "a") as f:
            f.write(" ".join(argv[1:]) + "\n")
        return 0
    args = [a for a in argv[1:] if a not in ("--no-block", "--quiet")]
    if args[0] == "daemon-reload":
        return 0
    if args[0] == "supervise":
        return supervise(args[1])
    if args[0] in ("enable", "start") and ("--now" in args or args[0] == "start"):
        unit = args[-1]
        if not (UNITS / unit).is_file():
            print(f"Failed to enable unit: Unit file {unit} does not exist.", file=sys.stderr)
            return 1
        subprocess.Popen([sys.executable, __file__, "systemctl", "supervise", unit], start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        return 0
    print(f"fake systemctl: unsupported {args}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
