"""IAM's policy simulator over a principal, for every authorization of a principal's listed calls."""

from typing import Any

from fleet.iam.calls import Request, Scope, calls


def role_arn(caller_arn: str) -> str:
    """The IAM ARN to simulate for a caller: an assumed role's session ARN becomes its role's ARN.

    The session ARN drops the role's path: a role with a path must be named with --principal.
    """
    if ":assumed-role/" in caller_arn:
        head, _, rest = caller_arn.partition(":assumed-role/")
        return head.replace(":sts:", ":iam:") + ":role/" + rest.split("/", 1)[0]
    return caller_arn


def requests(scope: Scope, principal: str = "controller") -> list[Request]:
    """The distinct authorizations of a principal's calls (one RunInstances shares most of them)."""
    distinct: dict[tuple[Any, ...], Request] = {}
    for call in calls(scope, principal):
        if not call.free:
            for req in call.requests:
                distinct.setdefault((req.action, req.resource, tuple(sorted(req.context.items()))), req)
    return list(distinct.values())


def denied(iam: Any, source_arn: str, asked: list[Request]) -> list[Request]:
    """The requests IAM's simulator does not allow for the principal (one SimulatePrincipalPolicy each)."""
    out = []
    for req in asked:
        params: dict[str, Any] = {"PolicySourceArn": source_arn, "ActionNames": [req.action]}
        if req.resource != "*":
            params["ResourceArns"] = [req.resource]
        if req.context:
            params["ContextEntries"] = [
                {
                    "ContextKeyName": k,
                    "ContextKeyValues": list(v),
                    "ContextKeyType": "stringList" if len(v) > 1 else "string",
                }
                for k, v in sorted(req.context.items())
            ]
        results = iam.simulate_principal_policy(**params)["EvaluationResults"]
        if any(r["EvalDecision"] != "allowed" for r in results):
            out.append(req)
    return out
