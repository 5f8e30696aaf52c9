"""A small evaluator of identity-based IAM policy documents, to prove what a policy allows without AWS.

It follows AWS's rules for what it supports: a request is allowed when some Allow statement matches
(its Action, Resource and every condition) and no Deny statement does. Action names match
case-insensitively with * and ? wildcards; resources match case-sensitively with the same wildcards.
Conditions: StringEquals, StringNotEquals, StringLike, StringNotLike, ArnEquals, ArnLike, Bool,
Null, with the ForAnyValue: / ForAllValues: prefixes and the IfExists suffix. Anything else it
does not know (NotResource, policy variables, other operators) raises instead of guessing.
"""

import re
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any

from fleet.iam.calls import Request

Context = Mapping[str, Iterable[str]]


class Unsupported(ValueError):
    """A policy element this evaluator does not evaluate."""


@cache
def _glob(pattern: str, *, case: bool) -> re.Pattern[str]:
    body = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(f"^{body}$", 0 if case else re.IGNORECASE)


def matches(pattern: str, value: str, *, case: bool = True) -> bool:
    """IAM's wildcard match: * any run of characters, ? one character."""
    if "${" in pattern:
        raise Unsupported(f"policy variables are not evaluated: {pattern}")
    return bool(_glob(pattern, case=case).match(value))


def _listed(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _one(operator: str, wanted: list[str], got: str) -> bool:
    if operator in ("StringEquals", "ArnEquals"):
        return got in wanted
    if operator == "StringNotEquals":
        return got not in wanted
    if operator in ("StringLike", "ArnLike"):
        return any(matches(w, got) for w in wanted)
    if operator == "StringNotLike":
        return not any(matches(w, got) for w in wanted)
    if operator == "Bool":
        return got.lower() in [w.lower() for w in wanted]
    raise Unsupported(f"condition operator {operator}")


def _condition(operator: str, key: str, wanted: Any, context: Context) -> bool:
    """One condition key of one operator block against the request's context."""
    wanted = _listed(wanted)
    present = key in context
    values = list(context.get(key, ()))
    if operator == "Null":
        return (not present) == (wanted[0].lower() == "true")
    quantifier, _, op = operator.rpartition(":")
    if_exists = op.endswith("IfExists")
    op = op.removesuffix("IfExists")
    if not present:
        # A missing key fails a condition, except for IfExists, ForAllValues and the negated operators.
        return if_exists or quantifier == "ForAllValues" or (op.startswith("StringNot") and not quantifier)
    if quantifier == "ForAnyValue":
        return any(_one(op, wanted, v) for v in values)
    if quantifier == "ForAllValues":
        return all(_one(op, wanted, v) for v in values)
    if quantifier:
        raise Unsupported(f"condition quantifier {quantifier}")
    if len(values) != 1:
        # A single-valued operator on a multi-valued key: AWS needs ForAnyValue/ForAllValues there.
        return op.startswith("StringNot") and all(_one(op, wanted, v) for v in values)
    return _one(op, wanted, values[0])


def statement_matches(statement: Mapping[str, Any], request: Request) -> bool:
    """Whether one statement applies to the request (whatever its Effect)."""
    for unknown in ("NotAction", "NotResource", "Principal", "NotPrincipal"):
        if unknown in statement:
            raise Unsupported(f"{unknown} in an identity policy statement")
    if not any(matches(a, request.action, case=False) for a in _listed(statement["Action"])):
        return False
    if not any(matches(r, request.resource) for r in _listed(statement["Resource"])):
        return False
    for operator, block in statement.get("Condition", {}).items():
        for key, wanted in block.items():
            if not _condition(operator, key, wanted, request.context):
                return False
    return True


def allowed(policy: Mapping[str, Any], request: Request) -> bool:
    """Whether the policy allows the request: an Allow matches and no Deny does."""
    statements = policy["Statement"]
    statements = [statements] if isinstance(statements, Mapping) else statements
    hits = [st["Effect"] for st in statements if statement_matches(st, request)]
    return "Allow" in hits and "Deny" not in hits
