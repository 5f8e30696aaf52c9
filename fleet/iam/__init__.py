"""The fleet's AWS calls per principal (calls.py), the least-privilege policies for them (policies.py),
and an evaluator that proves a policy allows those calls and nothing beside them (evaluate.py)."""

from fleet.iam.calls import Call, Request, Scope, calls
from fleet.iam.evaluate import allowed
from fleet.iam.policies import ROLES, agent_policy, controller_policy, operator_policy, policy

__all__ = [
    "ROLES",
    "Call",
    "Request",
    "Scope",
    "agent_policy",
    "allowed",
    "calls",
    "controller_policy",
    "operator_policy",
    "policy",
]
