"""The API's one timestamp format (API.md §0), whatever time zone a value carries."""
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from workcenter.clock import iso_ms

UTC_VALUE = datetime(2026, 12, 5, 9, 30, 1, 123456, tzinfo=timezone.utc)


def test_every_time_zone_form_gives_the_same_utc_milliseconds():
    expected = "2026-12-05T09:30:01.123Z"
    assert iso_ms(UTC_VALUE) == expected
    assert iso_ms(UTC_VALUE.replace(tzinfo=None)) == expected  # naive values are UTC
    assert iso_ms(UTC_VALUE.astimezone(ZoneInfo("UTC"))) == expected
    assert iso_ms(UTC_VALUE.astimezone(timezone(timedelta(hours=2)))) == expected
    assert iso_ms(UTC_VALUE.astimezone(ZoneInfo("America/New_York"))) == expected
    assert iso_ms(None) is None


def test_whole_seconds_keep_their_milliseconds():
    assert iso_ms(datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)) == "2026-01-02T03:04:05.000Z"
