"""Requests per second per API key: a token bucket in Redis, so every API process shares one bucket per key."""

import logging
import math
from typing import Any

import redis

from shared.core import tasks
from shared.core.errors import RateLimited

log = logging.getLogger(__name__)

# KEYS[1]: the bucket; ARGV: rate per second, capacity. Redis's own clock, so API hosts' clocks need not agree.
# Returns {1, 0} when a token was taken, else {0, seconds until one is there} (as a string: Lua would round it).
TAKE = """
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) + tonumber(now_parts[2]) / 1000000
local rate, capacity = tonumber(ARGV[1]), tonumber(ARGV[2])
local held = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(held[1]) or capacity
local at = tonumber(held[2]) or now
tokens = math.min(capacity, tokens + math.max(0, now - at) * rate)
local wait = 0
if tokens >= 1 then tokens = tokens - 1 else wait = (1 - tokens) / rate end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('EXPIRE', KEYS[1], math.ceil(capacity / rate) + 1)
if wait > 0 then return {0, tostring(wait)} end
return {1, '0'}
"""

# KEYS[1]: a bucket of failures (under traincast:rate:, which the API's Redis ACL user may write);
# ARGV: rate per second, capacity, 1 to take one (a failure) or 0 to look.
# Returns the seconds until the bucket holds a token (0: it holds one now).
FAILURES = """
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) + tonumber(now_parts[2]) / 1000000
local rate, capacity, take = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local held = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(held[1]) or capacity
local at = tonumber(held[2]) or now
tokens = math.min(capacity, tokens + math.max(0, now - at) * rate)
if take == 1 then
  tokens = math.max(0, tokens - 1)
  redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
  redis.call('EXPIRE', KEYS[1], math.ceil(capacity / rate) + 1)
end
if tokens >= 1 then return '0' end
return tostring((1 - tokens) / rate)
"""

_script: Any = None
_failures_script: Any = None


def _take_script() -> Any:
    """TAKE registered once: each call sends its SHA (EVALSHA), not the script; redis-py loads it again on NOSCRIPT."""
    global _script
    if _script is None:
        _script = tasks.redis_client(socket_connect_timeout=1, socket_timeout=1).register_script(TAKE)
    return _script


def _failures() -> Any:
    """FAILURES registered once, as TAKE is."""
    global _failures_script
    if _failures_script is None:
        _failures_script = tasks.redis_client(socket_connect_timeout=1, socket_timeout=1).register_script(FAILURES)
    return _failures_script


def failed_auth(*, buckets: list[tuple[str, float]], take: bool) -> None:
    """Failed authentications, per bucket (name, failures a minute): take one (a failure) or only look; RateLimited
    when a bucket is empty, before any secret is checked. Fails open when Redis is unreachable, as the rate does."""
    for name, per_min in buckets:
        try:
            wait = float(_failures()(keys=[f"traincast:rate:authfail:{name}"], args=[per_min / 60, per_min, int(take)]))
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
        allowed, wait = _take_script()(keys=[f"traincast:rate:{key_id}"], args=[rate_per_s, capacity])
    except redis.RedisError as exc:
        # Fail open: a broker outage must not lock every key out of reading its jobs.
        log.warning("rate limit not applied to key %s: Redis unreachable (%s)", key_id, exc)
        return
    if int(allowed) == 1:
        return
    retry_after = max(1, math.ceil(float(wait)))
    raise RateLimited(
        f"API key {key_id} is over its {rate_per_s:g} requests per second; retry after {retry_after} s",
        retry_after_s=retry_after,
    )
