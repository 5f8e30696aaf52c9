"""Hostile probes over real HTTP: each gets a short, clear problem, refused before it costs anything, and changes
nothing (tests/integration/test_limits.py holds the earlier ones)."""

import json
from typing import Any

import httpx
import pytest

from tests.integration.test_keys import new_key
from tests.integration.test_limits import GOOD, assert_problem, counts
from tests.support.stack import Stack, http, running

JSON = {"content-type": "application/json"}


def post_job(stack: Stack, body: bytes | dict[str, Any], **headers: str) -> httpx.Response:
    """POST /v1/jobs with a raw or JSON body (the admin key unless headers say otherwise)."""
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return http.post(f"{stack.url}/v1/jobs", content=content, headers=JSON | headers)


def test_a_body_of_200000_bad_items_gets_one_short_answer(api_only: Stack) -> None:
    """839 KB of strings in batch_sizes: one error (the list is too long), a few KB, nothing stored."""
    before = counts()
    r = post_job(api_only, GOOD | {"batch_sizes": ["x"] * 209_695})
    assert_problem(r, 422, "batch_sizes")
    assert len(r.content) < 4_000 and r.json()["error_count"] <= 3
    many = {f"field{i}": i for i in range(50_000)}
    r = post_job(api_only, GOOD | many)
    assert_problem(r, 422, "50004 fields")
    assert len(r.content) < 4_000
    assert counts() == before


def test_every_error_listed_is_capped_in_count_and_length(api_only: Stack) -> None:
    """Bad items that pass the structural bound still list at most 20 errors, and say how many there were."""
    r = post_job(api_only, GOOD | {"batch_sizes": ["x" * 1000] * 500})
    assert_problem(r, 422, "more)")
    body = r.json()
    assert len(body["errors"]) == 20 and body["error_count"] >= 500 and len(r.content) < 12_000


def test_types_are_strict(api_only: Stack) -> None:
    """true is not 1, "8" is not 8, "yes" is not true, 8.0 is not a batch size."""
    before = counts()
    for bad in (
        {"epochs": True}, {"batch_sizes": ["8"]}, {"channels_last": "yes"}, {"batch_sizes": [8.0]},
        {"batch_sizes": {"min": "1", "max": 4}}, {"image_size": "64"},
    ):  # fmt: skip
        r = post_job(api_only, GOOD | bad)
        assert_problem(r, 422, next(iter(bad)))
    assert counts() == before


def test_a_5000_digit_number_is_a_422(api_only: Stack) -> None:
    """A body json cannot turn into values is malformed (it was a bare 400)."""
    r = post_job(api_only, b'{"cnns": ["resnet18"], "machines": ["local"], "batch_sizes": [' + b"9" * 5000 + b"]}")
    assert_problem(r, 422, "malformed JSON")


def test_who_asks_is_checked_before_a_malformed_body(api_only: Stack) -> None:
    """An anonymous or wrong key with a malformed body gets 401, not the parse position; a good key gets the 422."""
    for headers in ({"authorization": ""}, {"authorization": "Bearer tc_nope_nope"}):
        r = post_job(api_only, b'{"cnns": [', **headers)
        assert_problem(r, 401)
        assert "malformed" not in r.text
    assert_problem(post_job(api_only, b'{"cnns": ['), 422, "malformed JSON")


def test_an_empty_idempotency_key_is_refused_and_a_range_equals_its_list(api_only: Stack) -> None:
    """An empty key is no key (422); the same batch sizes as a range or as a list are one request for a key."""
    assert_problem(post_job(api_only, GOOD, **{"Idempotency-Key": ""}), 422, "idempotency-key")
    key = {"Idempotency-Key": "range-or-list"}
    first = post_job(api_only, GOOD | {"batch_sizes": {"min": 8, "max": 16, "step": 8}}, **key)
    again = post_job(api_only, GOOD | {"batch_sizes": [16, 8]}, **key)
    assert first.status_code in (200, 201, 202) and again.status_code in (200, 201, 202), again.text
    assert first.json()["id"] == again.json()["id"]


def test_failed_authentication_is_throttled_per_address_and_key_id(
    service_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """After API_AUTH_FAILURES_PER_MIN wrong secrets from an address, further wrong ones get 429 with Retry-After;
    the right key still gets in (a valid key is never refused for someone else's failures); requests without a key
    guess nothing and count not; a made-up X-Forwarded-For is not believed without API_TRUSTED_PROXIES (80 of 80
    were answered 401 with a new address each). (150 wrong secrets for a real key id went through in 0.37 s before.)"""
    for stack in running({**service_env, "API_AUTH_FAILURES_PER_MIN": "5"}, tmp_path_factory, "auth", ("api",)):
        key = new_key("read")
        key_id = key.split("_")[1]
        wrong = f"tc_{key_id}_{'A' * 43}"
        for _ in range(10):  # no key: 401 each time, never 429
            assert http.get(f"{stack.url}/v1/jobs", headers={"Authorization": ""}).status_code == 401
        codes = [http.get(f"{stack.url}/v1/jobs", headers={"Authorization": f"Bearer {wrong}",
                                                            "X-Forwarded-For": f"203.0.113.{i}"}).status_code
                 for i in range(8)]  # fmt: skip
        assert codes[:5] == [401] * 5 and set(codes[5:]) == {429}, codes
        r = http.get(f"{stack.url}/v1/jobs", headers={"Authorization": f"Bearer {wrong}"})
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
        assert http.get(f"{stack.url}/v1/jobs", headers={"Authorization": f"Bearer {key}"}).status_code == 200


def test_a_trusted_proxy_names_the_client(
    service_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Behind a proxy named in API_TRUSTED_PROXIES, each client is throttled on its own X-Forwarded-For address:
    one attacker locked out leaves another client's wrong attempts their own count."""
    env = {**service_env, "API_AUTH_FAILURES_PER_MIN": "3", "API_TRUSTED_PROXIES": "127.0.0.0/8"}
    for stack in running(env, tmp_path_factory, "proxy", ("api",)):
        key = new_key("read")
        wrong = f"tc_{key.split('_')[1]}_{'B' * 43}"

        def attempt(client: str, url: str = stack.url, token: str = wrong) -> int:
            headers = {"Authorization": f"Bearer {token}", "X-Forwarded-For": f"{client}, 127.0.0.1"}
            return http.get(f"{url}/v1/jobs", headers=headers).status_code

        assert [attempt("198.51.100.7") for _ in range(5)] == [401, 401, 401, 429, 429]
        assert attempt("198.51.100.8") == 401  # another client behind the same proxy


def test_layout_lists_and_bandwidths_are_bounded_at_the_door(api_only: Stack) -> None:
    """200,000 GPU or node counts are refused at their length; bandwidths outside 0.1-10,000 Gbit/s (5e-324 divided
    by zero, 1e-300 gave a 304-digit cost) are refused by name; nothing is stored."""
    before = counts()
    for field in ("gpus", "nodes"):
        r = post_job(api_only, GOOD | {field: ["x"] * 200_000})
        assert_problem(r, 422, field)
        assert len(r.content) < 4_000 and "at most 16" in r.text, r.text[:500]
    for value in (5e-324, 1e-300, 0.05, 1e6):
        r = post_job(api_only, GOOD | {"internode_gbps": value, "nodes": 2})
        assert_problem(r, 422, "internode_gbps")
        network = {"source": "network_jpeg", "network_gbps": value}
        assert_problem(post_job(api_only, GOOD | {"input": network}), 422, "network_gbps")
    assert counts() == before
    ok = post_job(api_only, GOOD | {"input": {"source": "network_jpeg", "network_gbps": 0.1}})
    assert ok.status_code == 202, ok.text


def test_a_job_too_large_to_answer_is_refused_at_the_door_with_its_size(api_only: Stack) -> None:
    """12 CNNs x p4d.24xlarge x batch 1-1000 x 16 GPU and node counts (192,000 points, a 196 MB result that took the
    API down) is a 422 naming the points, the result's size and the limit; nothing is stored."""
    before = counts()
    body = {"cnns": ["resnet18", "resnet50", "vgg16", "alexnet", "densenet121", "mobilenet_v2", "googlenet",
                     "squeezenet1_1", "vgg11", "resnet34", "resnet101", "efficientnet_b0"],
            "machines": ["p4d.24xlarge"], "batch_sizes": {"min": 1, "max": 1000}, "gpus": [1, 2, 4, 8],
            "nodes": [1, 2, 3, 4]}  # fmt: skip
    r = post_job(api_only, body)
    assert_problem(r, 422, "192000 prediction points", "about 188 MB", "at most 100000")
    assert counts() == before
