"""`traincast fleet publish`: build the agent's wheel from this checkout and upload it for the fleet's boots."""

import argparse
import sys
from typing import Any


def register(fsub: Any) -> None:
    """Add `publish` to the `fleet` sub-commands."""
    pu = fsub.add_parser("publish", help="build the agent wheel from this checkout and upload it to FLEET_ARTIFACT")
    pu.add_argument("--artifact", help="s3://bucket/prefix/ (default: FLEET_ARTIFACT)")
    pu.add_argument("--region", help="the bucket's region (default: FLEET_REGION)")


def run(args: argparse.Namespace) -> int | None:
    """Carry out `publish`; None for any other sub-command."""
    if args.fleet_command != "publish":
        return None
    # Imported here so the HTTP commands of `traincast` start without boto3.
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    from fleet import publish
    from shared.core.errors import TraincastError
    from shared.core.settings import get_settings

    settings = get_settings()
    artifact = args.artifact or settings.fleet_artifact
    if not artifact:
        print("error: no artifact location: pass --artifact s3://bucket/prefix/ or set FLEET_ARTIFACT", file=sys.stderr)
        return 2
    try:
        s3 = boto3.client("s3", region_name=args.region or settings.fleet_region)
        done = publish.publish(artifact=artifact, s3=s3)
    except TraincastError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (ClientError, BotoCoreError) as exc:
        print(f"error: uploading to {artifact} failed: {exc}", file=sys.stderr)
        return 1
    print(f"published {done.wheel_key} (sha256 {done.sha256})")
    print(f"instances booted from now on install it; the fleet needs FLEET_ARTIFACT={done.uri}")
    return 0
