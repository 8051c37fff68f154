"""Names shared by the models and the pure service modules (no Django imports here)."""

# The eight per-run execution counters of DOMAIN §12.1.
COUNTER_FIELDS: tuple[str, ...] = (
    "llm_request_count",
    "loop_count",
    "tool_count",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "total_tokens",
)

# The characters of a run's response the store keeps (DOMAIN §12.3); the HTTP worker sends no more.
RESPONSE_CAP = 65536

# The largest integers a 32-bit and a 64-bit column hold: an epoch, revision, event id, duration or
# counter beyond them is invalid input (refused with 422, or a counter stored as 0, DOMAIN §12.1)
# instead of an overflow.
MAX_INT32 = 2**31 - 1
MAX_INT64 = 2**63 - 1

# What an attempt of `POST /api/v1/claims` tells the long-poll claim that runs it
# (workcenter/dispatch/longpoll.py), as values, never as headers: the long-poll puts a dict under
# this key of the attempt's ASGI scope and the route sets `contended` (nothing claimed, but a
# candidate another transaction held at that moment was skipped, services.claims.claim_attempt:
# the long-poll claim tries again shortly instead of parking) and `more` (another action was
# claimable beside the one claimed; one commit can make several claimable: a stage with several
# dependants, a plan's parallel branches, a retry: the long-poll claim wakes the next parked claim
# of its process). A claim without `wait_ms` is asked for neither.
CLAIM_HINTS = "workcenter.claim_hints"

# the environment variable that lets a web server honour the demo's one-time sign-in links
# (workcenter/demo_login.py); only `manage.py demo` sets it, for the server it starts with debug on
DEMO_LOGIN_ENV = "WORKCENTER_DEMO_LOGIN"
