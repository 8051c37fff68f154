"""The worker protocol's waiting claims: long-poll claims parked until an action may be claimable,
and the wake that releases them."""
