"""Requests per second per API key: a token bucket in Redis, so every API process shares one bucket per key."""

import logging
import math
from typing import Any

import redis

from shared.core import tasks
from shared.core.errors import RateLimited

log = logging.getLogger(__name__)

# One token bucket for requests and failed authentications. KEYS[1]: the bucket (under traincast:rate:, which the
# API's Redis ACL user may write); ARGV: rate per second, capacity, and what to do: 'request' takes a token when there
# is one, 'failure' takes one down to empty, 'look' changes nothing. Redis's own clock, so API hosts' clocks need not
# agree. Returns the seconds until the bucket holds a token, as a string (Lua would round a number); for 'request',
# '0' means a token was taken.
BUCKET = """
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) + tonumber(now_parts[2]) / 1000000
local rate, capacity, mode = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local held = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(held[1]) or capacity
local at = tonumber(held[2]) or now
tokens = math.min(capacity, tokens + math.max(0, now - at) * rate)
local wait = 0
if mode == 'request' then
  if tokens >= 1 then tokens = tokens - 1 else wait = (1 - tokens) / rate end
elseif mode == 'failure' then
  tokens = math.max(0, tokens - 1)
end
if mode ~= 'look' then
  redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
  redis.call('EXPIRE', KEYS[1], math.ceil(capacity / rate) + 1)
end
if mode ~= 'request' and tokens < 1 then wait = (1 - tokens) / rate end
return tostring(wait)
"""

_script: Any = None


def _bucket(key: str, *, rate_per_s: float, capacity: float, mode: str) -> float:
    """Run BUCKET (registered once: each call sends its SHA, and redis-py loads it again on NOSCRIPT)."""
    global _script
    if _script is None:
        _script = tasks.redis_client(socket_connect_timeout=1, socket_timeout=1).register_script(BUCKET)
    return float(_script(keys=[key], args=[rate_per_s, capacity, mode]))


def failed_auth(*, buckets: list[tuple[str, float]], take: bool) -> None:
    """Failed authentications, per bucket (name, failures a minute): take one (a failure) or only look; RateLimited
    when a bucket is empty, before any secret is checked. Fails open when Redis is unreachable, as the rate does."""
    for name, per_min in buckets:
        try:
            key, mode = f"traincast:rate:authfail:{name}", "failure" if take else "look"
            wait = _bucket(key, rate_per_s=per_min / 60, capacity=per_min, mode=mode)
        except redis.RedisError as exc:
            log.warning("failed authentications not counted for %s: Redis unreachable (%s)", name, exc)
            return
        if wait > 0 and not take:
            retry_after = max(1, math.ceil(wait))
            raise RateLimited(
                f"too many failed authentications from this client or for this key id; retry after {retry_after} s",
                retry_after_s=retry_after,
            )


def take(*, key_id: str, rate_per_s: float) -> None:
    """Take one request from the key's bucket (a second's worth at most); RateLimited when it is empty."""
    capacity = max(1.0, rate_per_s)
    try:
        wait = _bucket(f"traincast:rate:{key_id}", rate_per_s=rate_per_s, capacity=capacity, mode="request")
    except redis.RedisError as exc:
        # Fail open: a broker outage must not lock every key out of reading its jobs.
        log.warning("rate limit not applied to key %s: Redis unreachable (%s)", key_id, exc)
        return
    if wait == 0:
        return
    retry_after = max(1, math.ceil(wait))
    raise RateLimited(
        f"API key {key_id} is over its {rate_per_s:g} requests per second; retry after {retry_after} s",
        retry_after_s=retry_after,
    )
