"""Events are stored in the service's transaction and published only after commit."""
import pytest

from workcenter import events, services
from workcenter.models import Event


@pytest.fixture
def published():
    seen = []
    events.set_publisher(seen.append)
    yield seen
    events.set_publisher(None)


def test_event_published_on_commit_only(store, published, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        item = store.linear()
    assert published == [] and len(callbacks) == 1
    callbacks[0]()
    assert [e.type for e in published] == ["work_item.created"]
    assert published[0].pk == Event.objects.get(work_item=item).pk


def test_every_service_publishes_its_event(store, published, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        item = store.linear()
        c = store.claim()
        store.submit(c, {"outcome": "failed", "error": "x"})
        services.work_item_retry(item_id=item.pk, now=store.now())
        services.work_item_cancel(item_id=item.pk, now=store.now())
    assert [e.type for e in published] == ["work_item.created", "run.claimed", "action.failed",
                                           "work_item.retried", "work_item.cancelled"]
    assert [e.pk for e in published] == sorted(e.pk for e in published)


def test_failed_transaction_publishes_nothing(store, published, django_capture_on_commit_callbacks):
    from workcenter.services.hooks import inject_fault

    with django_capture_on_commit_callbacks(execute=True):
        store.linear()
        c = store.claim()
    assert len(published) == 2
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        with inject_fault("before_event"), pytest.raises(RuntimeError):
            store.complete(c)
    assert callbacks == [] and len(published) == 2


def test_publisher_failure_does_not_break_the_service(store, django_capture_on_commit_callbacks):
    def boom(event):
        raise RuntimeError("channel layer down")

    events.set_publisher(boom)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            item = store.linear()
        assert item.status == "ready"
    finally:
        events.set_publisher(None)
