"""EC2 look-ups by instance id: is an instance the tag listing missed really gone, and what did its console say."""

import base64
import binascii
import re
from typing import Any

from botocore.exceptions import ClientError

GONE_STATES = frozenset({"shutting-down", "terminated", "not-found"})
# EC2 gives the reason a spot instance went: not a boot failure of ours.
SPOT_INTERRUPTION = "Server.SpotInstanceTermination"
CONSOLE_LINES = 40
CONSOLE_LINE_CHARS = 300
CONSOLE_CHARS = 6000
# Terminal escapes and other control characters: console text is shown in operators' terminals.
ANSI = re.compile(r"\x1b(\[[0-9;?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-_])")
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def state(ec2: Any, instance_id: str) -> tuple[str, str]:
    """(state name, state reason code) of one instance by id; ('not-found', '') when EC2 does not know it.

    Other errors (throttling, permissions) propagate: the caller must not take them for "gone".
    """
    try:
        resp = ec2.describe_instances(InstanceIds=[instance_id])
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "InvalidInstanceID.NotFound":
            return "not-found", ""
        raise
    for reservation in resp.get("Reservations", []):
        for inst in reservation.get("Instances", []):
            if inst.get("InstanceId") == instance_id:
                return str(inst["State"]["Name"]), str(inst.get("StateReason", {}).get("Code", ""))
    return "not-found", ""


def console_tail(ec2: Any, instance_id: str) -> str:
    """The last CONSOLE_LINES lines of an instance's console output, decoded and cleaned ('' if none yet)."""
    try:
        resp = ec2.get_console_output(InstanceId=instance_id, Latest=True)
    except ClientError as exc:
        # Latest=True works on Nitro types only; older ones have the boot-time capture.
        if exc.response.get("Error", {}).get("Code") not in ("UnsupportedOperation", "InvalidParameterCombination"):
            raise
        resp = ec2.get_console_output(InstanceId=instance_id)
    return tail(decode(str(resp.get("Output") or "")))


def decode(output: str) -> str:
    """EC2 sends the console base64-encoded; text that is not base64 (moto sends it plain) is kept as is."""
    try:
        return base64.b64decode("".join(output.split()), validate=True).decode("utf-8", errors="replace")
    except (binascii.Error, ValueError):
        return output


def tail(text: str) -> str:
    """The last lines of console text, without terminal escapes, each line and the whole capped."""
    text = ANSI.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))
    lines = [CONTROL.sub("", line)[:CONSOLE_LINE_CHARS] for line in text.rstrip("\n").split("\n")]
    return "\n".join(lines[-CONSOLE_LINES:])[-CONSOLE_CHARS:]
