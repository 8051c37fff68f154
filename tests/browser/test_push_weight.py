"""What the item page's stream weighs, read from the websocket frames as the browser received
them: a progress report's diff on a 6-stage item carries only what changed (≤ 2 KB), a retry
travels as a diff (the message ≤ 4 KB, no whole state, no read back), and the hello of an item
retried 17 times weighs what it does after one retry (± 10 %): a stage's earlier attempts and
every instruction stay out of it, and the page still draws all 18 attempts and shows the
instruction when the lead opens the stage (one read of it then)."""
from __future__ import annotations

import json

import pytest

from workcenter import services

from .conftest import ThreadedStore, screenshot, wait_for_js, wait_live, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

STAGES = [{"id": f"step{i}", "type": "research", "objective": f"find out {i}"} for i in range(5)]  # + triage: 6


class Weights:
    """Every text frame the item page's websocket received, with its size in bytes."""

    def __init__(self, page):
        self.frames: list[tuple[int, dict]] = []
        page.on("websocket", lambda ws: ws.on("framereceived", self._received))

    def _received(self, payload) -> None:
        data = payload if isinstance(payload, bytes) else payload.encode("utf-8")
        try:
            self.frames.append((len(data), json.loads(data)))
        except ValueError:
            pass

    def hellos(self) -> list[tuple[int, dict]]:
        return [(n, m) for n, m in self.frames if m.get("type") == "hello"]

    def with_state(self, after: int = 0) -> list[tuple[int, dict]]:
        """The event messages that carry the item's state, received after the `after`th frame."""
        return [(n, m) for n, m in self.frames[after:] if m.get("type") == "event" and "state" in m]


def open_item(page, url, item_id) -> list[str]:
    page.goto(f"{url}/work-items/{item_id}/")
    page.wait_for_selector("#graph g.node")
    wait_live(page)
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url) if r.resource_type != "websocket" else None)
    return requests


def failed_linear(store, bg, retries: int):
    """A linear item whose implement stage failed `retries + 1` times, retried by the lead between."""
    item = store.linear(title=f"Retried {retries} times")
    store.complete(store.claim_item(item.pk))  # triage
    for i in range(retries + 1):
        claim = store.claim_item(item.pk)
        store.submit(claim, {"outcome": "failed", "error": f"compiler crashed ({i + 1})"})
        if i < retries:
            bg(services.work_item_retry, item_id=item.pk, actor="user:lead", now=store.now())
    return item


def kb(n: int) -> str:
    return f"{n} B ({n / 1024:.2f} KB)"


def test_a_progress_diff_on_a_six_stage_item_carries_only_what_changed(page, daphne_server, bg, http_api):
    store = ThreadedStore(bg)
    item = store.planned(STAGES, title="Six stages")
    weights = Weights(page)
    requests = open_item(page, daphne_server.url, item.pk)
    mark = len(weights.frames)

    # a worker's claim and its completion, through the API (the server that sent the hello publishes)
    _, claim = http_api.call("POST", "/claims", {"owner_boot_id": "boot-weight"})
    run = claim["run"]
    stage = claim["action"]["stage_id"]
    http_api.call("POST", f"/runs/{run['id']}/submit", {"owner_boot_id": "boot-weight", "lease_epoch": run["lease_epoch"],
                                                        "outcome": "completed", "summary": "found it",
                                                        "evidence": ["read the sources"], "acceptance_checks": []})
    wait_until(page, lambda: any(m["event"]["type"] == "action.completed" for _, m in weights.with_state(mark)))
    wait_for_js(page, "(s) => document.querySelector(`#graph g.node[data-stage=\"${s}\"]`)?.dataset.status === 'completed'",
                stage)

    pushed = weights.with_state(mark)
    states = [len(json.dumps(m["state"], separators=(",", ":"), ensure_ascii=False).encode()) for _, m in pushed]
    print(f"\nprogress: {len(pushed)} messages with the state; diffs {[kb(n) for n in states]}; "
          f"messages {[kb(n) for n, _ in pushed]}")
    assert all(m["state"]["base_rev"] is not None for _, m in pushed), "a whole state was pushed"
    assert max(states) <= 2048
    assert not [r for r in requests if r.endswith("/state")], requests  # applied as pushed, nothing read back


def test_a_retry_travels_as_a_diff(page, daphne_server, bg, http_api):
    store = ThreadedStore(bg)
    item = failed_linear(store, bg, 16)
    weights = Weights(page)
    requests = open_item(page, daphne_server.url, item.pk)
    wait_for_js(page, "() => document.querySelector('#graph g.node[data-stage=\"implement\"] .node-badge')?.textContent === '×17'")
    mark = len(weights.frames)

    status, _ = http_api.call("POST", f"/work-items/{item.pk}/retry", {})  # the lead's retry, as the page sends it
    assert status == 200
    wait_until(page, lambda: any(m["event"]["type"] == "work_item.retried" for _, m in weights.with_state(mark)))
    wait_for_js(page, "() => document.querySelector('#graph g.node[data-stage=\"implement\"]')?.dataset.status === 'ready'")

    pushed = weights.with_state(mark)
    print(f"\nafter the 17th retry: messages {[kb(n) for n, _ in pushed]}")
    assert all(m["state"]["base_rev"] is not None for _, m in pushed), "a whole state was pushed"
    assert max(n for n, _ in pushed) <= 4096
    assert not [r for r in requests if r.endswith("/state")], requests


def test_the_hello_does_not_grow_with_the_retries(page, daphne_server, bg):
    store = ThreadedStore(bg)
    once = failed_linear(store, bg, 1)
    many = failed_linear(store, bg, 17)
    weights = Weights(page)
    sizes = {}
    for retries, item in ((1, once), (17, many)):
        requests = open_item(page, daphne_server.url, item.pk)
        size, hello = weights.hellos()[-1]
        sizes[retries] = size
        assert hello["state"]["left_out"]["runs"] == retries
        # the page puts back the attempts it read at load: all of them drawn, the state not read again
        wait_for_js(page, "(n) => document.querySelector('#graph g.node[data-stage=\"implement\"] .node-badge')"
                          "?.textContent === `×${n}`", retries + 1)
        page.wait_for_timeout(300)
        assert not [r for r in requests if r.endswith("/state")], requests
        assert "instruction" not in json.dumps(hello["state"]["actions"])
    print(f"\nhello after 1 retry {kb(sizes[1])}, after 17 retries {kb(sizes[17])}")
    assert abs(sizes[17] - sizes[1]) <= sizes[1] * 0.10

    # the instruction is read when the lead opens the stage, once
    requests = open_item(page, daphne_server.url, many.pk)
    page.click('#graph g.node[data-stage="implement"]')
    page.wait_for_selector("#panel:not([hidden])")
    page.click("#panel-body details.instruction summary")
    wait_for_js(page, "() => (document.querySelector('#panel-body details.instruction pre')?.textContent || '').length > 100")
    reads = [r for r in requests if r.endswith("/instruction")]
    assert len(reads) == 1, requests
    screenshot(page, "push-weight-panel-instruction.png")
