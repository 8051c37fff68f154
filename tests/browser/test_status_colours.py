"""A running node keeps the running colour through its whole pulse (UI.md: one hue per meaning).

The pulse animates something other than the stroke colour: the computed stroke of a running node,
sampled across a full period (stepped through the animation and in real time), is the running
colour in every sample, light and dark; with reduced motion the node does not pulse at all.
"""
from __future__ import annotations

import re

import pytest

from .conftest import screenshot, wait_live
from .conftest import ThreadedStore
from .test_dashboard import DIAMOND

pytestmark = pytest.mark.django_db(transaction=True)

BOX = '#graph g.node[data-stage="survey"] .node-box'

# Steps the box's CSS animations through one full period, then samples it live with
# requestAnimationFrame for a little more than a period; returns every computed stroke seen.
SAMPLE = """async (selector) => {
    const box = document.querySelector(selector);
    const style = getComputedStyle(box);
    const anims = box.getAnimations();
    const pulse = anims.find(a => a.animationName === 'pulse');
    const period = pulse ? pulse.effect.getComputedTiming().duration : 0;
    const stepped = [], widths = [];
    if (pulse) {
        pulse.pause();
        for (let i = 0; i <= 60; i++) {
            pulse.currentTime = period * i / 60;
            stepped.push(style.stroke);
            widths.push(parseFloat(style.strokeWidth));
        }
        pulse.play();
    }
    const live = [];
    const until = performance.now() + Math.max(period, 600) * 1.1;
    while (performance.now() < until) {
        await new Promise(r => requestAnimationFrame(r));
        live.push(style.stroke);
    }
    const running = getComputedStyle(document.documentElement).getPropertyValue('--st-running').trim();
    return {names: anims.map(a => a.animationName), period, stepped, widths, live, running,
            animation: style.animationName};
}"""

RGB = re.compile(r"rgba?\(\s*(\d+),\s*(\d+),\s*(\d+)(?:,\s*[\d.]+)?\s*\)")


def hex_rgb(value: str) -> tuple[int, int, int]:
    value = value.lstrip("#")
    if len(value) == 3:
        value = "".join(c * 2 for c in value)
    return int(value[0:2], 16), int(value[2:4], 16), int(value[4:6], 16)


def not_running(samples: list[str], running: tuple[int, int, int]) -> list[str]:
    """The samples that are not the running colour (alpha may differ)."""
    bad = []
    for s in samples:
        m = RGB.fullmatch(s.strip())
        if not m or any(abs(int(c) - r) > 1 for c, r in zip(m.groups(), running)):
            bad.append(s)
    return bad


@pytest.fixture
def running_item(transactional_db, bg):
    store = ThreadedStore(bg)
    item = store.graph(DIAMOND, title="Running pulse")
    claim = store.claim_item(item.pk, stage="survey")
    assert claim is not None
    return item


def open_running(page, daphne_server, item):
    page.goto(f"{daphne_server.url}/work-items/{item.pk}/")
    page.wait_for_selector('#graph g.node[data-stage="survey"][data-status="running"]')
    wait_live(page)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_a_running_node_keeps_the_running_colour_through_a_full_pulse(page, daphne_server, running_item, scheme):
    page.set_viewport_size({"width": 1280, "height": 800})
    page.emulate_media(color_scheme=scheme, reduced_motion="no-preference")
    open_running(page, daphne_server, running_item)
    seen = page.evaluate(SAMPLE, BOX)
    # the node does pulse, over a real period, and the pulse is visible (its width changes)
    assert "pulse" in seen["names"], seen["names"]
    assert seen["period"] >= 1000
    assert max(seen["widths"]) - min(seen["widths"]) >= 0.5, seen["widths"]
    assert len(seen["live"]) >= 30
    running = hex_rgb(seen["running"])
    samples = seen["stepped"] + seen["live"]
    bad = not_running(samples, running)
    print(f"\n{scheme}: {len(samples)} samples of the running node's stroke, running colour {seen['running']}, "
          f"others: {sorted(set(bad))[:5]}")
    assert not bad, f"{len(bad)} of {len(samples)} samples are not {seen['running']}: {sorted(set(bad))[:5]}"
    screenshot(page, f"running-node-1280-{scheme}.png")


def test_with_reduced_motion_a_running_node_is_still_and_running_coloured(page, daphne_server, running_item):
    page.set_viewport_size({"width": 1280, "height": 800})
    page.emulate_media(reduced_motion="reduce")
    open_running(page, daphne_server, running_item)
    seen = page.evaluate(SAMPLE, BOX)
    assert seen["animation"] == "none" and "pulse" not in seen["names"], seen
    bad = not_running(seen["live"], hex_rgb(seen["running"]))
    assert not bad, sorted(set(bad))[:5]
