"""The injectable clock of DOMAIN §0 and the one timestamp format of the API.

Services call `clock.now()` unless given `now=`; every timestamp the API, the worker protocol
and the admin show is `iso_ms` of it (API.md §0).
"""
from datetime import datetime, timezone as dt_timezone

from django.utils import timezone


def now():
    return timezone.now()


def iso_ms(value: datetime | None, _utc=dt_timezone.utc) -> str | None:
    """ISO 8601, UTC, millisecond precision, `Z` (API.md §0); None stays None."""
    if value is None:
        return None
    tz = value.tzinfo
    if tz is not _utc:  # the store's rows and clock carry `_utc` itself: no offset to look up
        if tz is None:
            value = value.replace(tzinfo=_utc)
        elif value.utcoffset():
            value = value.astimezone(_utc)
    # isoformat is C code (strftime and an f-string cost 3x more per call); the offset is +00:00
    return value.isoformat(timespec="milliseconds")[:-6] + "Z"
